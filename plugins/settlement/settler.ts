/**
 * Settle onchain (DESIGN step 6): takes debits from each chain's Redis Stream as a consumer group, so any number
 * of gateway instances share the work, and charges them with the escrow's chargeBatch, one event per call id.
 * An entry is acknowledged only after its batch's receipt; until then it stays pending and is retried (by this
 * instance, or claimed by another after `claimIdleMs`). Retries are safe: the escrow skips a call id it has
 * seen. Pending amounts leave `pending` when the watcher applies the Charged event, not here.
 */
import type { Redis } from 'ioredis';
import type { ChainName } from '../chains/config.js';
import type { Charge, Hex, SettlementChain } from '../chains/port.js';
import { countBy, type Metrics } from '../metrics/metrics.js';
import { logRedisErrors } from '../store/redis.js';
import { Sleeps } from './sleeps.js';
import { LuaScript } from '../store/redis-script.js';
import { keys } from '../store/keys.js';

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
  /** Called once a batch of `chain` is mined (this process's watcher polls that chain at once). */
  onMined?: (chain: ChainName) => void;
}

type Entry = [id: string, fields: string[]];

function toCharge(fields: string[]): Charge | null {
  const f: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) f[fields[i]] = fields[i + 1];
  if (!f.call_id || !f.account || !f.amount) return null;
  return { callId: f.call_id as Hex, account: f.account as Hex, amount: BigInt(f.amount) };
}

/**
 * Acknowledge entries and delete them, in one transaction. Acknowledged entries are done with, and deleting them keeps
 * the stream short; apart, a crash between the two left an entry no consumer would ever take again, holding the queue
 * depth and oldest-debit gauges up for good (seen in the crash test).
 */
async function done(conn: Redis, key: string, ids: string[]): Promise<void> {
  const results = await conn.multi().xack(key, GROUP, ...ids).xdel(key, ...ids).exec();
  const failed = results?.find(([err]) => err);
  if (!results || failed) throw failed?.[0] ?? new Error('debit acknowledgement transaction discarded');
}

/** Stream entry ids start with their creation time in ms. */
function entryTime(id: string): number {
  return Number(id.slice(0, id.indexOf('-')));
}

/** Charges debits onchain, per chain, in batches. */
export class Settler {
  private running = false;
  private readonly loops: Promise<void>[] = [];
  private readonly conns: Redis[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly sleeps = new Sleeps();

  constructor(
    private readonly redis: Redis,
    private readonly chains: Partial<Record<ChainName, SettlementChain>>,
    private readonly consumer: string,
    private readonly settings: SettlerSettings,
    private readonly metrics: Metrics,
    private readonly log: { error(obj: object, msg: string): void; warn(obj: object, msg: string): void },
  ) {}

  /** Start one loop per chain that has a settler key. */
  async start(): Promise<void> {
    this.running = true;
    for (const [name, chain] of Object.entries(this.chains) as [ChainName, SettlementChain][]) {
      if (!chain.canSettle) continue;
      // Blocking reads get a connection of their own: a BLOCK would stall every other command on a shared one.
      const conn = logRedisErrors(this.redis.duplicate(), (err) => this.log.warn({ err, chain: name }, 'settler redis connection'));
      this.conns.push(conn);
      this.loops.push(this.loop(name, chain, conn));
    }
    this.timer = setInterval(() => void this.measure().catch(() => {}), 5_000);
    this.timer.unref();
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

  private async loop(name: ChainName, chain: SettlementChain, conn: Redis): Promise<void> {
    const key = keys.debits(name);
    let backoff = 0;
    let lastClaim = 0;
    let grouped = false;
    while (this.running) {
      try {
        // Here, not in start(): a gateway starting while Redis is away still starts, and settles once it is back.
        if (!grouped) {
          await this.ensureGroup(name);
          grouped = true;
        }
        let entries: Entry[] = [];
        // Own unacknowledged entries first (a batch that failed), then others' stale ones, then new ones.
        const own = (await conn.xreadgroup('GROUP', GROUP, this.consumer, 'COUNT', this.settings.batchSize, 'STREAMS', key, '0')) as [string, Entry[]][] | null;
        entries = own?.[0]?.[1] ?? [];
        if (entries.length === 0 && Date.now() - lastClaim > this.settings.claimIdleMs / 2) {
          lastClaim = Date.now();
          const claimed = (await conn.xautoclaim(key, GROUP, this.consumer, this.settings.claimIdleMs, '0-0', 'COUNT', this.settings.batchSize)) as [string, Entry[]];
          entries = claimed[1] ?? [];
          await pruneConsumers(this.redis, name, this.settings.claimIdleMs);
        }
        if (entries.length === 0) {
          const fresh = (await conn.xreadgroup('GROUP', GROUP, this.consumer, 'COUNT', this.settings.batchSize, 'BLOCK', 1000, 'STREAMS', key, '>')) as [string, Entry[]][] | null;
          entries = fresh?.[0]?.[1] ?? [];
          if (entries.length > 0 && entries.length < this.settings.batchSize && this.settings.batchWaitMs > 0) {
            await new Promise((r) => setTimeout(r, this.settings.batchWaitMs));
            const more = (await conn.xreadgroup('GROUP', GROUP, this.consumer, 'COUNT', this.settings.batchSize - entries.length, 'STREAMS', key, '>')) as [string, Entry[]][] | null;
            entries = entries.concat(more?.[0]?.[1] ?? []);
          }
        }
        if (entries.length === 0) continue;
        await this.settle(name, chain, conn, key, entries);
        backoff = 0;
      } catch (err) {
        if (!this.running) break;
        if (String((err as Error).message).includes('NOGROUP')) grouped = false;
        this.metrics.settlementFailures.inc({ chain: name });
        this.log.error({ err, chain: name }, 'settlement batch failed; will retry');
        // Capped low: a settler that waits long leaves debits pending (and balances locked) for that long.
        backoff = Math.min(5_000, backoff ? backoff * 2 : 500);
        // A stop ends the wait: a backoff never holds a shutdown.
        await this.sleeps.sleep(backoff);
      }
    }
  }

  private async settle(name: ChainName, chain: SettlementChain, conn: Redis, key: string, entries: Entry[]): Promise<void> {
    const charges: Charge[] = [];
    const ids: string[] = [];
    const malformed: string[] = [];
    for (const [id, fields] of entries) {
      const c = toCharge(fields);
      if (c) {
        charges.push(c);
        ids.push(id);
      } else {
        malformed.push(id);
      }
    }
    if (malformed.length) {
      this.log.error({ chain: name, ids: malformed }, 'malformed debit entries dropped');
      await done(conn, key, malformed);
    }
    if (charges.length === 0) return;
    const started = process.hrtime.bigint();
    const receipt = await chain.charge(charges);
    this.settings.onMined?.(name);
    this.metrics.settlementDuration.observe({ chain: name }, Number(process.hrtime.bigint() - started) / 1e9);
    this.metrics.settlementBatches.inc({ chain: name, result: 'mined' });
    const now = Date.now();
    countBy(receipt.results.map((r) => r.outcome), (outcome, n) => this.metrics.settlementCharges.inc({ chain: name, outcome }, n));
    for (const id of ids) this.metrics.settlementLag.observe({ chain: name }, Math.max(0, now - entryTime(id)) / 1000);
    await done(conn, key, ids);
  }

  /** Queue depth and age of the oldest debit not yet charged, per chain. */
  async measure(): Promise<void> {
    for (const name of Object.keys(this.chains) as ChainName[]) {
      const key = keys.debits(name);
      // Both read before either is set: a scrape never sees one gauge of a chain without the other.
      const [depth, first] = await Promise.all([this.redis.xlen(key), this.redis.xrange(key, '-', '+', 'COUNT', 1) as Promise<Entry[]>]);
      this.metrics.debitQueueDepth.set({ chain: name }, depth);
      this.metrics.debitQueueOldest.set({ chain: name }, first.length ? Math.max(0, Date.now() - entryTime(first[0][0])) / 1000 : 0);
    }
  }

  /** Stop after the batches in flight, and leave the groups where nothing is left pending to this consumer. */
  async stop(): Promise<void> {
    this.running = false;
    clearInterval(this.timer);
    this.sleeps.wakeAll();
    for (const c of this.conns) c.disconnect();
    // A loop stuck on a command of a Redis that is away must not hold a shutdown: what it did not finish is
    // left pending in the stream, and taken over by another settler.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled(this.loops), new Promise((r) => (timer = setTimeout(r, 5_000)))]);
    clearTimeout(timer);
    for (const [name, chain] of Object.entries(this.chains) as [ChainName, SettlementChain][]) {
      if (chain.canSettle) await pruneConsumers(this.redis, name, 0, this.consumer).catch(() => {});
    }
  }
}
