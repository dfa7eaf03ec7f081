/**
 * Watch chains (DESIGN step 7): applies each escrow's events (deposits, charges, refusals, withdrawals) to the
 * synced balances in Redis, exactly once and in order, resuming after restarts from the last applied event; and
 * reconciles: compares each synced balance with balanceOf onchain, corrects a difference that persists across
 * two rounds (one round can be the watcher's own lag), and counts it as drift.
 *
 * One instance watches each chain at a time (a Redis lease per chain); the others stand by. Applying is
 * idempotent anyway: an event at or before the cursor is skipped.
 *
 * What a range must pass before it counts as scanned (SettlementChain.scanEvents): its blocks have the chain's
 * confirmations; the node that answered had its last block (a lagging backend behind a load balancer answers with
 * no logs for blocks it lacks); and the block scanned last before it is still the node's block at that height. That
 * block's hash is kept in Redis beside the scanned block. A different hash there is a reorganisation deeper than the
 * confirmations: events already applied may be gone, or back at other positions, where the cursor would drop or
 * re-apply them. The watcher then halts the chain (chain-halt:<chain>, farebox_chain_halted, an error log and an
 * alert) and applies nothing more of it until an operator resumes it: resumeChain rebuilds the chain's wallets as of
 * the last block both branches share and lets the watcher apply the new branch from there.
 *
 * Reconciliation runs in a loop of its own per chain, paced (reconcileRate balanceOf calls a second), so a slow or
 * failing reconciliation never delays events and a failing poll never stops reconciliation.
 */
import type { Redis } from 'ioredis';
import type { ChainName } from '../chains/config.js';
import type { BlockRef, EscrowAdminEvent, Hex, SettlementChain } from '../chains/port.js';
import type { Metrics } from '../metrics/metrics.js';
import { countBy, usdOf } from '../metrics/metrics.js';
import { readWallet } from '../billing/wallets.js';
import { Sleeps } from './sleeps.js';
import { applyEventBatch, correctSynced, readCursor } from './apply-events.js';
import { keys } from '../store/keys.js';
import type { Log } from '../log.js';
import { Lease } from '../store/lease.js';

/** Watcher settings. */
export interface WatcherSettings {
  pollMs: number;
  /** Pause between two reconciliation rounds of a chain. */
  reconcileMs: number;
  /** Most balanceOf calls a second of one chain's reconciliation: the RPC serves the polls and the settler too. */
  reconcileRate?: number;
  /** Block each chain's scan starts at when nothing was scanned yet (the escrow's deploy block). */
  startBlocks: Partial<Record<ChainName, bigint>>;
  /** How long a call record rebuilt from a charge event is kept (billing.retention_days; default 30 days). */
  retentionMs?: number;
}

/** Why a chain's bookkeeping stopped: the JSON of chain-halt:<chain>. */
export interface ChainHalt {
  reason: 'reorg';
  /** The block scanned last, whose hash the node no longer has. */
  block: string;
  expected: Hex;
  found: Hex;
  /** The cursor (last applied event) when it halted. */
  cursor: string | null;
  at: string;
}

/** The lease's TTL: the same as earlier versions', so old and new instances stay exclusive (store/lease.ts). */
const LEASE_MS = 10_000;
/** A held lease is renewed once this much of it has run, not on every poll. */
const RENEW_AFTER_MS = LEASE_MS / 3;
const DEFAULT_RECONCILE_RATE = 20;
/** Admin events that announce a change to who can take callers' money: logged as errors, alerted on. */
const PROPOSALS = new Set<EscrowAdminEvent['kind']>([
  'settler_proposed',
  'treasury_proposed',
  'max_charge_proposed',
  'ownership_transfer_started',
]);

const ZERO_ADDRESS = /^0x0{40}$/i;

/**
 * The escrow's constructor announcing its first roles (Escrow.sol): ownership taken from the zero address, and the
 * treasury, the charge cap and the settler set in that same transaction. They need no action (every start of the
 * embedded default deploys four escrows); any other role event does, and is a warn.
 */
function deploymentEvents(admin: readonly EscrowAdminEvent[]): Set<EscrowAdminEvent> {
  const txs = new Set(
    admin.filter((e) => e.kind === 'ownership_transferred' && ZERO_ADDRESS.test(e.previous)).map((e) => e.txHash),
  );
  return new Set(
    admin.filter((e) => {
      if (!txs.has(e.txHash)) return false;
      switch (e.kind) {
        case 'ownership_transferred':
        case 'treasury_updated':
          return ZERO_ADDRESS.test(e.previous);
        case 'max_charge_updated':
          return e.previous === 0n;
        case 'settler_updated':
          return e.enabled;
        default:
          return false;
      }
    }),
  );
}

/** The deployment's roles on one log line: its transaction, owner, treasury, charge cap and settler. */
function deploymentSummary(events: Set<EscrowAdminEvent>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const e of events) {
    out.blockNumber = e.blockNumber;
    out.txHash = e.txHash;
    if (e.kind === 'ownership_transferred') out.owner = e.owner;
    else if (e.kind === 'treasury_updated') out.treasury = e.treasury;
    else if (e.kind === 'max_charge_updated') out.maxCharge = e.maxCharge;
    else if (e.kind === 'settler_updated') out.settler = e.settler;
  }
  return out;
}

/** What resumeChain did. */
export interface ResumeReport {
  halt: ChainHalt;
  /** The last block both branches share: the chain's bookkeeping restarts after it. */
  fork: BlockRef;
  /** Wallets whose synced and locked amounts were read back at the fork block. */
  wallets: number;
}

/** How many scanned blocks are kept as anchors for finding a fork (scan-anchors:<chain>). */
const ANCHORS = 256;

/**
 * Resume a halted chain (an operator's step, after looking at the reorg the halt names). It finds the fork: the
 * newest scanned block (scan-anchors) still on the node's chain, or `forkBlock` when given. It then rebuilds what
 * the watcher derives from the chain as of that block: each known wallet's synced balance (balanceOf) and locked
 * amount (pendingWithdrawal) read at the fork block, the cursor and the scanned block set to it. The watcher then
 * applies the new branch's events from the next block: nothing of the orphaned blocks stays counted, nothing of the
 * new branch is skipped. Call records are the exception: a charge of an orphaned block that the new branch does not
 * carry left its record settled (and its amount out of pending) though the escrow never charged it; its debit must
 * be queued again by hand. Needs the node's state at the fork block (a full node keeps the last 128 blocks).
 */
export async function resumeChain(
  r: Redis,
  name: ChainName,
  chain: SettlementChain,
  opts: { forkBlock?: bigint } = {},
): Promise<ResumeReport> {
  const raw = await r.get(keys.chainHalt(name));
  if (raw === null) throw new Error(`${name} is not halted`);
  let fork: BlockRef | undefined;
  if (opts.forkBlock !== undefined) {
    const hash = await chain.blockHash(opts.forkBlock);
    if (hash === null) throw new Error(`${name}: the node has no block ${opts.forkBlock}`);
    fork = { number: opts.forkBlock, hash };
  } else {
    for (const anchor of await r.lrange(keys.scanAnchors(name), 0, -1)) {
      const [n, hash] = anchor.split(':') as [string, Hex];
      if ((await chain.blockHash(BigInt(n)))?.toLowerCase() === hash.toLowerCase()) {
        fork = { number: BigInt(n), hash };
        break;
      }
    }
    if (!fork)
      throw new Error(`${name}: none of the last ${ANCHORS} scanned blocks is on the node's chain: pass forkBlock`);
  }
  const accounts = await r.smembers(keys.wallets(name));
  const state: [string, bigint, bigint][] = [];
  for (const account of accounts) {
    const [synced, w] = await Promise.all([
      chain.balanceOf(account as Hex, fork.number),
      chain.pendingWithdrawal(account as Hex, fork.number),
    ]);
    state.push([account, synced, w?.amount ?? 0n]);
  }
  const m = r.multi();
  for (const [account, synced, locked] of state)
    m.hset(keys.wallet(account, name), 'synced', synced.toString(), 'locked', locked.toString());
  // Every event up to the fork block was applied before the halt (the fork is at or below the scanned block).
  m.set(keys.cursor(name), `${fork.number}:${Number.MAX_SAFE_INTEGER}`);
  m.set(keys.scanned(name), fork.number.toString());
  m.set(keys.scannedHash(name), fork.hash);
  m.del(keys.scanAnchors(name));
  m.lpush(keys.scanAnchors(name), `${fork.number}:${fork.hash}`);
  m.del(keys.chainHalt(name));
  await execAll(m);
  return { halt: JSON.parse(raw) as ChainHalt, fork, wallets: state.length };
}

/** Follows the escrows of all chains. */
export class ChainWatcher {
  private readonly r: Redis;
  private running = false;
  /** Set while stop() runs: a poll or reconciliation round in progress ends early. */
  private stopping = false;
  private readonly loops: Promise<void>[] = [];
  /** Differences seen in the last reconcile round, per chain and account. */
  private readonly suspects = new Map<string, bigint>();
  /** Per chain: this instance's lease (watcher-lease:<chain>). */
  private readonly leases = new Map<ChainName, Lease>();
  /** Per chain: the head the last poll scanned up to, while the lease has been held since. */
  private readonly scannedHead = new Map<ChainName, bigint>();
  /** The loops' waits: a chain's poll wait ends on wake(chain), every wait on stop. */
  private readonly sleeps = new Sleeps<ChainName>();
  /** Chains woken while not waiting: their next wait is skipped. */
  private readonly woken = new Set<ChainName>();
  /** Chains whose node was behind at the last poll (logged once per stretch). */
  private readonly behind = new Set<ChainName>();

  constructor(
    redis: Redis,
    private readonly chains: Partial<Record<ChainName, SettlementChain>>,
    private readonly instance: string,
    private readonly settings: WatcherSettings,
    private readonly metrics: Metrics,
    private readonly log: Log,
  ) {
    this.r = redis;
    for (const name of Object.keys(chains) as ChainName[])
      this.leases.set(name, new Lease(redis, keys.watcherLease(name), instance, LEASE_MS));
  }

  /**
   * Poll `chain` now instead of at its next interval: the settler of this process calls it once a batch is mined, so
   * the batch's charges leave `pending` at once while the polls for others' transactions (deposits) stay sparse.
   */
  wake(chain: ChainName): void {
    if (!this.sleeps.wake(chain)) this.woken.add(chain);
  }

  /** Wait `ms`, or less if the watcher stops: a backoff of 30 s never holds a shutdown. */
  private sleep(ms: number): Promise<void> {
    return this.stopping ? Promise.resolve() : this.sleeps.sleep(ms);
  }

  /** Wait `ms` before the next poll of `chain`, or less if woken or stopping. */
  private pause(chain: ChainName, ms: number): Promise<void> {
    if (!this.running || this.woken.delete(chain)) return Promise.resolve();
    return this.sleeps.sleep(ms, chain);
  }

  start(): void {
    this.running = true;
    for (const [name, chain] of Object.entries(this.chains) as [ChainName, SettlementChain][]) {
      this.loops.push(this.loop(name, chain), this.reconcileLoop(name, chain));
    }
  }

  /** Take or keep the chain's lease (renewed once RENEW_AFTER_MS of it has run); a standby forgets its scanned head. */
  private async lease(name: ChainName): Promise<boolean> {
    const held = await this.leases.get(name)!.keep(RENEW_AFTER_MS);
    if (!held) this.scannedHead.delete(name);
    return held;
  }

  private async loop(name: ChainName, chain: SettlementChain): Promise<void> {
    let backoff = 0;
    while (this.running) {
      try {
        let more = false;
        if (!(await this.lease(name))) {
          // A standby's last readings would go stale: the lease holder reports them.
          for (const g of [this.metrics.chainLagBlocks, this.metrics.chainHalted, this.metrics.chainLogRange])
            g.remove({ chain: name });
        } else {
          if (!this.termsPublished.has(name)) await this.publishTerms(name, chain);
          // Polls mostly find the head where the last one left it: that costs one RPC request and no Redis.
          const head = await chain.latestBlock();
          if (head !== this.scannedHead.get(name)) {
            this.scannedHead.delete(name);
            await this.poll(name, chain, head);
            // Catching up (a range limit, a long outage): go on at once, once the lease is renewed.
            more =
              this.scannedHead.get(name) !== head &&
              !this.behind.has(name) &&
              (await this.r.exists(keys.chainHalt(name))) === 0;
          }
        }
        backoff = 0;
        if (!more) await this.pause(name, this.settings.pollMs);
      } catch (err) {
        if (!this.running) break;
        // RPC or Redis errors: keep the cursor, retry with backoff.
        this.metrics.chainErrors.inc({ chain: name });
        this.log.warn({ err, chain: name }, 'chain watcher error; retrying');
        backoff = Math.min(30_000, backoff ? backoff * 2 : this.settings.pollMs);
        await this.sleep(backoff);
      }
    }
  }

  /**
   * Read and apply the events of the blocks not scanned yet, up to `head` (one call; exported for tests). Stops
   * early, to let the loop renew the lease, after RENEW_AFTER_MS of ranges; returns the events applied.
   */
  async poll(name: ChainName, chain: SettlementChain, head?: bigint): Promise<number> {
    head ??= await chain.latestBlock();
    const started = Date.now();
    let applied = 0;
    for (;;) {
      const [scannedRaw, hashRaw, halt] = await this.r.mget(
        keys.scanned(name),
        keys.scannedHash(name),
        keys.chainHalt(name),
      );
      if (halt !== null) {
        this.metrics.chainHalted.set({ chain: name }, 1);
        return applied;
      }
      this.metrics.chainHalted.set({ chain: name }, 0);
      const from = scannedRaw !== null ? BigInt(scannedRaw) + 1n : (this.settings.startBlocks[name] ?? 0n);
      if (from > head) {
        this.metrics.chainLagBlocks.set({ chain: name }, 0);
        if (this.leases.get(name)?.held) this.scannedHead.set(name, head);
        return applied;
      }
      const parent: BlockRef | null =
        scannedRaw !== null && hashRaw !== null ? { number: BigInt(scannedRaw), hash: hashRaw as Hex } : null;
      const scan = await chain.scanEvents(from, head, parent);
      if (!scan.ok) {
        if (scan.reason === 'node_behind') {
          this.metrics.chainNodeBehind.inc({ chain: name });
          if (!this.behind.has(name))
            this.log.warn(
              { chain: name, block: scan.block.toString(), detail: scan.detail },
              'chain node behind the range asked; retrying',
            );
          this.behind.add(name);
        } else {
          await this.halt(name, scan.block, scan.expected, scan.found);
        }
        return applied;
      }
      this.behind.delete(name);
      this.metrics.chainLogRange.set({ chain: name }, scan.span);
      if (scan.splits > 0) this.metrics.chainLogRangeSplits.inc({ chain: name }, scan.splits);
      const report = await applyEventBatch(this.r, name, scan.events, { retentionMs: this.settings.retentionMs });
      countBy(report.applied, (kind, n) => this.metrics.chainEvents.inc({ chain: name, kind }, n));
      applied += report.applied.length;
      for (const a of report.anomalies) {
        this.metrics.chainAnomalies.inc({ chain: name, kind: a.kind });
        this.log.error(
          { chain: name, ...stringified(a) },
          'escrow event not applied: amount out of range (kept in chain-anomalies)',
        );
      }
      for (const u of report.unmatched) {
        this.metrics.unmatchedCharges.inc({ chain: name, reason: u.reason });
        const msg = u.rebuilt
          ? 'charge outcome of a call Redis had lost: its record rebuilt from the event'
          : 'charge outcome without a pending call record';
        this.log.warn({ chain: name, ...stringified(u) }, msg);
      }
      const deployment = deploymentEvents(scan.admin);
      if (deployment.size > 0)
        this.log.info?.({ chain: name, ...stringified(deploymentSummary(deployment)) }, 'escrow deployed');
      for (const e of scan.admin) {
        this.metrics.escrowAdminEvents.inc({ chain: name, kind: e.kind });
        if (PROPOSALS.has(e.kind)) this.log.error({ chain: name, ...stringified(e) }, 'escrow role change announced');
        else if (!deployment.has(e)) this.log.warn({ chain: name, ...stringified(e) }, 'escrow role event');
      }
      await execAll(
        this.r
          .multi()
          .mset(keys.scanned(name), scan.to.number.toString(), keys.scannedHash(name), scan.to.hash)
          .lpush(keys.scanAnchors(name), `${scan.to.number}:${scan.to.hash}`)
          .ltrim(keys.scanAnchors(name), 0, ANCHORS - 1),
      );
      this.metrics.chainLagBlocks.set({ chain: name }, Number(head - scan.to.number));
      if (scan.to.number === head) {
        if (this.leases.get(name)?.held) this.scannedHead.set(name, head);
        return applied;
      }
      if (Date.now() - started >= RENEW_AFTER_MS || this.stopping) return applied;
    }
  }

  /** Stop applying `name`'s events: the block scanned last is no longer the node's (see the head of this file). */
  private async halt(name: ChainName, block: bigint, expected: Hex, found: Hex): Promise<void> {
    const cursor = await this.r.get(keys.cursor(name));
    const halt: ChainHalt = {
      reason: 'reorg',
      block: block.toString(),
      expected,
      found,
      cursor,
      at: new Date().toISOString(),
    };
    await this.r.set(keys.chainHalt(name), JSON.stringify(halt), 'NX');
    this.metrics.chainHalted.set({ chain: name }, 1);
    this.log.error(
      { chain: name, ...halt },
      'chain reorganised below the confirmed block scanned last: its events are no longer applied until an operator resumes it',
    );
  }

  /**
   * Reconcile `name` every reconcileMs while this instance holds its lease; errors are counted, never fatal. The loop
   * takes or renews the lease itself: a poll loop waiting out a long backoff must not let it lapse under it.
   */
  private async reconcileLoop(name: ChainName, chain: SettlementChain): Promise<void> {
    while (this.running) {
      await this.sleep(this.settings.reconcileMs);
      if (!this.running) break;
      try {
        if (!(await this.lease(name))) {
          this.metrics.reconcileLastRound.remove({ chain: name });
          continue;
        }
        await this.publishTerms(name, chain);
        await this.reconcile(name, chain);
      } catch (err) {
        this.metrics.chainErrors.inc({ chain: name });
        this.log.warn({ err, chain: name }, 'reconciliation round failed');
      }
    }
  }

  /** Chains whose escrow terms this watcher has published since it started. */
  private readonly termsPublished = new Set<ChainName>();

  /**
   * Publish the escrow's terms gateways admit calls by, read at the first lease and every reconciliation round: its
   * per-charge cap, so they refuse a call whose worst case it could not charge (that call would be refused onchain,
   * and so go free); and its withdrawal delay, which bounds how long a debit may wait for its charge (admission.ts
   * stops a chain's new holds as its backlog nears it; the alerts read it as farebox_escrow_withdrawal_delay_seconds).
   */
  async publishTerms(name: ChainName, chain: SettlementChain): Promise<void> {
    const [cap, delay] = await Promise.all([chain.maxCharge(), chain.withdrawalDelay()]);
    await this.r.mset(keys.escrowCap(name), cap.toString(), keys.escrowDelay(name), delay.toString());
    this.metrics.escrowWithdrawalDelay.set({ chain: name }, Number(delay));
    this.termsPublished.add(name);
  }

  /**
   * Compare every synced balance of a chain with the chain (one round, paced; exported for tests). A halted chain
   * is not reconciled: its synced balances stand as the watcher left them. Returns the corrections made.
   */
  async reconcile(name: ChainName, chain: SettlementChain): Promise<number> {
    if ((await this.r.exists(keys.chainHalt(name))) === 1) return 0;
    const gap = 1000 / (this.settings.reconcileRate ?? DEFAULT_RECONCILE_RATE);
    let corrected = 0;
    let cursor = '0';
    let first = true;
    do {
      const [next, accounts] = await this.r.sscan(keys.wallets(name), cursor, 'COUNT', 100);
      cursor = next;
      for (const account of accounts) {
        if (this.stopping) return corrected;
        if (!first) await this.sleep(gap);
        first = false;
        try {
          if (await this.reconcileOne(name, chain, account)) corrected++;
        } catch (err) {
          // One account's failure (an RPC error, a balance beyond what Redis counts) does not end the round.
          this.metrics.chainErrors.inc({ chain: name });
          this.log.warn({ err, chain: name, account }, 'reconciling an account failed');
        }
      }
    } while (cursor !== '0');
    this.metrics.reconcileLastRound.set({ chain: name }, Date.now() / 1000);
    return corrected;
  }

  /** One account of a round: true when its synced balance was corrected. */
  private async reconcileOne(name: ChainName, chain: SettlementChain, account: string): Promise<boolean> {
    // Cursor first, then the scanned block: the balance at that block is what the applied events sum to.
    const cursor = await readCursor(this.r, name);
    const scanned = await this.r.get(keys.scanned(name));
    if (scanned === null) return false;
    const onchain = await chain.balanceOf(account as `0x${string}`, BigInt(scanned));
    const wallet = await readWallet(this.r, account, name);
    const key = `${name}:${account}`;
    const diff = onchain - wallet.synced;
    if (diff === 0n) {
      this.suspects.delete(key);
      return false;
    }
    // A difference can be an event the watcher has not applied yet: correct only one seen twice alike.
    if (this.suspects.get(key) !== diff) {
      this.suspects.set(key, diff);
      return false;
    }
    this.suspects.delete(key);
    const made = await correctSynced(this.r, name, account, cursor?.raw ?? '', onchain);
    if (made === null) return false;
    this.metrics.drift.inc({ chain: name }, usdOf(made < 0n ? -made : made));
    this.metrics.driftCorrections.inc({ chain: name });
    this.log.warn(
      { chain: name, account, synced: wallet.synced.toString(), onchain: onchain.toString() },
      'synced balance corrected',
    );
    return true;
  }

  async stop(): Promise<void> {
    this.running = false;
    this.stopping = true;
    this.sleeps.wakeAll();
    await Promise.allSettled(this.loops);
    this.loops.length = 0;
    this.stopping = false;
    this.woken.clear();
    this.scannedHead.clear();
    // Hand the leases over now: a successor would otherwise wait LEASE_MS for them to expire.
    for (const lease of this.leases.values()) await lease.release().catch(() => {});
  }
}

/** Run a MULTI; throws on a discarded transaction or a failed command in it. */
async function execAll(m: ReturnType<Redis['multi']>): Promise<void> {
  const results = await m.exec();
  const failed = results?.find(([err]) => err);
  if (!results || failed) throw failed?.[0] ?? new Error('Redis transaction discarded');
}

/** A record's bigints as strings, for a JSON log line. */
function stringified(o: object): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, typeof v === 'bigint' ? v.toString() : v]));
}
