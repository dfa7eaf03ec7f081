// Published rates: where the exact bigint rates become the USD strings that callers and operators read
// (`farebox prices`, the dashboard's Prices page, GET /v1/models), so every one of them shows the same numbers.
import { QUARTERS } from './cost.js';
import { formatUsdExact } from './money.js';
import {
  IMAGE_SIZES,
  type ImageRates,
  type ImageSize,
  type ModelRates,
  type PriceTable,
  type PricesDocument,
  type TextRates,
  type VideoRates,
} from './table.js';

/** A text model's rates, USD per 1,000,000 tokens; cache writes are billed at 5/4 and 8/4 of input (QUARTERS). */
export interface TextPrices {
  readonly input: string;
  readonly output: string;
  readonly cache_read: string;
  readonly cache_write_5m: string;
  readonly cache_write_1h: string;
}

/** An image model's price of one image, by size. */
export type ImagePrices = Readonly<Record<ImageSize, string>>;

/** A video model's price of one clip, by duration in seconds. */
export type VideoPrices = Readonly<Record<string, string>>;

/**
 * The published rates of one model, USD with at least `minDecimals` decimals (2 as `farebox prices` prints them, 6 as
 * the API's amounts) and the further ones an exact value needs: never rounded.
 */
export function publishedRates(r: TextRates, minDecimals: number): TextPrices;
export function publishedRates(r: ImageRates, minDecimals: number): ImagePrices;
export function publishedRates(r: VideoRates, minDecimals: number): VideoPrices;
export function publishedRates(r: ModelRates, minDecimals: number): TextPrices | ImagePrices | VideoPrices;
export function publishedRates(r: ModelRates, minDecimals: number): TextPrices | ImagePrices | VideoPrices {
  const usd = (atomic: bigint, quarters: bigint = QUARTERS.base) =>
    formatUsdExact(atomic * quarters, QUARTERS.base, minDecimals);
  if (r.kind === 'text') {
    return {
      input: usd(r.input),
      output: usd(r.output),
      cache_read: usd(r.cacheRead),
      cache_write_5m: usd(r.input, QUARTERS.cacheWrite5m),
      cache_write_1h: usd(r.input, QUARTERS.cacheWrite1h),
    };
  }
  if (r.kind === 'image') {
    const perImage = {} as Record<ImageSize, string>;
    for (const size of IMAGE_SIZES) perImage[size] = usd(r.perImage[size]);
    return perImage;
  }
  const perClip: Record<string, string> = {};
  for (const [s, atomic] of Object.entries(r.perClip)) perClip[s] = usd(atomic);
  return perClip;
}

/**
 * The `farebox prices --json` document of a table (DESIGN.md operator contract): USD strings, at least 2 decimals,
 * in the shape of the config's `prices` (cache writes follow from input, so they are not in it).
 */
export function publishPrices(table: PriceTable): PricesDocument {
  const doc: PricesDocument = { text: {}, image: {}, video: {} };
  for (const [id, r] of Object.entries(table)) {
    if (r.kind === 'text') {
      const { input, output, cache_read } = publishedRates(r, 2);
      doc.text[id] = { input, output, cache_read };
    } else if (r.kind === 'image') doc.image[id] = { ...publishedRates(r, 2) };
    else doc.video[id] = { ...publishedRates(r, 2) };
  }
  return doc;
}
