// Worst-case prices: what a call is held at before it runs (SPEC.md "Funds gate"; DESIGN.md "Money").
//
// Why the worst case is never below the actual price (priceCall), for any usage consistent with the bounds:
// - Text. A usage is consistent with { inputTokensBound, maxOutputTokens, cacheWrite } when
//   input_tokens + cache_read_tokens + cache_write_5m_tokens + cache_write_1h_tokens <= inputTokensBound,
//   output_tokens <= maxOutputTokens, cache_write_5m_tokens = 0 when cacheWrite is 'none', and
//   cache_write_1h_tokens = 0 unless cacheWrite is '1h'. priceCall is ceil(N / D) with D = 4 * 1,000,000 and
//   N = sum over input-side tokens of the quarter rate of its bucket (4*input, 4*cache_read, 5*input, 8*input)
//   + 4 * output_tokens * output. The worst case uses N' = inputTokensBound * Q + 4 * maxOutputTokens * output,
//   where Q is the maximum of the quarter rates of every bucket the request can bill. Each input-side token
//   contributes at most Q, there are at most inputTokensBound of them, and output_tokens <= maxOutputTokens,
//   so N <= N' (all rates are >= 0). ceil is monotone, so ceil(N / D) <= ceil(N' / D). Q takes the maximum rather
//   than assuming input >= cache_read, so an operator price table with an odd cache-read rate stays covered.
// - Images: usage.images <= n at one size, price = images * per-image rate <= n * rate.
// - Video: the delivered clip is the requested duration or nothing (a failed job is free), so the clip price
//   of the requested duration bounds it.
// The caller keeps its side of the bargain: inputTokensBound counts every input-side token (a tokenizer upper
// bound), maxOutputTokens is the clamped max_tokens, and cacheWrite is the highest TTL the request's cache_control
// can trigger; fromAnthropicUsage must be given that same tier for unsplit cache writes.
import { ceilDiv } from './money.js';
import { QUARTERS, TEXT_DENOMINATOR } from './cost.js';
import { type ImageSize, type PriceTable, lookupRates } from './table.js';
import type { CacheWriteTier } from './usage.js';

/** Bounds of a text request known before it runs. */
export interface TextBounds {
  /** Upper bound on all input-side tokens (input + cache reads + cache writes). */
  readonly inputTokensBound: number;
  /** The (clamped) max_tokens of the request. */
  readonly maxOutputTokens: number;
  /** Highest cache-write tier the request can trigger. */
  readonly cacheWrite: CacheWriteTier;
}

function bound(value: number, name: string): bigint {
  if (!Number.isSafeInteger(value) || value < 0)
    throw new RangeError(`${name} must be a non-negative integer, got ${value}`);
  return BigInt(value);
}

function max(...xs: bigint[]): bigint {
  return xs.reduce((a, b) => (b > a ? b : a));
}

/** Worst-case price of a text call in atomic units: every input-side token at the highest rate it could be billed at, plus max output; rounded up once. */
export function worstCaseText(table: PriceTable, modelId: string, bounds: TextBounds): bigint {
  const r = lookupRates(table, modelId);
  if (r.kind !== 'text') throw new Error(`worstCaseText: ${modelId} is priced as ${r.kind}`);
  const inputBound = bound(bounds.inputTokensBound, 'inputTokensBound');
  const outputBound = bound(bounds.maxOutputTokens, 'maxOutputTokens');
  const quarterRates = [QUARTERS.base * r.input, QUARTERS.base * r.cacheRead];
  // '1h' requests may also write 5m entries; 8/4 > 5/4 so the 1h rate covers both.
  if (bounds.cacheWrite === '5m') quarterRates.push(QUARTERS.cacheWrite5m * r.input);
  else if (bounds.cacheWrite === '1h') quarterRates.push(QUARTERS.cacheWrite1h * r.input);
  else if (bounds.cacheWrite !== 'none') throw new RangeError(`unknown cacheWrite tier ${String(bounds.cacheWrite)}`);
  const numerator = inputBound * max(...quarterRates) + QUARTERS.base * outputBound * r.output;
  return ceilDiv(numerator, TEXT_DENOMINATOR);
}

/** Worst-case price of n images of one size, in atomic units. */
export function worstCaseImage(table: PriceTable, modelId: string, size: ImageSize, n: number): bigint {
  const r = lookupRates(table, modelId);
  if (r.kind !== 'image') throw new Error(`worstCaseImage: ${modelId} is priced as ${r.kind}`);
  if (!Object.hasOwn(r.perImage, size)) throw new RangeError(`worstCaseImage: unknown size ${String(size)}`);
  return bound(n, 'n') * r.perImage[size];
}

/** Worst-case price of one clip of the requested duration, in atomic units; a duration without a price throws. */
export function worstCaseVideo(table: PriceTable, modelId: string, seconds: number): bigint {
  const r = lookupRates(table, modelId);
  if (r.kind !== 'video') throw new Error(`worstCaseVideo: ${modelId} is priced as ${r.kind}`);
  const key = String(seconds);
  if (!Object.hasOwn(r.perClip, key)) throw new RangeError(`no price for a ${key}s clip of ${modelId}`);
  return r.perClip[key]!;
}
