// The actual price of one call: exact, one rounding per call, upward (DESIGN.md "Money").
import { ceilDiv } from './money.js';
import { type ImageSize, type PriceTable, type TextRates, RATE_TOKENS, lookupRates } from './table.js';
import { type Usage, makeUsage } from './usage.js';

/**
 * Every text term is an integer multiple of rate / (4 * RATE_TOKENS): cache writes cost 1.25x (5/4) and 2x (8/4)
 * the input rate (SPEC.md "Billing units"), so quarters make all terms integers over one common denominator.
 */
export const TEXT_DENOMINATOR = 4n * RATE_TOKENS;

/** Quarters of a rate, per tier: input, output and cache reads 4/4, 5-minute cache writes 5/4, 1-hour 8/4. */
export const QUARTERS = { base: 4n, cacheWrite5m: 5n, cacheWrite1h: 8n } as const;

/** What priceCall needs beyond Usage: the size the delivered images were rendered at. */
export interface PriceCallOptions {
  readonly imageSize?: ImageSize;
}

/** Numerator over TEXT_DENOMINATOR of a text usage (exact, before rounding). */
export function textNumerator(r: TextRates, u: Usage): bigint {
  return (
    QUARTERS.base *
      (BigInt(u.input_tokens) * r.input +
        BigInt(u.output_tokens) * r.output +
        BigInt(u.cache_read_tokens) * r.cacheRead) +
    QUARTERS.cacheWrite5m * BigInt(u.cache_write_5m_tokens) * r.input +
    QUARTERS.cacheWrite1h * BigInt(u.cache_write_1h_tokens) * r.input
  );
}

function assertOnly(modelId: string, u: Usage, allowed: readonly (keyof Usage)[]): void {
  for (const [field, n] of Object.entries(u)) {
    if (n !== 0 && !allowed.includes(field as keyof Usage)) {
      throw new Error(`usage of ${modelId} has ${field}=${n}, which its kind does not bill`);
    }
  }
}

const TEXT_FIELDS = [
  'input_tokens',
  'output_tokens',
  'cache_read_tokens',
  'cache_write_5m_tokens',
  'cache_write_1h_tokens',
] as const;

/**
 * The exact actual price of a call in atomic units, rounded up once. Text: every token term over TEXT_DENOMINATOR,
 * one ceiling. Images: count x the per-image price of `options.imageSize`. Video: the price of one clip of
 * `video_seconds` (0 = nothing delivered = free). An unknown model, a duration the model has no price for, or
 * units the model's kind does not bill throw: they are bugs upstream of pricing.
 */
export function priceCall(table: PriceTable, modelId: string, usage: Usage, options: PriceCallOptions = {}): bigint {
  const r = lookupRates(table, modelId);
  const u = makeUsage(usage); // rejects negative / fractional counts before they reach BigInt
  switch (r.kind) {
    case 'text':
      assertOnly(modelId, u, TEXT_FIELDS);
      return ceilDiv(textNumerator(r, u), TEXT_DENOMINATOR);
    case 'image': {
      assertOnly(modelId, u, ['images']);
      if (u.images === 0) return 0n;
      const size = options.imageSize;
      if (size === undefined || !Object.hasOwn(r.perImage, size)) {
        throw new Error(`priceCall(${modelId}): images delivered without a valid imageSize (${String(size)})`);
      }
      return BigInt(u.images) * r.perImage[size];
    }
    case 'video': {
      assertOnly(modelId, u, ['video_seconds']);
      if (u.video_seconds === 0) return 0n;
      const key = String(u.video_seconds);
      if (!Object.hasOwn(r.perClip, key)) throw new Error(`no price for a ${key}s clip of ${modelId}`);
      return r.perClip[key]!;
    }
  }
}
