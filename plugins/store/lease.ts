/**
 * A lease in Redis: one owner at a time holds a key (its value is the owner's id) until `ttlMs` after its last take or
 * renewal. Expiry is Redis's (PX, on Redis's clock); no instance reads another's clock. Take, renew and release are
 * each one script, so nothing runs between the owner check and the write: an instance whose lease lapsed cannot
 * extend or delete a lease another has taken since.
 *
 * The layout is the one earlier versions used (the owner's id as a plain string with a PX expiry; taken only when
 * absent; renewed and deleted only by the instance whose id it holds), so instances of both versions stay exclusive
 * during a rolling upgrade.
 */
import type { Redis } from 'ioredis';
import { performance } from 'node:perf_hooks';
import { LuaScript } from './redis-script.js';
import { ifAnswering } from './redis.js';

/** Take the lease if nobody holds it; keep it (a new expiry) if the owner holds it already. 1: held. */
const TAKE = new LuaScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`);
/** A new expiry, only if the owner holds the lease. */
const RENEW = new LuaScript(
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0",
);
/** Delete the lease, only if the owner holds it. */
const RELEASE = new LuaScript(
  "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
);

/** One owner's hold on one lease key. */
export class Lease {
  /** When this owner last took or renewed the lease (monotonic ms; undefined: not held). */
  private heldAt: number | undefined;

  constructor(
    private readonly redis: Redis,
    readonly key: string,
    readonly owner: string,
    readonly ttlMs: number,
  ) {}

  /** Whether the last take, renewal or keep held the lease (no Redis command). */
  get held(): boolean {
    return this.heldAt !== undefined;
  }

  /** Take the lease if free or already this owner's (renewing it then); false if another owner holds it. */
  async take(): Promise<boolean> {
    return this.record(
      performance.now(),
      (await TAKE.run<number>(this.redis, [this.key], [this.owner, this.ttlMs])) === 1,
    );
  }

  /** Extend the lease by `ttlMs` from now; false (and not held) if it is not this owner's any more. */
  async renew(): Promise<boolean> {
    return this.record(
      performance.now(),
      (await RENEW.run<number>(this.redis, [this.key], [this.owner, this.ttlMs])) === 1,
    );
  }

  /**
   * Give the lease up, if it is still this owner's (a successor need not wait for it to expire). Only while Redis
   * answers, for at most a second: a stop is not held by a Redis that is away, and the lease then expires by itself.
   */
  async release(): Promise<boolean> {
    this.heldAt = undefined;
    return (
      (await ifAnswering(this.redis, 1_000, () => RELEASE.run<number>(this.redis, [this.key], [this.owner]))) === 1
    );
  }

  /**
   * Take or keep the lease, renewing a held one only once `renewAfterMs` of it has run (no Redis command before).
   * Held, it is this owner's until `ttlMs` after the last renewal: Redis starts its expiry later than the time kept
   * here is read. A renewal that finds the lease lost tries to take it again (it may have lapsed with nobody else on it).
   */
  async keep(renewAfterMs: number): Promise<boolean> {
    const now = performance.now();
    if (this.heldAt !== undefined && now - this.heldAt < renewAfterMs) return true;
    if (this.heldAt !== undefined && (await this.renew())) return true;
    return this.take();
  }

  private record(at: number, held: boolean): boolean {
    this.heldAt = held ? at : undefined;
    return held;
  }
}
