/**
 * Settle onchain (DESIGN step 6): takes debits from each chain's Redis Stream as a consumer group, so any number
 * of gateway instances share the work, and charges them with the escrow's chargeBatch, one event per call id.
 * Batches are pipelined: each chain has up to `batchesInFlight` batches sent and awaiting their confirmations at
 * once, on consecutive nonces of the settler key, at most `batchesUnmined` of them not yet in a block, so a chain's
 * rate is bound by its blocks, not by one batch per confirmation window. An entry is acknowledged only after its
 * batch's confirmed receipt (again until Redis takes it; a charged batch is never sent again for its acknowledgement);
 * until then it stays pending, kept fresh so no other settler takes it. A batch that fails (reverted, never mined,
 * reorged) has its debits sent again, the batches around it standing; debits of a settler that stopped are claimed by
 * another after `claimIdleMs`. Retries are safe: the escrow skips a call id it has seen. Pending amounts leave
 * `pending` when the watcher applies the Charged event, not here.
 */
import type { Redis } from 'ioredis';
import type { Address, ChainName } from '../chains/config.js';
import type { Charge, Hex, PendingBatch, SettlementChain } from '../chains/port.js';
import { countBy, type Metrics } from '../metrics/metrics.js';
import { ifAnswering, logRedisErrors } from '../store/redis.js';
import { Sleeps } from './sleeps.js';
import { LuaScript } from '../store/redis-script.js';
import { keys } from '../store/keys.js';
import type { Log } from '../log.js';

const GROUP = 'settlers';

// Each gateway process joins the group under a name of its own, so names of processes long gone would pile up.
// Deletes the consumers of KEYS[1]'s group ARGV[1] that hold no entry and have been idle over ARGV[2] ms (ARGV[3],
// when given: only that one). In one script: a consumer that takes an entry between a check and its deletion would
// lose it from the group (entries delivered once are not delivered again). A live consumer deleted while idle is
// made again by its next read.
const PRUNE = `
local gone = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f.pending == 0 and f.idle >= tonumber(ARGV[2]) and (ARGV[3] == nil or f.name == ARGV[3]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f.name)
    gone = gone + 1
  end
end
return gone
`;
const pruneScript = new LuaScript(PRUNE);

/** Delete the idle consumers of a chain's debit stream that hold nothing (`only`: that one); returns how many. */
export function pruneConsumers(r: Redis, chain: ChainName, idleMs: number, only?: string): Promise<number> {
  return pruneScript.run<number>(r, [keys.debits(chain)], only === undefined ? [GROUP, idleMs] : [GROUP, idleMs, only]);
}

/** Settler settings. */
export interface SettlerSettings {
  batchSize: number;
  batchWaitMs: number;
  /** Entries another consumer left unacknowledged this long are taken over. */
  claimIdleMs: number;
  /** Batches per chain sent and not yet confirmed at once. Default DEFAULT_BATCHES_IN_FLIGHT. */
  batchesInFlight?: number;
  /** Of those, how many may be sent and not yet mined. Default DEFAULT_BATCHES_UNMINED. */
  batchesUnmined?: number;
  /** Called once a batch of `chain` is mined (this process's watcher polls that chain at once). */
  onMined?: (chain: ChainName) => void;
}

/**
 * Batches per chain in flight when the settings name none: at 1,000 charges a batch, 128 keep up with ~4,900 charges
 * a second through a confirmation window of 26 s (12 confirmations of 2 s blocks, and the wait for the first), ~2,000
 * through one of 62 s (30 of 2 s).
 */
export const DEFAULT_BATCHES_IN_FLIGHT = 128;

/**
 * Batches per chain waiting unmined when the settings name none. A node's mempool keeps only so many transactions of
 * one sender (geth guarantees 16 slots of 32 KB: four full batches) and evicts the rest under pressure; 8 batches of
 * 1,000 a block are still 4,000 charges a second on 2 s blocks.
 */
export const DEFAULT_BATCHES_UNMINED = 8;

type Entry = [id: string, fields: string[] | null];

/** A debit of the stream: its entry id and its charge. */
interface Debit {
  id: string;
  charge: Charge;
}

const CALL_ID = /^0x[0-9a-fA-F]{64}$/;
const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const AMOUNT = /^\d{1,78}$/;
const UINT256_MAX = 2n ** 256n - 1n;

/** The charge of an entry; null when it could never be charged (a batch holding it would be refused whole). */
function toCharge(fields: string[] | null): Charge | null {
  if (!fields) return null; // deleted while pending (XAUTOCLAIM answers such entries with no fields)
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
  if (!f.call_id || !f.account || !f.amount) return null;
  if (!CALL_ID.test(f.call_id) || !ADDRESS.test(f.account) || !AMOUNT.test(f.amount) || BigInt(f.amount) > UINT256_MAX)
    return null;
  return { callId: f.call_id as Hex, account: f.account as Address, amount: BigInt(f.amount) };
}

/**
 * Acknowledge entries and delete them, in one transaction. Acknowledged entries are done with, and deleting them keeps
 * the stream short; apart, a crash between the two left an entry no consumer would ever take again, holding the queue
 * depth and oldest-debit gauges up for good (seen in the crash test).
 */
async function done(conn: Redis, key: string, ids: string[]): Promise<void> {
  const results = await conn
    .multi()
    .xack(key, GROUP, ...ids)
    .xdel(key, ...ids)
    .exec();
  const failed = results?.find(([err]) => err);
  if (!results || failed) throw failed?.[0] ?? new Error('debit acknowledgement transaction discarded');
}

/** Stream entry ids start with their creation time in ms. */
function entryTime(id: string): number {
  return Number(id.slice(0, id.indexOf('-')));
}

/** One chain's settling: its stream, its connection and its batches in flight. */
interface Lane {
  name: ChainName;
  chain: SettlementChain;
  /** For the stream reads, which block. */
  conn: Redis;
  key: string;
  /** Batches sent and not yet done with (confirmed and acknowledged, or failed). */
  inFlight: Set<Promise<void>>;
  /** Batches sent and not yet mined. */
  unmined: Set<Promise<void>>;
  /** Debits sent again before any other: those of failed batches, and those a batch could not carry. */
  retry: Debit[];
  /** Entry ids this lane holds: in a batch in flight, or in `retry`. */
  held: Set<string>;
  lastClaim: number;
  /** Where the next XAUTOCLAIM goes on ('0-0': a new pass over the stream). */
  claimCursor: string;
  /** Stops watching the batches in flight (a stop). */
  abort: AbortController;
}

/** Charges debits onchain, per chain, in batches, several in flight per chain. */
export class Settler {
  private running = false;
  private readonly loops: Promise<void>[] = [];
  private readonly lanes: Lane[] = [];
  private timer: NodeJS.Timeout | undefined;
  private keepTimer: NodeJS.Timeout | undefined;
  private keeping = false;
  private readonly sleeps = new Sleeps();
  private readonly maxInFlight: number;
  private readonly maxUnmined: number;

  constructor(
    private readonly redis: Redis,
    private readonly chains: Partial<Record<ChainName, SettlementChain>>,
    private readonly consumer: string,
    private readonly settings: SettlerSettings,
    private readonly metrics: Metrics,
    private readonly log: Log,
  ) {
    this.maxInFlight = Math.max(1, settings.batchesInFlight ?? DEFAULT_BATCHES_IN_FLIGHT);
    this.maxUnmined = Math.max(1, settings.batchesUnmined ?? DEFAULT_BATCHES_UNMINED);
  }

  /** Start one loop per chain that has a settler key. */
  async start(): Promise<void> {
    this.running = true;
    for (const [name, chain] of Object.entries(this.chains) as [ChainName, SettlementChain][]) {
      if (!chain.canSettle) continue;
      // Blocking reads get a connection of their own: a BLOCK would stall every other command on a shared one.
      const conn = logRedisErrors(this.redis.duplicate(), (err) =>
        this.log.warn({ err, chain: name }, 'settler redis connection'),
      );
      const lane: Lane = {
        name,
        chain,
        conn,
        key: keys.debits(name),
        inFlight: new Set(),
        unmined: new Set(),
        retry: [],
        held: new Set(),
        lastClaim: 0,
        claimCursor: '0-0',
        abort: new AbortController(),
      };
      this.lanes.push(lane);
      this.loops.push(this.loop(lane));
    }
    this.timer = setInterval(() => void this.measure().catch(() => {}), 5_000);
    this.timer.unref();
    this.keepTimer = setInterval(
      () => void this.keepHeld().catch(() => {}),
      Math.max(100, this.settings.claimIdleMs / 3),
    );
    this.keepTimer.unref();
  }

  /**
   * Keep this process's entries from looking idle to other settlers: a batch waits its confirmations (12 blocks of 12
   * s on Ethereum, 150 s) longer than `claimIdleMs`, and another settler would take its entries and send them again
   * (skipped by the escrow, but a whole batch's gas). XCLAIM to their owner with JUSTID resets their idle time and
   * nothing else; an id acknowledged meanwhile is no longer pending and is passed over.
   */
  private async keepHeld(): Promise<void> {
    // One pass at a time: with Redis away a pass waits, and the next would only queue the same commands behind it.
    if (this.keeping) return;
    this.keeping = true;
    try {
      for (const lane of this.lanes) {
        const ids = [...lane.held];
        for (let i = 0; i < ids.length && this.running; i += 1_000) {
          await this.redis.xclaim(lane.key, GROUP, this.consumer, 0, ...ids.slice(i, i + 1_000), 'JUSTID');
        }
      }
    } finally {
      this.keeping = false;
    }
  }

  private async ensureGroup(chain: ChainName): Promise<void> {
    // ioredis does not prefix XGROUP's key (it follows a subcommand): add the prefix here.
    const prefix = (this.redis.options.keyPrefix as string | undefined) ?? '';
    try {
      // From the stream's start ('0'), not '$': debits written before the first settler started count too.
      await this.redis.call('XGROUP', 'CREATE', prefix + keys.debits(chain), GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!String((err as Error).message).includes('BUSYGROUP')) throw err;
    }
  }

  private async loop(lane: Lane): Promise<void> {
    let backoff = 0;
    let grouped = false;
    while (this.running) {
      try {
        // Here, not in start(): a gateway starting while Redis is away still starts, and settles once it is back.
        if (!grouped) {
          await this.ensureGroup(lane.name);
          grouped = true;
        }
        if (lane.inFlight.size >= this.maxInFlight) {
          await Promise.race(lane.inFlight); // each settles, never rejects (track)
          continue;
        }
        if (lane.unmined.size >= this.maxUnmined) {
          await Promise.race([...lane.unmined, ...lane.inFlight]); // never reject
          continue;
        }
        const debits = await this.next(lane);
        if (debits.length === 0) continue;
        await this.send(lane, debits);
        backoff = 0;
      } catch (err) {
        if (!this.running) break;
        if (String((err as Error).message).includes('NOGROUP')) grouped = false;
        this.metrics.settlementFailures.inc({ chain: lane.name });
        this.log.error({ err, chain: lane.name }, 'settlement batch failed; will retry');
        // Capped low: a settler that waits long leaves debits pending (and balances locked) for that long.
        backoff = Math.min(5_000, backoff ? backoff * 2 : 500);
        // A stop ends the wait: a backoff never holds a shutdown.
        await this.sleeps.sleep(backoff);
      }
    }
  }

  /**
   * The debits of the next batch: those to send again first, then this consumer's own unacknowledged entries (left by
   * an earlier run under its name; read only while nothing is in flight, since entries in flight are unacknowledged
   * too), then others' stale ones, then new ones.
   */
  private async next(lane: Lane): Promise<Debit[]> {
    const { batchSize, batchWaitMs, claimIdleMs } = this.settings;
    if (lane.retry.length > 0) return lane.retry.splice(0, batchSize);
    const read = async (count: number, from: string, block?: number): Promise<Entry[]> => {
      const got = (
        block === undefined
          ? await lane.conn.xreadgroup('GROUP', GROUP, this.consumer, 'COUNT', count, 'STREAMS', lane.key, from)
          : await lane.conn.xreadgroup(
              'GROUP',
              GROUP,
              this.consumer,
              'COUNT',
              count,
              'BLOCK',
              block,
              'STREAMS',
              lane.key,
              from,
            )
      ) as [string, Entry[]][] | null;
      return got?.[0]?.[1] ?? [];
    };
    let entries: Entry[] = [];
    if (lane.inFlight.size === 0) entries = await read(batchSize, '0');
    // A pass over the stream every claimIdleMs / 2; once one finds entries, it goes on batch by batch to the stream's
    // end, so the backlog of a settler that died (up to batches_in_flight x batch_size) is taken over at the rate
    // batches go out, not one batch per pass.
    if (entries.length === 0 && (lane.claimCursor !== '0-0' || Date.now() - lane.lastClaim > claimIdleMs / 2)) {
      const fresh = lane.claimCursor === '0-0';
      if (fresh) lane.lastClaim = Date.now();
      const [cursor, claimed] = (await lane.conn.xautoclaim(
        lane.key,
        GROUP,
        this.consumer,
        claimIdleMs,
        lane.claimCursor,
        'COUNT',
        batchSize,
      )) as [string, Entry[]];
      lane.claimCursor = cursor;
      // Ours are kept fresh (keepHeld), but one may have gone idle while Redis was away: it is watched already.
      entries = (claimed ?? []).filter(([id]) => !lane.held.has(id));
      if (fresh) await pruneConsumers(this.redis, lane.name, claimIdleMs);
    }
    if (entries.length === 0) {
      entries = await read(batchSize, '>', 1000);
      if (entries.length > 0 && entries.length < batchSize && batchWaitMs > 0) {
        await new Promise((r) => setTimeout(r, batchWaitMs));
        entries = entries.concat(await read(batchSize - entries.length, '>'));
      }
    }
    const debits: Debit[] = [];
    const malformed: string[] = [];
    for (const [id, fields] of entries) {
      const charge = toCharge(fields);
      if (charge) debits.push({ id, charge });
      else malformed.push(id);
    }
    if (malformed.length) {
      this.log.error({ chain: lane.name, ids: malformed }, 'malformed debit entries dropped');
      await done(this.redis, lane.key, malformed);
    }
    return debits;
  }

  /** Send one batch of `debits` (what it cannot carry is kept for the next) and track it until confirmed. */
  private async send(lane: Lane, debits: Debit[]): Promise<void> {
    const fits = Math.max(
      1,
      Math.min(debits.length, lane.chain.batchFits?.(debits.map((d) => d.charge)) ?? debits.length),
    );
    const batch = debits.slice(0, fits);
    for (const d of debits) lane.held.add(d.id);
    lane.retry.unshift(...debits.slice(fits));
    const started = process.hrtime.bigint();
    let pending: PendingBatch;
    try {
      pending = await lane.chain.submitCharges(
        batch.map((d) => d.charge),
        { signal: lane.abort.signal },
      );
    } catch (err) {
      // Not sent (refused by its simulation, fees above the ceiling, the node away): sent again after the backoff.
      lane.retry.unshift(...batch);
      throw err;
    }
    const tracked = this.track(lane, pending, batch, started);
    lane.inFlight.add(tracked);
    void tracked.finally(() => lane.inFlight.delete(tracked));
    // Until it is in a block (a chain that cannot tell: until confirmed).
    const unmined = pending.mined ?? tracked;
    lane.unmined.add(unmined);
    void unmined.finally(() => lane.unmined.delete(unmined));
  }

  /** Wait for a sent batch's confirmation, then acknowledge its debits; on a failure, queue them to be sent again. */
  private async track(lane: Lane, pending: PendingBatch, batch: Debit[], started: bigint): Promise<void> {
    const { name } = lane;
    const ids = batch.map((d) => d.id);
    let receipt: Awaited<ReturnType<PendingBatch['wait']>>;
    try {
      receipt = await pending.wait();
    } catch (err) {
      // A stop: the batch is left unacknowledged, for a settler to take over (the escrow skips what it charged).
      if (lane.abort.signal.aborted) return;
      // Reverted or never mined: its debits go out again, ahead of new ones; the batches sent around it stand. A
      // debit it did charge (a receipt lost, not the batch) comes back already_charged.
      lane.retry.unshift(...batch);
      this.metrics.settlementFailures.inc({ chain: name });
      this.log.error(
        { err, chain: name, nonce: pending.nonce, tx: pending.txHash },
        'settlement batch failed; will retry',
      );
      return;
    }
    this.settings.onMined?.(name);
    this.metrics.settlementDuration.observe({ chain: name }, Number(process.hrtime.bigint() - started) / 1e9);
    this.metrics.settlementBatches.inc({ chain: name, result: 'mined' });
    const now = Date.now();
    countBy(
      receipt.results.map((r) => r.outcome),
      (outcome, n) => this.metrics.settlementCharges.inc({ chain: name, outcome }, n),
    );
    for (const id of ids) this.metrics.settlementLag.observe({ chain: name }, Math.max(0, now - entryTime(id)) / 1000);
    await this.acknowledge(lane, ids, pending);
  }

  /**
   * Acknowledge the debits of a confirmed batch, again after a backoff until Redis takes it: they are charged, so
   * sending them again would only buy a batch of skips. The batch keeps its place in flight meanwhile, so a Redis
   * that is away holds back new batches too. A stop leaves them pending, for a settler to take over.
   */
  private async acknowledge(lane: Lane, ids: string[], pending: PendingBatch): Promise<void> {
    let backoff = 0;
    while (this.running) {
      try {
        // On the shared connection: the lane's own may be in a blocking read.
        await done(this.redis, lane.key, ids);
        for (const id of ids) lane.held.delete(id);
        return;
      } catch (err) {
        if (!this.running) return;
        this.log.warn(
          { err, chain: lane.name, tx: pending.txHash },
          'confirmed batch not acknowledged; acknowledging again',
        );
        backoff = Math.min(5_000, backoff ? backoff * 2 : 200);
        await this.sleeps.sleep(backoff);
      }
    }
  }

  /** Queue depth and age of the oldest debit not yet charged, per chain. */
  async measure(): Promise<void> {
    for (const name of Object.keys(this.chains) as ChainName[]) {
      const key = keys.debits(name);
      // Both read before either is set: a scrape never sees one gauge of a chain without the other.
      const [depth, first] = await Promise.all([
        this.redis.xlen(key),
        this.redis.xrange(key, '-', '+', 'COUNT', 1) as Promise<Entry[]>,
      ]);
      this.metrics.debitQueueDepth.set({ chain: name }, depth);
      this.metrics.debitQueueOldest.set(
        { chain: name },
        first.length ? Math.max(0, Date.now() - entryTime(first[0]![0])) / 1000 : 0,
      );
    }
  }

  /**
   * Stop: no batch is sent after it, and the batches in flight are no longer watched: their debits stay pending in
   * the stream, taken over by another settler (or this one's restart), which charges nothing twice. Leaves the groups
   * where nothing is left pending to this consumer.
   */
  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.timer);
    clearInterval(this.keepTimer);
    this.sleeps.wakeAll();
    for (const lane of this.lanes) {
      lane.abort.abort();
      lane.conn.disconnect();
    }
    // A loop stuck on a command of a Redis that is away must not hold a shutdown: what it did not finish is
    // left pending in the stream, and taken over by another settler.
    let timer: NodeJS.Timeout | undefined;
    const tracked = this.lanes.flatMap((l) => [...l.inFlight]);
    await Promise.race([
      Promise.allSettled([...this.loops, ...tracked]),
      new Promise((r) => (timer = setTimeout(r, 5_000))),
    ]);
    clearTimeout(timer);
    for (const [name, chain] of Object.entries(this.chains) as [ChainName, SettlementChain][]) {
      if (chain.canSettle)
        await ifAnswering(this.redis, 1_000, () => pruneConsumers(this.redis, name, 0, this.consumer));
    }
  }
}
