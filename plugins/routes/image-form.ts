/**
 * The form of an image edit, read with @fastify/multipart as it streams in, within EDIT_LIMITS
 * (policies/image-request.ts): text fields, and 1 to 14 reference images in `image` parts (or repeated `image[]`
 * parts, as the official SDK sends several). An image's format is decided by its first bytes and its pixel size by
 * its header (policies/image-size.ts probeHeader); an image over its size, or the images over their total, are
 * refused as soon as the bytes that pass the limit arrive, so an oversized upload is never buffered whole (its
 * connection is closed behind the answer: upstream/reference-images.ts closeUnreadUpload). Nothing is decoded before
 * the hold: once it is placed, the edit's prepare phase decodes every image in full (decodeEditImages, sharp at a
 * thumbnail's cost) so a truncated or corrupt one is refused by the gateway, its hold released, not by the provider.
 */
import type { FastifyRequest } from 'fastify';
import type { Multipart } from '@fastify/multipart';
import { GatewayError } from '../../policies/errors.js';
import { EDIT_LIMITS, formValue, imageError } from '../../policies/image-request.js';
import { imageFormat, probeHeader, type ImageFormat } from '../../policies/image-size.js';
import type { ReferenceImage } from '../upstream/image-answer.js';
import { decodeInOrder, loadSharp } from '../upstream/reference-images.js';

/** Limits of @fastify/multipart (busboy) behind the gateway's own: it stops what gets past them. */
export const MULTIPART_LIMITS = {
  fileSize: EDIT_LIMITS.imageBytes + 1,
  files: EDIT_LIMITS.images + 1,
  fields: 64,
  parts: 96,
  fieldSize: EDIT_LIMITS.fieldBytes,
  fieldNameSize: 200,
  headerPairs: 100,
} as const;

/** Part names that carry reference images. */
const IMAGE_PARTS = new Set(['image', 'image[]']);

const MB = (n: number) => `${n / 1_000_000} MB`;

/** A refusal in the middle of an upload. */
function midUpload(code: 'invalid_request' | 'request_too_large', param: string, message: string): GatewayError {
  return new GatewayError(code, { param, message });
}

/** An edit image's side at the pixel limit (8192), for messages. */
const MAX_SIDE = Math.sqrt(EDIT_LIMITS.pixels);

/** Decode the whole image (to a thumbnail): a truncated, corrupt or oversized one is refused naming it. */
async function checkDecodes(bytes: Buffer, n: number, format: ImageFormat): Promise<void> {
  const sharp = await loadSharp();
  try {
    await sharp(bytes, { failOn: 'truncated', limitInputPixels: EDIT_LIMITS.pixels }).resize(16, 16, { fit: 'inside' }).raw().toBuffer();
  } catch (err) {
    const why = (err as Error).message ?? '';
    if (/pixel limit/i.test(why)) throw imageError(`Image ${n} has more than ${MAX_SIDE} x ${MAX_SIDE} pixels.`);
    throw notWhole(n, format);
  }
}

function notWhole(n: number, format: ImageFormat): GatewayError {
  return imageError(`Image ${n} is not a whole ${format.toUpperCase()} image: it is truncated or cannot be decoded.`);
}

/**
 * Decode an edit's images in full (the prepare phase, once the call's hold is placed): 400 naming the first in order
 * that is truncated or corrupt. `observe` gets each decode's time (farebox_image_decode_seconds).
 */
export async function decodeEditImages(images: readonly ReferenceImage[], observe: (seconds: number) => void, left: () => boolean): Promise<void> {
  await decodeInOrder(images.map((img, i) => () => checkDecodes(img.bytes, i + 1, img.format)), observe, left);
}

/** The form's error from @fastify/multipart or busboy, as the caller's 400 or 413. */
function formError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  const e = err as { code?: string; message?: string };
  if (e.code === 'FST_REQ_FILE_TOO_LARGE') return midUpload('request_too_large', 'image', `An image is over ${MB(EDIT_LIMITS.imageBytes)}.`);
  if (e.code === 'FST_FILES_LIMIT') return midUpload('invalid_request', 'image', `At most ${EDIT_LIMITS.images} reference images are taken.`);
  if (e.code === 'FST_PARTS_LIMIT' || e.code === 'FST_FIELDS_LIMIT') return midUpload('invalid_request', 'body', 'The form has too many parts.');
  return midUpload('invalid_request', 'body', `The multipart body is malformed: ${String(e.message ?? 'unreadable').slice(0, 200)}`);
}

/** An edit's form: its fields as the schema reads them, and its checked reference images in order. */
export interface ImageForm {
  readonly fields: Record<string, unknown>;
  readonly images: ReferenceImage[];
}

/** Read one image part within the limits; `total` is what the images before it took. */
async function readImage(part: Extract<Multipart, { type: 'file' }>, n: number, total: number): Promise<{ bytes: Buffer; format: ImageFormat }> {
  const chunks: Buffer[] = [];
  let size = 0;
  let format: ImageFormat | null = null;
  for await (const chunk of part.file as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > EDIT_LIMITS.imageBytes) {
      throw midUpload('request_too_large', 'image', `Image ${n} is over ${MB(EDIT_LIMITS.imageBytes)}, the largest reference image taken.`);
    }
    if (total + size > EDIT_LIMITS.totalBytes) {
      throw midUpload('request_too_large', 'image', `The reference images are over ${MB(EDIT_LIMITS.totalBytes)} in total.`);
    }
    chunks.push(chunk);
    if (format === null && size >= 12) {
      format = imageFormat(chunks.length === 1 ? chunk : Buffer.concat(chunks));
      if (format === null) throw midUpload('invalid_request', 'image', `Image ${n} is not a PNG, JPEG or WebP image (judged by its bytes).`);
    }
  }
  if ((part.file as { truncated?: boolean }).truncated) {
    throw midUpload('request_too_large', 'image', `Image ${n} is over ${MB(EDIT_LIMITS.imageBytes)}, the largest reference image taken.`);
  }
  if (format === null) throw imageError(size === 0 ? `Image ${n} is empty.` : `Image ${n} is not a PNG, JPEG or WebP image (judged by its bytes).`);
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  // What the header says is all that is known before the hold; the pixels are decoded after it (decodeEditImages).
  const probe = probeHeader(bytes, EDIT_LIMITS.pixels);
  if (probe.ok) return { bytes, format };
  if (probe.why === 'pixels') throw imageError(`Image ${n} is ${probe.width}x${probe.height}: more than ${MAX_SIDE} x ${MAX_SIDE} pixels.`);
  throw notWhole(n, format);
}

/**
 * Read an edit's form. `onModel` is called with the model field as soon as it arrives (it throws for a model not
 * served here). 400 for a body that is not multipart, a missing or extra image, one whose header cannot be read or
 * announces too many pixels, a field over its size; 413 for images over their limits.
 */
export async function readImageForm(request: FastifyRequest, onModel: (model: string) => unknown): Promise<ImageForm> {
  if (!request.isMultipart()) {
    throw new GatewayError('invalid_request', {
      param: 'body',
      message: 'Image edits take a multipart/form-data body: the fields as text parts, 1 to 14 images in image parts.',
    });
  }
  const fields: Record<string, unknown> = {};
  const images: ReferenceImage[] = [];
  let total = 0;
  try {
    for await (const part of request.parts({ limits: MULTIPART_LIMITS })) {
      if (part.type === 'field') {
        if (part.valueTruncated || part.fieldnameTruncated) {
          throw midUpload('invalid_request', part.fieldname, `${part.fieldname}: over ${EDIT_LIMITS.fieldBytes / 1024} KiB.`);
        }
        const value = typeof part.value === 'string' ? formValue(part.fieldname, part.value) : part.value;
        fields[part.fieldname] = value;
        if (part.fieldname === 'model' && typeof value === 'string' && value !== '') onModel(value);
        continue;
      }
      if (!IMAGE_PARTS.has(part.fieldname)) {
        throw midUpload('invalid_request', part.fieldname, `${part.fieldname}: unexpected file part; reference images go in image parts.`);
      }
      if (images.length === EDIT_LIMITS.images) {
        throw midUpload('invalid_request', 'image', `More than ${EDIT_LIMITS.images} reference images: an edit takes 1 to ${EDIT_LIMITS.images}.`);
      }
      const n = images.length + 1;
      const image = await readImage(part, n, total);
      total += image.bytes.length;
      images.push(image);
    }
  } catch (err) {
    throw formError(err);
  }
  if (images.length === 0) throw imageError(`No reference image: an edit takes 1 to ${EDIT_LIMITS.images} images in image parts.`);
  return { fields, images };
}
