/**
 * Watch chains (DESIGN step 7): applies each escrow's events (deposits, charges, refusals, withdrawals) to the
 * synced balances in Redis, exactly once and in order, resuming after restarts from the last applied event; and
 * reconciles: compares each synced balance with balanceOf onchain, corrects a difference that persists across
 * two rounds (one round can be the watcher's own lag), and counts it as drift.
 *
 * One instance watches each chain at a time (a Redis lease per chain); the others stand by. Applying is
 * idempotent anyway: an event at or before the cursor is skipped.
 */
import type { Redis } from 'ioredis';
import type { ChainName } from '../chains/config.js';
import type { SettlementChain } from '../chains/port.js';
import type { Metrics } from '../metrics/metrics.js';
import { countBy, usdOf } from '../metrics/metrics.js';
import { readWallet } from '../billing/wallets.js';
import { applyEvents, correctSynced, readCursor } from './apply-events.js';
import { keys } from '../store/keys.js';

/** Watcher settings. */
export interface WatcherSettings {
  pollMs: number;
  reconcileMs: number;
  /** Most blocks read in one eth_getLogs range. */
  maxRange: number;
  /** Block each chain's scan starts at when nothing was scanned yet (the escrow's deploy block). */
  startBlocks: Partial<Record<ChainName, bigint>>;
}

const LEASE_MS = 10_000;
/** A held lease is renewed once this much of it has run, not on every poll. */
const RENEW_AFTER_MS = LEASE_MS / 3;

/** Follows the escrows of all chains. */
export class ChainWatcher {
  private readonly r: Redis;
  private running = false;
  private readonly loops: Promise<void>[] = [];
  /** Differences seen in the last reconcile round, per chain and account. */
  private readonly suspects = new Map<string, bigint>();
  /** Per chain: when this instance last took or renewed its lease (ms; absent: not held). */
  private readonly leasedAt = new Map<ChainName, number>();
  /** Per chain: the head the last poll scanned up to, while the lease has been held since. */
  private readonly scannedHead = new Map<ChainName, bigint>();
  /** Per chain: ends the wait before its next poll (wake). */
  private readonly wakers = new Map<ChainName, () => void>();
  /** Chains woken while not waiting: their next wait is skipped. */
  private readonly woken = new Set<ChainName>();

  constructor(
    redis: Redis,
    private readonly chains: Partial<Record<ChainName, SettlementChain>>,
    private readonly instance: string,
    private readonly settings: WatcherSettings,
    private readonly metrics: Metrics,
    private readonly log: { error(obj: object, msg: string): void; warn(obj: object, msg: string): void },
  ) {
    this.r = redis;
  }

  /**
   * Poll `chain` now instead of at its next interval: the settler of this process calls it once a batch is mined, so
   * the batch's charges leave `pending` at once while the polls for others' transactions (deposits) stay sparse.
   */
  wake(chain: ChainName): void {
    const waker = this.wakers.get(chain);
    if (waker) waker();
    else this.woken.add(chain);
  }

  /** Wait `ms` before the next poll of `chain`, or less if woken or stopping. */
  private pause(chain: ChainName, ms: number): Promise<void> {
    if (!this.running || this.woken.delete(chain)) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakers.delete(chain);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakers.set(chain, done);
    });
  }

  start(): void {
    this.running = true;
    for (const [name, chain] of Object.entries(this.chains) as [ChainName, SettlementChain][]) {
      this.loops.push(this.loop(name, chain));
    }
  }

  /**
   * Take or keep the chain's lease. Held, it is renewed only after RENEW_AFTER_MS: it is known to be this
   * instance's until LEASE_MS after the last renewal (Redis starts its PX later than `now` is read here).
   */
  private async lease(name: ChainName): Promise<boolean> {
    const now = Date.now();
    const at = this.leasedAt.get(name);
    if (at !== undefined && now - at < RENEW_AFTER_MS) return true;
    const key = keys.watcherLease(name);
    let held = (await this.r.set(key, this.instance, 'PX', LEASE_MS, 'NX')) === 'OK';
    if (!held && (await this.r.get(key)) === this.instance) held = (await this.r.pexpire(key, LEASE_MS)) === 1;
    if (held) {
      this.leasedAt.set(name, now);
    } else {
      this.leasedAt.delete(name);
      this.scannedHead.delete(name);
    }
    return held;
  }

  private async loop(name: ChainName, chain: SettlementChain): Promise<void> {
    let lastReconcile = Date.now();
    let backoff = 0;
    while (this.running) {
      try {
        if (!(await this.lease(name))) {
          // A standby's last lag reading would go stale: the lease holder reports it.
          this.metrics.chainLagBlocks.remove({ chain: name });
        } else {
          // Polls mostly find the head where the last one left it: that costs one RPC request and no Redis.
          const head = await chain.latestBlock();
          if (head !== this.scannedHead.get(name)) {
            this.scannedHead.delete(name);
            await this.poll(name, chain, head);
          }
          if (Date.now() - lastReconcile >= this.settings.reconcileMs) {
            lastReconcile = Date.now();
            await this.reconcile(name, chain);
          }
        }
        backoff = 0;
        await this.pause(name, this.settings.pollMs);
      } catch (err) {
        if (!this.running) break;
        // RPC or Redis errors: keep the cursor, retry with backoff.
        this.metrics.chainErrors.inc({ chain: name });
        this.log.warn({ err, chain: name }, 'chain watcher error; retrying');
        backoff = Math.min(30_000, backoff ? backoff * 2 : this.settings.pollMs);
        await new Promise((r) => setTimeout(r, backoff));
      }
    }
  }

  /** Read and apply the events of the blocks not scanned yet (one step; exported for tests). */
  async poll(name: ChainName, chain: SettlementChain, head?: bigint): Promise<number> {
    head ??= await chain.latestBlock();
    const scannedRaw = await this.r.get(keys.scanned(name));
    const from = scannedRaw !== null ? BigInt(scannedRaw) + 1n : (this.settings.startBlocks[name] ?? 0n);
    if (from > head) {
      this.metrics.chainLagBlocks.set({ chain: name }, 0);
      if (this.leasedAt.has(name)) this.scannedHead.set(name, head);
      return 0;
    }
    const to = head - from + 1n > BigInt(this.settings.maxRange) ? from + BigInt(this.settings.maxRange) - 1n : head;
    const events = await chain.readEvents(from, to);
    const kinds = await applyEvents(this.r, name, events);
    countBy(kinds, (kind, n) => this.metrics.chainEvents.inc({ chain: name, kind }, n));
    const applied = kinds.length;
    await this.r.set(keys.scanned(name), to.toString());
    if (to === head && this.leasedAt.has(name)) this.scannedHead.set(name, head);
    this.metrics.chainLagBlocks.set({ chain: name }, Number(head - to));
    return applied;
  }

  /** Compare every synced balance of a chain with the chain (one round; exported for tests). */
  async reconcile(name: ChainName, chain: SettlementChain): Promise<number> {
    let corrected = 0;
    const accounts = await this.r.smembers(keys.wallets(name));
    for (const account of accounts) {
      // Cursor first, then the scanned block: the balance at that block is what the applied events sum to.
      const cursor = await readCursor(this.r, name);
      const scanned = await this.r.get(keys.scanned(name));
      if (scanned === null) return corrected;
      const onchain = await chain.balanceOf(account as `0x${string}`, BigInt(scanned));
      const wallet = await readWallet(this.r, account, name);
      const key = `${name}:${account}`;
      const diff = onchain - wallet.synced;
      if (diff === 0n) {
        this.suspects.delete(key);
        continue;
      }
      // A difference can be an event the watcher has not applied yet: correct only one seen twice alike.
      if (this.suspects.get(key) !== diff) {
        this.suspects.set(key, diff);
        continue;
      }
      this.suspects.delete(key);
      const made = await correctSynced(this.r, name, account, cursor?.raw ?? '', onchain);
      if (made !== null) {
        corrected++;
        this.metrics.drift.inc({ chain: name }, usdOf(made < 0n ? -made : made));
        this.metrics.driftCorrections.inc({ chain: name });
        this.log.warn({ chain: name, account, synced: wallet.synced.toString(), onchain: onchain.toString() }, 'synced balance corrected');
      }
    }
    return corrected;
  }

  async stop(): Promise<void> {
    this.running = false;
    for (const waker of [...this.wakers.values()]) waker();
    await Promise.allSettled(this.loops);
    this.woken.clear();
    this.leasedAt.clear();
    this.scannedHead.clear();
    // Hand the leases over now: a successor would otherwise wait LEASE_MS for them to expire.
    for (const name of Object.keys(this.chains)) {
      await this.r
        .eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0", 1, keys.watcherLease(name), this.instance)
        .catch(() => {});
    }
  }
}
