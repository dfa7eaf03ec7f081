/**
 * Decoding uploaded images, the one part of intake a refused call must not cost the gateway: run only in the prepare
 * phase of a call whose hold is placed (plugins/phases/prepare.ts), one call's images in order, in a few process-wide
 * slots. A truncated or corrupt image is refused by the gateway (400 invalid_reference_image, the hold released),
 * not by the provider.
 */
import type sharpType from 'sharp';
import { imageSize } from '../../policies/image-size.js';
import { pixels, refuseImage, type UploadedImage } from './multipart.js';

let sharpModule: Promise<typeof sharpType> | undefined;

/** sharp, imported on the first image: a gateway that serves only text never maps libvips. */
export function loadSharp(): Promise<typeof sharpType> {
  sharpModule ??= import('sharp').then((m) => m.default);
  return sharpModule;
}

/** An image to decode: its bytes, the format they announce, and its name in refusals. */
export type ImageToDecode = Pick<UploadedImage, 'field' | 'index' | 'format' | 'bytes'>;

/** An uploaded image, decoded. */
export interface DecodedImage extends UploadedImage {
  readonly width: number;
  readonly height: number;
  readonly hasAlpha: boolean;
  /** EXIF orientation other than upright: the pixels are turned before they go upstream. */
  readonly rotated: boolean;
}

/**
 * Decode an upload whole and check it is a whole image of the format its bytes announce, at most `maxPixels`; what
 * its preparation for the upstream needs (size, alpha, orientation) comes with it. Its reader checked the header.
 */
export async function decodeImage(img: UploadedImage, maxPixels: number): Promise<DecodedImage> {
  const tooMany = (w: number, h: number) => refuseImage(img, `: ${w}x${h} is over ${pixels(maxPixels)}.`);
  // The header's size first: a few bytes can announce more pixels than are worth decoding.
  const announced = imageSize(img.bytes);
  if (announced && announced.width * announced.height > maxPixels) throw tooMany(announced.width, announced.height);
  const sharp = await loadSharp();
  let meta: Awaited<ReturnType<ReturnType<typeof sharpType>['metadata']>>;
  try {
    meta = await sharp(img.bytes, { limitInputPixels: false }).metadata();
  } catch (err) {
    throw Object.assign(refuseImage(img, ': the image cannot be decoded.'), { cause: err });
  }
  if (meta.format !== img.format || !meta.width || !meta.height)
    throw refuseImage(img, `: the bytes are not a whole ${img.format.toUpperCase()} image.`);
  if (meta.width * meta.height > maxPixels) throw tooMany(meta.width, meta.height);
  // Decoding the pixels finds a truncated or corrupt body that the header alone does not.
  try {
    await sharp(img.bytes, { failOn: 'error' }).stats();
  } catch (err) {
    throw Object.assign(refuseImage(img, ': the image is truncated or corrupt.'), { cause: err });
  }
  return {
    ...img,
    width: meta.width,
    height: meta.height,
    hasAlpha: meta.hasAlpha === true,
    rotated: (meta.orientation ?? 1) !== 1,
  };
}

/**
 * Check an image decodes whole, at most `maxPixels`, at a thumbnail's cost (an image passed on byte for byte needs
 * nothing more: an edit's references).
 */
export async function checkDecodes(img: ImageToDecode, maxPixels: number): Promise<void> {
  const sharp = await loadSharp();
  try {
    await sharp(img.bytes, { failOn: 'truncated', limitInputPixels: maxPixels })
      .resize(16, 16, { fit: 'inside' })
      .raw()
      .toBuffer();
  } catch (err) {
    const why = (err as Error).message ?? '';
    if (/pixel limit/i.test(why)) throw refuseImage(img, `: more than ${pixels(maxPixels)}.`);
    throw Object.assign(
      refuseImage(img, ` is not a whole ${img.format.toUpperCase()} image: it is truncated or cannot be decoded.`),
      { cause: err },
    );
  }
}

/**
 * Full decodes running at once in this process. sharp decodes on libuv's threadpool (4 threads by default), which DNS
 * lookups of new upstream connections and file reads share: two decodes at a time leave it room, and a burst of
 * uploads queues here instead of stalling every other call.
 */
const DECODE_SLOTS = 2;
let decoding = 0;
const waitingForSlot: (() => void)[] = [];

/** Run `decode` in one of DECODE_SLOTS, handed on to the next waiting decode when it ends. */
async function inDecodeSlot<T>(decode: () => Promise<T>): Promise<T> {
  if (decoding < DECODE_SLOTS) decoding++;
  else await new Promise<void>((resolve) => waitingForSlot.push(resolve));
  try {
    return await decode();
  } finally {
    const next = waitingForSlot.shift();
    if (next) next();
    else decoding--;
  }
}

/** Thrown when a call's decodes stop because its caller left (prepare then finishes the call, unforwarded). */
export class CallerLeft extends Error {
  constructor() {
    super('the caller left while its images were decoded');
  }
}

/**
 * A call's full decodes (and preparations), one at a time in the process's decode slots, each timed to `observe`
 * (farebox_image_decode_seconds, which only a call whose hold is placed runs): their values in order; the first
 * failure ends them, so a refusal names the first bad image and no decode runs once the call is answered; a caller
 * that left (`left()`) ends them with CallerLeft.
 */
export async function decodeInOrder<T>(
  decodes: readonly (() => Promise<T>)[],
  observe: (seconds: number) => void,
  left: () => boolean,
): Promise<T[]> {
  const out: T[] = [];
  for (const decode of decodes) {
    if (left()) throw new CallerLeft();
    out.push(
      await inDecodeSlot(async () => {
        const start = process.hrtime.bigint();
        try {
          return await decode();
        } finally {
          observe(Number(process.hrtime.bigint() - start) / 1e9);
        }
      }),
    );
  }
  return out;
}
