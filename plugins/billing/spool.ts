/**
 * Debits that could not reach Redis wait in a file of this instance until Redis takes them, so a call that ended
 * while Redis was away is charged once it is back: in order, exactly once (the debit script answers a run again as
 * the first run did), whatever the outage's length, up to `maxEntries` waiting, and across a restart of the gateway
 * (a new process adopts the files of dead ones on the same host). While anything waits, new debits queue behind it.
 *
 * One JSON line per debit in `<dir>/<instance>.jsonl`, appended and flushed to disk before the call's end is
 * acknowledged; rewritten (and flushed) without the debits Redis took. A crash between a debit and the rewrite replays
 * that debit, which changes nothing the second time. A debit Redis refuses outright (an error reply, never an outage)
 * would be refused again: it moves to `<dir>/<instance>.refused` for an operator and stops holding up the rest.
 *
 * A spool belongs to one Redis and key prefix (SpoolOwner), and never mixes with another's: a debit drained into
 * another Redis finds no hold there and is dropped for good (its call ends free in its own Redis). So:
 * - the default folder is named by both (`farebox-spool-<uid>/<server>-<prefix>-<hash>` under the temporary folder);
 * - every file starts with a header line naming them, and a dead process's file is adopted only if its header names
 *   this spool's; one naming another, or none (written before files had a header, when folders were named by the
 *   prefix alone, so it may be any Redis's), is left in place, logged and counted, for an operator to place;
 * - debits are call data: folders are 0700 and files 0600; a folder another user owns, or that group or others may
 *   change, is refused at start (files could be planted or taken); one others could only read (as earlier versions
 *   made them) is narrowed to 0700 with its files, since only this user could have written into it.
 */
import { createHash } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  closeSync,
  fstatSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { CHAIN_NAMES, type ChainName } from '../chains/config.js';
import type { Log } from '../log.js';
import type { DebitInput, DebitResult } from './wallets.js';

/** A debit to keep: the debit script's input and the model it is for (metrics). */
export type SpooledDebit = DebitInput & { model: string };

/** A debit as it waits in the spool (bigints as decimal strings). */
type Line = Omit<SpooledDebit, 'price'> & { price: string };

/** What the spool reports. */
export interface SpoolEvents {
  /** A debit was spooled (Redis away). */
  spooled(): void;
  /** A spooled debit reached Redis. */
  drained(result: DebitResult | null, input: SpooledDebit): void;
  /** A debit was dropped: the spool was full. */
  lost(input: SpooledDebit): void;
  /** The number of debits waiting changed. */
  resized(size: number): void;
  /** Redis refused a spooled debit itself (not for being away): it is set aside, not retried. */
  refused(input: SpooledDebit, err: unknown): void;
  /** Files of gone processes left in the folder at start: another Redis's, an earlier version's, or unreadable. */
  notAdopted(files: number): void;
}

/** The Redis a spool's debits belong to: the server (redisIdentity, plugins/store/redis.ts) and the key prefix. */
export interface SpoolOwner {
  redis: string;
  prefix: string;
}

/** A spool folder this process must not use: named in the message, with why and what to do. */
export class SpoolFolderRefused extends Error {
  constructor(
    readonly folder: string,
    why: string,
  ) {
    super(`debit spool folder ${folder}: ${why}`);
    this.name = 'SpoolFolderRefused';
  }
}

/**
 * The spool folder when the config names none: under the system's temporary folder, named by the Redis server and
 * the prefix (readable, then a hash of both in full), so deployments on one host keep apart whatever they share.
 */
export function defaultSpoolDir(owner: SpoolOwner, base = tmpdir()): string {
  const readable = (s: string, max: number) =>
    s
      .replace(/^redis:\/\//, '')
      .replace(/[^A-Za-z0-9.]+/g, '_')
      .replace(/^_+|_+$/g, '')
      .slice(0, max);
  const hash = createHash('sha256')
    .update(JSON.stringify([owner.redis, owner.prefix]))
    .digest('hex')
    .slice(0, 12);
  return join(
    base,
    userSpoolRoot(),
    [readable(owner.redis, 48), readable(owner.prefix, 32), hash].filter(Boolean).join('-'),
  );
}

/**
 * The folder the default spool folders of this user live in: one per user (`farebox-spool-<uid>`), so no other user
 * can take it first and no user's gateway is refused for another's.
 */
function userSpoolRoot(): string {
  const uid = process.getuid?.();
  return uid === undefined ? 'farebox-spool' : `farebox-spool-${uid}`;
}

/** Where versions before spool headers kept the default spool: `farebox-spool/<prefix>`, whatever the Redis. */
function legacySpoolDir(prefix: string, base = tmpdir()): string {
  return join(base, 'farebox-spool', prefix.replace(/[^A-Za-z0-9_.-]/g, '_') || 'default');
}

const SPOOL_FILE = /^((.+)-(\d+)-[0-9a-f]{6})\.jsonl$/;
/** Spools open in this process: an instance of this process not among them (a gateway closed and made again) is gone. */
const openHere = new Set<string>();

/** The file spool of one gateway instance. */
export class DebitSpool {
  private readonly dir: string;
  /** Whether `dir` is the operator's (billing.spool_dir) rather than the default one. */
  private readonly operatorDir: boolean;
  /** The default folder of earlier versions, looked into for debits left there (never drained: see adopt). */
  private readonly legacyDir: string | undefined;
  private readonly file: string;
  /** The first line of every file of this spool. */
  private readonly header: string;
  private readonly queue: Line[] = [];
  private draining: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  /**
   * `dir` undefined: the default folder (defaultSpoolDir). Throws SpoolFolderRefused when the folder (or the default's
   * farebox-spool folder) belongs to another user or group or others may change it.
   */
  constructor(
    dir: string | undefined,
    private readonly owner: SpoolOwner,
    private readonly instance: string,
    private readonly maxEntries: number,
    private readonly debit: (input: SpooledDebit) => Promise<DebitResult | null>,
    /** Whether a debit's error means Redis is away (wait and retry) rather than a refusal (set it aside). */
    private readonly retryable: (err: unknown) => boolean,
    private readonly events: SpoolEvents,
    private readonly log: Log,
  ) {
    this.operatorDir = dir !== undefined;
    this.dir = dir ?? defaultSpoolDir(owner);
    if (dir === undefined) this.legacyDir = legacySpoolDir(owner.prefix);
    this.makeFolder();
    this.header = JSON.stringify({ farebox_spool: 1, redis: owner.redis, prefix: owner.prefix });
    this.file = join(this.dir, `${instance}.jsonl`);
    openHere.add(instance);
  }

  /** Debits waiting. */
  get size(): number {
    return this.queue.length;
  }

  /** Whether debits wait: new ones must queue behind them, to keep the order. */
  get busy(): boolean {
    return this.queue.length > 0;
  }

  /** Keep a debit until Redis takes it; false when the spool is full and the debit is lost (counted). */
  add(input: SpooledDebit): boolean {
    if (this.queue.length >= this.maxEntries) {
      this.events.lost(input);
      this.log.error(
        { requestId: input.requestId, price: input.price.toString() },
        'debit spool full: a delivered call is not charged',
      );
      return false;
    }
    const line: Line = { ...input, price: input.price.toString() };
    this.append(line);
    this.events.spooled();
    this.events.resized(this.queue.length);
    this.kick();
    return true;
  }

  /** Adopt the spools of dead processes on this host, and retry what waits every `everyMs`. */
  start(everyMs = 1_000): void {
    this.adopt();
    this.timer = setInterval(() => this.kick(), everyMs);
    this.timer.unref();
    this.kick();
  }

  /** Try to hand what waits to Redis now (one drain at a time). */
  kick(): void {
    if (this.stopped || this.draining || this.queue.length === 0) return;
    this.draining = this.drain().finally(() => {
      this.draining = undefined;
    });
  }

  /** Resolves once nothing waits, or after `timeoutMs`. */
  async flush(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.queue.length > 0 && Date.now() < deadline) {
      this.kick();
      await new Promise((r) => setTimeout(r, 100));
    }
    return this.queue.length === 0;
  }

  /** Stop retrying; what still waits stays in the file for the next process. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.draining;
    openHere.delete(this.instance);
  }

  private async drain(): Promise<void> {
    let taken = 0;
    try {
      while (this.queue.length > taken) {
        const line = this.queue[taken]!;
        const input = debitOf(line);
        if (input === null) {
          // Not a debit (a hand edit): Redis being up or not changes nothing, and the debits behind it must go on.
          this.setAsideUnreadable(line);
          taken++;
          continue;
        }
        try {
          this.events.drained(await this.debit(input), input);
        } catch (err) {
          if (this.retryable(err)) throw err;
          this.setAside(input);
          this.events.refused(input, err);
        }
        taken++;
      }
    } catch (err) {
      // Redis still away: the rest waits for the next try.
      if (taken === 0) this.log.warn({ err, waiting: this.queue.length }, 'spooled debits still waiting for Redis');
    } finally {
      if (taken > 0) this.forget(taken);
    }
  }

  /** Make the folder if it is missing, and check that it is this user's alone (ownFolder). */
  private makeFolder(): void {
    if (this.operatorDir) {
      // The operator's folder: a link there is the operator's choice.
      ownFolder(this.dir, true, this.log);
    } else {
      // In a folder every user may write to: links are not followed, so no one can point the spool elsewhere.
      ownFolder(dirname(this.dir), false, this.log);
      ownFolder(this.dir, false, this.log);
    }
  }

  /**
   * appendSynced into this spool's folder. The folder is made at start but holds a file only while debits wait, so
   * a cleaner of the temporary folder may remove it in between (an empty folder unused for days): it is made again,
   * checked as at start.
   */
  private appendHere(file: string, line: object): void {
    try {
      appendSynced(file, this.header, line);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      this.makeFolder();
      appendSynced(file, this.header, line);
    }
  }

  /** Keep a debit at the end of the queue, on disk before in memory. */
  private append(line: Line): void {
    this.appendHere(this.file, line);
    this.queue.push(line);
  }

  /** Keep a line that is no debit in this instance's `.refused` file as it was, logged. */
  private setAsideUnreadable(line: unknown): void {
    this.log.error({ line }, 'a spooled line that is no debit is set aside; it is not charged');
    try {
      this.appendHere(`${this.file.slice(0, -'.jsonl'.length)}.refused`, { unreadable: line });
    } catch (err) {
      this.log.error({ err }, 'an unreadable spooled line could not be set aside');
    }
  }

  /** Keep a debit Redis refused in this instance's `.refused` file, out of the queue's way. */
  setAside(input: SpooledDebit): void {
    try {
      this.appendHere(`${this.file.slice(0, -'.jsonl'.length)}.refused`, {
        ...input,
        price: input.price.toString(),
      });
    } catch (err) {
      this.log.error({ err, requestId: input.requestId }, 'a refused debit could not be set aside');
    }
  }

  /** Drop the first `n` debits, from memory and from the file. */
  private forget(n: number): void {
    this.queue.splice(0, n);
    this.events.resized(this.queue.length);
    if (this.queue.length === 0) {
      rmSync(this.file, { force: true });
      return;
    }
    const tmp = `${this.file}.tmp`;
    const fd = openSync(tmp, 'w', 0o600);
    try {
      writeFileSync(fd, `${this.header}\n${this.queue.map((l) => `${JSON.stringify(l)}\n`).join('')}`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.file);
    syncDir(this.dir);
  }

  /**
   * Take over the spool files of processes of this host that are gone: their debits wait in this one's queue. A file
   * whose header names another Redis or prefix, or none, stays where it is: logged, and counted in `notAdopted`.
   */
  private adopt(): void {
    const host = hostname();
    let left = 0;
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith('.jsonl') || join(this.dir, name) === this.file) continue;
      const m = SPOOL_FILE.exec(name);
      if (!m || m[2] !== host) continue;
      const pid = Number(m[3]);
      if (pid === process.pid ? openHere.has(m[1]!) : processAlive(pid)) continue;
      const path = join(this.dir, name);
      const why = this.notOurs(path);
      if (why) {
        left++;
        this.log.error(
          { file: path, redis: this.owner.redis, prefix: this.owner.prefix, header: this.header },
          `spooled debits not adopted: ${why}; left in place for a gateway of their Redis (or, once you know it is this one's, give the file the header line logged here)`,
        );
        continue;
      }
      const claimed = join(this.dir, `${name}.${this.instance}`);
      try {
        renameSync(path, claimed); // one adopter wins the rename
      } catch {
        continue;
      }
      const lines = readFileSync(claimed, 'utf8')
        .split('\n')
        .filter((l) => l.trim() !== '');
      if (lines.length > 0 && headerOf(lines[0]!)) lines.shift();
      for (const l of lines) {
        let line: unknown;
        try {
          line = JSON.parse(l);
        } catch {
          line = l;
        }
        if (debitOf(line) === null) this.setAsideUnreadable(line);
        else this.append(line as Line);
      }
      rmSync(claimed, { force: true });
      if (lines.length > 0)
        this.log.warn({ file: name, debits: lines.length }, 'adopted the debits of a process that is gone');
    }
    this.events.notAdopted(left + this.legacyLeft());
  }

  /**
   * Spool files of this host in the default folder of earlier versions (`farebox-spool/<prefix>`): named by the prefix
   * alone, they may be any Redis's, so none is drained; each that holds debits is logged and counted as not adopted.
   */
  private legacyLeft(): number {
    if (this.legacyDir === undefined) return 0;
    let names: string[];
    try {
      names = readdirSync(this.legacyDir);
    } catch {
      return 0;
    }
    let left = 0;
    for (const name of names) {
      const m = SPOOL_FILE.exec(name);
      if (!m || m[2] !== hostname()) continue;
      const path = join(this.legacyDir, name);
      try {
        if (statSync(path).size === 0) continue;
      } catch {
        continue;
      }
      left++;
      this.log.error(
        { file: path, redis: this.owner.redis, prefix: this.owner.prefix, header: this.header },
        "spooled debits of an earlier version not adopted: its default folder was named by the prefix alone, so they may be any Redis's; once you know they are this one's, give the file the header line logged here and move it into this gateway's spool folder",
      );
    }
    return left;
  }

  /** Why the spool file at `path` is not this spool's to drain; undefined when it is (or is empty). */
  private notOurs(path: string): string | undefined {
    let first: string;
    try {
      first = firstLine(path);
    } catch (err) {
      return `the file cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
    }
    if (first === '') return undefined;
    const h = headerOf(first);
    if (!h)
      return "the file names no Redis (written before spool files had a header line, it may be any Redis's with this prefix)";
    if (h.redis !== this.owner.redis || h.prefix !== this.owner.prefix)
      return `the file belongs to ${h.redis} with prefix "${h.prefix}"`;
    return undefined;
  }
}

/** The largest amount a Redis script takes (a Lua number that holds every integer below it). */
const MAX_AMOUNT = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The debit a spooled line holds, or null when it holds none the debit script could take: the fields it needs, of
 * their types, and a price of decimal digits within the script's range.
 */
function debitOf(line: unknown): SpooledDebit | null {
  if (typeof line !== 'object' || line === null) return null;
  const l = line as Partial<Record<keyof Line, unknown>>;
  const text = (v: unknown) => typeof v === 'string' && v !== '';
  if (!text(l.requestId) || !text(l.callId) || !text(l.account) || !text(l.owner)) return null;
  if (!CHAIN_NAMES.includes(l.chain as ChainName) || typeof l.usageJson !== 'string') return null;
  // The debit script takes amounts up to 2^53 - 1 (wallets.ts amountLua): a larger one would be retried for good.
  if (typeof l.price !== 'string' || !/^\d{1,16}$/.test(l.price) || BigInt(l.price) > MAX_AMOUNT) return null;
  // Fractional days of retention give a fractional count of ms: the debit script rounds it.
  if (typeof l.retentionMs !== 'number' || !Number.isFinite(l.retentionMs) || l.retentionMs <= 0) return null;
  if (l.keyId !== undefined && typeof l.keyId !== 'string') return null;
  return { ...(line as Line), model: typeof l.model === 'string' ? l.model : '', price: BigInt(l.price) };
}

/** A spool file's header line as an object, or undefined when `line` is not one (a debit of an earlier version). */
function headerOf(line: string): SpoolOwner | undefined {
  try {
    const h = JSON.parse(line) as { farebox_spool?: unknown; redis?: unknown; prefix?: unknown } | null;
    if (h && h.farebox_spool === 1 && typeof h.redis === 'string' && typeof h.prefix === 'string')
      return { redis: h.redis, prefix: h.prefix };
  } catch {
    // not JSON: no header
  }
  return undefined;
}

/** The first line of a file, read from its first 64 KiB (a header is far shorter; a longer line is no header). */
function firstLine(path: string): string {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.alloc(64 * 1024);
    const text = buf.toString('utf8', 0, readSync(fd, buf, 0, buf.length, 0));
    const end = text.indexOf('\n');
    return end === -1 ? text : text.slice(0, end);
  } finally {
    closeSync(fd);
  }
}

/**
 * Make `dir` 0700 if it is missing, and make sure only this user can read or change it: another owner, or group or
 * others allowed to write, is refused (SpoolFolderRefused); read or search rights of group or others are taken away,
 * and so are those of the files in it. `follow`: whether `dir` may be a symbolic link to a folder.
 */
function ownFolder(dir: string, follow: boolean, log: Log): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = follow ? statSync(dir) : lstatSync(dir);
  if (!st.isDirectory()) {
    throw new SpoolFolderRefused(
      dir,
      `${st.isSymbolicLink() ? 'a symbolic link' : 'not a folder'}: refused; remove it, or set billing.spool_dir to a folder of this user`,
    );
  }
  const uid = process.getuid?.();
  if (uid === undefined) return; // Windows: no POSIX owner or mode, and the temporary folder is the user's own.
  const mode = `0${(st.mode & 0o777).toString(8)}`;
  if (st.uid !== uid) {
    throw new SpoolFolderRefused(
      dir,
      `owned by uid ${st.uid}, not by this process's uid ${uid}: refused, its debits are not ours to drain nor its folder ours to trust; set billing.spool_dir to a folder of this user`,
    );
  }
  // An operator's folder writable by a group this process belongs to (a Kubernetes volume with fsGroup is remade
  // group-writable at every mount) is the operator's setup: a warning. Others, or another group: refused.
  const ownGroup = follow && (st.mode & 0o022) === 0o020 && (process.getgroups?.() ?? []).includes(st.gid);
  if (st.mode & 0o022 && !ownGroup) {
    throw new SpoolFolderRefused(
      dir,
      `group or others may write to it (mode ${mode}): refused, files could have been planted or taken; check its files, then chmod 700 it, or set billing.spool_dir to a folder of this user`,
    );
  }
  if (ownGroup)
    log.warn(
      { folder: dir, mode, gid: st.gid },
      'debit spool folder writable by a group of this process: its members could plant or take debits',
    );
  if (st.mode & 0o077 && !ownGroup) {
    chmodSync(dir, 0o700);
    log.warn({ folder: dir, mode }, 'debit spool folder narrowed to 0700: others could read its call data');
  }
  for (const name of readdirSync(dir)) {
    const f = lstatSync(join(dir, name));
    if (f.isFile() && f.uid === uid && f.mode & 0o077) chmodSync(join(dir, name), 0o600);
  }
}

/** Append one JSON line to `file` (0600; a new file starts with `header`) and flush it to disk. */
function appendSynced(file: string, header: string, line: object): void {
  const fd = openSync(file, 'a', 0o600);
  let created = false;
  try {
    created = fstatSync(fd).size === 0;
    appendFileSync(fd, `${created ? `${header}\n` : ''}${JSON.stringify(line)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  // The new file's entry in its folder, flushed too: else a crash could lose the file with its fsynced content.
  if (created) syncDir(dirname(file));
}

/** Flush a directory's entries (a rename) to disk; a no-op where directories cannot be opened for it. */
function syncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch {
    // Windows cannot fsync a directory.
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Whether a process of this host runs under `pid`. */
function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
