/**
 * The pixel size of an image read from its first bytes (PNG, JPEG, GIF, WebP), without decoding it: what a
 * provider bills an inline image by is in its header, and what an upload may cost to decode too (probeHeader, run on
 * every uploaded image before any money is held; the whole decode waits for the hold).
 */
import { crc32 } from 'node:zlib';

/** The image formats the gateway takes as references. */
export type ImageFormat = 'png' | 'jpeg' | 'webp';

/** The media type of each format. */
export const IMAGE_MIME: Readonly<Record<ImageFormat, string>> = Object.freeze({
  png: 'image/png',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
});

/**
 * The format of an image from its first bytes (at least 12), never from a file name or a declared type: PNG's
 * signature, JPEG's SOI marker followed by a marker, WebP's RIFF....WEBP container. Null for anything else.
 */
export function imageFormat(b: Uint8Array): ImageFormat | null {
  if (
    b.length >= 8 &&
    b[0] === 0x89 &&
    b[1] === 0x50 &&
    b[2] === 0x4e &&
    b[3] === 0x47 &&
    b[4] === 0x0d &&
    b[5] === 0x0a &&
    b[6] === 0x1a &&
    b[7] === 0x0a
  ) {
    return 'png';
  }
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return 'jpeg';
  if (
    b.length >= 12 &&
    b[0] === 0x52 &&
    b[1] === 0x49 &&
    b[2] === 0x46 &&
    b[3] === 0x46 &&
    b[8] === 0x57 &&
    b[9] === 0x45 &&
    b[10] === 0x42 &&
    b[11] === 0x50
  ) {
    return 'webp';
  }
  return null;
}

/** Width and height in pixels. */
export interface PixelSize {
  readonly width: number;
  readonly height: number;
}

/** PNG bit depths allowed for each colour type (PNG specification, 11.2.2 IHDR). */
const PNG_DEPTHS: Readonly<Record<number, readonly number[]>> = {
  0: [1, 2, 4, 8, 16],
  2: [8, 16],
  3: [1, 2, 4, 8],
  4: [8, 16],
  6: [8, 16],
};

function png(b: Buffer): PixelSize | null {
  // Signature, then the IHDR chunk (PNG specification 11.2.2): length 13, "IHDR", width and height (big-endian, 1 to
  // 2^31-1), bit depth, colour type, compression 0, filter 0, interlace 0 or 1, and its CRC: what a decoder reads first.
  if (
    b.length < 33 ||
    b.readUInt32BE(0) !== 0x89504e47 ||
    b.readUInt32BE(8) !== 13 ||
    b.toString('latin1', 12, 16) !== 'IHDR'
  )
    return null;
  const width = b.readUInt32BE(16);
  const height = b.readUInt32BE(20);
  if (width === 0 || height === 0 || width > 0x7fffffff || height > 0x7fffffff) return null;
  if (!PNG_DEPTHS[b[25]!]?.includes(b[24]!) || b[26] !== 0 || b[27] !== 0 || b[28]! > 1) return null;
  if (crc32(b.subarray(12, 29)) !== b.readUInt32BE(29)) return null;
  return { width, height };
}

function gif(b: Buffer): PixelSize | null {
  if (b.length < 10 || b.toString('latin1', 0, 4) !== 'GIF8') return null;
  return { width: b.readUInt16LE(6), height: b.readUInt16LE(8) };
}

function webp(b: Buffer): PixelSize | null {
  if (b.length < 30 || b.toString('latin1', 0, 4) !== 'RIFF' || b.toString('latin1', 8, 12) !== 'WEBP') return null;
  const chunk = b.toString('latin1', 12, 16);
  // Lossy: a key frame's start code, then 14-bit width and height (RFC 6386 9.1). Lossless: its signature byte 0x2f,
  // then 14-bit width and height less one; extended: the canvas size less one, 24 bits each (RFC 9649).
  if (chunk === 'VP8 ') {
    if (b[23] !== 0x9d || b[24] !== 0x01 || b[25] !== 0x2a) return null;
    const size = { width: b.readUInt16LE(26) & 0x3fff, height: b.readUInt16LE(28) & 0x3fff };
    return size.width > 0 && size.height > 0 ? size : null;
  }
  if (chunk === 'VP8L') {
    if (b[20] !== 0x2f) return null;
    const bits = b.readUInt32LE(21);
    return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1 };
  }
  if (chunk === 'VP8X') return { width: b.readUIntLE(24, 3) + 1, height: b.readUIntLE(27, 3) + 1 };
  return null;
}

function jpeg(b: Buffer): PixelSize | null {
  if (b.length < 4 || b[0] !== 0xff || b[1] !== 0xd8) return null;
  let i = 2;
  while (i + 9 < b.length) {
    if (b[i] !== 0xff) return null;
    const marker = b[i + 1]!;
    // Fill bytes, and the markers that carry no length.
    if (marker === 0xff) {
      i++;
      continue;
    }
    if (marker === 0xd8 || marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      i += 2;
      continue;
    }
    // Start of frame (any coding but DHT, JPG, DAC): precision, height, width.
    if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
      // A height of 0 is left to a DNL marker after the first scan (ITU T.81 B.2.2), which libjpeg does not read.
      const size = { width: b.readUInt16BE(i + 7), height: b.readUInt16BE(i + 5) };
      return size.width > 0 && size.height > 0 ? size : null;
    }
    i += 2 + b.readUInt16BE(i + 2);
  }
  return null;
}

/** The pixel size in an image's leading bytes, or null when the bytes hold no header of a format read here. */
export function imageSize(bytes: Buffer): PixelSize | null {
  return png(bytes) ?? jpeg(bytes) ?? gif(bytes) ?? webp(bytes);
}

/**
 * What an uploaded image's header tells, read without decoding it: a PNG, JPEG or WebP image (by its first bytes) of
 * `width` x `height` within `maxPixels`; else why not: `format` (not one of the three), `header` (its header cannot
 * be read: cut short, or values its format does not allow), `pixels` (more than `maxPixels`).
 */
export type HeaderProbe =
  | { readonly ok: true; readonly format: ImageFormat; readonly width: number; readonly height: number }
  | { readonly ok: false; readonly why: 'format' }
  | { readonly ok: false; readonly why: 'header'; readonly format: ImageFormat }
  | {
      readonly ok: false;
      readonly why: 'pixels';
      readonly format: ImageFormat;
      readonly width: number;
      readonly height: number;
    };

/** Probe an uploaded image's header (HeaderProbe): the check every reader of uploads runs before any hold. */
export function probeHeader(bytes: Buffer, maxPixels: number): HeaderProbe {
  const format = imageFormat(bytes);
  if (format === null) return { ok: false, why: 'format' };
  const size = format === 'png' ? png(bytes) : format === 'jpeg' ? jpeg(bytes) : webp(bytes);
  if (size === null) return { ok: false, why: 'header', format };
  if (size.width * size.height > maxPixels) return { ok: false, why: 'pixels', format, ...size };
  return { ok: true, format, ...size };
}

/** Base64 characters decoded to find a header: a JPEG's frame header may follow tens of KB of metadata. */
const HEAD_CHARS = 256 * 1024;

/** The pixel size of a base64-encoded image, from its header. */
export function base64ImageSize(b64: string): PixelSize | null {
  const head = b64.length <= HEAD_CHARS ? b64 : b64.slice(0, HEAD_CHARS);
  return imageSize(Buffer.from(head, 'base64'));
}
