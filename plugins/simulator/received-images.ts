/**
 * Reference images as the simulated providers received them, decoded, so tests can check the pixels a
 * gateway forwarded (its flattening, cropping, re-encoding) rather than the bytes it was sent.
 */
import { SimError } from './errors.js';
import { loadSharp } from './media-libs.js';

/** One received reference image. */
export interface ReceivedImage {
  /** Where it came in: `image`, `image[]`, `mask`, `input_reference`, `last_reference`, `inlineData`, `inline_data`, `instances[0].image`, ... */
  field: string;
  /** The MIME type the request declared for it ('' when none). */
  mimeType: string;
  bytes: Buffer;
  /** The format sharp read from the bytes: png, jpeg, webp, ... */
  format: string;
  width: number;
  height: number;
  channels: number;
  hasAlpha: boolean;
}

/** The reference images of one request, in the order they came. */
export interface ReceivedImages {
  method: string;
  /** Path and query string, as sent. */
  url: string;
  /** Arrival time, ms since the epoch. */
  at: number;
  images: ReceivedImage[];
}

/** Formats the image endpoints accept (the providers document PNG, JPEG and WebP; Gemini also HEIC/HEIF). */
const ACCEPTED = new Set(['png', 'jpeg', 'webp', 'heif']);

/**
 * Decodes `bytes` with sharp; `invalid(message)` builds the protocol's 400 when they are not an image
 * of an accepted format.
 */
export async function decodeImage(
  field: string,
  mimeType: string,
  bytes: Buffer,
  invalid: (message: string) => SimError,
): Promise<ReceivedImage> {
  const sharp = await loadSharp();
  let meta;
  try {
    meta = await sharp(bytes).metadata();
  } catch {
    throw invalid(`The ${field} part is not a valid image.`);
  }
  if (!ACCEPTED.has(meta.format) || meta.width === undefined || meta.height === undefined) {
    throw invalid(`Unsupported image format '${meta.format}' in ${field}: use PNG, JPEG or WebP.`);
  }
  return {
    field,
    mimeType,
    bytes,
    format: meta.format,
    width: meta.width,
    height: meta.height,
    channels: meta.channels ?? 0,
    hasAlpha: meta.hasAlpha ?? false,
  };
}

/** The MIME type and bytes of a base64 `data:` URL, or undefined. */
export function parseDataUrl(url: string): { mimeType: string; bytes: Buffer } | undefined {
  const m = /^data:([\w.+-]+\/[\w.+-]+);base64,([A-Za-z0-9+/=\s]*)$/.exec(url);
  return m === null ? undefined : { mimeType: m[1]!, bytes: Buffer.from(m[2]!, 'base64') };
}
