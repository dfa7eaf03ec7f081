// Billable usage of one call, and converters from the providers' usage objects.
// Counts are disjoint (DESIGN.md operator contract): each token is in exactly one bucket, priced at one rate.

/** Billable units of one call; every count is a non-negative safe integer and no token is in two buckets. */
export interface Usage {
  /** Tokens priced at the input rate only (not cache reads, not cache writes). */
  readonly input_tokens: number;
  readonly output_tokens: number;
  readonly cache_read_tokens: number;
  /** Tokens written to the 5-minute cache (1.25x input rate). */
  readonly cache_write_5m_tokens: number;
  /** Tokens written to the 1-hour cache (2x input rate). */
  readonly cache_write_1h_tokens: number;
  /** Delivered images. */
  readonly images: number;
  /** Duration of the delivered clip; 0 when none was delivered. */
  readonly video_seconds: number;
}

/** The cache-write tier a request can trigger: none, up to 5-minute, or up to 1-hour entries. */
export type CacheWriteTier = 'none' | '5m' | '1h';

/** Names of the Usage fields, in the order of the operator contract. */
export const USAGE_FIELDS = [
  'input_tokens',
  'output_tokens',
  'cache_read_tokens',
  'cache_write_5m_tokens',
  'cache_write_1h_tokens',
  'images',
  'video_seconds',
] as const satisfies readonly (keyof Usage)[];

/** A call that consumed and delivered nothing. */
export const ZERO_USAGE: Usage = Object.freeze(makeUsage({}));

/** Usage fields of an Anthropic Messages response (`usage`, or merged from message_start/message_delta). */
export interface AnthropicUsageLike {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_creation?: {
    ephemeral_5m_input_tokens?: number | null;
    ephemeral_1h_input_tokens?: number | null;
  } | null;
}

/** Usage fields of an OpenAI chat completion (`usage`, or the final usage chunk of a stream). */
export interface OpenAIUsageLike {
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
}

/** Reads one count: missing or null is 0; anything but a non-negative safe integer throws RangeError naming the field. */
function count(value: unknown, field: string): number {
  if (value === undefined || value === null) return 0;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`usage.${field} must be a non-negative integer, got ${JSON.stringify(value)}`);
  }
  return value === 0 ? 0 : value; // -0 -> 0
}

/** Builds a frozen Usage from partial counts (missing = 0); throws RangeError on negative, fractional or unsafe counts. */
export function makeUsage(counts: Partial<Record<keyof Usage, number | null>>): Usage {
  const u = {} as Record<keyof Usage, number>;
  for (const f of USAGE_FIELDS) u[f] = count(counts[f], f);
  return Object.freeze(u);
}

/**
 * Converts an Anthropic Messages usage object.
 * input_tokens, cache_read_input_tokens and cache_creation_input_tokens are already disjoint in that API
 * (input_tokens counts only the tokens after the last cache breakpoint). cache_creation splits the writes by TTL.
 * When the split is absent (older API versions, some proxies), the unsplit writes are billed at the highest tier
 * the request could trigger, `requestCacheWrite`: '1h' (the default) never undercharges a request that asked for
 * 1-hour entries, and passing the tier the request was held at keeps the price within that hold. 'none' and '5m'
 * bill unsplit writes at 5m, the API's default TTL.
 */
export function fromAnthropicUsage(
  u: AnthropicUsageLike | null | undefined,
  requestCacheWrite: CacheWriteTier = '1h',
): Usage {
  const src = u ?? {};
  const total = count(src.cache_creation_input_tokens, 'cache_creation_input_tokens');
  const split = src.cache_creation ?? null;
  let w5m = count(split?.ephemeral_5m_input_tokens, 'cache_creation.ephemeral_5m_input_tokens');
  let w1h = count(split?.ephemeral_1h_input_tokens, 'cache_creation.ephemeral_1h_input_tokens');
  // Creation tokens the split does not account for (all of them when the split is absent).
  const unsplit = Math.max(0, total - w5m - w1h);
  if (requestCacheWrite === '1h') w1h += unsplit;
  else w5m += unsplit;
  return makeUsage({
    input_tokens: count(src.input_tokens, 'input_tokens'),
    output_tokens: count(src.output_tokens, 'output_tokens'),
    cache_read_tokens: count(src.cache_read_input_tokens, 'cache_read_input_tokens'),
    cache_write_5m_tokens: w5m,
    cache_write_1h_tokens: w1h,
  });
}

/**
 * Converts an OpenAI chat-completions usage object.
 * prompt_tokens includes prompt_tokens_details.cached_tokens, so input = prompt - cached; completion_tokens
 * already includes reasoning tokens (completion_tokens_details is a breakdown, not an addition).
 * Cache writes carry no surcharge in that API, so they stay input tokens. A cached count above prompt_tokens
 * (an inconsistent upstream) is capped at prompt_tokens: the billed input side never exceeds what was reported.
 */
export function fromOpenAIUsage(u: OpenAIUsageLike | null | undefined): Usage {
  const src = u ?? {};
  const prompt = count(src.prompt_tokens, 'prompt_tokens');
  const cached = Math.min(
    prompt,
    count(src.prompt_tokens_details?.cached_tokens, 'prompt_tokens_details.cached_tokens'),
  );
  return makeUsage({
    input_tokens: prompt - cached,
    cache_read_tokens: cached,
    output_tokens: count(src.completion_tokens, 'completion_tokens'),
  });
}
