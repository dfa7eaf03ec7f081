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
 */
import { appendFileSync, closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { DebitInput, DebitResult } from './wallets.js';

/** A debit to keep: the debit script's input and the model it is for (metrics). */
export type SpooledDebit = DebitInput & { model: string };

/** A debit as it waits in the spool (bigints as decimal strings). */
type Line = Omit<SpooledDebit, 'price'> & { price: string };

type Log = { error(obj: object, msg: string): void; warn(obj: object, msg: string): void };

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
}

const SPOOL_FILE = /^((.+)-(\d+)-[0-9a-f]{6})\.jsonl$/;
/** Spools open in this process: an instance of this process not among them (a gateway closed and made again) is gone. */
const openHere = new Set<string>();

/** The file spool of one gateway instance. */
export class DebitSpool {
  private readonly file: string;
  private readonly queue: Line[] = [];
  private draining: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly dir: string,
    private readonly instance: string,
    private readonly maxEntries: number,
    private readonly debit: (input: SpooledDebit) => Promise<DebitResult | null>,
    /** Whether a debit's error means Redis is away (wait and retry) rather than a refusal (set it aside). */
    private readonly retryable: (err: unknown) => boolean,
    private readonly events: SpoolEvents,
    private readonly log: Log,
  ) {
    mkdirSync(dir, { recursive: true });
    this.file = join(dir, `${instance}.jsonl`);
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
      this.log.error({ requestId: input.requestId, price: input.price.toString() }, 'debit spool full: a delivered call is not charged');
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
        const input: SpooledDebit = { ...line, price: BigInt(line.price) };
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

  /** Keep a debit at the end of the queue, on disk before in memory. */
  private append(line: Line): void {
    appendSynced(this.file, line);
    this.queue.push(line);
  }

  /** Keep a debit Redis refused in this instance's `.refused` file, out of the queue's way. */
  setAside(input: SpooledDebit): void {
    try {
      appendSynced(`${this.file.slice(0, -'.jsonl'.length)}.refused`, { ...input, price: input.price.toString() });
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
    const fd = openSync(tmp, 'w');
    try {
      writeFileSync(fd, this.queue.map((l) => `${JSON.stringify(l)}\n`).join(''));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, this.file);
    syncDir(this.dir);
  }

  /** Take over the spool files of processes of this host that are gone: their debits wait in this one's queue. */
  private adopt(): void {
    const host = hostname();
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith('.jsonl') || join(this.dir, name) === this.file) continue;
      const m = SPOOL_FILE.exec(name);
      if (!m || m[2] !== host) continue;
      const pid = Number(m[3]);
      if (pid === process.pid ? openHere.has(m[1]!) : processAlive(pid)) continue;
      const claimed = join(this.dir, `${name}.${this.instance}`);
      try {
        renameSync(join(this.dir, name), claimed); // one adopter wins the rename
      } catch {
        continue;
      }
      const lines = readFileSync(claimed, 'utf8').split('\n').filter((l) => l.trim() !== '');
      for (const l of lines) {
        try {
          this.append(JSON.parse(l) as Line);
        } catch (err) {
          this.log.error({ err, file: name }, 'unreadable spooled debit skipped');
        }
      }
      rmSync(claimed, { force: true });
      if (lines.length > 0) this.log.warn({ file: name, debits: lines.length }, 'adopted the debits of a process that is gone');
    }
  }
}

/** Append one JSON line to `file` and flush it to disk. */
function appendSynced(file: string, line: object): void {
  const fd = openSync(file, 'a');
  try {
    appendFileSync(fd, `${JSON.stringify(line)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
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
