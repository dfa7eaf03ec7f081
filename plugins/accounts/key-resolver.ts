/**
 * Identify: the API key of a request (x-api-key or Authorization: Bearer) resolved to its account.
 * Resolutions are cached per instance; revocations and status changes are announced on a Redis channel
 * so every instance drops the entry at once, and entries expire anyway after `ttlMs`.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Redis } from 'ioredis';
import { hashKey, lookupKey, touchKey, type KeyIdentity } from './accounts.js';
import { keys } from '../store/keys.js';
import { GatewayError } from '../../policies/errors.js';
import { closeRedis } from '../store/redis.js';

/** The API key a request presents, or undefined. */
export function presentedKey(headers: IncomingHttpHeaders): string | undefined {
  const x = headers['x-api-key'];
  if (typeof x === 'string' && x.length > 0) return x.trim();
  const auth = headers.authorization;
  if (typeof auth === 'string' && auth.length > 7 && auth.slice(0, 7).toLowerCase() === 'bearer ')
    return auth.slice(7).trim();
  return undefined;
}

interface Entry {
  identity: KeyIdentity;
  expires: number;
  touched: number;
}

/** Resolves keys to accounts with a bounded, invalidated cache. */
export class KeyResolver {
  private readonly cache = new Map<string, Entry>();
  private subscriber: Redis | undefined;

  constructor(
    private readonly redis: Redis,
    private readonly opts: { ttlMs?: number; maxEntries?: number; touchEveryMs?: number } = {},
  ) {}

  /** Subscribe to invalidations on a second connection (a subscribed connection cannot run commands). */
  listen(onError: (err: Error) => void = () => {}): void {
    const prefix = (this.redis.options.keyPrefix as string | undefined) ?? '';
    this.subscriber = this.redis.duplicate({ keyPrefix: '', maxRetriesPerRequest: null });
    this.subscriber.on('message', (_channel: string, what: string) => this.invalidate(what));
    // After a reconnect, announcements may have been missed: start from an empty cache.
    this.subscriber.on('ready', () => this.cache.clear());
    this.subscriber.on('error', onError);
    // Not awaited: the gateway starts (and says 503 on /v1/health) while Redis is away; ioredis resubscribes.
    this.subscriber.subscribe(keys.invalidateChannel(prefix)).catch(onError);
  }

  /** Drop cached entries for `apikey:<hash>` or `account:<addr>`. */
  invalidate(what: string): void {
    if (what.startsWith('apikey:')) {
      this.cache.delete(what.slice(7));
    } else if (what.startsWith('account:')) {
      const addr = what.slice(8);
      for (const [hash, e] of this.cache) if (e.identity.account === addr) this.cache.delete(hash);
    }
  }

  /**
   * The identity behind `key`, at once when it is cached (no promise on the call path), else once Redis answered.
   * Missing and malformed keys throw; a key Redis does not know rejects (401 invalid_api_key).
   */
  resolve(key: string | undefined): KeyIdentity | Promise<KeyIdentity> {
    if (!key) throw new GatewayError('missing_api_key');
    if (!key.startsWith('sk_') || key.length > 200) throw new GatewayError('invalid_api_key');
    const hash = hashKey(key);
    const now = Date.now();
    const hit = this.cache.get(hash);
    if (hit && hit.expires > now) {
      if (now - hit.touched > (this.opts.touchEveryMs ?? 60_000)) {
        hit.touched = now;
        touchKey(this.redis, hash, now).catch(() => {});
      }
      return hit.identity;
    }
    return this.lookup(key, hash, now);
  }

  private async lookup(key: string, hash: string, now: number): Promise<KeyIdentity> {
    const identity = await lookupKey(this.redis, key);
    if (!identity) {
      this.cache.delete(hash);
      throw new GatewayError('invalid_api_key');
    }
    if (this.cache.size >= (this.opts.maxEntries ?? 100_000)) {
      const oldest = this.cache.keys().next().value;
      if (oldest !== undefined) this.cache.delete(oldest);
    }
    this.cache.set(hash, { identity, expires: now + (this.opts.ttlMs ?? 30_000), touched: now });
    touchKey(this.redis, hash, now).catch(() => {});
    return identity;
  }

  /** Close the subscriber connection. */
  async close(): Promise<void> {
    if (this.subscriber) await closeRedis(this.subscriber);
  }
}
