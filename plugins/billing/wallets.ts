/**
 * Wallet state in Redis: the money of each (account, chain), moved only by Lua scripts so every step is atomic.
 *
 * Keys (plugins/store/keys.ts): wallet:<account>:<chain> (synced = escrow balance as of the watcher, locked =
 * requested withdrawal, pending = debits not yet seen onchain, held = holds of running calls); call:<callId>, the
 * call's record from its hold to its charge, in the compact layout of call-records.ts (t time, a account, k key id,
 * m model, c chain, h held, o owner (while held, or a job's), e expiry while held, p price, s status,
 * usage counts, x tx, cap = 1 when the price was cut to the hold); holds and owner-holds:<owner> while held;
 * debits:<chain>; usage-idx:<account>; cursor:<chain>.
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
import { storedRequestId, upgradeRecordLua, USAGE_RECORD_FIELDS, usageArgs } from './call-records.js';
import { USAGE_FIELDS } from '../../pricing/index.js';
import { keys } from '../store/keys.js';
import { LuaScript } from '../store/redis-script.js';
import { parseReset, windowStartLua, type Reset } from '../accounts/key-limits.js';

// Redis TIME as ms (one clock for every instance), or ARGV's `now` when a test gives one.
const nowLua = (arg: string) => `local now = tonumber(${arg})
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end`;

// An amount argument as a Lua number: a whole number from 0 to 2^53 - 1, else the script refuses before any write.
const amountLua = (name: string, arg: string) => `local ${name} = tonumber(${arg})
if ${name} == nil or ${name} < 0 or ${name} ~= math.floor(${name}) or ${name} > 9007199254740991 then
  return redis.error_reply('amount out of range: ' .. tostring(${arg}))
end`;

// Decide the call's rate limits and place its hold, in one step. KEYS[1..6]: wallet, call record, holds,
// owner-holds, usage-idx, the key's spend (accounts/key-limits.ts); KEYS[7..]: rate-limit keys. ARGV[1..11]: request
// id, amount, ttl ms, owner, account, chain, model, key id, retention ms, now ms ('' = Redis TIME), the request id as
// the record keeps it ('' when the call id spells it); ARGV[12..]: the rate-limit arguments (rate-limit.ts). A call
// the limits refuse holds nothing ({-2, 0, ...}); a hold refused for funds or as a duplicate ({0|-1, available, ...})
// charges no limit; a placed hold charges them ({1, available after, ...}). The rate-limit decision (rateLimitLua's
// `out`) follows the first two values. A hold the key's spend limit refuses holds nothing and charges no limit:
// {-3, what the key has left, its window's start, its reset, its limit}.
// Request ids are the gateway's own, so a record already there with this owner and amount is this very call, run
// again: ioredis resends a command whose reply a dropped connection lost. It answers as placed the first time,
// with the decision as it stands, and changes nothing. The hold expires `ttl` after now unless its owner renews it
// (renewHolds); the record outlives that by the retention, so a hold is never lost to the record's TTL. A record of
// the first layout (its `status`) under the id is a duplicate too.
// The key's spend: a limit (l) refuses a hold above what its window spent (s, 0 once the window moved) and its other
// calls hold (h) leave; a placed hold adds to h and marks the record (ks), whose debit moves it from h to s and t.
const HOLD = `
local n = #KEYS - 6
${amountLua('v', 'ARGV[2]')}
local prior = redis.call('HMGET', KEYS[2], 'o', 'h', 's', 'status')
local again = prior[1] == ARGV[4] and prior[2] == ARGV[2] and prior[3] == 'held'
${rateLimitLua.decide(6, 11, 'again')}
if allowed == 0 then return {-2, 0, unpack(out)} end
local w = redis.call('HMGET', KEYS[1], 'synced', 'locked', 'pending', 'held')
local avail = tonumber(w[1] or '0') - tonumber(w[2] or '0') - tonumber(w[3] or '0') - tonumber(w[4] or '0')
if again then return {1, avail, unpack(out)} end
if prior[3] or prior[4] then return {-1, avail, unpack(out)} end
${nowLua('ARGV[10]')}
${windowStartLua}
local ks = redis.call('HMGET', KEYS[6], 'l', 'r', 'w', 's', 'h')
local kstart = windowStart(ks[2], now)
local kmoved = tonumber(ks[3] or '-1') ~= kstart
if ks[1] then
  -- A limit, spend or hold that is not a number refuses everything: a broken write must not unbound a key.
  local spent = kmoved and 0 or tonumber(ks[4] or '0')
  local left = (tonumber(ks[1]) or 0) - (spent or math.huge) - (tonumber(ks[5] or '0') or math.huge)
  if left ~= left then left = -1 end
  if left < v then return {-3, left, kstart, ks[2] or 'never', ks[1]} end
end
if avail < v then return {0, avail, unpack(out)} end
local expires = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[2], 't', now, 'a', ARGV[5], 'k', ARGV[8], 'm', ARGV[7], 'c', ARGV[6], 'h', ARGV[2], 'o', ARGV[4],
  'e', expires, 'p', '0', 's', 'held')
if v > 0 then
  redis.call('HINCRBY', KEYS[1], 'held', v)
  if kmoved then redis.call('HSET', KEYS[6], 'w', kstart, 's', 0) end
  redis.call('HINCRBY', KEYS[6], 'h', v)
  redis.call('HSET', KEYS[2], 'ks', '1')
end
if ARGV[11] ~= '' then redis.call('HSET', KEYS[2], 'r', ARGV[11]) end
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[9]))
redis.call('ZADD', KEYS[3], expires, ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now - tonumber(ARGV[9]))
redis.call('PEXPIRE', KEYS[5], ARGV[9])
${rateLimitLua.charge(6, 11)}
return {1, avail - v, unpack(out)}
`;

// Turn a hold into a debit (price > 0) or release it (price 0). KEYS: wallet, call record, holds, owner-holds,
// debits, instances, the key's spend; KEYS[8..]: token limits to correct to the call's actual tokens, with ARGV[21..] (rate-limit.ts),
// in the same step and so only once. ARGV: request id, price, the request id as the record keeps it ('' when the
// call id spells it), call id, account, chain, status when free, retention ms, release reason ('' for a debit), now
// ms ('' = Redis TIME), instance timeout ms, image size class ('' none), then the usage counts in USAGE_FIELDS order
// (ARGV[13..19], a count of 0 not written), '1' when the owner is a job. Replies {amount debited, capped, late}.
// - The record leaves the hold's expiry behind, and its owner unless a job (call-records.ts: the job's id names the
//   call's job for good, an instance's name nothing once the hold is gone); one of the first layout is rewritten in
//   the compact one first.
// - The price is capped at the hold: a worst case that was too low is a bug that must never overdraw a wallet (capped
//   = 1, kept in the record).
// - A record no longer held is this debit run again (a resend after a lost reply, or a retry): it answers as the
//   first run did and changes nothing.
// - A release (the sweeper's) happens only if its reason still holds when the script runs: the hold's expiry is
//   past ('expired'), or its owner's last heartbeat is older than the instance timeout ('instance_died'). An owner
//   that renewed or beat since the sweeper read its state keeps the hold ({-1, 0, 0}).
// - A record the sweeper released (its owner taken for dead, or its expiry passed while Redis or the owner was away)
//   whose call still delivered: the price is debited all the same (late = 1), so delivered output is never free. The
//   wallet may then be committed beyond its balance; the escrow refuses what it cannot pay.
// - A record released at 0, or none, answers {-1, 0, 0}.
// - A hold the key's spend counted (ks): its amount leaves the key's held (h) as it leaves the wallet's, and the price
//   is added to what the key spent in the window the debit lands in (s) and in all (t). The mark goes with a debit
//   (a release keeps it, for a debit that comes late).
const DEBIT = `
local USAGE = {${USAGE_FIELDS.map((f) => `'${USAGE_RECORD_FIELDS[f]}'`).join(', ')}}
${upgradeRecordLua}
${amountLua('price', 'ARGV[2]')}
local rec = redis.call('HMGET', KEYS[2], 's', 'h', 'p', 'cap', 'rel', 'late', 'status', 'ks')
if rec[7] then
  upgradeRecord(KEYS[2], ARGV[3] ~= '')
  rec = redis.call('HMGET', KEYS[2], 's', 'h', 'p', 'cap', 'rel', 'late')
end
local status = rec[1]
local late = 0
if status ~= 'held' then
  if status == 'pending' or status == 'settled' or status == 'failed' then
    return {tonumber(rec[3]), rec[4] and 1 or 0, rec[6] and 1 or 0}
  end
  if not (status == 'free' and rec[5] and ARGV[9] == '' and price > 0) then return {-1, 0, 0} end
  late = 1
end
if ARGV[9] ~= '' then
  ${nowLua('ARGV[10]')}
  if ARGV[9] == 'expired' then
    local expires = redis.call('ZSCORE', KEYS[3], ARGV[1])
    if expires and tonumber(expires) > now then return {-1, 0, 0} end
  elseif ARGV[9] == 'instance_died' then
    local beat = redis.call('ZSCORE', KEYS[6], redis.call('HGET', KEYS[2], 'o') or '')
    if beat and tonumber(beat) > now - tonumber(ARGV[11]) then return {-1, 0, 0} end
  end
end
local held = tonumber(rec[2])
local capped = 0
if price > held then price = held; capped = 1 end
if late == 0 then
  if held > 0 then redis.call('HINCRBY', KEYS[1], 'held', -held) end
  if rec[8] and held > 0 then redis.call('HINCRBY', KEYS[7], 'h', -held) end
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('SREM', KEYS[4], ARGV[1])
end
if rec[8] and price > 0 then
  local now = tonumber(ARGV[10])
  if now == nil then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  ${windowStartLua}
  local kw = redis.call('HMGET', KEYS[7], 'r', 'w')
  local kstart = windowStart(kw[1], now)
  if tonumber(kw[2] or '-1') ~= kstart then redis.call('HSET', KEYS[7], 'w', kstart, 's', price)
  else redis.call('HINCRBY', KEYS[7], 's', price) end
  redis.call('HINCRBY', KEYS[7], 't', price)
end
local fields = {'s', price > 0 and 'pending' or ARGV[7], 'p', price}
for i, f in ipairs(USAGE) do
  if ARGV[12 + i] ~= '0' then fields[#fields + 1] = f; fields[#fields + 1] = ARGV[12 + i] end
end
if ARGV[12] ~= '' then fields[#fields + 1] = 'z'; fields[#fields + 1] = ARGV[12] end
if price > 0 then
  redis.call('HINCRBY', KEYS[1], 'pending', price)
  redis.call('XADD', KEYS[5], '*', 'request_id', ARGV[1], 'call_id', ARGV[4], 'account', ARGV[5], 'amount', price)
  if capped == 1 then fields[#fields + 1] = 'cap'; fields[#fields + 1] = '1' end
  if late == 1 then fields[#fields + 1] = 'late'; fields[#fields + 1] = '1' end
elseif ARGV[9] ~= '' then
  fields[#fields + 1] = 'rel'; fields[#fields + 1] = ARGV[9]
end
redis.call('HSET', KEYS[2], unpack(fields))
if ARGV[20] == '1' then redis.call('HDEL', KEYS[2], 'e') else redis.call('HDEL', KEYS[2], 'o', 'e') end
-- Debited, the call's spend is the key's: nothing reads the mark again (a release keeps it for a late debit).
if price > 0 and rec[8] then redis.call('HDEL', KEYS[2], 'ks') end
redis.call('PEXPIRE', KEYS[2], ARGV[8])
if #KEYS > 7 then
  local n = #KEYS - 7
  ${rateLimitLua.adjust(7, 20)}
end
return {price, capped, late}
`;

// Push back the expiry of holds their owner still runs. KEYS: holds, then the call records; ARGV: ttl ms, retention
// ms, now ms ('' = Redis TIME), then the request ids (one per record). A hold no longer in `holds` (debited, released)
// is left alone. Returns how many were renewed. Only the instance that placed a hold renews it, so its record is in
// this version's layout (e = expiry).
const RENEW = `
${nowLua('ARGV[3]')}
local ttl = tonumber(ARGV[1])
local renewed = 0
for i = 4, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
    redis.call('HSET', KEYS[i - 2], 'e', now + ttl)
    redis.call('PEXPIRE', KEYS[i - 2], ttl + tonumber(ARGV[2]))
    renewed = renewed + 1
  end
end
return renewed
`;

const holdScript = new LuaScript(HOLD);
const debitScript = new LuaScript(DEBIT);
const renewScript = new LuaScript(RENEW);

/** The largest amount the scripts take (Lua numbers are exact up to 2^53 - 1 atomic units). */
export const MAX_AMOUNT = 9_007_199_254_740_991n;

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
  /** Who keeps the hold alive: a gateway instance (renewing it while its call runs) or a job (`job:<id>`). */
  owner: string;
  /** The hold expires this long after it is placed unless its owner renews it. */
  ttlMs: number;
  model: string;
  keyId: string;
  retentionMs: number;
  /** Milliseconds since the epoch to place the hold at, instead of Redis TIME (tests). */
  now?: number;
}

/** A key's spend limit that refused a hold: what the key had left, and its window. */
export interface KeyLimitRefusal {
  limit: bigint;
  reset: Reset;
  /** Never below 0 (a late debit can take a key past its limit). */
  left: bigint;
  windowStart: number;
}

/**
 * Result of a hold: placed, or refused with what was available (for funds, as a duplicate, by a rate limit, or by
 * the key's spend limit, which hold nothing). `limits` is the rate-limit decision (RateLimiter.decide), when limits
 * were given.
 */
export type HoldResult =
  | { placed: true; available: bigint; limits: number[] }
  | {
      placed: false;
      available: bigint;
      duplicate: boolean;
      rateLimited: boolean;
      limits: number[];
      keyLimit?: KeyLimitRefusal;
    };

/** Decide the call's rate limits (`limits`, from RateLimiter.prepare) and place its hold if they pass and the wallet's available balance covers it (atomic). */
export async function placeHold(
  r: Redis,
  h: HoldInput,
  limits?: { keys: readonly string[]; args: readonly (string | number)[] },
): Promise<HoldResult> {
  const scriptKeys = [
    keys.wallet(h.account, h.chain),
    keys.call(h.callId),
    keys.holds,
    keys.ownerHolds(h.owner),
    keys.usageIndex(h.account),
    keys.keySpend(h.keyId),
  ];
  if (limits) scriptKeys.push(...limits.keys);
  const args: (string | number)[] = [
    h.requestId,
    h.amount.toString(),
    wholeMs(h.ttlMs),
    h.owner,
    h.account,
    h.chain,
    h.model,
    h.keyId,
    wholeMs(h.retentionMs),
    h.now ?? '',
    storedRequestId(h.requestId, h.callId),
  ];
  if (limits) args.push(...limits.args);
  else args.push('', 0);
  const reply = await holdScript.run<(number | string)[]>(r, scriptKeys, args);
  const ok = reply[0] as number;
  const available = reply[1] as number;
  if (ok === -3) {
    const left = BigInt(Math.trunc(available));
    const keyLimit: KeyLimitRefusal = {
      left: left < 0n ? 0n : left,
      windowStart: reply[2] as number,
      reset: parseReset(String(reply[3])),
      limit: /^\d+$/.test(String(reply[4])) ? BigInt(String(reply[4])) : 0n,
    };
    return { placed: false, available: 0n, duplicate: false, rateLimited: false, limits: [], keyLimit };
  }
  const decision = reply.slice(2) as number[];
  if (ok === 1) return { placed: true, available: BigInt(available), limits: decision };
  return {
    placed: false,
    available: BigInt(available),
    duplicate: ok === -1,
    rateLimited: ok === -2,
    limits: decision,
  };
}

/** A debit request: the hold of `requestId` becomes a debit of `price` (0 releases it). */
export interface DebitInput {
  requestId: string;
  /** callIdOf(requestId). */
  callId: string;
  account: string;
  /**
   * The key whose spend the hold counted (the record's `k`); absent only in a debit spooled before keys had a spend,
   * whose hold counted on none.
   */
  keyId?: string;
  chain: ChainName;
  owner: string;
  price: bigint;
  /** The call's usage as JSON (Usage, with `size` for an image): the spool keeps it so. */
  usageJson: string;
  /** Usage record status when nothing is charged: 'free'. */
  freeStatus?: string;
  retentionMs: number;
  /**
   * Set by the sweeper: why it releases the hold (price 0), checked again inside the script against `now` (default
   * Redis TIME) and the instance timeout; a debit that comes later still charges.
   */
  release?: { reason: 'expired' | 'instance_died'; instanceTimeoutMs: number; now?: number };
  /** The call's token-limit correction (RateLimiter.prepareAdjust), made with the debit. */
  limits?: PreparedAdjust | null;
  /** Milliseconds since the epoch to debit at, instead of Redis TIME (tests). */
  now?: number;
}

/** What a debit did. */
export interface DebitResult {
  debited: bigint;
  /** The price was above the hold and cut to it. */
  capped: boolean;
  /** The hold had been released before the debit: charged all the same. */
  late: boolean;
}

/**
 * Debit a hold: returns the amount debited (run again, the amount the first run debited), or null when there was
 * nothing to debit (released at 0, or never placed).
 */
export async function debitHold(r: Redis, d: DebitInput): Promise<DebitResult | null> {
  const scriptKeys = [
    keys.wallet(d.account, d.chain),
    keys.call(d.callId),
    keys.holds,
    keys.ownerHolds(d.owner),
    keys.debits(d.chain),
    keys.instances,
    keys.keySpend(d.keyId ?? ''),
  ];
  const args: (string | number)[] = [
    d.requestId,
    d.price.toString(),
    storedRequestId(d.requestId, d.callId),
    d.callId,
    d.account,
    d.chain,
    d.freeStatus ?? 'free',
    wholeMs(d.retentionMs),
    d.release?.reason ?? '',
    d.release?.now ?? d.now ?? '',
    d.release?.instanceTimeoutMs ?? 0,
    ...usageArgs(d.usageJson),
    d.owner.startsWith('job:') ? '1' : '',
  ];
  if (d.limits) {
    scriptKeys.push(...d.limits.keys);
    args.push(...d.limits.args);
  }
  const [price, capped, late] = await debitScript.run<[number, number, number]>(r, scriptKeys, args);
  if (price === -1) return null;
  return { debited: BigInt(price), capped: capped === 1, late: late === 1 };
}

/** Push the expiry of live holds to `ttlMs` from now (Redis TIME); returns how many were still held. */
export async function renewHolds(
  r: Redis,
  holds: readonly { requestId: string; callId: string }[],
  ttlMs: number,
  retentionMs: number,
  now?: number,
): Promise<number> {
  if (holds.length === 0) return 0;
  const scriptKeys: string[] = [keys.holds];
  const args: (string | number)[] = [wholeMs(ttlMs), wholeMs(retentionMs), now ?? ''];
  for (const h of holds) {
    scriptKeys.push(keys.call(h.callId));
    args.push(h.requestId);
  }
  return renewScript.run<number>(r, scriptKeys, args);
}

/** Redis's clock in ms: every instance compares expiries and heartbeats on it, never on its own. */
export async function redisNow(r: Redis): Promise<number> {
  const [s, us] = await r.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
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
  const [s, l, p, h] = await r.hmget(keys.wallet(account.toLowerCase(), chain), 'synced', 'locked', 'pending', 'held');
  const synced = BigInt(s ?? 0);
  const locked = BigInt(l ?? 0);
  const pending = BigInt(p ?? 0);
  const held = BigInt(h ?? 0);
  return { synced, locked, pending, held, available: synced - locked - pending - held };
}
