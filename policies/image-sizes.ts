/**
 * What each image model renders, and how the spec's size classes (1K, 2K, 4K) and aspect ratios reach its provider
 * (README "Images" has the tables). An image is priced by what is rendered: a model declares the classes and ratios
 * its upstream honours (config `sizes`, `aspect_ratios`; by default what the provider documents for the upstream
 * model, `documentedCapabilities`), a request outside them is refused before any hold, and the delivered image's
 * pixels are checked against the class it was billed at (`deliveredClass`).
 *
 * - Gemini (generateContent): `imageConfig.aspectRatio` and `imageConfig.imageSize` take both as they are; 1K is the
 *   API's default and is left out. Gemini 3 Pro Image (and 3.1 Flash Image) render the three classes at every ratio,
 *   at the pixel sizes of the image generation guide's table (about 1, 4 and 16 megapixels); Gemini 2.5 Flash Image
 *   takes no imageSize and renders 1K only.
 * - OpenAI Images API: `size` is WIDTHxHEIGHT from a list per model ("Create image", size): the gateway sends the
 *   accepted size nearest in aspect ratio, then nearest in area to the class. A class is an area, as in Gemini's
 *   table (its 1K sizes hold about 1024 x 1024 pixels at every ratio): 1K 1024², 2K 2048², 4K 4096² pixels.
 *   gpt-image-2 takes any size whose sides are multiples of 16, with a ratio between 1:3 and 3:1, a long edge of at
 *   most 3,840 and at most 3,840 x 2,160 pixels: it gets the requested ratio at the class's area, scaled down into
 *   those bounds (so 4K is at most 8.3 megapixels), and honours every class and ratio. Every other GPT image model
 *   takes 1024x1024, 1536x1024 and 1024x1536 only: 1K, at 1:1, 3:2 and 2:3; dall-e-3 1K at 1:1, 16:9 and 9:16
 *   (1792x1024 is 1.6% from 16:9); dall-e-2 1K at 1:1.
 */
import { IMAGE_SIZES, type ImageSize } from '../pricing/index.js';
import { ASPECT_RATIOS, type AspectRatio } from './image-request.js';

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

/** The `imageConfig` sent to a Gemini image model. */
export function geminiImageConfig(
  size: ImageSize,
  ratio: AspectRatio,
): { aspectRatio: AspectRatio; imageSize?: ImageSize } {
  return size === '1K' ? { aspectRatio: ratio } : { aspectRatio: ratio, imageSize: size };
}

/** The image protocols. */
export type ImageProtocol = 'openai' | 'gemini';

/** What an image model's upstream renders: the size classes and aspect ratios it honours. */
export interface ImageCapabilities {
  readonly sizes: readonly ImageSize[];
  readonly ratios: readonly AspectRatio[];
}

/** How far (log of the quotient) a fixed size's ratio may be from a requested ratio and still honour it: 2%. */
const RATIO_TOLERANCE = 0.02;

const EVERYTHING: ImageCapabilities = Object.freeze({ sizes: IMAGE_SIZES, ratios: ASPECT_RATIOS });

/** The classes and ratios the provider documents for an upstream model (the config may narrow or replace them). */
export function documentedCapabilities(protocol: ImageProtocol, upstreamModel: string): ImageCapabilities {
  if (protocol === 'gemini') {
    // Gemini 2.5 Flash Image takes no imageSize: every ratio, 1K alone.
    return upstreamModel.startsWith('gemini-2.5-flash-image') ? { sizes: ['1K'], ratios: ASPECT_RATIOS } : EVERYTHING;
  }
  if (upstreamModel.startsWith(FREE_SIZE_PREFIX)) return EVERYTHING;
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

/**
 * The pixels an upstream model renders for a class and ratio: OpenAI's the size the gateway asks for; Gemini's the
 * class's area (the image generation guide's sizes hold it within 4% at every ratio: 1376x768 at 1K 16:9,
 * 6336x2688 at 4K 21:9).
 */
export function renderedPixels(
  protocol: ImageProtocol,
  upstreamModel: string,
  size: ImageSize,
  ratio: AspectRatio,
): number {
  if (protocol === 'gemini') return CLASS_SIDE[size] ** 2;
  const [w, h] = dims(openaiSize(upstreamModel, size, ratio));
  return w * h;
}

/** Share of a class's rendered pixels an image must hold to be billed at that class: 90%. */
const CLASS_PIXEL_SHARE = 0.9;

/**
 * The class a delivered image is billed at: the requested class when it holds the pixels the model renders for it,
 * else the largest smaller class whose pixels it holds (never more than requested; 1K, the smallest price, for any
 * image at all). A class the model renders at no more pixels than the class below it is not a class of its own there
 * (a fixed-size GPT image model asked for 2K by a config that declares it): its image is billed as the smaller one.
 * `pixels` null (a header not read): the requested class, which the model declared it renders.
 */
export function deliveredClass(
  protocol: ImageProtocol,
  upstreamModel: string,
  requested: ImageSize,
  ratio: AspectRatio,
  pixels: number | null,
): ImageSize {
  for (let i = IMAGE_SIZES.indexOf(requested); i > 0; i--) {
    const size = IMAGE_SIZES[i]!;
    const rendered = renderedPixels(protocol, upstreamModel, size, ratio);
    if (rendered <= renderedPixels(protocol, upstreamModel, IMAGE_SIZES[i - 1]!, ratio)) continue;
    if (pixels === null || pixels >= rendered * CLASS_PIXEL_SHARE) return size;
  }
  return '1K';
}
