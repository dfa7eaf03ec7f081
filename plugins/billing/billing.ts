/**
 * Billing: holds and debits of wallets, for any kind of call and from anywhere (a request, a video job's poller).
 * It knows no endpoint, no model kind and no Fastify: a quote in (the worst-case price), a hold out; a bill in (the
 * actual price and usage), a debit out. The settler then charges debits onchain (plugins/settlement/).
 *
 * A hold belongs to an owner: a gateway instance, for a call it is running (renewed at every heartbeat while the
 * call lives, released by any instance once the owner stops heart-beating), or a job (`job:<id>`, held until the
 * job's own deadline, renewed by no one). Expiries and heartbeats are on Redis's clock, never an instance's.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ChainName } from '../chains/config.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Log } from '../log.js';
import { usdOf } from '../metrics/metrics.js';
import type { PreparedAdjust, PreparedLimits } from './rate-limit.js';
import { DebitSpool, type SpooledDebit } from './spool.js';
import {
  debitHold,
  MAX_AMOUNT,
  placeHold,
  redisNow,
  renewHolds,
  type DebitResult,
  type HoldResult,
} from './wallets.js';
import { ifAnswering, redisIdentity, redisUnavailable, RedisUnanswered } from '../store/redis.js';
import { keys } from '../store/keys.js';
import { makeUsage, type Usage } from '../../pricing/index.js';
import { callIdOf } from '../request-ids.js';

/** Billing settings (config `billing`). */
export interface BillingSettings {
  /** How long call records (usage records) are kept after their call. */
  retentionMs: number;
  /** A hold lives this long past its owner's last renewal. */
  holdTtlMs: number;
  /** An instance whose heartbeat is older than this is dead: its holds are released. */
  instanceTimeoutMs: number;
  /**
   * Where debits wait while Redis is away (spool.ts); none: they are retried for a few seconds, then lost. `dir`
   * undefined: the default folder, named by the connection's Redis and prefix.
   */
  spool?: { dir: string | undefined; maxEntries: number };
}

/** What a call may cost at worst: the amount its hold takes. */
export interface Quote {
  /** The model id, as the call's record names it. */
  readonly model: string;
  /** Atomic units. */
  readonly amount: bigint;
}

/** What a finished call is debited: its usage and its price (atomic units, rounded up once). */
export interface Bill {
  readonly usage: Usage;
  readonly price: bigint;
  /** The size class of a delivered image, kept on the call's usage record beside the usage. */
  readonly size?: string;
}

/**
 * What a debit of `price` takes from a hold of `held` atomic units: the debit script cuts a price above its hold to
 * the hold (wallets.ts DEBIT); a call without a hold (the gateway bills nothing) is debited nothing. The price a
 * caller is shown (x-gw-price, a stream's usage.cost, a video job's price) is this, so it is the debit.
 */
export function debitedPrice(price: bigint, held: bigint | undefined): bigint {
  if (held === undefined) return 0n;
  return price > held ? held : price;
}

/** A debit script run unanswered this long is taken for Redis away (ms). */
const DEBIT_TIMEOUT_MS = 5_000;

/** A debit that could not reach Redis through its retries, with no spool to keep it. */
export class DebitNotReached extends Error {
  constructor(
    readonly requestId: string,
    cause: unknown,
  ) {
    super(`the debit of ${requestId} did not reach Redis; its hold will expire`, { cause });
    this.name = 'DebitNotReached';
  }
}

/** Nothing delivered: a free call. */
export const FREE: Bill = Object.freeze({ usage: makeUsage({}), price: 0n });

/** A placed hold. */
export interface Hold {
  readonly requestId: string;
  /** callIdOf(requestId): the key of the call's record and its escrow charge. */
  readonly callId: string;
  readonly account: string;
  readonly keyId: string;
  readonly chain: ChainName;
  readonly model: string;
  readonly amount: bigint;
  readonly owner: string;
}

/** A hold to place. */
export interface HoldRequest {
  requestId: string;
  account: string;
  keyId: string;
  chain: ChainName;
  quote: Quote;
  /** Default: this instance, renewing the hold while the call runs (track). A job passes `job:<id>` and its deadline. */
  owner?: string;
  /** Default: settings.holdTtlMs. */
  ttlMs?: number;
}

/** Holds and debits. */
export class Billing {
  readonly instance = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  /** This instance's holds of calls still running: renewed at every heartbeat. */
  private readonly live = new Map<string, Hold>();
  private timer: NodeJS.Timeout | undefined;
  /**
   * Redis time of this instance's first sweep since it started or a sweep last failed (Redis away); undefined until
   * the next success. A new instance cannot tell the others' heartbeats that lapsed in an outage it did not see from
   * dead ones: it waits as one that saw it.
   */
  private heardSince: number | undefined;
  /** Debits waiting for Redis. */
  readonly spool: DebitSpool | undefined;

  constructor(
    private readonly r: Redis,
    readonly settings: BillingSettings,
    private readonly metrics: Metrics,
    private readonly log: Log,
  ) {
    if (settings.spool) {
      // The spool belongs to the Redis this connection writes to, as its options name it (reachable or not).
      const owner = { redis: redisIdentity(r), prefix: (r.options.keyPrefix as string | undefined) ?? '' };
      this.spool = new DebitSpool(
        settings.spool.dir,
        owner,
        this.instance,
        settings.spool.maxEntries,
        (d) => this.debitOnce(d),
        redisUnavailable,
        {
          spooled: () => metrics.debitsSpooled.inc(),
          drained: (done, d) => this.counted(d.chain, d.model, JSON.parse(d.usageJson) as Usage, d.requestId, done),
          lost: () => metrics.debitsLost.inc(),
          refused: (d, err) => this.refused(d, err, false),
          resized: (size) => metrics.debitSpoolSize.set(size),
          notAdopted: (files) => metrics.debitSpoolFilesNotAdopted.set(files),
        },
        log,
      );
    }
  }

  /** Place a hold of `req.quote.amount`, deciding `limits` in the same script (rate-limit.ts). */
  async hold(req: HoldRequest, limits?: PreparedLimits): Promise<{ result: HoldResult; hold: Hold }> {
    const hold: Hold = {
      requestId: req.requestId,
      callId: callIdOf(req.requestId),
      account: req.account,
      keyId: req.keyId,
      chain: req.chain,
      model: req.quote.model,
      amount: req.quote.amount,
      owner: req.owner ?? this.instance,
    };
    // Written out, not `{ ...hold, ttlMs, retentionMs }`: a spread followed by new keys takes V8's slow path
    // (bench/README.md, 2026-11-26).
    const result = await placeHold(
      this.r,
      {
        requestId: hold.requestId,
        callId: hold.callId,
        account: hold.account,
        keyId: hold.keyId,
        chain: hold.chain,
        model: hold.model,
        amount: hold.amount,
        owner: hold.owner,
        ttlMs: req.ttlMs ?? this.settings.holdTtlMs,
        retentionMs: this.settings.retentionMs,
      },
      limits,
    );
    if (result.placed) this.metrics.holdsPlaced.inc({ chain: hold.chain });
    return { result, hold };
  }

  /** Keep `hold` alive while its call runs on this instance (until untrack). */
  track(hold: Hold): void {
    this.live.set(hold.requestId, hold);
  }

  /** The call of `hold` has ended on this instance. */
  untrack(hold: Hold): void {
    this.live.delete(hold.requestId);
  }

  /**
   * Turn `hold` into a debit of `bill.price` (0 releases it), correcting the call's token limits in the same step
   * (`limits`, RateLimiter.prepareAdjust). While Redis is away the debit waits in the spool; without a spool it is
   * tried 6 times over about 6 s of backoff (each try given up after DEBIT_TIMEOUT_MS if unanswered), then throws
   * DebitNotReached (the hold expires and is released; a job retries it). A debit
   * Redis refuses outright is logged and counted, and answers null.
   */
  async debit(hold: Hold, bill: Bill, limits?: PreparedAdjust | null): Promise<DebitResult | null> {
    const input: SpooledDebit = {
      requestId: hold.requestId,
      callId: hold.callId,
      account: hold.account,
      keyId: hold.keyId,
      chain: hold.chain,
      owner: hold.owner,
      // A price beyond what the script reads is above any hold: the script cuts it to the hold and reports the cut.
      price: bill.price > MAX_AMOUNT ? MAX_AMOUNT : bill.price,
      usageJson: JSON.stringify(bill.size === undefined ? bill.usage : { ...bill.usage, size: bill.size }),
      retentionMs: this.settings.retentionMs,
      limits,
      model: hold.model,
    };
    // Debits already wait for Redis: this one queues behind them, so they reach it in order.
    if (this.spool?.busy) {
      this.spool.add(input);
      return null;
    }
    for (let attempt = 0; ; attempt++) {
      try {
        const done = await this.debitOnce(input);
        this.counted(hold.chain, hold.model, bill.usage, hold.requestId, done);
        return done;
      } catch (err) {
        if (!redisUnavailable(err)) {
          // Redis refused the debit itself: a retry would repeat it, and it must not hold up the debits behind it.
          this.refused(input, err);
          return null;
        }
        if (this.spool) {
          this.log.warn({ err, requestId: hold.requestId }, 'Redis away: the debit waits in the spool');
          this.spool.add(input);
          return null;
        }
        // No spool: retry for a while; after that the hold expires and is released (the call goes free).
        if (attempt >= 5) throw new DebitNotReached(hold.requestId, err);
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
  }

  /**
   * One run of the debit script, given up after DEBIT_TIMEOUT_MS: a command on a connection that died unanswered
   * waits in ioredis until it reconnects, and would hold the debit (and a shutdown) for the whole outage. The run
   * given up may still land once Redis is back; the one that follows answers as it did.
   */
  private debitOnce(input: SpooledDebit): Promise<DebitResult | null> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new RedisUnanswered(`debit unanswered after ${DEBIT_TIMEOUT_MS} ms`)),
        DEBIT_TIMEOUT_MS,
      );
      debitHold(this.r, input).then(
        (done) => {
          clearTimeout(timer);
          resolve(done);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  /** A debit Redis refused (a bug, never an outage): logged, counted and kept in the spool's `.refused` file, not retried. */
  private refused(input: SpooledDebit, err: unknown, setAside = true): void {
    if (setAside) this.spool?.setAside(input);
    this.metrics.debitsRefused.inc();
    this.log.error(
      { err, requestId: input.requestId, price: input.price.toString() },
      'debit refused by Redis; the call is not charged',
    );
  }

  /** Count what a debit did in the metrics, and log a late one. */
  private counted(chain: string, model: string, usage: Usage, requestId: string, done: DebitResult | null): void {
    if (done && done.debited > 0n) {
      this.metrics.charged.inc({ chain, model }, usdOf(done.debited));
      this.countUnits(model, usage);
    }
    if (done?.capped) this.metrics.priceAboveHold.inc({ model });
    if (done?.late) {
      this.metrics.lateDebits.inc({ chain });
      this.log.warn(
        { requestId, price: done.debited.toString() },
        'hold was released before its call ended; debited what was delivered',
      );
    }
  }

  private countUnits(model: string, u: Usage): void {
    if (u.input_tokens) this.metrics.tokens.inc({ model, kind: 'input' }, u.input_tokens);
    if (u.output_tokens) this.metrics.tokens.inc({ model, kind: 'output' }, u.output_tokens);
    if (u.cache_read_tokens) this.metrics.tokens.inc({ model, kind: 'cache_read' }, u.cache_read_tokens);
    const writes = u.cache_write_5m_tokens + u.cache_write_1h_tokens;
    if (writes) this.metrics.tokens.inc({ model, kind: 'cache_write' }, writes);
  }

  /** Heartbeat, renew this instance's live holds and release what died, every `everyMs`; retry spooled debits. */
  start(everyMs = 5_000): void {
    this.spool?.start();
    const tick = () => {
      this.sweep().catch((err) => this.log.warn({ err }, 'hold sweep failed'));
    };
    tick();
    this.timer = setInterval(tick, everyMs);
    this.timer.unref();
  }

  /** One sweep: heartbeat, renew, then release holds of dead instances and expired holds (exported for tests). */
  async sweep(now?: number): Promise<number> {
    try {
      return await this.sweepOnce(now);
    } catch (err) {
      this.heardSince = undefined;
      throw err;
    }
  }

  private async sweepOnce(now?: number): Promise<number> {
    const at = now ?? (await redisNow(this.r));
    await this.r.zadd(keys.instances, at, this.instance);
    this.heardSince ??= at;
    await renewHolds(this.r, [...this.live.values()], this.settings.holdTtlMs, this.settings.retentionMs, now);
    // While Redis was away, every instance's heartbeat and renewals lapsed, the live ones' too: releasing at once
    // would free the holds of calls still running (their debits come late) and let new holds take that room. Nothing
    // is released until this instance has reached Redis again for an instance timeout: the live ones beat meanwhile.
    // A new instance waits as long, since Redis may have been away just before it started.
    if (at - this.heardSince < this.settings.instanceTimeoutMs) {
      this.metrics.holdsOpen.set(await this.r.zcard(keys.holds));
      return 0;
    }
    let released = 0;
    const dead = await this.r.zrangebyscore(keys.instances, '-inf', at - this.settings.instanceTimeoutMs);
    for (const instance of dead) {
      if (instance === this.instance) continue;
      const ids = await this.r.smembers(keys.ownerHolds(instance));
      for (const id of ids) released += await this.releaseOne(id, 'instance_died', now);
      if ((await this.r.scard(keys.ownerHolds(instance))) === 0) await this.r.zrem(keys.instances, instance);
    }
    const expired = await this.r.zrangebyscore(keys.holds, '-inf', at, 'LIMIT', 0, 500);
    for (const id of expired) {
      // This instance's own running calls are renewed above; one that expired anyway (Redis was away longer than the
      // hold's TTL) is released like any other, and its debit still charges what it delivered.
      released += await this.releaseOne(id, 'expired', now);
    }
    this.metrics.holdsOpen.set(await this.r.zcard(keys.holds));
    return released;
  }

  /** Release one hold; one Redis refuses (a bug, never an outage) is logged and passed over, not the end of the sweep. */
  private async releaseOne(
    requestId: string,
    reason: 'expired' | 'instance_died',
    now: number | undefined,
  ): Promise<number> {
    try {
      return await this.release(requestId, reason, now);
    } catch (err) {
      if (redisUnavailable(err)) throw err;
      this.log.error({ err, requestId, reason }, 'releasing a hold failed; the sweep goes on');
      return 0;
    }
  }

  private async release(
    requestId: string,
    reason: 'expired' | 'instance_died',
    now: number | undefined,
  ): Promise<number> {
    const callId = callIdOf(requestId);
    // The record's compact layout (call-records.ts), or the first one of a hold placed before it.
    const f = await this.r.hmget(keys.call(callId), 'a', 'c', 'o', 's', 'account', 'chain', 'owner', 'status', 'k');
    const [account, chain, owner, status] = f[3] ? f : f.slice(4);
    // A record of the first layout has no `ks`: its hold counted on no key's spend.
    const keyId = f[8] ?? undefined;
    if (!account || !chain || !owner || status !== 'held') {
      await this.r.zrem(keys.holds, requestId);
      return 0;
    }
    const done = await debitHold(this.r, {
      requestId,
      callId,
      account,
      keyId,
      chain: chain as ChainName,
      owner,
      price: 0n,
      usageJson: JSON.stringify(FREE.usage),
      retentionMs: this.settings.retentionMs,
      release: { reason, instanceTimeoutMs: this.settings.instanceTimeoutMs, now },
    });
    // Debited (the call ended between the read and this release), or the owner renewed or beat since: kept.
    if (!done || done.debited > 0n) return 0;
    this.metrics.holdsReleased.inc({ reason });
    return 1;
  }

  /** Stop the sweep and retire this instance (its holds are debited by then, or released by others later). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    // What Redis takes in a few seconds is charged now; the rest waits in the file for the next process.
    if (this.spool) {
      await this.spool.flush(3_000);
      await this.spool.stop();
    }
    await ifAnswering(this.r, 1_000, () => this.r.zrem(keys.instances, this.instance));
  }
}
