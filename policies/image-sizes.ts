/**
 * The size classes of images, provider-neutral (README "Images" has the tables). An image is priced by what is
 * rendered: a model declares the classes and ratios its upstream honours (config `sizes`, `aspect_ratios`; by default
 * what the provider documents for the upstream model, its protocol's `ImageAdapter.capabilities`), a request outside
 * them is refused before any hold, and the delivered image's pixels are checked against the class it was billed at
 * (`deliveredClass`, over the pixels the protocol's `ImageAdapter.renderedPixels` says the model renders).
 *
 * A class is an area, as in Gemini's image generation table (its 1K sizes hold about 1024 x 1024 pixels at every
 * ratio): 1K 1024², 2K 2048², 4K 4096² pixels. How each provider takes a class and ratio, and what it renders for
 * them, is its protocol's (plugins/upstream/protocols/<name>/image-sizes.ts).
 */
import { IMAGE_SIZES, type ImageSize } from '../pricing/index.js';
import { ASPECT_RATIOS, type AspectRatio } from './image-request.js';

/** Side of the square of each size class's area, pixels. */
export const CLASS_SIDE: Readonly<Record<ImageSize, number>> = { '1K': 1024, '2K': 2048, '4K': 4096 };

/** What an image model's upstream renders: the size classes and aspect ratios it honours. */
export interface ImageCapabilities {
  readonly sizes: readonly ImageSize[];
  readonly ratios: readonly AspectRatio[];
}

/** Every class at every ratio. */
export const EVERY_CLASS_AND_RATIO: ImageCapabilities = Object.freeze({ sizes: IMAGE_SIZES, ratios: ASPECT_RATIOS });

/** An aspect ratio as width / height. */
export function ratioOf(r: AspectRatio): number {
  const [w, h] = r.split(':').map(Number) as [number, number];
  return w / h;
}

/** Share of a class's rendered pixels an image must hold to be billed at that class: 90%. */
const CLASS_PIXEL_SHARE = 0.9;

/**
 * The class a delivered image is billed at: the requested class when it holds the pixels the model renders for it,
 * else the largest smaller class whose pixels it holds (never more than requested; 1K, the smallest price, for any
 * image at all). A class the model renders at no more pixels than the class below it is not a class of its own there
 * (a fixed-size GPT image model asked for 2K by a config that declares it): its image is billed as the smaller one.
 * `rendered`: the pixels the model renders for a class at the request's ratio (its protocol's). `pixels` null (a
 * header not read): the requested class, which the model declared it renders.
 */
export function deliveredClass(
  rendered: (size: ImageSize) => number,
  requested: ImageSize,
  pixels: number | null,
): ImageSize {
  for (let i = IMAGE_SIZES.indexOf(requested); i > 0; i--) {
    const size = IMAGE_SIZES[i]!;
    const own = rendered(size);
    if (own <= rendered(IMAGE_SIZES[i - 1]!)) continue;
    if (pixels === null || pixels >= own * CLASS_PIXEL_SHARE) return size;
  }
  return '1K';
}
