/**
 * The chain watcher's writes: escrow events applied to the wallets and call records (wallets.ts has the layout),
 * each exactly once and in chain order, and the reconciler's correction of a synced balance.
 *
 * No event may stop a chain's bookkeeping. The apply script checks and plans every event of its chunk before its
 * first write, so a refusal leaves nothing half applied; it never builds a negative number from text (Redis refuses
 * `-0`, which is what `'-' .. amount` made of a Withdrawn of 0), and an amount of 0, of any kind, writes nothing.
 *
 * Two rules for events that do not fit:
 * - An amount at or above 2^53 (9 billion USD) cannot be counted exactly by the wallet scripts (Lua numbers are
 *   doubles). Nothing of such an event is applied; it is appended to chain-anomalies:<chain> with its position and
 *   transaction, reported to the watcher (metric farebox_chain_anomalies_total, an error log, an alert), and the
 *   cursor moves past it so the events after it are applied. The wallet then differs from the escrow until an
 *   operator settles it by hand.
 * - A Charged, ChargeRefused or ChargeOverCap event of a call Redis does not hold as pending. Redis writes its log
 *   to disk every second and replicates asynchronously, so a crash or a failover can lose a call's last writes (its
 *   hold, its debit) after a settler read the debit and charged it. The event then rebuilds that call's record from
 *   itself, and never touches another call's amounts:
 *   - no record (lost; or expired, as records live billing.retention_days): one is made from the event (chain,
 *     price = the amount, tx, block, status settled or failed, rebuilt; model, key and usage unknown) and listed in
 *     the usage of the event's account. Nothing leaves `pending`: a lost debit took its pending amount with it (one
 *     script wrote both), so what is pending is other calls'. (A record that expired before its charge leaves its
 *     amount in `pending`: the wallet shows less available, never more.)
 *   - a record still `held`, or released `free` (its debit was lost): settled or failed from the event, rebuilt = 1,
 *     its own hold released if still held.
 *   - a record of another account or chain, or already settled: nothing changes.
 *   Each is reported (farebox_chain_unmatched_charges_total by reason, and a warning): a charge for an unknown call id
 *   is also what a settler outside this deployment would produce.
 *
 * `pending` and `held` never go below 0: a decrement that would is stopped at 0.
 */
import type { Redis } from 'ioredis';
import type { Address, ChainName } from '../chains/config.js';
import type { EscrowEvent, EscrowEventKind, Hex } from '../chains/port.js';
import { keys, luaKeys } from '../store/keys.js';
import { LuaScript } from '../store/redis-script.js';
import { windowStartLua } from '../accounts/key-limits.js';

const LIMIT = `if v > 9007199254740991 or v < -9007199254740991 then return redis.error_reply('amount out of range') end`;

// Apply escrow events in order, each once: events at or before the cursor were applied already. KEYS: cursor,
// anomalies list. ARGV: prefix, chain, now (ms), retention of a rebuilt record (ms), then 7 per event (block,
// logIndex, kind, amount, account, callId, txHash), all decimal or hex text. The keys of each event follow from its
// fields, so they are built here from the prefix (one round trip per APPLY_CHUNK events; a Redis Cluster deployment
// needs them declared instead, see deploy/README.md). Returns {kinds applied, notes}; a note is
// {'anomaly'|'unmatched', reason, block, logIndex, kind, tx, account, callId, amount, rebuilt ('1' or '0')}.
const APPLY = `
local prefix, chain, now, retention = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local MAX = 9007199254740991
local cur = redis.call('GET', KEYS[1])
local pb, pl = -1, -1
if cur then
  local b, l = string.match(cur, '^(%d+):(%d+)$')
  if not b then return redis.error_reply('cursor ' .. cur .. ' is not block:logIndex') end
  pb, pl = tonumber(b), tonumber(l)
end
-- 1 for the kinds that settle a call record, 2 for ChargeSkipped (a call id, no record change), 0 for the others.
local KINDS = {deposited = 0, charged = 1, charge_refused = 1, charge_over_cap = 1, charge_skipped = 2,
  withdrawal_requested = 0, withdrawal_cancelled = 0, withdrawn = 0}
local HEX40 = '^0x' .. string.rep('%x', 40) .. '$'
local HEX64 = '^0x' .. string.rep('%x', 64) .. '$'

-- The request id a gateway call id stands for (callIdOf in request-ids.ts: 'req_' and the low 128 bits); any other
-- call id stands for itself.
local function requestIdOf(callId)
  local id = string.lower(callId)
  if string.sub(id, 3, 34) == string.rep('0', 32) then return 'req_' .. string.sub(id, 35) end
  return id
end
${windowStartLua}

-- Pass 1, reads only: every event is checked and planned before the first write, so no refusal can leave the chunk
-- half applied (a Lua error does not undo the writes before it).
local plan = {}
for i = 5, #ARGV, 7 do
  local bs, ls, kind, a, account, callId, tx = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local ck = KINDS[kind]
  if not (ck and string.find(bs, '^%d+$') and string.find(ls, '^%d+$') and string.find(a, '^%d+$')
      and string.find(account, HEX40) and string.find(tx, HEX64) and (ck == 0 or string.find(callId, HEX64))) then
    return redis.error_reply('event ' .. ((i - 5) / 7 + 1) .. ' of the chunk is malformed; nothing applied')
  end
  local b, l = tonumber(bs), tonumber(ls)
  if b > pb or (b == pb and l > pl) then
    local e = {b = bs, l = ls, kind = kind, a = a, account = account, callId = callId, tx = tx, release = 0}
    if #a > 16 or tonumber(a) > MAX then
      e.anomaly = 'amount_out_of_range'
    else
      e.v = tonumber(a)
      if ck == 1 then
        e.call = ${luaKeys.call('callId')}
        -- The compact layout (billing/call-records.ts; its request id is r, or the one its call id spells), or the
        -- first one (long names) of a record written before it.
        local d = redis.call('HMGET', e.call, 's', 'p', 'a', 'c', 'h', 'o', 'r', 'status', 'price', 'account', 'chain', 'held', 'owner', 'call_id', 'k', 'ks')
        -- The key whose spend counted the hold (billing/wallets.ts HOLD), if it did.
        e.keyId = d[16] and d[15]
        if d[8] then
          d = {d[8], d[9], d[10], d[11], d[12], d[13], d[14]}
          e.firstLayout = true
        elseif d[1] and not d[7] then
          d[7] = requestIdOf(callId)
        end
        local price = d[2] and string.find(d[2], '^%d+$') and #d[2] <= 16 and tonumber(d[2])
        local ours = (not d[3] or string.lower(d[3]) == account) and (not d[4] or d[4] == chain)
        if not d[1] then
          e.unmatched, e.rebuild = 'unknown_call', 'new'
        elseif ours and d[1] == 'pending' and price then
          e.release = price
        elseif ours and (d[1] == 'held' or d[1] == 'free') and d[7] then
          -- Its debit was lost: the hold's amount is this call's own to release.
          e.unmatched, e.rebuild, e.requestId, e.owner = 'call_not_debited', d[1], d[7], d[6]
          e.held = d[1] == 'held' and tonumber(d[5] or '0') or 0
        else
          e.unmatched = 'call_not_pending'
        end
      end
    end
    plan[#plan + 1] = e
    pb, pl = b, l
  end
end

-- Pass 2, writes: nothing below can fail on the events' contents. Amounts are written as integers formatted here
-- (never '-' .. text), and an amount of 0 writes nothing.
local function add(key, field, v)
  if v > 0 then redis.call('HINCRBY', key, field, string.format('%d', v)) end
end
local function sub(key, field, v)
  if v > 0 then redis.call('HINCRBY', key, field, string.format('%d', -v)) end
end
-- pending and held count what this deployment still expects: never below 0, whatever a lost write left.
local function release(key, field, v)
  if v > 0 and redis.call('HINCRBY', key, field, string.format('%d', -v)) < 0 then redis.call('HSET', key, field, '0') end
end
local applied, notes, listed = {}, {}, {}
for _, e in ipairs(plan) do
  local kind, account = e.kind, e.account
  if e.anomaly then
    redis.call('RPUSH', KEYS[2], cjson.encode({reason = e.anomaly, block = e.b, log_index = e.l, kind = kind,
      tx = e.tx, account = account, call_id = e.callId, amount = e.a, at = now}))
    notes[#notes + 1] = {'anomaly', e.anomaly, e.b, e.l, kind, e.tx, account, e.callId, e.a, '0'}
  else
    local wallet = ${luaKeys.wallet('account', 'chain')}
    -- Once per account and script: a batch's charges are mostly one account's.
    if not listed[account] then
      redis.call('SADD', ${luaKeys.wallets('chain')}, account)
      listed[account] = true
    end
    if kind == 'deposited' then
      add(wallet, 'synced', e.v)
    elseif e.call then
      local state = kind == 'charged' and 'settled' or 'failed'
      if kind == 'charged' then sub(wallet, 'synced', e.v) end
      release(wallet, 'pending', e.release)
      local rebuilt = e.rebuild and e.v > 0
      if rebuilt and e.rebuild == 'new' then
        local id = requestIdOf(e.callId)
        -- The compact layout, settled: no account; the reader names it by the request id its call id spells (or the
        -- call id itself), as the index does.
        redis.call('HSET', e.call, 't', now, 'c', chain, 'h', '0', 'p', e.a, 's', state, 'x', string.sub(e.tx, 3), 'blk', e.b, 'rb', '1')
        redis.call('PEXPIRE', e.call, retention)
        local index = ${luaKeys.usageIndex('account')}
        redis.call('ZADD', index, now, id)
        redis.call('PEXPIRE', index, retention)
      elseif rebuilt then
        if e.held > 0 then release(wallet, 'held', e.held) end
        if e.keyId then
          -- As the lost debit would have: the hold leaves the key's held, the charge joins its spend.
          local spend = ${luaKeys.keySpend('e.keyId')}
          if e.held > 0 then release(spend, 'h', e.held) end
          local kw = redis.call('HMGET', spend, 'r', 'w')
          local kstart = windowStart(kw[1], tonumber(now))
          if tonumber(kw[2] or '-1') ~= kstart then redis.call('HSET', spend, 'w', kstart, 's', '0') end
          add(spend, 's', e.v)
          add(spend, 't', e.v)
        end
        redis.call('ZREM', ${luaKeys.holds}, e.requestId)
        if e.owner then redis.call('SREM', ${luaKeys.ownerHolds('e.owner')}, e.requestId) end
        if e.firstLayout then
          redis.call('HSET', e.call, 'price', e.a, 'status', state, 'tx', e.tx, 'block', e.b, 'rebuilt', '1')
        else
          redis.call('HSET', e.call, 'p', e.a, 's', state, 'x', string.sub(e.tx, 3), 'blk', e.b, 'rb', '1')
          -- As the debit leaves it (wallets.ts): a job's id stays, naming the call's job.
          if string.sub(e.owner or '', 1, 4) == 'job:' then redis.call('HDEL', e.call, 'a', 'e') else redis.call('HDEL', e.call, 'a', 'o', 'e') end
        end
      elseif not e.unmatched then
        if e.firstLayout then
          redis.call('HSET', e.call, 'status', state, 'tx', e.tx)
        else
          -- Settled, the record keeps what its readers show and its money: the account was for the check above.
          redis.call('HSET', e.call, 's', state, 'x', string.sub(e.tx, 3))
          redis.call('HDEL', e.call, 'a')
        end
      end
      if e.unmatched then
        notes[#notes + 1] = {'unmatched', e.unmatched, e.b, e.l, kind, e.tx, account, e.callId, e.a, rebuilt and '1' or '0'}
      end
    elseif kind == 'withdrawal_requested' then
      redis.call('HSET', wallet, 'locked', e.a)
    elseif kind == 'withdrawal_cancelled' then
      redis.call('HSET', wallet, 'locked', '0')
    elseif kind == 'withdrawn' then
      sub(wallet, 'synced', e.v)
      redis.call('HSET', wallet, 'locked', '0')
    end
    applied[#applied + 1] = kind
  end
end
if #plan > 0 then redis.call('SET', KEYS[1], plan[#plan].b .. ':' .. plan[#plan].l) end
return {applied, notes}
`;

// Set the synced balance to the chain's, if no event was applied since the caller read the cursor.
const CORRECT = `
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return {0, 0} end
local before = tonumber(redis.call('HGET', KEYS[2], 'synced') or '0')
local v = tonumber(ARGV[2])
${LIMIT}
redis.call('HSET', KEYS[2], 'synced', ARGV[2])
return {1, v - before}
`;

const applyScript = new LuaScript(APPLY);
const correctScript = new LuaScript(CORRECT);

/**
 * Events per apply script. A script holds Redis for its whole run, and a charge is 4-5 commands: a settled batch of
 * hundreds applied at once would stall every gateway's hold and debit scripts behind it. Each script is atomic and
 * advances the cursor, so a watcher stopped between two loses nothing.
 */
export const APPLY_CHUNK = 16;

/** An escrow event the apply script did not apply (its amount is 2^53 or more); also kept in chain-anomalies:<chain>. */
export interface Anomaly {
  reason: 'amount_out_of_range';
  blockNumber: bigint;
  logIndex: number;
  kind: EscrowEventKind;
  txHash: Hex;
  account: string;
  callId: Hex | null;
  amount: bigint;
}

/** A charge outcome that found no pending call record to settle (see the rule at the head of this file). */
export interface UnmatchedCharge {
  /**
   * unknown_call: no record (lost, expired, or never made here); call_not_debited: a record still held or released
   * free (its debit lost); call_not_pending: a record already settled, or another wallet's.
   */
  reason: 'unknown_call' | 'call_not_debited' | 'call_not_pending';
  blockNumber: bigint;
  logIndex: number;
  kind: EscrowEventKind;
  txHash: Hex;
  account: string;
  callId: Hex;
  amount: bigint;
  /** The call's record was rebuilt from the event (unknown_call and call_not_debited, unless the amount is 0). */
  rebuilt: boolean;
}

/** What applyEventBatch did: the kinds applied, in order, and the events that did not fit. */
export interface ApplyReport {
  applied: string[];
  anomalies: Anomaly[];
  unmatched: UnmatchedCharge[];
}

type Note = [
  type: 'anomaly' | 'unmatched',
  reason: string,
  block: string,
  logIndex: string,
  kind: string,
  tx: string,
  account: string,
  callId: string,
  amount: string,
  rebuilt: string,
];

/** How long a record rebuilt from an event is kept when the caller names no retention: billing.retention_days' default. */
export const DEFAULT_RETENTION_MS = 30 * 86_400_000;

/**
 * Apply escrow events (in chain order) to the synced state, each exactly once; reports what did not fit. A call
 * record rebuilt from an event is kept `retentionMs` (billing.retention_days).
 */
export async function applyEventBatch(
  r: Redis,
  chain: ChainName,
  events: readonly EscrowEvent[],
  opts: { retentionMs?: number } = {},
): Promise<ApplyReport> {
  const prefix = (r.options.keyPrefix as string | undefined) ?? '';
  const report: ApplyReport = { applied: [], anomalies: [], unmatched: [] };
  // Whole ms: PEXPIRE refuses a fraction (retention_days 0.7).
  const retention = String(Math.ceil(opts.retentionMs ?? DEFAULT_RETENTION_MS));
  for (let i = 0; i < events.length; i += APPLY_CHUNK) {
    const args: string[] = [prefix, chain, String(Date.now()), retention];
    for (const e of events.slice(i, i + APPLY_CHUNK)) {
      args.push(
        e.blockNumber.toString(),
        String(e.logIndex),
        e.kind,
        e.amount.toString(),
        e.account.toLowerCase(),
        e.callId ?? '',
        e.txHash,
      );
    }
    const [applied, notes] = await applyScript.run<[string[], Note[]]>(
      r,
      [keys.cursor(chain), keys.chainAnomalies(chain)],
      args,
    );
    report.applied.push(...applied);
    for (const [type, reason, block, logIndex, kind, tx, account, callId, amount, rebuilt] of notes) {
      const at = {
        blockNumber: BigInt(block),
        logIndex: Number(logIndex),
        kind: kind as EscrowEventKind,
        txHash: tx as Hex,
        account,
        amount: BigInt(amount),
      };
      if (type === 'anomaly')
        report.anomalies.push({ reason: 'amount_out_of_range', ...at, callId: (callId || null) as Hex | null });
      else
        report.unmatched.push({
          reason: reason as UnmatchedCharge['reason'],
          ...at,
          callId: callId as Hex,
          rebuilt: rebuilt === '1',
        });
    }
  }
  return report;
}

/** The events the watcher could not apply on `chain`, oldest first (JSON entries of chain-anomalies:<chain>). */
export async function readAnomalies(r: Redis, chain: ChainName): Promise<Record<string, string>[]> {
  return (await r.lrange(keys.chainAnomalies(chain), 0, -1)).map((s) => JSON.parse(s) as Record<string, string>);
}

/** Where the watcher stands on a chain: the last applied event, or null before the first. */
export async function readCursor(
  r: Redis,
  chain: ChainName,
): Promise<{ raw: string; block: bigint; logIndex: number } | null> {
  const raw = await r.get(keys.cursor(chain));
  if (!raw) return null;
  const [b, l] = raw.split(':');
  return { raw, block: BigInt(b), logIndex: Number(l) };
}

/** Set the synced balance to `onchain` unless the cursor moved from `cursorRaw`; returns the correction made. */
export async function correctSynced(
  r: Redis,
  chain: ChainName,
  account: Address | string,
  cursorRaw: string,
  onchain: bigint,
): Promise<bigint | null> {
  const [ok, diff] = await correctScript.run<[number, number]>(
    r,
    [keys.cursor(chain), keys.wallet(account.toLowerCase(), chain)],
    [cursorRaw, onchain.toString()],
  );
  return ok === 1 ? BigInt(diff) : null;
}
