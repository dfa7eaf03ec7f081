/**
 * Reference images prepared for the upstream, once decoded (intake/images.ts) in the prepare phase of a call whose
 * hold is placed: transparency flattened onto a solid background, EXIF orientation applied, and a frame fitted to the
 * output size (cover-cropped, or contained with nothing cropped) when the endpoint asks. An image that needs none of
 * this goes upstream byte for byte.
 */
import { IMAGE_MIME, type ImageFormat } from '../../policies/image-size.js';
import { loadSharp, type DecodedImage } from '../intake/images.js';

/** What transparency is flattened onto. */
export const FLATTEN_BACKGROUND = { r: 255, g: 255, b: 255 } as const;
/** What pads a contained frame to the output size (as a player letterboxes a frame). */
export const PAD_BACKGROUND = { r: 0, g: 0, b: 0 } as const;

/** How an image meets the output: as it is, or fitted to a frame of `width` x `height`. */
export type ImageFit =
  | { readonly fit: 'none' }
  /** Scaled to cover the frame, the overflow cropped evenly from both sides. */
  | { readonly fit: 'cover'; readonly width: number; readonly height: number }
  /** Scaled to fit inside the frame, aspect ratio kept, nothing cropped; the rest padded with PAD_BACKGROUND. */
  | { readonly fit: 'contain'; readonly width: number; readonly height: number };

/** An image ready for the upstream. */
export interface PreparedImage {
  readonly field: string;
  readonly format: ImageFormat;
  readonly mimeType: string;
  readonly bytes: Buffer;
  readonly width: number;
  readonly height: number;
}

/**
 * Prepare a decoded image for the upstream: transparency flattened onto FLATTEN_BACKGROUND, EXIF orientation
 * applied, then fitted as `how` says; re-encoded in its own format (PNG losslessly). An image none of this changes is
 * passed on as uploaded.
 */
export async function prepareImage(img: DecodedImage, how: ImageFit): Promise<PreparedImage> {
  const fits = how.fit === 'none' || (img.width === how.width && img.height === how.height && !img.rotated);
  if (!img.hasAlpha && !img.rotated && fits) {
    return {
      field: img.field,
      format: img.format,
      mimeType: IMAGE_MIME[img.format],
      bytes: img.bytes,
      width: img.width,
      height: img.height,
    };
  }
  const sharp = await loadSharp();
  let p = sharp(img.bytes).rotate();
  if (img.hasAlpha) p = p.flatten({ background: FLATTEN_BACKGROUND });
  if (how.fit === 'cover') p = p.resize(how.width, how.height, { fit: 'cover', position: 'centre' });
  else if (how.fit === 'contain') p = p.resize(how.width, how.height, { fit: 'contain', background: PAD_BACKGROUND });
  p = img.format === 'png' ? p.png() : img.format === 'jpeg' ? p.jpeg({ quality: 95 }) : p.webp({ quality: 95 });
  const { data, info } = await p.toBuffer({ resolveWithObject: true });
  return {
    field: img.field,
    format: img.format,
    mimeType: IMAGE_MIME[img.format],
    bytes: data,
    width: info.width,
    height: info.height,
  };
}
