/**
 * Call records (usage records): one per billed call, written by the wallet scripts (hold, debit) and the watcher
 * (the charge's event), kept for the configured retention after the call. `farebox usage` lists them; the dashboard
 * and the tests read a call's money state here too, never through the key layout.
 *
 * The layout (call:<callId>, a hash; plugins/store/keys.ts lists the fields) keeps every field name and value within
 * Redis's default `hash-max-listpack-value` (64 bytes), so Redis stores a settled record as one listpack of about 360
 * bytes, key included, instead of a hashtable of about 1,260 (the usage JSON and the 66-character tx of the first
 * layout each passed 64; bench/record-bytes.ts measures both). Names are short, counts are numbers Redis keeps as
 * integers, a count of 0 is not written, the tx is its 64 hex digits, and the request id is left out when the call
 * id spells it (callIdOf). What
 * only the hold needs goes at the debit (its expiry; its owner unless a video job, whose id names the call's job) and
 * the account at the charge's event: a settled record is what the readers show and its money (status, price, hold,
 * tx), nothing more.
 *
 * Records of the first layout (long names, `usage` as JSON) are still read as they are; the debit script rewrites one
 * it finds in this layout (upgradeRecordLua) and the watcher settles one in its own. A Redis upgraded in place keeps
 * both until the old ones reach their retention.
 */
import type { Redis } from 'ioredis';
import { keys } from '../store/keys.js';
import { formatUsd, USAGE_FIELDS, type Usage } from '../../pricing/index.js';
import { callIdOf } from '../request-ids.js';

/** The short field of each usage count in a record, in USAGE_FIELDS order; a count of 0 has no field. */
export const USAGE_RECORD_FIELDS = {
  input_tokens: 'in',
  output_tokens: 'out',
  cache_read_tokens: 'cr',
  cache_write_5m_tokens: 'cw5',
  cache_write_1h_tokens: 'cw1',
  images: 'img',
  video_seconds: 'vs',
} as const satisfies Record<keyof Usage, string>;

const GATEWAY_CALL_ID = /^0x0{32}([0-9a-f]{32})$/;

/**
 * The request id a call id stands for when the gateway made it (callIdOf: `req_` and the 32 hex digits of the call
 * id's low half), else null: only then does a record keep its request id (`r`).
 */
export function requestIdOfCallId(callId: string): string | null {
  const m = GATEWAY_CALL_ID.exec(callId);
  return m ? `req_${m[1]}` : null;
}

/** The request id as a record stores it (`r`): '' when its call id spells it. */
export function storedRequestId(requestId: string, callId: string): string {
  return requestIdOfCallId(callId) === requestId ? '' : requestId;
}

/**
 * The debit script's usage arguments: the image size class ('' for none), then the 7 counts of `usageJson` in
 * USAGE_FIELDS order ('0' for none or anything not a count). The JSON is the spool's (spool.ts) and the tests'.
 */
export function usageArgs(usageJson: string): string[] {
  const u = JSON.parse(usageJson) as Record<string, unknown>;
  const out: string[] = [typeof u.size === 'string' ? u.size : ''];
  for (const f of USAGE_FIELDS) {
    const v = u[f];
    out.push(typeof v === 'number' && Number.isFinite(v) && v > 0 ? String(v) : '0');
  }
  return out;
}

/**
 * Lua: `upgradeRecord(key, keepRequestId)` rewrites a record of the first layout at `key` (long names, usage as JSON,
 * a 0x tx) in the compact one, keeping its TTL; `keepRequestId` when its call id does not spell its request id. Run
 * only on a record that has `status` (the first layout's), so only while records written before the upgrade last.
 */
export const upgradeRecordLua = `
local function upgradeRecord(key, keepRequestId)
  -- Built here, not at the script's top: the debit script runs on every call, this only on an old record.
  local OLD_NAMES = {'time', 't', 'account', 'a', 'key_id', 'k', 'model', 'm', 'chain', 'c', 'held', 'h', 'owner', 'o',
    'expires', 'e', 'price', 'p', 'status', 's', 'capped', 'cap', 'late', 'late', 'released', 'rel'}
  local OLD_USAGE = {'input_tokens', 'in', 'output_tokens', 'out', 'cache_read_tokens', 'cr', 'cache_write_5m_tokens',
    'cw5', 'cache_write_1h_tokens', 'cw1', 'images', 'img', 'video_seconds', 'vs'}
  local flat = redis.call('HGETALL', key)
  local out = {}
  local function put(f, v)
    if v ~= nil and v ~= '' then out[#out + 1] = f; out[#out + 1] = v end
  end
  local old = {}
  for i = 1, #flat, 2 do old[flat[i]] = flat[i + 1] end
  -- What the compact layout drops at the debit (expiry; owner unless a job) and at the charge's event (account).
  if old.status ~= 'held' then
    old.expires = nil
    if string.sub(old.owner or '', 1, 4) ~= 'job:' then old.owner = nil end
  end
  if old.status == 'settled' or old.status == 'failed' then old.account = nil end
  for i = 1, #OLD_NAMES, 2 do put(OLD_NAMES[i + 1], old[OLD_NAMES[i]]) end
  if keepRequestId then put('r', old.call_id) end
  if old.tx then put('x', (string.gsub(old.tx, '^0x', ''))) end
  if old.usage then
    local ok, u = pcall(cjson.decode, old.usage)
    if ok and type(u) == 'table' then
      for i = 1, #OLD_USAGE, 2 do
        local v = u[OLD_USAGE[i]]
        if type(v) == 'number' and v > 0 then put(OLD_USAGE[i + 1], string.format('%d', v)) end
      end
      if type(u.size) == 'string' then put('z', u.size) end
    end
  end
  local ttl = redis.call('PTTL', key)
  redis.call('DEL', key)
  if #out > 0 then redis.call('HSET', key, unpack(out)) end
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
`;

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
  /**
   * Present when the record was rebuilt from the escrow's event after Redis lost the call's writes
   * (settlement/apply-events.ts): price, chain, status and tx are the chain's; model, key and usage are unknown.
   */
  rebuilt?: true;
}

/** A call's record with its money state: what was held, by whom, until when, and how the debit went. */
export interface CallRecord extends UsageRecord {
  /** The hold, atomic units. */
  held: bigint;
  /** The price debited, atomic units. */
  priceAtomic: bigint;
  /** The hold's owner: a gateway instance while held (then ''), or `job:<id>`, kept: the call's video job. */
  owner: string;
  /** While held: when the hold expires unless renewed (ms, Redis's clock). */
  expires: number | null;
  /** The price was above the hold and cut to it. */
  capped: boolean;
  /** Debited after its hold had been released. */
  late: boolean;
  /** Why the sweeper released the hold (instance_died, expired), if it did. */
  released: string | null;
}

const count = (v: string | undefined): number => (v === undefined ? 0 : Number(v));

/** A record of the compact layout (see the head of this file). */
function fromCompact(h: Record<string, string>, callId: string, requestId: string | undefined): CallRecord {
  const usage: Record<string, number> = {};
  for (const f of USAGE_FIELDS) usage[f] = count(h[USAGE_RECORD_FIELDS[f]]);
  const priceAtomic = BigInt(h.p ?? '0');
  const status = h.s as UsageRecord['status'];
  return {
    call_id: h.r ?? requestId ?? requestIdOfCallId(callId) ?? callId,
    time: new Date(Number(h.t)).toISOString(),
    key_id: h.k ?? '',
    model: h.m ?? '',
    chain: h.c ?? '',
    usage,
    price: formatUsd(priceAtomic),
    status,
    tx: h.x ? `0x${h.x}` : null,
    held: BigInt(h.h ?? '0'),
    priceAtomic,
    owner: h.o ?? '',
    expires: status === 'held' && h.e ? Number(h.e) : null,
    capped: h.cap === '1',
    late: h.late === '1',
    released: h.rel ?? null,
    ...(h.rb === '1' ? { rebuilt: true as const } : {}),
    ...(h.z === undefined ? {} : { size: h.z }),
  };
}

/** A record of the first layout: long names, usage as JSON. */
function fromFirstLayout(h: Record<string, string>): CallRecord {
  const parsed = h.usage ? (JSON.parse(h.usage) as Record<string, unknown>) : {};
  const usage: Record<string, number> = {};
  for (const f of USAGE_FIELDS) usage[f] = typeof parsed[f] === 'number' ? parsed[f] : 0;
  const priceAtomic = BigInt(h.price ?? '0');
  const status = (h.status ?? 'held') as UsageRecord['status'];
  return {
    call_id: h.call_id,
    time: new Date(Number(h.time)).toISOString(),
    key_id: h.key_id ?? '',
    model: h.model ?? '',
    chain: h.chain ?? '',
    usage,
    price: formatUsd(priceAtomic),
    status,
    tx: h.tx ?? null,
    held: BigInt(h.held ?? '0'),
    priceAtomic,
    // Kept after the debit in this layout; read as the compact layout keeps them.
    owner: status === 'held' || h.owner?.startsWith('job:') ? (h.owner ?? '') : '',
    expires: status === 'held' && h.expires ? Number(h.expires) : null,
    capped: h.capped === '1',
    late: h.late === '1',
    released: h.released ?? null,
    ...(h.rebuilt === '1' ? { rebuilt: true as const } : {}),
    ...(typeof parsed.size === 'string' ? { size: parsed.size } : {}),
  };
}

/** The record in `h` (HGETALL of call:<callId>), of either layout, or null (expired, or never held). */
function toRecord(h: Record<string, string>, callId: string, requestId?: string): CallRecord | null {
  if (h.s) return fromCompact(h, callId, requestId);
  if (h.call_id) return fromFirstLayout(h);
  return null;
}

/** The record of the call with request id `requestId`, or null (never billed, or past its retention). */
export async function getCallRecord(redis: Redis, requestId: string): Promise<CallRecord | null> {
  const callId = callIdOf(requestId);
  return toRecord(await redis.hgetall(keys.call(callId)), callId, requestId);
}

/**
 * The record of `account`'s call with request id `requestId`, or null: none, or another account's. A settled record
 * no longer names its account (see the head of this file), so the owner is the account whose usage index lists the
 * call, as `farebox usage` lists it; the hold script and the rebuild from an event write the index beside the record.
 * Both reads go out in one turn: one round trip.
 */
export async function getOwnCallRecord(redis: Redis, account: string, requestId: string): Promise<CallRecord | null> {
  const callId = callIdOf(requestId);
  const [listed, h] = await Promise.all([
    redis.zscore(keys.usageIndex(account.toLowerCase()), requestId),
    redis.hgetall(keys.call(callId)),
  ]);
  return listed === null ? null : toRecord(h, callId, requestId);
}

/** The record of the call with call id `callId` (the id the escrow charges), or null. */
export async function getCallRecordById(redis: Redis, callId: string): Promise<CallRecord | null> {
  return toRecord(await redis.hgetall(keys.call(callId)), callId);
}

/** Request ids of the account's calls, newest first. */
export async function listCallIds(redis: Redis, account: string, limit = 100, offset = 0): Promise<string[]> {
  return redis.zrevrange(keys.usageIndex(account.toLowerCase()), offset, offset + limit - 1);
}

/** The account's most recent records, newest first, as `farebox usage` prints them. */
export async function listUsage(redis: Redis, account: string, limit = 100, offset = 0): Promise<UsageRecord[]> {
  const records = await listCallRecords(redis, account, limit, offset);
  return records.map(({ call_id, time, key_id, model, chain, usage, price, status, tx, size, rebuilt }) => ({
    call_id,
    time,
    key_id,
    model,
    chain,
    usage,
    ...(size === undefined ? {} : { size }),
    price,
    status,
    tx,
    ...(rebuilt ? { rebuilt } : {}),
  }));
}

/** The account's most recent call records with their money state, newest first. */
export async function listCallRecords(redis: Redis, account: string, limit = 100, offset = 0): Promise<CallRecord[]> {
  const ids = await listCallIds(redis, account, limit, offset);
  const callIds = ids.map(callIdOf);
  const rows = await Promise.all(callIds.map((callId) => redis.hgetall(keys.call(callId))));
  return rows.map((h, i) => toRecord(h, callIds[i], ids[i])).filter((r): r is CallRecord => r !== null);
}

/** Holds open across all instances and jobs. */
export async function countOpenHolds(redis: Redis): Promise<number> {
  return redis.zcard(keys.holds);
}

/** Debits of `chain` waiting to be charged onchain. */
export async function countQueuedDebits(redis: Redis, chain: string): Promise<number> {
  return redis.xlen(keys.debits(chain));
}
