/**
 * What a key may do, set by its account's owner (CLI `key create|update`, the dashboard's Keys page): a spend limit
 * with a reset, a model allow-list, an expiry.
 *
 * - The spend limit lives in the key's spend hash (keys.keySpend), beside what the key has held and spent: the hold
 *   script (billing/wallets.ts HOLD) reads the limit and places the hold in one step, so no number of concurrent calls
 *   takes a key past it (what is held counts), and a change of the limit is seen by the next hold. Spend is kept for
 *   every key, limited or not: `GET /v1/key` and the Keys page show it.
 * - A window starts at 00:00 UTC: every day (`daily`), every Monday (`weekly`), on the 1st of every month (`monthly`),
 *   or never (`never`: the limit is on all the key's spend). What the window has spent is set to 0 at its start; calls
 *   still held then count in the new window, and a call counts in the window its debit lands in. Changing the reset
 *   starts the window it names.
 * - The allow-list (ids, or `prefix-*` patterns) and the expiry are on the key's hash (keys.apiKey) and travel with its
 *   identity (accounts.ts lookupKey): a change is announced like a revocation, so every instance sees it at once.
 */
import type { Redis } from 'ioredis';
import { keys } from '../store/keys.js';
import { formatUsd, parseUsd } from '../../pricing/money.js';

/** When a spend limit's window starts again. */
export const RESETS = ['daily', 'weekly', 'monthly', 'never'] as const;
/** One reset. */
export type Reset = (typeof RESETS)[number];

/** The most entries an allow-list holds. */
export const MODELS_MAX = 64;
const MODEL_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}\*?$/;
/** The largest limit: what the scripts take exactly (wallets.ts MAX_AMOUNT). */
const LIMIT_MAX = 9_007_199_254_740_991n;
const DAY_MS = 86_400_000;

/** A key's limits as stored; null: none. */
export interface KeyLimits {
  /** Atomic units the key may spend per window. */
  limit: bigint | null;
  reset: Reset;
  /** Model ids and `prefix-*` patterns the key may call. */
  models: readonly string[] | null;
  /** Ms since the epoch from which the key answers 401 key_expired. */
  expiresAt: number | null;
}

/** A change of limits: a field left out keeps its value, null removes it. */
export interface KeyLimitsChange {
  limit?: bigint | null;
  reset?: Reset;
  models?: readonly string[] | null;
  expiresAt?: number | null;
}

/** A spend limit in USD ("25", "2.5"), or null for "none"; throws a readable error. */
export function parseLimit(s: string): bigint | null {
  if (s === 'none') return null;
  let atomic: bigint;
  try {
    atomic = parseUsd(s);
  } catch (err) {
    throw new Error(`a spend limit is a USD amount with at most 6 decimals, or "none" (${(err as Error).message})`);
  }
  if (atomic <= 0n) throw new Error('a spend limit is above 0 (revoke a key that must spend nothing)');
  if (atomic > LIMIT_MAX) throw new Error(`a spend limit is at most ${formatUsd(LIMIT_MAX)} USD`);
  return atomic;
}

/** A reset name; throws a readable error. */
export function parseReset(s: string): Reset {
  if (!(RESETS as readonly string[]).includes(s)) throw new Error(`a reset is one of ${RESETS.join(', ')}`);
  return s as Reset;
}

/** An allow-list given as "id,prefix-*" (or an array of entries), or null for "none" (every model). */
export function parseModels(s: string | readonly string[]): readonly string[] | null {
  if (s === 'none') return null;
  const entries = (typeof s === 'string' ? s.split(',') : s).map((e) => e.trim()).filter((e) => e !== '');
  if (entries.length === 0) throw new Error('an allow-list names at least one model, or is "none"');
  if (entries.length > MODELS_MAX) throw new Error(`an allow-list has at most ${MODELS_MAX} entries`);
  for (const e of entries) {
    if (!MODEL_PATTERN.test(e))
      throw new Error(`${JSON.stringify(e.slice(0, 100))} is not a model id or a "prefix-*" pattern`);
  }
  return [...new Set(entries)];
}

/** An expiry as an ISO 8601 time with its zone ("2027-01-01T00:00:00Z"), or null for "never". */
export function parseExpiry(s: string, now = Date.now()): number | null {
  if (s === 'never') return null;
  // A time without a zone would be read in the host's zone: an expiry must mean the same everywhere.
  if (!/^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2}))?$/.test(s))
    throw new Error(
      'an expiry is an ISO 8601 date or time with its zone (2027-01-01, 2027-01-01T12:00:00Z), or "never"',
    );
  const at = Date.parse(s.length === 10 ? `${s}T00:00:00Z` : s);
  // Date.parse takes 2027-02-30 for 2027-03-02: the day must be the one written (in UTC, or with its zone's offset).
  const day = Number.isFinite(at) ? new Date(at - zoneOffsetMs(s)).toISOString().slice(0, 10) : '';
  if (day !== s.slice(0, 10)) throw new Error(`${s} is not a valid date`);
  if (at <= now) throw new Error(`the expiry ${new Date(at).toISOString()} is already past`);
  return at;
}

/** The offset of a time's zone ("+01:00": 3,600,000; "Z" or none: 0). */
function zoneOffsetMs(s: string): number {
  const m = /([+-])(\d{2}):(\d{2})$/.exec(s.length > 10 ? s : '');
  return m ? (m[1] === '-' ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3])) * 60_000 : 0;
}

/** Whether `models` (an allow-list; null: every model) lets a key call `id`. */
export function modelAllowed(models: readonly string[] | null | undefined, id: string): boolean {
  if (!models) return true;
  for (const m of models) {
    if (m.endsWith('*') ? id.startsWith(m.slice(0, -1)) : m === id) return true;
  }
  return false;
}

/** The window of `reset` that holds `now` (ms): its start and the start of the next (null: never resets). */
export function keyWindow(reset: Reset, now: number): { start: number; end: number | null } {
  const day = Math.floor(now / DAY_MS);
  switch (reset) {
    case 'daily':
      return { start: day * DAY_MS, end: (day + 1) * DAY_MS };
    case 'weekly': {
      // Day 0 (1970-01-01) was a Thursday: a week starts on Monday.
      const monday = day - ((((day + 3) % 7) + 7) % 7);
      return { start: monday * DAY_MS, end: (monday + 7) * DAY_MS };
    }
    case 'monthly': {
      const d = new Date(now);
      return {
        start: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1),
        end: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1),
      };
    }
    case 'never':
      return { start: 0, end: null };
  }
}

/**
 * keyWindow's start in Lua, as `windowStart(reset, now)`: the same days, from Redis's clock. The month's first day
 * comes from the civil calendar's day count (days from 0000-03-01 in 400-year eras), in whole numbers only.
 */
export const windowStartLua = `
local function windowStart(reset, now)
  local day = math.floor(now / ${DAY_MS})
  if reset == 'daily' then return day * ${DAY_MS} end
  if reset == 'weekly' then return (day - (day + 3) % 7) * ${DAY_MS} end
  if reset == 'monthly' then
    local z = day + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    local dom = doy - math.floor((153 * mp + 2) / 5) + 1
    return (day - dom + 1) * ${DAY_MS}
  end
  return 0
end`;

/** A key's spend as its hash holds it, read at `now` (Redis's clock): the window's part is 0 once the window moved. */
export interface KeySpend {
  limit: bigint | null;
  reset: Reset;
  /** Spent in the current window (debits, pending or settled). */
  window: bigint;
  /** Held now by the key's running calls. */
  held: bigint;
  /** Spent in all. */
  total: bigint;
  windowStart: number;
  /** When the window starts again (null: never). */
  resetsAt: number | null;
  /** What the key may still hold: limit - window - held, never below 0; null without a limit. */
  left: bigint | null;
}

function whole(s: string | null | undefined): bigint {
  return s && /^\d+$/.test(s) ? BigInt(s) : 0n;
}

/** A key's spend, from its hash's fields (l r w s h t) at `now`. */
export function spendOf(fields: (string | null)[], now: number): KeySpend {
  const [l, r, w, s, h, t] = fields;
  const reset = r && (RESETS as readonly string[]).includes(r) ? (r as Reset) : 'never';
  const { start, end } = keyWindow(reset, now);
  const limit = l ? whole(l) : null;
  const window = whole(w) === BigInt(start) ? whole(s) : 0n;
  const held = whole(h);
  const left = limit === null ? null : limit - window - held < 0n ? 0n : limit - window - held;
  return { limit, reset, window, held, total: whole(t), windowStart: start, resetsAt: end, left };
}

/** The key-spend hash fields spendOf reads, in its order. */
export const SPEND_FIELDS = ['l', 'r', 'w', 's', 'h', 't'] as const;

/** Read a key's spend at Redis's clock. */
export async function readKeySpend(redis: Redis, keyId: string): Promise<KeySpend> {
  const [fields, [sec, us]] = await Promise.all([redis.hmget(keys.keySpend(keyId), ...SPEND_FIELDS), redis.time()]);
  return spendOf(fields, Number(sec) * 1000 + Math.floor(Number(us) / 1000));
}

/** An allow-list as the key's hash stores it (comma-separated), or null. */
export function storedModels(s: string | null | undefined): readonly string[] | null {
  return s ? s.split(',') : null;
}

/** An expiry as the key's hash stores it (ms), or null. */
export function storedExpiry(s: string | null | undefined): number | null {
  return s && /^\d+$/.test(s) ? Number(s) : null;
}

/**
 * Change a key's limits (fields left out keep their value) and tell every instance, as a revocation does. With
 * `account`, only a key of that account: another's answers as unknown. Throws `no key <id>`.
 */
export async function setKeyLimits(
  redis: Redis,
  id: string,
  change: KeyLimitsChange,
  opts: { account?: string } = {},
): Promise<void> {
  const hash = await redis.get(keys.apiKeyId(id));
  if (!hash) throw new Error(`no key ${id}`);
  if (opts.account !== undefined && !(await redis.sismember(keys.accountKeys(opts.account.toLowerCase()), id)))
    throw new Error(`no key ${id}`);
  const m = redis.multi();
  if (change.models !== undefined) {
    if (change.models === null) m.hdel(keys.apiKey(hash), 'models');
    else m.hset(keys.apiKey(hash), 'models', change.models.join(','));
  }
  if (change.expiresAt !== undefined) {
    if (change.expiresAt === null) m.hdel(keys.apiKey(hash), 'expires_at');
    else m.hset(keys.apiKey(hash), 'expires_at', String(change.expiresAt));
  }
  if (change.limit !== undefined) {
    if (change.limit === null) m.hdel(keys.keySpend(id), 'l');
    else m.hset(keys.keySpend(id), 'l', change.limit.toString());
  }
  if (change.reset !== undefined) m.hset(keys.keySpend(id), 'r', change.reset);
  await m.exec();
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  await redis.publish(keys.invalidateChannel(prefix), keys.apiKey(hash));
}

/** A key's limits and spend as the CLI's `--json`, the dashboard and `GET /v1/key` show them (times in ms). */
export interface KeyLimitsView {
  /** The allow-list; null: every model. */
  models: readonly string[] | null;
  expires_at: number | null;
  /** The spend limit; null: none. */
  limit: {
    amount: string;
    amount_atomic: string;
    reset: Reset;
    /** When the window starts again; null for `never`. */
    resets_at: number | null;
    /** What calls may still hold: the limit less the window's spend and the running calls' holds. */
    left: string;
    left_atomic: string;
  } | null;
  spent: {
    /** In the current window (for a key without a limit, or `never`: in all). */
    window: string;
    window_atomic: string;
    /** In all. */
    total: string;
    total_atomic: string;
    /** Held now by running calls. */
    held: string;
    held_atomic: string;
  };
}

/** The view of a key's limits and spend. */
export function limitsView(models: readonly string[] | null, expiresAt: number | null, s: KeySpend): KeyLimitsView {
  return {
    models,
    expires_at: expiresAt,
    limit:
      s.limit === null
        ? null
        : {
            amount: formatUsd(s.limit),
            amount_atomic: s.limit.toString(),
            reset: s.reset,
            resets_at: s.resetsAt,
            left: formatUsd(s.left!),
            left_atomic: s.left!.toString(),
          },
    spent: {
      window: formatUsd(s.window),
      window_atomic: s.window.toString(),
      total: formatUsd(s.total),
      total_atomic: s.total.toString(),
      held: formatUsd(s.held),
      held_atomic: s.held.toString(),
    },
  };
}

/** How a limit reads in a message: "10.000000 USD per day", "… in all". */
export function describeLimit(limit: bigint, reset: Reset): string {
  const per = { daily: 'per day', weekly: 'per week', monthly: 'per month', never: 'in all' }[reset];
  return `${formatUsd(limit)} USD ${per}`;
}
