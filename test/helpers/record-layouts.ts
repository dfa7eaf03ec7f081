/**
 * Call records as the scripts before the compact layout wrote them (the first layout, up to e22c5fd: long field
 * names, usage as JSON, the tx with its 0x), for tests and the measurement of a Redis upgraded in place; and what
 * a call's keys weigh in Redis (MEMORY USAGE).
 */
import type { Redis } from 'ioredis';
import { keys } from '../../plugins/store/keys.js';
import { makeUsage, type Usage } from '../../pricing/index.js';
import { callIdOf } from '../../plugins/request-ids.js';

/** One call as the first layout's hold, debit and charge scripts left its record. */
export interface FirstLayoutCall {
  requestId: string;
  account: string;
  keyId: string;
  model: string;
  chain: string;
  held: bigint;
  owner: string;
  /** Call time, ms. */
  time: number;
  /** Hold expiry, ms. */
  expires: number;
  status: 'held' | 'pending' | 'settled' | 'failed' | 'free';
  price?: bigint;
  usage?: Partial<Usage>;
  size?: string;
  tx?: string;
  capped?: boolean;
  late?: boolean;
  released?: string;
}

/**
 * Write `c` as the first layout did (HOLD's HSET, then DEBIT's, then the watcher's), listed in the account's usage
 * index, kept `retentionMs`.
 */
export async function writeFirstLayout(redis: Redis, c: FirstLayoutCall, retentionMs: number): Promise<void> {
  const key = keys.call(callIdOf(c.requestId));
  const fields: Record<string, string> = {
    call_id: c.requestId,
    time: String(c.time),
    account: c.account,
    key_id: c.keyId,
    model: c.model,
    chain: c.chain,
    held: c.held.toString(),
    owner: c.owner,
    expires: String(c.expires),
    price: (c.price ?? 0n).toString(),
    status: c.status,
  };
  // The debit wrote the whole Usage (makeUsage), with the image's size class beside it.
  if (c.status !== 'held') {
    const usage = makeUsage(c.usage ?? {});
    fields.usage = JSON.stringify(c.size === undefined ? usage : { ...usage, size: c.size });
  }
  if (c.tx) fields.tx = c.tx;
  if (c.capped) fields.capped = '1';
  if (c.late) fields.late = '1';
  if (c.released) fields.released = c.released;
  await redis
    .multi()
    .hset(key, fields)
    .pexpire(key, retentionMs)
    .zadd(keys.usageIndex(c.account), c.time, c.requestId)
    .pexpire(keys.usageIndex(c.account), retentionMs)
    .exec();
}

/** MEMORY USAGE (SAMPLES 0: every element counted) and OBJECT ENCODING of `key` under the connection's prefix. */
export async function weigh(redis: Redis, key: string): Promise<{ bytes: number; encoding: string }> {
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  // ioredis does not prefix the keys of MEMORY and OBJECT: ask under the full name on a connection without one.
  const raw = redis.duplicate({ keyPrefix: '' });
  try {
    const [bytes, encoding] = await Promise.all([
      raw.call('MEMORY', 'USAGE', prefix + key, 'SAMPLES', '0') as Promise<number | null>,
      raw.call('OBJECT', 'ENCODING', prefix + key) as Promise<string | null>,
    ]);
    return { bytes: bytes ?? 0, encoding: encoding ?? 'none' };
  } finally {
    raw.disconnect();
  }
}
