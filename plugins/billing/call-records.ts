/**
 * Call records (usage records): one per billed call, written by the wallet scripts (hold, debit) and the watcher
 * (the charge's event), kept for the configured retention after the call. `farebox usage` lists them; the dashboard
 * and the tests read a call's money state here too, never through the key layout.
 */
import type { Redis } from 'ioredis';
import { callIdOf } from '../chains/port.js';
import { keys } from '../store/keys.js';
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
  /** Image calls: the size class of the delivered image. */
  size?: string;
}

/** A call's record with its money state: what was held, by whom, until when, and how the debit went. */
export interface CallRecord extends UsageRecord {
  /** The hold, atomic units. */
  held: bigint;
  /** The price debited, atomic units. */
  priceAtomic: bigint;
  /** The hold's owner: a gateway instance, or `job:<id>`. */
  owner: string;
  /** When the hold expires unless renewed (ms, Redis's clock). */
  expires: number | null;
  /** The price was above the hold and cut to it. */
  capped: boolean;
  /** Debited after its hold had been released. */
  late: boolean;
  /** Why the sweeper released the hold (instance_died, expired), if it did. */
  released: string | null;
}

function toRecord(h: Record<string, string>): CallRecord | null {
  if (!h.call_id) return null; // expired, or never held
  const parsed = h.usage ? (JSON.parse(h.usage) as Record<string, unknown>) : {};
  const usage: Record<string, number> = {};
  for (const f of USAGE_FIELDS) usage[f] = typeof parsed[f] === 'number' ? parsed[f] : 0;
  const priceAtomic = BigInt(h.price ?? '0');
  return {
    call_id: h.call_id,
    time: new Date(Number(h.time)).toISOString(),
    key_id: h.key_id ?? '',
    model: h.model ?? '',
    chain: h.chain ?? '',
    usage,
    price: formatUsd(priceAtomic),
    status: (h.status ?? 'held') as UsageRecord['status'],
    tx: h.tx ?? null,
    held: BigInt(h.held ?? '0'),
    priceAtomic,
    owner: h.owner ?? '',
    expires: h.expires ? Number(h.expires) : null,
    capped: h.capped === '1',
    late: h.late === '1',
    released: h.released ?? null,
    ...(typeof parsed.size === 'string' ? { size: parsed.size } : {}),
  };
}

/** The record of the call with request id `requestId`, or null (never billed, or past its retention). */
export async function getCallRecord(redis: Redis, requestId: string): Promise<CallRecord | null> {
  return getCallRecordById(redis, callIdOf(requestId));
}

/** The record of the call with call id `callId` (the id the escrow charges), or null. */
export async function getCallRecordById(redis: Redis, callId: string): Promise<CallRecord | null> {
  return toRecord(await redis.hgetall(keys.call(callId)));
}

/** Request ids of the account's calls, newest first. */
export async function listCallIds(redis: Redis, account: string, limit = 100, offset = 0): Promise<string[]> {
  return redis.zrevrange(keys.usageIndex(account.toLowerCase()), offset, offset + limit - 1);
}

/** The account's most recent records, newest first, as `farebox usage` prints them. */
export async function listUsage(redis: Redis, account: string, limit = 100, offset = 0): Promise<UsageRecord[]> {
  const records = await listCallRecords(redis, account, limit, offset);
  return records.map(({ call_id, time, key_id, model, chain, usage, price, status, tx, size }) => ({
    call_id, time, key_id, model, chain, usage, ...(size === undefined ? {} : { size }), price, status, tx,
  }));
}

/** The account's most recent call records with their money state, newest first. */
export async function listCallRecords(redis: Redis, account: string, limit = 100, offset = 0): Promise<CallRecord[]> {
  const ids = await listCallIds(redis, account, limit, offset);
  const rows = await Promise.all(ids.map((id) => redis.hgetall(keys.call(callIdOf(id)))));
  return rows.map(toRecord).filter((r): r is CallRecord => r !== null);
}

/** Holds open across all instances and jobs. */
export async function countOpenHolds(redis: Redis): Promise<number> {
  return redis.zcard(keys.holds);
}

/** Debits of `chain` waiting to be charged onchain. */
export async function countQueuedDebits(redis: Redis, chain: string): Promise<number> {
  return redis.xlen(keys.debits(chain));
}
