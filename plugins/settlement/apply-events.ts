/**
 * The chain watcher's writes: escrow events applied to the wallets and call records (wallets.ts has the layout),
 * each exactly once and in chain order, and the reconciler's correction of a synced balance.
 */
import type { Redis } from 'ioredis';
import type { Address, ChainName } from '../chains/config.js';
import type { EscrowEvent } from '../chains/port.js';
import { keys, luaKeys } from '../store/keys.js';
import { LuaScript } from '../store/redis-script.js';

const LIMIT = `if v > 9007199254740991 or v < -9007199254740991 then return redis.error_reply('amount out of range') end`;

// Apply escrow events in order, each once: events at or before the cursor were applied already. Events come in
// groups of 7 ARGV after the prefix and chain (block, logIndex, kind, amount, account, callId, txHash). The keys of
// each event follow from its fields, so they are built here from the prefix (one round trip per APPLY_CHUNK events;
// a Redis Cluster deployment needs them declared instead, see deploy/README.md).
const APPLY = `
local prefix, chain = ARGV[1], ARGV[2]
local cur = redis.call('GET', KEYS[1])
local cb, cl = -1, -1
if cur then
  local b, l = string.match(cur, '(%d+):(%d+)')
  cb, cl = tonumber(b), tonumber(l)
end
-- Every amount is checked before anything is written: an error half-way would leave the batch half applied.
for i = 3, #ARGV, 7 do
  local v = tonumber(ARGV[i + 3])
  ${LIMIT}
end
local applied = {}
local listed = {}
for i = 3, #ARGV, 7 do
  local b, l = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if b > cb or (b == cb and l > cl) then
    local kind, amount, account, callId, tx = ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
    local wallet = ${luaKeys.wallet('account', 'chain')}
    -- Once per account and script: a batch's charges are mostly one account's.
    if not listed[account] then
      redis.call('SADD', ${luaKeys.wallets('chain')}, account)
      listed[account] = true
    end
    if kind == 'deposited' then
      redis.call('HINCRBY', wallet, 'synced', amount)
    elseif kind == 'charged' or kind == 'charge_refused' then
      if kind == 'charged' then redis.call('HINCRBY', wallet, 'synced', '-' .. amount) end
      local call = ${luaKeys.call('callId')}
      local d = redis.call('HMGET', call, 'status', 'price')
      if d[1] == 'pending' then
        redis.call('HINCRBY', wallet, 'pending', '-' .. d[2])
        redis.call('HSET', call, 'status', kind == 'charged' and 'settled' or 'failed', 'tx', tx)
      end
    elseif kind == 'withdrawal_requested' then
      redis.call('HSET', wallet, 'locked', amount)
    elseif kind == 'withdrawal_cancelled' then
      redis.call('HSET', wallet, 'locked', '0')
    elseif kind == 'withdrawn' then
      redis.call('HINCRBY', wallet, 'synced', '-' .. amount)
      redis.call('HSET', wallet, 'locked', '0')
    end
    cb, cl = b, l
    applied[#applied + 1] = kind
  end
end
if #applied > 0 then redis.call('SET', KEYS[1], cb .. ':' .. cl) end
return applied
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
 * hundreds applied at once stalled every gateway's hold and settle scripts behind it (in the bench, scripts of 64
 * events ran 1.6 ms). Each script is atomic and advances the cursor, so a watcher stopped between two loses nothing.
 */
export const APPLY_CHUNK = 16;

/** Apply escrow events (in chain order) to the synced state, each exactly once; returns the kinds applied. */
export async function applyEvents(r: Redis, chain: ChainName, events: readonly EscrowEvent[]): Promise<string[]> {
  const prefix = (r.options.keyPrefix as string | undefined) ?? '';
  const applied: string[] = [];
  for (let i = 0; i < events.length; i += APPLY_CHUNK) {
    const args: string[] = [prefix, chain];
    for (const e of events.slice(i, i + APPLY_CHUNK)) {
      args.push(e.blockNumber.toString(), String(e.logIndex), e.kind, e.amount.toString(), e.account.toLowerCase(), e.callId ?? '', e.txHash);
    }
    applied.push(...(await applyScript.run<string[]>(r, [keys.cursor(chain)], args)));
  }
  return applied;
}

/** Where the watcher stands on a chain: the last applied event, or null before the first. */
export async function readCursor(r: Redis, chain: ChainName): Promise<{ raw: string; block: bigint; logIndex: number } | null> {
  const raw = await r.get(keys.cursor(chain));
  if (!raw) return null;
  const [b, l] = raw.split(':');
  return { raw, block: BigInt(b), logIndex: Number(l) };
}

/** Set the synced balance to `onchain` unless the cursor moved from `cursorRaw`; returns the correction made. */
export async function correctSynced(r: Redis, chain: ChainName, account: Address | string, cursorRaw: string, onchain: bigint): Promise<bigint | null> {
  const [ok, diff] = await correctScript.run<[number, number]>(r, [keys.cursor(chain), keys.wallet(account.toLowerCase(), chain)], [cursorRaw, onchain.toString()]);
  return ok === 1 ? BigInt(diff) : null;
}

