/**
 * The images of `response_format: url` calls, in Redis so that any instance serves their URLs: each under an
 * unguessable id (192 random bits, the URL's only secret) for the configured TTL, all of them within one byte budget
 * shared by every instance. Room is reserved before the provider renders (`reserve`: the most bytes the image can
 * take), so a call the budget cannot hold is refused before anyone pays for its image; the store then takes the
 * image's own size in the reservation's place. The budget is counted in one script with the store, on Redis's
 * clock: expired images and reservations (a crashed instance's) are taken off the count by the next store or
 * reservation.
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

// What every script does first: the time on Redis's clock, and the expired entries (images, reservations) taken off.
const EXPIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 500)
if #old > 0 then
  local freed = 0
  for _, m in ipairs(old) do freed = freed + (tonumber(string.match(m, ':(%d+)$')) or 0) end
  redis.call('ZREM', KEYS[2], unpack(old))
  redis.call('DECRBY', KEYS[3], freed)
end
`;

// KEYS: image:<id>, images, images-bytes. ARGV: id, size, ttl ms, budget, type, data, bytes reserved under id (0: none).
const PUT = `${EXPIRE}
local size = tonumber(ARGV[2])
if ARGV[7] ~= '0' and redis.call('ZREM', KEYS[2], ARGV[1] .. ':' .. ARGV[7]) == 1 then redis.call('DECRBY', KEYS[3], ARGV[7]) end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
if used + size > tonumber(ARGV[4]) then return 0 end
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'type', ARGV[5], 'expires', expires, 'data', ARGV[6])
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('ZADD', KEYS[2], expires, ARGV[1] .. ':' .. ARGV[2])
redis.call('INCRBY', KEYS[3], size)
return expires
`;

// KEYS: image:<id> (unused), images, images-bytes. ARGV: id, bytes, ttl ms, budget.
const RESERVE = `${EXPIRE}
local bytes = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[3]) or '0') + bytes > tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1] .. ':' .. ARGV[2])
redis.call('INCRBY', KEYS[3], bytes)
return 1
`;

// KEYS: image:<id>, images, images-bytes. ARGV: id, size.
const REMOVE = `
if redis.call('ZREM', KEYS[2], ARGV[1] .. ':' .. ARGV[2]) == 1 then redis.call('DECRBY', KEYS[3], ARGV[2]) end
return redis.call('DEL', KEYS[1])
`;

/** An id of the URL: 24 random bytes, base64url. */
const ID = /^[A-Za-z0-9_-]{32}$/;

/** Room held in the budget for an image not rendered yet: the id it will be stored under, and the bytes held. */
export interface ImageReservation {
  readonly id: string;
  readonly bytes: number;
}

/** url images on the gateway's Redis. */
export class ImageStore {
  constructor(
    private readonly redis: Redis,
    readonly settings: ImageStoreSettings,
  ) {}

  /**
   * Hold `bytes` of the budget for `ttlMs` (the call's longest run: a reservation its instance never used or gave
   * back lapses then); null when the budget has no room.
   */
  async reserve(bytes: number, ttlMs: number): Promise<ImageReservation | null> {
    const id = randomBytes(24).toString('base64url');
    const done = (await this.redis.eval(
      RESERVE,
      3,
      keys.image(id),
      keys.images,
      keys.imagesBytes,
      id,
      bytes,
      ttlMs,
      this.settings.maxBytes,
    )) as number;
    return done === 1 ? { id, bytes } : null;
  }

  /**
   * Store `data` (in place of `reservation`, whose room it takes); its id and expiry, or null when the budget has no
   * room for it (only an image larger than its reservation, or stored without one, can find none).
   */
  async put(
    data: Buffer,
    type: string,
    reservation?: ImageReservation,
  ): Promise<{ id: string; expires: number } | null> {
    const id = reservation?.id ?? randomBytes(24).toString('base64url');
    const expires = (await this.redis.eval(
      PUT,
      3,
      keys.image(id),
      keys.images,
      keys.imagesBytes,
      id,
      data.length,
      this.settings.ttlMs,
      this.settings.maxBytes,
      type,
      data,
      reservation?.bytes ?? 0,
    )) as number;
    return expires === 0 ? null : { id, expires };
  }

  /** Give back a reservation the call did not use (it failed, or its caller left). */
  async release(reservation: ImageReservation): Promise<void> {
    await this.remove(reservation.id, reservation.bytes);
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
