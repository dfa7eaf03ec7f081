/**
 * How the spec's size classes (1K, 2K, 4K) and aspect ratios reach each provider (README "Images" has the tables).
 *
 * - Gemini (generateContent): `imageConfig.aspectRatio` and `imageConfig.imageSize` take both as they are; 1K is the
 *   API's default and is left out, so models that take no imageSize (Gemini 2.5 Flash Image) still serve 1K.
 * - OpenAI Images API: `size` is WIDTHxHEIGHT from a list per model ("Create image", size): the gateway sends the
 *   accepted size nearest in aspect ratio, then nearest in area to the class. A class is an area, as in Gemini's
 *   table (its 1K sizes hold about 1024 x 1024 pixels at every ratio): 1K 1024², 2K 2048², 4K 4096² pixels.
 *   gpt-image-2 takes any size whose sides are multiples of 16, with a ratio between 1:3 and 3:1, a long edge of at
 *   most 3,840 and at most 3,840 x 2,160 pixels: it gets the requested ratio at the class's area, scaled down into
 *   those bounds (so 4K is at most 8.3 megapixels). Every other GPT image model takes 1024x1024, 1536x1024 and
 *   1024x1536 only: 2K and 4K get the pixels of 1K. The caller receives what the provider rendered; the price
 *   follows the requested class.
 */
import type { ImageSize } from '../pricing/index.js';
import type { AspectRatio } from './image-request.js';

/** Side of the square of each size class's area, pixels. */
export const CLASS_SIDE: Readonly<Record<ImageSize, number>> = { '1K': 1024, '2K': 2048, '4K': 4096 };

/** Sizes each fixed-size OpenAI image model accepts ("Create image", size), by upstream model id prefix. */
export const OPENAI_FIXED_SIZES: readonly { prefix: string; sizes: readonly string[] }[] = [
  { prefix: 'dall-e-2', sizes: ['256x256', '512x512', '1024x1024'] },
  { prefix: 'dall-e-3', sizes: ['1024x1024', '1792x1024', '1024x1792'] },
  // gpt-image-1, gpt-image-1-mini, gpt-image-1.5, chatgpt-image-latest and any other GPT image model.
  { prefix: '', sizes: ['1024x1024', '1536x1024', '1024x1536'] },
];

/** Models that take any WIDTHxHEIGHT within bounds (the SDK's ImageGenerateParams, size). */
const FREE_SIZE_PREFIX = 'gpt-image-2';
const FREE_SIZE_STEP = 16;
const FREE_SIZE_MAX_EDGE = 3840;
const FREE_SIZE_MAX_PIXELS = 3840 * 2160;

function ratioOf(r: AspectRatio): number {
  const [w, h] = r.split(':').map(Number) as [number, number];
  return w / h;
}

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
    const key: [number, number] = [Math.round(Math.abs(Math.log(w / h) - target) * 1e9), Math.abs(Math.log((w * h) / CLASS_SIDE[size] ** 2))];
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

/** The `imageConfig` sent to a Gemini image model. */
export function geminiImageConfig(size: ImageSize, ratio: AspectRatio): { aspectRatio: AspectRatio; imageSize?: ImageSize } {
  return size === '1K' ? { aspectRatio: ratio } : { aspectRatio: ratio, imageSize: size };
}
