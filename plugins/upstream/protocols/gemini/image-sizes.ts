/**
 * Gemini image sizes (generateContent; README "Images"): `imageConfig.aspectRatio` and `imageConfig.imageSize` take
 * the ratio and class as they are; 1K is the API's default and is left out. Gemini 3 Pro Image (and 3.1 Flash Image)
 * render the three classes at every ratio, at the pixel sizes of the image generation guide's table (about 1, 4 and
 * 16 megapixels); Gemini 2.5 Flash Image takes no imageSize and renders 1K only.
 */
import { ASPECT_RATIOS, type AspectRatio } from '../../../../policies/image-request.js';
import { CLASS_SIDE, EVERY_CLASS_AND_RATIO, type ImageCapabilities } from '../../../../policies/image-sizes.js';
import type { ImageSize } from '../../../../pricing/index.js';

/** The `imageConfig` sent to a Gemini image model. */
export function geminiImageConfig(
  size: ImageSize,
  ratio: AspectRatio,
): { aspectRatio: AspectRatio; imageSize?: ImageSize } {
  return size === '1K' ? { aspectRatio: ratio } : { aspectRatio: ratio, imageSize: size };
}

/** The classes and ratios Gemini documents for an upstream model. */
export function geminiCapabilities(upstreamModel: string): ImageCapabilities {
  // Gemini 2.5 Flash Image takes no imageSize: every ratio, 1K alone.
  return upstreamModel.startsWith('gemini-2.5-flash-image')
    ? { sizes: ['1K'], ratios: ASPECT_RATIOS }
    : EVERY_CLASS_AND_RATIO;
}

/**
 * The pixels a Gemini image model renders for a class: the class's area (the image generation guide's sizes hold it
 * within 4% at every ratio: 1376x768 at 1K 16:9, 6336x2688 at 4K 21:9).
 */
export function geminiRenderedPixels(_upstreamModel: string, size: ImageSize): number {
  return CLASS_SIDE[size] ** 2;
}
