/**
 * Usage records: the call records of billed calls (wallets.ts), written by the wallet scripts (hold, settle,
 * watcher) and kept for the configured retention after the call. `farebox usage` lists them.
 */
import type { Redis } from 'ioredis';
import { callIdOf } from '../chains/port.js';
import { walletKeys } from './wallets.js';
import { formatUsd, USAGE_FIELDS } from '../../pricing/index.js';

/** One call's record as `farebox usage --json` prints it. */
export interface UsageRecord {
  call_id: string;
  time: string;
  key_id: string;
  model: string;
  chain: string;
  usage: Record<string, number>;
  price: string;
  status: 'held' | 'pending' | 'settled' | 'failed' | 'free';
  tx: string | null;
}

/** The account's most recent records, newest first. */
export async function listUsage(redis: Redis, account: string, limit = 100): Promise<UsageRecord[]> {
  const ids = await redis.zrevrange(walletKeys.usageIndex(account.toLowerCase()), 0, limit - 1);
  const rows = await Promise.all(ids.map((id) => redis.hgetall(walletKeys.call(callIdOf(id)))));
  const out: UsageRecord[] = [];
  for (const h of rows) {
    if (!h.call_id) continue; // expired
    const parsed = h.usage ? (JSON.parse(h.usage) as Record<string, number>) : {};
    const usage: Record<string, number> = {};
    for (const f of USAGE_FIELDS) usage[f] = parsed[f] ?? 0;
    out.push({
      call_id: h.call_id,
      time: new Date(Number(h.time)).toISOString(),
      key_id: h.key_id ?? '',
      model: h.model ?? '',
      chain: h.chain ?? '',
      usage,
      price: formatUsd(BigInt(h.price ?? '0')),
      status: (h.status ?? 'held') as UsageRecord['status'],
      tx: h.tx ?? null,
    });
  }
  return out;
}
