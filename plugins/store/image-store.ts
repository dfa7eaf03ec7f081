/**
 * The images of `response_format: url` calls, in Redis so that any instance serves their URLs: each under an
 * unguessable id (192 random bits, the URL's only secret) for the configured TTL, all of them within one byte budget
 * shared by every instance. The budget is counted in one script with the store, on Redis's clock: expired images are
 * taken off the count as the next store finds them.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { keys } from './keys.js';

/** Settings of the store (config `images`). */
export interface ImageStoreSettings {
  readonly ttlMs: number;
  readonly maxBytes: number;
}

/** A stored image. */
export interface StoredImage {
  readonly type: string;
  readonly data: Buffer;
  /** When it expires, ms since the epoch (Redis's clock). */
  readonly expires: number;
}

// KEYS: image:<id>, images, images-bytes. ARGV: id, size, ttl ms, budget, type, data.
const PUT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local size = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 500)
if #old > 0 then
  local freed = 0
  for _, m in ipairs(old) do freed = freed + (tonumber(string.match(m, ':(%d+)$')) or 0) end
  redis.call('ZREM', KEYS[2], unpack(old))
  redis.call('DECRBY', KEYS[3], freed)
end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
if used + size > tonumber(ARGV[4]) then return 0 end
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'type', ARGV[5], 'expires', expires, 'data', ARGV[6])
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('ZADD', KEYS[2], expires, ARGV[1] .. ':' .. ARGV[2])
redis.call('INCRBY', KEYS[3], size)
return expires
`;

// KEYS: image:<id>, images, images-bytes. ARGV: id, size.
const REMOVE = `
if redis.call('ZREM', KEYS[2], ARGV[1] .. ':' .. ARGV[2]) == 1 then redis.call('DECRBY', KEYS[3], ARGV[2]) end
return redis.call('DEL', KEYS[1])
`;

/** An id of the URL: 24 random bytes, base64url. */
const ID = /^[A-Za-z0-9_-]{32}$/;

/** url images on the gateway's Redis. */
export class ImageStore {
  constructor(
    private readonly redis: Redis,
    readonly settings: ImageStoreSettings,
  ) {}

  /** Store `data`; its id and expiry, or null when the budget has no room for it. */
  async put(data: Buffer, type: string): Promise<{ id: string; expires: number } | null> {
    const id = randomBytes(24).toString('base64url');
    const expires = (await this.redis.eval(
      PUT, 3, keys.image(id), keys.images, keys.imagesBytes,
      id, data.length, this.settings.ttlMs, this.settings.maxBytes, type, data,
    )) as number;
    return expires === 0 ? null : { id, expires };
  }

  /** The image of `id`, or null (never stored, expired, or not an id). */
  async get(id: string): Promise<StoredImage | null> {
    if (!ID.test(id)) return null;
    const [type, expires, data] = await this.redis.hmgetBuffer(keys.image(id), 'type', 'expires', 'data');
    if (!type || !expires || !data) return null;
    return { type: type.toString('latin1'), data, expires: Number(expires.toString('latin1')) };
  }

  /** Remove an image that was never handed out (its caller left), giving its bytes back to the budget. */
  async remove(id: string, size: number): Promise<void> {
    await this.redis.eval(REMOVE, 3, keys.image(id), keys.images, keys.imagesBytes, id, size);
  }
}
