/**
 * OpenAI Images API sizes (README "Images"): `size` is WIDTHxHEIGHT from a list per model ("Create image", size): the
 * gateway sends the accepted size nearest in aspect ratio, then nearest in area to the class (a class is an area:
 * policies/image-sizes.ts). gpt-image-2 takes any size whose sides are multiples of 16, with a ratio between 1:3 and
 * 3:1, a long edge of at most 3,840 and at most 3,840 x 2,160 pixels: it gets the requested ratio at the class's area,
 * scaled down into those bounds (so 4K is at most 8.3 megapixels), and honours every class and ratio. Every other GPT
 * image model takes 1024x1024, 1536x1024 and 1024x1536 only: 1K, at 1:1, 3:2 and 2:3; dall-e-3 1K at 1:1, 16:9 and
 * 9:16 (1792x1024 is 1.6% from 16:9); dall-e-2 1K at 1:1. What a model renders is the size the gateway asks for.
 */
import type { AspectRatio } from '../../../../policies/image-request.js';
import { ASPECT_RATIOS } from '../../../../policies/image-request.js';
import {
  CLASS_SIDE,
  EVERY_CLASS_AND_RATIO,
  ratioOf,
  type ImageCapabilities,
} from '../../../../policies/image-sizes.js';
import type { ImageSize } from '../../../../pricing/index.js';

/** Sizes each fixed-size OpenAI image model accepts ("Create image", size), by upstream model id prefix. */
export const OPENAI_FIXED_SIZES: readonly { prefix: string; sizes: readonly string[] }[] = [
  { prefix: 'dall-e-2', sizes: ['256x256', '512x512', '1024x1024'] },
  { prefix: 'dall-e-3', sizes: ['1024x1024', '1792x1024', '1024x1792'] },
  // gpt-image-1, gpt-image-1-mini, gpt-image-1.5, chatgpt-image-latest and any other GPT image model.
  { prefix: '', sizes: ['1024x1024', '1536x1024', '1024x1536'] },
];

/** Models that take any WIDTHxHEIGHT within bounds (the SDK's ImageGenerateParams, size). */
export const FREE_SIZE_PREFIX = 'gpt-image-2';
const FREE_SIZE_STEP = 16;
const FREE_SIZE_MAX_EDGE = 3840;
const FREE_SIZE_MAX_PIXELS = 3840 * 2160;

function dims(size: string): [number, number] {
  const [w, h] = size.split('x').map(Number) as [number, number];
  return [w, h];
}

const roundTo = (n: number, step: number) => Math.max(step, Math.round(n / step) * step);
const floorTo = (n: number, step: number) => Math.max(step, Math.floor(n / step) * step);

/** gpt-image-2: the ratio itself at the class's area, within the model's bounds. */
function freeSize(size: ImageSize, ratio: AspectRatio): string {
  const r = ratioOf(ratio);
  const side = CLASS_SIDE[size];
  let w = side * Math.sqrt(r);
  let h = side / Math.sqrt(r);
  const scale = Math.min(1, FREE_SIZE_MAX_EDGE / Math.max(w, h), Math.sqrt(FREE_SIZE_MAX_PIXELS / (w * h)));
  if (scale < 1) {
    w = floorTo(w * scale, FREE_SIZE_STEP);
    h = floorTo(h * scale, FREE_SIZE_STEP);
  } else {
    w = roundTo(w, FREE_SIZE_STEP);
    h = roundTo(h, FREE_SIZE_STEP);
  }
  return `${w}x${h}`;
}

/** Of `sizes`, the one nearest to `ratio`, then nearest in area to the class (both by log distance). */
export function nearestSize(sizes: readonly string[], size: ImageSize, ratio: AspectRatio): string {
  const target = Math.log(ratioOf(ratio));
  let best = sizes[0]!;
  let bestKey: [number, number] = [Infinity, Infinity];
  for (const s of sizes) {
    const [w, h] = dims(s);
    // Rounded so that sizes of one ratio tie exactly.
    const key: [number, number] = [
      Math.round(Math.abs(Math.log(w / h) - target) * 1e9),
      Math.abs(Math.log((w * h) / CLASS_SIDE[size] ** 2)),
    ];
    if (key[0] < bestKey[0] || (key[0] === bestKey[0] && key[1] < bestKey[1])) {
      best = s;
      bestKey = key;
    }
  }
  return best;
}

/** The `size` sent to an OpenAI Images model for a size class and aspect ratio. */
export function openaiSize(upstreamModel: string, size: ImageSize, ratio: AspectRatio): string {
  if (upstreamModel.startsWith(FREE_SIZE_PREFIX)) return freeSize(size, ratio);
  const entry = OPENAI_FIXED_SIZES.find((e) => upstreamModel.startsWith(e.prefix))!;
  return nearestSize(entry.sizes, size, ratio);
}

/** How far (log of the quotient) a fixed size's ratio may be from a requested ratio and still honour it: 2%. */
const RATIO_TOLERANCE = 0.02;

/** The classes and ratios OpenAI documents for an upstream model. */
export function openaiCapabilities(upstreamModel: string): ImageCapabilities {
  if (upstreamModel.startsWith(FREE_SIZE_PREFIX)) return EVERY_CLASS_AND_RATIO;
  // Fixed sizes: the largest holds 1.5 to 1.8 megapixels, a 1K image; a ratio is honoured where a size has it.
  const { sizes } = OPENAI_FIXED_SIZES.find((e) => upstreamModel.startsWith(e.prefix))!;
  const ratios = ASPECT_RATIOS.filter((r) =>
    sizes.some((s) => {
      const [w, h] = dims(s);
      return Math.abs(Math.log(w / h / ratioOf(r))) <= RATIO_TOLERANCE;
    }),
  );
  return { sizes: ['1K'], ratios };
}

/** The pixels an OpenAI image model renders for a class and ratio: the size the gateway asks for. */
export function openaiRenderedPixels(upstreamModel: string, size: ImageSize, ratio: AspectRatio): number {
  const [w, h] = dims(openaiSize(upstreamModel, size, ratio));
  return w * h;
}

/**
 * Whether an image may carry an alpha channel: a GPT image model's unless its background is `opaque`; gpt-image-2
 * renders no transparency.
 */
export function openaiMayBeTransparent(upstreamModel: string, extra: Readonly<Record<string, unknown>>): boolean {
  return !upstreamModel.startsWith(FREE_SIZE_PREFIX) && extra.background !== 'opaque';
}
