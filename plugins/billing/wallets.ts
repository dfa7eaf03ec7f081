/**
 * Wallet state in Redis: the money of each (account, chain), moved only by Lua scripts so every step is atomic.
 *
 * Keys (plugins/store/keys.ts): wallet:<account>:<chain> (synced = escrow balance as of the watcher, locked =
 * requested withdrawal, pending = debits not yet seen onchain, held = holds of running calls); call:<callId>, the
 * call's record from its hold to its charge (call_id = the request id, time, account, key_id, model, chain, held,
 * owner, expires, price, usage, status held|pending|settled|failed|free, tx, and capped = 1 when the price was cut
 * to the hold); holds and owner-holds:<owner> while held; debits:<chain>; usage-idx:<account>; cursor:<chain>.
 *
 * One record per call, keyed by its escrow call id (callIdOf), so the watcher finds a Charged event's call directly.
 * Its status is the money's state: `held` (the amount in the wallet's `held`), `pending` (the price in `pending`),
 * then `settled` or `failed` when the escrow's event is applied, or `free` when it was released at 0.
 *
 * available = synced - locked - pending - held. A hold is placed only when available covers it, so the wallet
 * can never be committed beyond what the escrow holds. A debit stays in `pending` until the watcher applies its
 * Charged (or ChargeRefused) event, which lowers `synced` in the same script: no moment counts it twice or not at all.
 *
 * Amounts are integers of atomic units. Lua numbers are doubles, exact up to 2^53 atomic units (9 billion USD
 * per wallet); the scripts refuse anything larger rather than round.
 */
import type { Redis } from 'ioredis';
import type { ChainName } from '../chains/config.js';
import { rateLimitLua, type PreparedAdjust } from './rate-limit.js';
import { keys } from '../store/keys.js';
import { LuaScript } from '../store/redis-script.js';

const LIMIT = `if v > 9007199254740991 or v < -9007199254740991 then return redis.error_reply('amount out of range') end`;

// Decide the call's rate limits and place its hold, in one step. KEYS[1..5]: wallet, call record, holds,
// instance-holds, usage-idx; KEYS[6..]: rate-limit keys. ARGV[1..10]: the hold's fields; ARGV[11..]: the rate-limit
// arguments (rate-limit.ts). A call the limits refuse holds nothing ({-2, 0, ...}); a hold refused for funds or as a
// duplicate ({0|-1, available, ...}) charges no limit; a placed hold charges them ({1, available after, ...}). The
// rate-limit decision (rateLimitLua's `out`) follows the first two values.
// Request ids are the gateway's own, so a record already there with this instance and amount is this very call, run
// again: ioredis resends a command whose reply a dropped connection lost. It answers as placed the first time,
// with the decision as it stands, and changes nothing. The record outlives the hold's expiry by the retention, so a
// hold is never lost to the record's TTL.
const HOLD = `
local n = #KEYS - 5
local prior = redis.call('HMGET', KEYS[2], 'instance', 'held', 'status')
local again = prior[1] == ARGV[4] and prior[2] == ARGV[2] and prior[3] == 'held'
${rateLimitLua.decide(5, 10, 'again')}
if allowed == 0 then return {-2, 0, unpack(out)} end
local w = redis.call('HMGET', KEYS[1], 'synced', 'locked', 'pending', 'held')
local avail = tonumber(w[1] or '0') - tonumber(w[2] or '0') - tonumber(w[3] or '0') - tonumber(w[4] or '0')
local v = tonumber(ARGV[2])
${LIMIT}
if again then return {1, avail, unpack(out)} end
if prior[3] then return {-1, avail, unpack(out)} end
if avail < v then return {0, avail, unpack(out)} end
redis.call('HINCRBY', KEYS[1], 'held', ARGV[2])
redis.call('HSET', KEYS[2], 'call_id', ARGV[1], 'time', ARGV[7], 'account', ARGV[5], 'key_id', ARGV[9], 'model', ARGV[8],
  'chain', ARGV[6], 'held', ARGV[2], 'instance', ARGV[4], 'expires', ARGV[3], 'price', '0', 'status', 'held')
redis.call('PEXPIRE', KEYS[2], math.max(0, tonumber(ARGV[3]) - tonumber(ARGV[7])) + tonumber(ARGV[10]))
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', tonumber(ARGV[7]) - tonumber(ARGV[10]))
redis.call('PEXPIRE', KEYS[5], ARGV[10])
${rateLimitLua.charge(5, 10)}
return {1, avail - v, unpack(out)}
`;

// Turn a hold into a debit (price > 0) or release it (price 0). KEYS: wallet, call record, holds, instance-holds,
// debits; KEYS[6..]: token limits to correct to the call's actual tokens, with ARGV[9..] (rate-limit.ts), in the same
// step and so only once. The price is capped at the hold: a worst case that was too low is a bug that must never
// overdraw a wallet (the cap is reported as {price, 1}, and kept in the record as `capped`). A record no longer held
// is this settlement run again (a resend after a lost reply, or a retry): it answers as the first run did and changes
// nothing; a record released at 0, or none, answers {-1, 0}.
const SETTLE = `
local rec = redis.call('HMGET', KEYS[2], 'status', 'held', 'price', 'capped')
if rec[1] ~= 'held' then
  if rec[1] and tonumber(rec[3]) > 0 then return {tonumber(rec[3]), rec[4] and 1 or 0} end
  return {-1, 0}
end
local held = rec[2]
local price = ARGV[2]
local capped = 0
if tonumber(price) > tonumber(held) then price = held; capped = 1 end
redis.call('HINCRBY', KEYS[1], 'held', '-' .. held)
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
if tonumber(price) > 0 then
  redis.call('HINCRBY', KEYS[1], 'pending', price)
  redis.call('XADD', KEYS[5], '*', 'request_id', ARGV[1], 'call_id', ARGV[4], 'account', ARGV[5], 'amount', price)
  redis.call('HSET', KEYS[2], 'status', 'pending', 'price', price, 'usage', ARGV[3])
  if capped == 1 then redis.call('HSET', KEYS[2], 'capped', '1') end
else
  redis.call('HSET', KEYS[2], 'status', ARGV[7], 'price', '0', 'usage', ARGV[3])
end
redis.call('PEXPIRE', KEYS[2], ARGV[8])
if #KEYS > 5 then
  local n = #KEYS - 5
  ${rateLimitLua.adjust(5, 8)}
end
return {tonumber(price), capped}
`;

const holdScript = new LuaScript(HOLD);
const settleScript = new LuaScript(SETTLE);

/** Key names (plugins/store/keys.ts). */
export const walletKeys = { ...keys, instanceHolds: keys.ownerHolds };

/** Whole milliseconds for PEXPIRE, which refuses a fraction (retention_days 0.7 is 60479999.99999999 ms). */
function wholeMs(ms: number): number {
  return Math.ceil(ms);
}

/** A hold request. */
export interface HoldInput {
  requestId: string;
  /** callIdOf(requestId): the key of the call's record. */
  callId: string;
  account: string;
  chain: ChainName;
  amount: bigint;
  instance: string;
  expiresAt: number;
  model: string;
  keyId: string;
  now: number;
  retentionMs: number;
}

/**
 * Result of a hold: placed, or refused with what was available (for funds, as a duplicate, or by a rate limit,
 * which holds nothing). `limits` is the rate-limit decision (RateLimiter.decide), when limits were given.
 */
export type HoldResult =
  | { placed: true; available: bigint; limits: number[] }
  | { placed: false; available: bigint; duplicate: boolean; rateLimited: boolean; limits: number[] };

/** Decide the call's rate limits (`limits`, from RateLimiter.prepare) and place its hold if they pass and the wallet's available balance covers it (atomic). */
export async function placeHold(r: Redis, h: HoldInput, limits?: { keys: readonly string[]; args: readonly (string | number)[] }): Promise<HoldResult> {
  const keys = [
    walletKeys.wallet(h.account, h.chain), walletKeys.call(h.callId), walletKeys.holds,
    walletKeys.instanceHolds(h.instance), walletKeys.usageIndex(h.account),
  ];
  if (limits) keys.push(...limits.keys);
  const args: (string | number)[] = [
    h.requestId, h.amount.toString(), h.expiresAt, h.instance, h.account, h.chain, h.now, h.model, h.keyId, wholeMs(h.retentionMs),
  ];
  if (limits) args.push(...limits.args);
  else args.push('', 0);
  const reply = await holdScript.run<number[]>(r, keys, args);
  const [ok, available] = reply;
  const decision = reply.slice(2);
  if (ok === 1) return { placed: true, available: BigInt(available), limits: decision };
  return { placed: false, available: BigInt(available), duplicate: ok === -1, rateLimited: ok === -2, limits: decision };
}

/** A settle request: the hold of `requestId` becomes a debit of `price` (0 releases it). */
export interface SettleInput {
  requestId: string;
  /** callIdOf(requestId). */
  callId: string;
  account: string;
  chain: ChainName;
  instance: string;
  price: bigint;
  usageJson: string;
  /** Usage record status when nothing is charged: 'free'. */
  freeStatus?: string;
  retentionMs: number;
  /** The call's token-limit correction (RateLimiter.prepareAdjust), made with the settlement. */
  limits?: PreparedAdjust | null;
}

/**
 * Settle a hold: returns the amount debited (run again, the amount the first run debited), or null when there was
 * no hold to settle (released, or never placed).
 */
export async function settleHold(r: Redis, s: SettleInput): Promise<{ debited: bigint; capped: boolean } | null> {
  const keys = [
    walletKeys.wallet(s.account, s.chain), walletKeys.call(s.callId), walletKeys.holds,
    walletKeys.instanceHolds(s.instance), walletKeys.debits(s.chain),
  ];
  const args: (string | number)[] = [s.requestId, s.price.toString(), s.usageJson, s.callId, s.account, s.chain, s.freeStatus ?? 'free', wholeMs(s.retentionMs)];
  if (s.limits) {
    keys.push(...s.limits.keys);
    args.push(...s.limits.args);
  }
  const [price, capped] = await settleScript.run<[number, number]>(r, keys, args);
  if (price === -1) return null;
  return { debited: BigInt(price), capped: capped === 1 };
}

/** One wallet's numbers. */
export interface WalletState {
  synced: bigint;
  locked: bigint;
  pending: bigint;
  held: bigint;
  available: bigint;
}

/** Read one wallet. */
export async function readWallet(r: Redis, account: string, chain: ChainName): Promise<WalletState> {
  const [s, l, p, h] = await r.hmget(walletKeys.wallet(account.toLowerCase(), chain), 'synced', 'locked', 'pending', 'held');
  const synced = BigInt(s ?? 0);
  const locked = BigInt(l ?? 0);
  const pending = BigInt(p ?? 0);
  const held = BigInt(h ?? 0);
  return { synced, locked, pending, held, available: synced - locked - pending - held };
}
