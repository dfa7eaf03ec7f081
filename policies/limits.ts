/**
 * Rate limits (pure part): the `limits` config section, the limits that apply to a call, and the response
 * headers of a decision. plugins/billing/rate-limit.ts counts calls in Redis.
 *
 * Four limits per call: requests and tokens per minute, per API key and per account, each configurable per
 * model family. A number is the limit, null is unlimited. In a family entry an absent number inherits
 * `default`. Counters are per family: `default` is what each family gets, not a total across families.
 *
 * Headers (sent on every limited call, and on its 429):
 * - every endpoint: OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, reset as a duration
 *   ("1s", "6m0s", "12ms"), per OpenAI's rate-limits guide; sent on every 429 too.
 * - /v1/messages and count_tokens additionally: Anthropic's `anthropic-ratelimit-{requests,tokens}-{limit,
 *   remaining,reset}`, reset as an RFC 3339 time (Anthropic's rate-limits page); its SDK and Claude Code read
 *   them. The -input-tokens/-output-tokens variants are not sent: we count input and output together.
 * - on a refusal: `retry-after` in whole seconds, rounded up, at least 1 (RFC 9110), and `retry-after-ms`,
 *   which both official SDKs read first, so their automatic retry lands when the call can pass.
 * When key and account limits both apply, each header family reports the tighter of the two.
 *
 * Video polls and downloads (GET /v1/videos/{id}[/content], unknown ids included) count against a bucket of their
 * own per key, `video_polls.key.rpm`, answered with the same 429 and headers; a download also counts as a request
 * of its model's family.
 */
import { z } from 'zod';
import { FAMILIES } from './families.js';
import type { Protocol } from './errors.js';

/** The window of every limit: "per minute". */
export const WINDOW_MS = 60_000;

/** The four limits of a call, in the order they are checked. */
export const LIMIT_IDS = ['key_requests', 'key_tokens', 'account_requests', 'account_tokens'] as const;
/** One limit. */
export type LimitId = (typeof LIMIT_IDS)[number];

const limit = z.number().int().positive().max(1e12).nullable();

// Built-in defaults: generous requests, unlimited tokens (the wallet already bounds spending).
const DEFAULT_KEY_RPM = 3_000;
const DEFAULT_ACCOUNT_RPM = 6_000;
// Polls need no funds, so only this bounds them. 6,000 a minute follows 100 jobs at once at the 1 s interval of the
// Python SDK's create_and_poll (500 at 5 s), bursts included; a poll costs the gateway one Redis round trip (~0.07 ms
// of CPU, README "Videos"), so a key at its limit costs about 1% of a core, where unlimited polls reached 2,340/s.
const DEFAULT_KEY_POLL_RPM = 6_000;
/** An account's polls, whatever its keys: two keys at their limit, so more keys do not multiply what one account may poll. */
const DEFAULT_ACCOUNT_POLL_RPM = 12_000;

const defaultPair = (rpm: number | null) => z.strictObject({ rpm: limit.default(rpm), tpm: limit.default(null) });
const familyPair = z.strictObject({ rpm: limit.optional(), tpm: limit.optional() });
const familyScope = z.strictObject({ key: familyPair.optional(), account: familyPair.optional() });

/** The `limits` config section. */
export const limitsConfigSchema = z.strictObject({
  default: z
    .strictObject({
      key: defaultPair(DEFAULT_KEY_RPM).prefault({}),
      account: defaultPair(DEFAULT_ACCOUNT_RPM).prefault({}),
    })
    .prefault({}),
  families: z.partialRecord(z.enum(FAMILIES), familyScope).prefault({}),
  video_polls: z
    .strictObject({
      key: z.strictObject({ rpm: limit.default(DEFAULT_KEY_POLL_RPM) }).prefault({}),
      account: z.strictObject({ rpm: limit.default(DEFAULT_ACCOUNT_POLL_RPM) }).prefault({}),
    })
    .prefault({}),
});

/** The `limits` section as written. */
export type LimitsConfigInput = z.input<typeof limitsConfigSchema>;
/** The `limits` section, validated. */
export type LimitsConfig = z.output<typeof limitsConfigSchema>;

/** The limit of each of the four, null = unlimited. */
export type ResolvedLimits = Readonly<Record<LimitId, number | null>>;

/** The limits that apply to a call on `family` (an unknown family gets `default`). */
export function resolveLimits(config: LimitsConfig, family: string): ResolvedLimits {
  const d = config.default;
  const f = (config.families as Record<string, z.output<typeof familyScope> | undefined>)[family];
  const pick = (own: number | null | undefined, inherited: number | null) => (own === undefined ? inherited : own);
  return {
    key_requests: pick(f?.key?.rpm, d.key.rpm),
    key_tokens: pick(f?.key?.tpm, d.key.tpm),
    account_requests: pick(f?.account?.rpm, d.account.rpm),
    account_tokens: pick(f?.account?.tpm, d.account.tpm),
  };
}

/** The state of one limit after a decision. */
export interface LimitState {
  readonly limit: number;
  /** Unit-cost calls (requests) or tokens that would still pass now. */
  readonly remaining: number;
  /** Milliseconds until the limit is fully replenished. */
  readonly resetMs: number;
}

/** The outcome of a rate-limit check. */
export interface Decision {
  readonly allowed: boolean;
  /** The limit that refused the call; if allowed, the one closest to refusing; null when no limit applies. */
  readonly which: LimitId | null;
  /** State of `which` (Infinity and 0 when no limit applies). */
  readonly limit: number;
  readonly remaining: number;
  readonly resetMs: number;
  /** Milliseconds until this call would pass (0 when allowed). */
  readonly retryAfterMs: number;
  /** The tighter request limit (key or account), null when none applies; same for tokens. */
  readonly requests: LimitState | null;
  readonly tokens: LimitState | null;
}

/** The decision when no limit applies to a call (Redis is not asked). */
export const UNLIMITED: Decision = Object.freeze({
  allowed: true,
  which: null,
  limit: Infinity,
  remaining: Infinity,
  resetMs: 0,
  retryAfterMs: 0,
  requests: null,
  tokens: null,
});

/**
 * A Decision from the rate-limit script's reply: [allowed, refusing index (1-based, 0 none), retry-after ms,
 * now, then remaining and reset ms per limit], the limits being `ids` with `limits`, in that order.
 */
export function buildDecision(ids: readonly LimitId[], limits: readonly number[], reply: readonly number[]): Decision {
  const allowed = reply[0] === 1;
  const states: LimitState[] = [];
  for (let i = 0; i < ids.length; i++) {
    states.push({ limit: limits[i], remaining: reply[4 + 2 * i], resetMs: reply[5 + 2 * i] });
  }
  let w = allowed ? -1 : reply[1] - 1;
  if (w < 0) {
    // Closest to refusing: least remaining as a share of the limit; the key wins ties (checked first).
    for (let i = 0; i < states.length; i++) {
      if (w < 0 || states[i].remaining / states[i].limit < states[w].remaining / states[w].limit) w = i;
    }
  }
  const tighter = (kind: 'requests' | 'tokens'): LimitState | null => {
    let best = -1;
    for (let i = 0; i < ids.length; i++) {
      if (!ids[i].endsWith(kind)) continue;
      if (i === w) return states[i];
      if (best < 0 || states[i].remaining < states[best].remaining) best = i;
    }
    return best < 0 ? null : states[best];
  };
  if (w < 0) return UNLIMITED;
  return {
    allowed,
    which: ids[w],
    limit: states[w].limit,
    remaining: states[w].remaining,
    resetMs: states[w].resetMs,
    retryAfterMs: allowed ? 0 : reply[2],
    requests: tighter('requests'),
    tokens: tighter('tokens'),
  };
}

/** A duration as OpenAI's reset headers write it (Go's time.Duration style): "0s", "12ms", "1.5s", "6m0s". */
export function formatResetDuration(ms: number): string {
  const total = Math.max(0, Math.ceil(ms));
  if (total === 0) return '0s';
  if (total < 1000) return `${total}ms`;
  const h = Math.floor(total / 3_600_000);
  const m = Math.floor((total % 3_600_000) / 60_000);
  const s = `${(total % 60_000) / 1000}s`;
  if (h > 0) return `${h}h${m}m${s}`;
  return m > 0 ? `${m}m${s}` : s;
}

/** Retry-After in whole seconds: rounded up, at least 1. */
export function retryAfterSeconds(ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000));
}

/** RFC 3339 time `ms` from `nowMs`, rounded up to the second (Anthropic's reset headers). */
function resetTime(nowMs: number, ms: number): string {
  return new Date(Math.ceil((nowMs + ms) / 1000) * 1000).toISOString().replace('.000Z', 'Z');
}

/** The rate-limit response headers of a decision for a caller of `protocol` (see the file comment). */
export function rateLimitHeaders(
  decision: Decision,
  protocol: Protocol,
  nowMs: number = Date.now(),
): Record<string, string> {
  const h: Record<string, string> = {};
  const r = decision.requests;
  const t = decision.tokens;
  if (r) {
    h['x-ratelimit-limit-requests'] = String(r.limit);
    h['x-ratelimit-remaining-requests'] = String(r.remaining);
    h['x-ratelimit-reset-requests'] = formatResetDuration(r.resetMs);
  }
  if (t) {
    h['x-ratelimit-limit-tokens'] = String(t.limit);
    h['x-ratelimit-remaining-tokens'] = String(t.remaining);
    h['x-ratelimit-reset-tokens'] = formatResetDuration(t.resetMs);
  }
  if (protocol === 'anthropic') {
    if (r) {
      h['anthropic-ratelimit-requests-limit'] = String(r.limit);
      h['anthropic-ratelimit-requests-remaining'] = String(r.remaining);
      h['anthropic-ratelimit-requests-reset'] = resetTime(nowMs, r.resetMs);
    }
    if (t) {
      h['anthropic-ratelimit-tokens-limit'] = String(t.limit);
      h['anthropic-ratelimit-tokens-remaining'] = String(t.remaining);
      h['anthropic-ratelimit-tokens-reset'] = resetTime(nowMs, t.resetMs);
    }
  }
  if (!decision.allowed) {
    h['retry-after'] = String(retryAfterSeconds(decision.retryAfterMs));
    h['retry-after-ms'] = String(Math.max(1, Math.ceil(decision.retryAfterMs)));
  }
  return h;
}

const WHAT: Record<LimitId, string> = {
  key_requests: 'requests per minute for this API key',
  key_tokens: 'tokens per minute for this API key',
  account_requests: 'requests per minute for this account',
  account_tokens: 'tokens per minute for this account',
};

/**
 * The caller-facing message of a refusal (safe to show: it names only the caller's own limit); `what` names a limit
 * other than the four (video polls).
 */
export function refusalMessage(decision: Decision, what?: string): string {
  if (!decision.which) return 'Rate limit reached.';
  return `Rate limit reached: ${what ?? WHAT[decision.which]} (limit ${decision.limit}); retry after ${retryAfterSeconds(decision.retryAfterMs)} s.`;
}
