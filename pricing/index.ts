// pricing/: pure price tables, exact cost and worst-case calculators (no I/O).
export { ATOMIC_PER_USD, USD_DECIMALS, parseUsd, formatUsd, formatUsdExact, formatUsdRate, ceilDiv } from './money.js';
export {
  IMAGE_SIZES,
  VIDEO_DURATIONS,
  RATE_TOKENS,
  DEFAULT_PRICES,
  DEFAULT_PRICE_TABLE,
  PriceTableError,
  pricesConfigSchema,
  buildPriceTable,
  isVideoFamily,
  lookupRates,
} from './table.js';
export { publishedRates, publishPrices } from './publish.js';
export type { TextPrices, ImagePrices, VideoPrices } from './publish.js';
export type {
  ImageSize,
  VideoFamily,
  TextRates,
  ImageRates,
  VideoRates,
  ModelRates,
  PriceTable,
  PricesDocument,
  PricesConfig,
} from './table.js';
export { USAGE_FIELDS, ZERO_USAGE, makeUsage, fromAnthropicUsage, fromOpenAIUsage } from './usage.js';
export type { Usage, CacheWriteTier, AnthropicUsageLike, OpenAIUsageLike } from './usage.js';
export { TEXT_DENOMINATOR, QUARTERS, textNumerator, priceCall } from './cost.js';
export type { PriceCallOptions } from './cost.js';
export { worstCaseText, worstCaseImage, worstCaseVideo } from './worst-case.js';
export type { TextBounds } from './worst-case.js';
