/**
 * Rate limits counted in Redis, so every gateway instance on one Redis shares them (policies/limits.ts has
 * the config and the headers).
 *
 * Algorithm: GCRA, the token bucket Anthropic documents for its own per-minute limits: a limit of L per
 * minute admits a burst of L, then refills continuously at L per minute (no cliff at minute boundaries).
 * One value per limit: the bucket's level (units used), draining at L per minute. A call of cost c passes
 * when level + c <= L. Exact: retry-after is when the call would pass, reset when the level is back to 0.
 * A call whose cost exceeds the whole limit (a token estimate above the tpm) is charged the limit: it passes
 * once the bucket is full, instead of never.
 *
 * One script per call checks every limit that applies and, only if all pass, charges all of them: a refused
 * call consumes nothing. Time is Redis TIME (one clock for all instances) unless the caller passes `now`
 * (tests). Keys expire when their bucket is full again, so idle keys and accounts leave nothing behind:
 *   rl:{<account>}:<family>:k:<keyId>:r|t   per key, requests|tokens
 *   rl:{<account>}:<family>:a:r|t           per account
 *   rl:{<account>}:video-polls:k:<keyId>    per key, video polls and downloads (checkPoll)
 * The {account} hash tag puts one call's keys in one Redis Cluster slot, as a multi-key script needs there
 * (a key belongs to one account). The keyPrefix must then contain no braces.
 */
import type { Redis } from 'ioredis';
import { FAMILIES } from '../../policies/families.js';
import { GatewayError, type Protocol } from '../../policies/errors.js';
import { keys } from '../store/keys.js';
import { LuaScript } from '../store/redis-script.js';
import {
  buildDecision,
  LIMIT_IDS,
  rateLimitHeaders,
  refusalMessage,
  resolveLimits,
  UNLIMITED,
  WINDOW_MS,
  type Decision,
  type LimitId,
  type LimitsConfig,
} from '../../policies/limits.js';

// `now` in ms (ARGV[ao + 1], or Redis TIME when empty: one clock for all instances) and `window` (ARGV[ao + 2]).
const nowLua = (ao: number) => `local now = tonumber(ARGV[${ao + 1}])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
local window = tonumber(ARGV[${ao + 2}])`;

// The level of KEYS[ko + i] now: what it held, drained at `limit` per `window` since it was written (never below 0).
const levelLua = (ko: number) => `  local level = 0
  local v = redis.call('GET', KEYS[${ko} + i])
  if v then
    local used, at = string.match(v, '^(%S+) (%S+)$')
    level = tonumber(used) - (now - tonumber(at)) * limit / window
    if level < 0 then level = 0 end
  end`;

// Each key holds "<level> <at>": units used (requests or tokens) as measured at `at` (ms); the level drains at
// `limit` per window. This is GCRA's TAT (at + level * window / limit) kept relative, so precision follows the
// limit: a TAT in epoch ms (~1.7e12, a 0.24 us float grid) would lose small charges under a large tpm.
// The `n` limits are KEYS[ko + 1..ko + n]; ARGV[ao + 1..]: now ms ('' = Redis TIME), window ms, then limit and cost
// per key. Decides without writing: sets `allowed`, `levels`, `costs` and `out` (the reply: allowed, refusing
// index (1-based, 0 none), retry-after ms, now, then remaining and reset ms per key, as after the charge).
// `free`, a Lua expression, makes every cost 0 where true: the decision of a call already charged, as it stands.
// The 1e-6 unit slack absorbs floating-point rounding of the drain.
const decideLua = (ko: number, ao: number, free = 'false') => `
${nowLua(ao)}
local levels, costs = {}, {}
local allowed, worst, retry = 1, 0, 0
for i = 1, n do
  local limit = tonumber(ARGV[${ao} + 2 * i + 1])
  local cost = tonumber(ARGV[${ao} + 2 * i + 2])
  if cost > limit then cost = limit end
  if ${free} then cost = 0 end
${levelLua(ko)}
  levels[i], costs[i] = level, cost
  local over = level + cost - limit
  if over > 1e-6 then
    allowed = 0
    local wait = over * window / limit
    if wait > retry then retry = wait; worst = i end
  end
end
-- Rounded up to whole ms, less float noise (a wait of 1.0000000002 ms is 1 ms).
local out = { allowed, worst, math.max(allowed == 1 and 0 or 1, math.ceil(retry - 1e-6)), math.floor(now) }
for i = 1, n do
  local limit = tonumber(ARGV[${ao} + 2 * i + 1])
  local level = levels[i]
  if allowed == 1 then level = level + costs[i] end
  local remaining = math.floor(limit - level + 1e-6)
  if remaining < 0 then remaining = 0 end
  out[3 + 2 * i] = remaining
  out[4 + 2 * i] = math.max(0, math.ceil(level * window / limit - 1e-6))
end`;

// Charge what decideLua decided (run only when it allowed the call).
const chargeLua = (ko: number, ao: number) => `
for i = 1, n do
  if costs[i] > 0 then
    local limit = tonumber(ARGV[${ao} + 2 * i + 1])
    local level = levels[i] + costs[i]
    redis.call('SET', KEYS[${ko} + i], string.format('%.17g %.17g', level, now), 'PX', math.max(1, math.ceil(level * window / limit)))
  end
end`;

// Correct the token limits KEYS[ko + 1..ko + n] by (actual - charged). ARGV[ao + 1..]: now ms ('' = Redis TIME),
// window ms, actual tokens, then limit and estimate per key. A refund never takes a level below empty.
const adjustLua = (ko: number, ao: number) => `
${nowLua(ao)}
local actual = tonumber(ARGV[${ao + 3}])
for i = 1, n do
  local limit = tonumber(ARGV[${ao} + 2 * i + 2])
  local charged = tonumber(ARGV[${ao} + 2 * i + 3])
  if charged > limit then charged = limit end
${levelLua(ko)}
  level = level + actual - charged
  if level > 1e-6 then
    redis.call('SET', KEYS[${ko} + i], string.format('%.17g %.17g', level, now), 'PX', math.max(1, math.ceil(level * window / limit)))
  else
    redis.call('DEL', KEYS[${ko} + i])
  end
end`;

/**
 * The rate-limit steps as parts of another script (wallets.ts folds the check into the hold and the token
 * correction into the settlement): their keys follow the host script's first `ko` keys and their arguments the
 * first `ao`; `n` (the number of limit keys) must be set before each. `charge` runs only when `decide` set
 * `allowed == 1`; the reply tail of `decide` is `out`.
 */
export const rateLimitLua = { decide: decideLua, charge: chargeLua, adjust: adjustLua };

const CHECK_LUA = `
local n = #KEYS
${decideLua(0, 0)}
if allowed == 1 then
${chargeLua(0, 0)}
end
return out
`;

// KEYS: token limits; ARGV as adjustLua's.
const ADJUST_LUA = `
local n = #KEYS
${adjustLua(0, 0)}
return 1
`;

/** What a check is about. */
export interface RateLimitInput {
  keyId: string;
  /** The key's account (its address); two keys of one account share the account limits. */
  account: string;
  /** The model's family (alpha, beta, ...); an unknown one gets the default limits. */
  family: string;
  /** The call's token estimate: input bound + max output (0 where tokens do not apply). */
  tokens: number;
  /** Milliseconds since the epoch to decide at, instead of Redis TIME (tests). */
  now?: number;
}

interface Plan {
  readonly ids: readonly LimitId[];
  readonly limits: readonly number[];
  /** Per limit: per key ('k') or per account ('a'); requests ('r') or tokens ('t'). */
  readonly scopes: readonly ('k' | 'a')[];
  readonly kinds: readonly ('r' | 't')[];
  readonly tokenIdx: readonly number[];
}

/** A call's rate limits, ready to be decided in Redis (RateLimiter.prepare). */
export interface PreparedLimits {
  readonly plan: Plan;
  readonly keys: readonly string[];
  /** now ms ('' = Redis TIME), window ms, then limit and cost per key. */
  readonly args: readonly (string | number)[];
}

/** A token-limit correction, ready for a script (RateLimiter.prepareAdjust). */
export interface PreparedAdjust {
  readonly keys: readonly string[];
  /** now ms ('' = Redis TIME), window ms, actual tokens, then limit and estimate per key. */
  readonly args: readonly (string | number)[];
}

const checkScript = new LuaScript(CHECK_LUA);
const adjustScript = new LuaScript(ADJUST_LUA);

/** Checks and charges the rate limits of calls, shared through Redis. */
export class RateLimiter {
  private readonly plans = new Map<string, Plan | null>();
  private readonly fallback: Plan | null;
  /** The limits of a video poll: requests of the key, then of the account (those that are set). */
  private readonly poll: { readonly ids: readonly LimitId[]; readonly limits: readonly number[] };

  constructor(
    private readonly redis: Redis,
    config: LimitsConfig,
  ) {
    // Plans are built once: the per-call path only looks one up and fills in the ids.
    for (const family of FAMILIES) this.plans.set(family, plan(config, family));
    this.fallback = plan(config, '');
    const polls: [LimitId, number | null][] = [
      ['key_requests', config.video_polls.key.rpm],
      ['account_requests', config.video_polls.account.rpm],
    ];
    const set = polls.filter((p): p is [LimitId, number] => p[1] !== null);
    this.poll = { ids: set.map((p) => p[0]), limits: set.map((p) => p[1]) };
  }

  /**
   * Count one video poll or download against its key's and its account's poll limits (`limits.video_polls`), by the
   * same script as a call's limits: one EVALSHA, which a route sends in the same turn as its job read, so both share a
   * round trip.
   */
  async checkPoll(account: string, keyId: string, now?: number): Promise<Decision> {
    const { ids, limits } = this.poll;
    if (ids.length === 0) return UNLIMITED;
    const bucket = (id: LimitId) =>
      id === 'key_requests' ? keys.videoPollLimit(account, keyId) : keys.videoPollAccountLimit(account);
    const reply = await checkScript.run<number[]>(this.redis, ids.map(bucket), [
      now ?? '',
      WINDOW_MS,
      ...limits.flatMap((l) => [l, 1]),
    ]);
    return buildDecision(ids, limits, reply);
  }

  /** Decide on a call and, if every limit passes, charge it to all of them; a refusal charges nothing. */
  async check(input: RateLimitInput): Promise<Decision> {
    const p = this.prepare(input);
    if (!p) return UNLIMITED;
    const reply = await checkScript.run<number[]>(this.redis, p.keys, p.args);
    return this.decide(p, reply);
  }

  /** The Redis keys and script arguments of a call's limits (null: none apply), for check() or the hold script. */
  prepare(input: RateLimitInput): PreparedLimits | null {
    const p = this.planOf(input.family);
    if (!p) return null;
    const n = p.ids.length;
    const limitKeys: string[] = new Array(n);
    const args: (string | number)[] = new Array(2 + 2 * n);
    const base = keys.rateLimits(input.account, input.family);
    args[0] = input.now ?? '';
    args[1] = WINDOW_MS;
    for (let i = 0; i < n; i++) {
      limitKeys[i] = p.scopes[i] === 'k' ? `${base}k:${input.keyId}:${p.kinds[i]}` : `${base}a:${p.kinds[i]}`;
      args[2 + 2 * i] = p.limits[i];
      args[3 + 2 * i] = p.kinds[i] === 'r' ? 1 : tokenCost(input.tokens);
    }
    return { plan: p, keys: limitKeys, args };
  }

  /** The decision of a script's reply (`out` of rateLimitLua.decide). */
  decide(prepared: PreparedLimits, reply: readonly number[]): Decision {
    return buildDecision(prepared.plan.ids, prepared.plan.limits, reply);
  }

  /**
   * Correct the token limits of an admitted call once its actual usage is known (input + output tokens
   * delivered): a refund when it used less than its estimate, an extra charge when more. `input` is the one
   * given to check(). Skipped when no token limit applies or nothing changes. Never call it for a refused call.
   */
  async adjust(input: RateLimitInput, actualTokens: number): Promise<void> {
    const p = this.prepareAdjust(input, actualTokens);
    if (p) await adjustScript.run(this.redis, p.keys, p.args);
  }

  /**
   * The keys and script arguments of adjust() (null: no token limit applies, or nothing changes), for adjust() or
   * the debit script, which corrects the limits in the same step as the debit, once.
   */
  prepareAdjust(input: RateLimitInput, actualTokens: number): PreparedAdjust | null {
    const p = this.planOf(input.family);
    if (!p || p.tokenIdx.length === 0) return null;
    const estimate = tokenCost(input.tokens);
    const actual = tokenCost(actualTokens);
    // An estimate above the limit was charged as the limit: compare per limit.
    if (p.tokenIdx.every((i) => Math.min(estimate, p.limits[i]) === actual)) return null;
    const base = keys.rateLimits(input.account, input.family);
    const limitKeys = p.tokenIdx.map((i) => (p.scopes[i] === 'k' ? `${base}k:${input.keyId}:t` : `${base}a:t`));
    const args: (string | number)[] = [input.now ?? '', WINDOW_MS, actual];
    for (const i of p.tokenIdx) args.push(p.limits[i]!, estimate);
    return { keys: limitKeys, args };
  }

  private planOf(family: string): Plan | null {
    const p = this.plans.get(family);
    return p === undefined ? this.fallback : p;
  }
}

/** Whole tokens, and never NaN or Infinity (Lua would not read them). */
function tokenCost(tokens: number): number {
  return tokens > 0 ? Math.ceil(Math.min(tokens, 1e15)) : 0;
}

function plan(config: LimitsConfig, family: string): Plan | null {
  const resolved = resolveLimits(config, family);
  const ids: LimitId[] = [];
  const limits: number[] = [];
  for (const id of LIMIT_IDS) {
    const l = resolved[id];
    if (l !== null) {
      ids.push(id);
      limits.push(l);
    }
  }
  if (ids.length === 0) return null;
  return {
    ids,
    limits,
    scopes: ids.map((id) => (id.startsWith('key') ? 'k' : 'a')),
    kinds: ids.map((id) => (id.endsWith('requests') ? 'r' : 't')),
    tokenIdx: ids.flatMap((id, i) => (id.endsWith('tokens') ? [i] : [])),
  };
}

/**
 * The 429 of a refused decision, in the caller's protocol: message naming the limit (`what`, for a limit other than
 * the four), and its headers.
 */
export function rateLimitedError(decision: Decision, protocol: Protocol, nowMs?: number, what?: string): GatewayError {
  return new GatewayError('rate_limited', {
    message: refusalMessage(decision, what),
    headers: rateLimitHeaders(decision, protocol, nowMs),
  });
}
