/**
 * Reference images of image and video calls: multipart uploads read with their limits enforced while the bytes
 * arrive (a part over its limit stops the read, the rest is never buffered), the format decided by the bytes (PNG,
 * JPEG or WebP, whatever the part's declared type says) and the pixel size by the header (policies/image-size.ts
 * probeHeader), all before any hold. Only a call whose hold is placed has its images decoded with sharp (the
 * endpoint's prepare phase, plugins/hooks/prepare.ts) and prepared for the upstream: transparency flattened onto a
 * solid background, EXIF orientation applied, and a frame fitted to the output size (cover-cropped, or contained with
 * nothing cropped) when the endpoint asks. An image that needs none of this goes upstream byte for byte.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type sharpType from 'sharp';
import { GatewayError } from '../../policies/errors.js';
import { IMAGE_MIME, imageSize, probeHeader, type ImageFormat } from '../../policies/image-size.js';

/** Pixels one reference image may have, checked from its header before it is decoded (a small file can hold a huge image). */
export const MAX_IMAGE_PIXELS = 40_000_000;
/** What transparency is flattened onto. */
export const FLATTEN_BACKGROUND = { r: 255, g: 255, b: 255 } as const;
/** What pads a contained frame to the output size (as a player letterboxes a frame). */
export const PAD_BACKGROUND = { r: 0, g: 0, b: 0 } as const;

let sharpModule: Promise<typeof sharpType> | undefined;

/** sharp, imported on the first image: a gateway that serves only text never maps libvips. */
export function loadSharp(): Promise<typeof sharpType> {
  sharpModule ??= import('sharp').then((m) => m.default);
  return sharpModule;
}

/** Limits of one multipart upload, enforced while it is read. */
export interface ImagePartLimits {
  /** File fields taken, as sent -> as reported (`image[]` -> `image`); a file in any other field is refused. */
  readonly files: Readonly<Record<string, string>>;
  /** Most files in all (more: 400 too_many_references). */
  readonly maxFiles: number;
  /** Most bytes of one file (more: 400 reference_too_large). */
  readonly maxFileBytes: number;
  /** Most bytes of all files together (more: 400 reference_too_large). */
  readonly maxTotalBytes: number;
  /** Most text fields, and bytes of one (more: 400 invalid_request). */
  readonly maxFields: number;
  readonly maxFieldBytes: number;
  /** Most pixels of one image, as its header announces them (more: 400 invalid_reference_image). */
  readonly maxPixels: number;
}

/** One uploaded image file, its format read from its bytes. */
export interface UploadedImage {
  /** The field it came in, as `ImagePartLimits.files` reports it. */
  readonly field: string;
  /** Its position among the files of its field, from 1. */
  readonly index: number;
  readonly filename: string;
  readonly format: ImageFormat;
  readonly bytes: Buffer;
}

/** A multipart form: its text fields (a repeated field: the last value) and its image files in the order sent. */
export interface ImageForm {
  readonly fields: Record<string, string>;
  readonly files: UploadedImage[];
}

type Part =
  | { type: 'file'; fieldname: string; filename: string; file: AsyncIterable<Buffer> & { truncated?: boolean } }
  | { type: 'field'; fieldname: string; value: unknown; valueTruncated?: boolean };

interface MultipartRequest {
  isMultipart(): boolean;
  parts(opts?: { limits?: Record<string, number>; throwFileSizeLimit?: boolean }): AsyncIterableIterator<Part>;
}

/**
 * Register @fastify/multipart in `app`'s context, once (the image and video endpoints share it). Files are read
 * only by readImageParts, which gives each upload its own limits.
 */
export async function registerMultipart(app: FastifyInstance): Promise<void> {
  if (app.hasRequestDecorator('isMultipart')) return;
  const multipart = (await import('@fastify/multipart')).default;
  await app.register(multipart, { throwFileSizeLimit: false });
}

/**
 * How long a connection whose upload was refused before its end is still read (and what arrives dropped) after its
 * answer, before it is destroyed.
 */
export const LINGER_MS = 2_000;

/**
 * After a refusal of an upload not read to its end (a limit passed while it arrived, a file refused at its end with
 * parts still to come, a refused key): the answer says `connection: close` and the connection is closed behind it.
 * The rest of the body is not read to keep the connection: left unread, it stalls the next request on it; read to its
 * end, it would take whatever a refused caller chooses to send, without bound. The close is staged (RFC 9112 9.6):
 * the answer, then the gateway's FIN, then what still arrives is read and dropped until the caller closes or LINGER_MS
 * pass; closing at once would reset the connection and could lose the answer. HTTP/1.x only: an HTTP/2 stream has no
 * connection of its own to close.
 */
export function closeUnreadUpload(request: FastifyRequest, reply: FastifyReply): void {
  const raw = request.raw;
  if (raw.complete && raw.readableLength === 0) return;
  const socket = raw.socket;
  if (raw.httpVersionMajor !== 1 || !socket || socket.destroyed) return;
  reply.header('connection', 'close');
  reply.raw.once('finish', () => {
    // Node's own close after a `connection: close` answer (net.Socket destroySoon) ends the socket's write side and
    // destroys it once that is flushed; the socket stays open for reading instead, until the caller's FIN ends it
    // (net.Socket autoDestroy) or the linger is over. This leans on how Node 20 to 26 order those listeners: on a
    // Node that destroyed the socket already, the close was immediate (the answer may reach the caller reset).
    if (socket.destroyed) return;
    socket.removeListener('finish', socket.destroy);
    const linger = setTimeout(() => socket.destroy(), LINGER_MS);
    linger.unref();
    socket.once('close', () => clearTimeout(linger));
    // The HTTP parser hands the rest of the body to the request: flowing with no reader, it is dropped.
    raw.resume();
  });
}

/** Whether the request carries multipart/form-data (only after registerMultipart). */
export function isMultipartRequest(request: FastifyRequest): boolean {
  const r = request as unknown as Partial<MultipartRequest>;
  return typeof r.isMultipart === 'function' && r.isMultipart();
}

const MiB = 1024 * 1024;

function mb(bytes: number): string {
  return `${+(bytes / MiB).toFixed(2)} MB (${bytes.toLocaleString('en-US')} bytes)`;
}

/**
 * Read a multipart form of text fields and image files, refusing as soon as a limit is passed: a file over
 * maxFileBytes or a total over maxTotalBytes stops the read at that byte; a file in a field not taken, a file whose
 * bytes are not PNG, JPEG or WebP, whose header cannot be read or announces more than maxPixels, is refused when it
 * ends. Nothing is decoded here.
 */
export async function readImageParts(request: FastifyRequest, limits: ImagePartLimits): Promise<ImageForm> {
  const fields: Record<string, string> = {};
  const files: UploadedImage[] = [];
  const perField = new Map<string, number>();
  let total = 0;
  const parts = (request as unknown as MultipartRequest).parts({
    // One byte over each limit, so that passing it is seen here (busboy only truncates at its limit).
    limits: { fileSize: limits.maxFileBytes + 1, files: limits.maxFiles + 1, fields: limits.maxFields + 1, fieldSize: limits.maxFieldBytes + 1, parts: limits.maxFiles + limits.maxFields + 2 },
    throwFileSizeLimit: false,
  });
  try {
    for await (const part of parts) {
      if (part.type === 'field') {
        if (Object.keys(fields).length >= limits.maxFields && !(part.fieldname in fields)) {
          throw new GatewayError('invalid_request', { message: `At most ${limits.maxFields} text fields.` });
        }
        const value = String(part.value);
        if (part.valueTruncated || Buffer.byteLength(value) > limits.maxFieldBytes) {
          throw new GatewayError('invalid_request', { param: part.fieldname, message: `${part.fieldname}: at most ${limits.maxFieldBytes.toLocaleString('en-US')} bytes.` });
        }
        fields[part.fieldname] = value;
        continue;
      }
      const field = Object.hasOwn(limits.files, part.fieldname) ? limits.files[part.fieldname]! : undefined;
      if (field === undefined) {
        throw new GatewayError('invalid_request', { param: part.fieldname, message: `Unexpected file field ${JSON.stringify(part.fieldname)}; files go in ${Object.keys(limits.files).join(', ')}.` });
      }
      if (files.length >= limits.maxFiles) {
        throw new GatewayError('too_many_references', { param: field, message: `At most ${limits.maxFiles} image files in one request.` });
      }
      const index = (perField.get(field) ?? 0) + 1;
      perField.set(field, index);
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of part.file) {
        size += chunk.length;
        total += chunk.length;
        if (size > limits.maxFileBytes) {
          throw new GatewayError('reference_too_large', { param: field, message: `${field} ${index} is over ${mb(limits.maxFileBytes)}.` });
        }
        if (total > limits.maxTotalBytes) {
          throw new GatewayError('reference_too_large', { param: field, message: `The image files are over ${mb(limits.maxTotalBytes)} in total.` });
        }
        chunks.push(chunk);
      }
      const bytes = Buffer.concat(chunks, size);
      const probe = probeHeader(bytes, limits.maxPixels);
      if (!probe.ok) {
        const name = `${field} ${index}`;
        const message = probe.why === 'format'
          ? `${name} is not a PNG, JPEG or WebP image (by its bytes).`
          : probe.why === 'header' ? `${name}: its ${probe.format.toUpperCase()} header cannot be read.` : `${name}: ${tooMany(probe.width, probe.height, limits.maxPixels)}`;
        throw new GatewayError('invalid_reference_image', { param: field, message });
      }
      files.push({ field, index, filename: part.filename, format: probe.format, bytes });
    }
  } catch (err) {
    throw formError(err);
  }
  return { fields, files };
}

/** A multipart parser's failure as the caller's 400 (busboy and @fastify/multipart say what broke). */
function formError(err: unknown): unknown {
  if (err instanceof GatewayError) return err;
  const e = err as { code?: string; message?: string };
  if (e.code === 'FST_FILES_LIMIT') return new GatewayError('too_many_references', { cause: err });
  if (e.code?.startsWith('FST_') || /multipart|Part terminated|Unexpected end of form|Malformed/i.test(e.message ?? '')) {
    return new GatewayError('invalid_request', { message: `The multipart/form-data body could not be read: ${e.message ?? 'malformed'}.`, cause: err });
  }
  return err;
}

function tooMany(width: number, height: number, max = MAX_IMAGE_PIXELS): string {
  return `${width}x${height} is over ${max / 1e6} megapixels.`;
}

/** An uploaded image, decoded. */
export interface DecodedImage extends UploadedImage {
  readonly width: number;
  readonly height: number;
  readonly hasAlpha: boolean;
  /** EXIF orientation other than upright: the pixels are turned before they go upstream. */
  readonly rotated: boolean;
}

/**
 * Decode an upload whole and check it is a whole image of the format its bytes announce, at most MAX_IMAGE_PIXELS
 * (400 invalid_reference_image otherwise). Run only for a call whose hold is placed: its reader checked the header.
 */
export async function decodeImage(img: UploadedImage): Promise<DecodedImage> {
  const refuse = (why: string) => new GatewayError('invalid_reference_image', { param: img.field, message: `${img.field} ${img.index}: ${why}` });
  // The header's size first: a few bytes can announce more pixels than are worth decoding.
  const announced = imageSize(img.bytes);
  if (announced && announced.width * announced.height > MAX_IMAGE_PIXELS) throw refuse(tooMany(announced.width, announced.height));
  const sharp = await loadSharp();
  let meta: Awaited<ReturnType<ReturnType<typeof sharpType>['metadata']>>;
  try {
    meta = await sharp(img.bytes, { limitInputPixels: false }).metadata();
  } catch (err) {
    throw Object.assign(refuse('the image cannot be decoded.'), { cause: err });
  }
  if (meta.format !== img.format || !meta.width || !meta.height) throw refuse(`the bytes are not a whole ${img.format.toUpperCase()} image.`);
  if (meta.width * meta.height > MAX_IMAGE_PIXELS) {
    throw refuse(tooMany(meta.width, meta.height));
  }
  // Decoding the pixels finds a truncated or corrupt body that the header alone does not.
  try {
    await sharp(img.bytes, { failOn: 'error' }).stats();
  } catch (err) {
    throw Object.assign(refuse('the image is truncated or corrupt.'), { cause: err });
  }
  return { ...img, width: meta.width, height: meta.height, hasAlpha: meta.hasAlpha === true, rotated: (meta.orientation ?? 1) !== 1 };
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
export async function decodeInOrder<T>(decodes: readonly (() => Promise<T>)[], observe: (seconds: number) => void, left: () => boolean): Promise<T[]> {
  const out: T[] = [];
  for (const decode of decodes) {
    if (left()) throw new CallerLeft();
    out.push(await inDecodeSlot(async () => {
      const start = process.hrtime.bigint();
      try {
        return await decode();
      } finally {
        observe(Number(process.hrtime.bigint() - start) / 1e9);
      }
    }));
  }
  return out;
}

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
    return { field: img.field, format: img.format, mimeType: IMAGE_MIME[img.format], bytes: img.bytes, width: img.width, height: img.height };
  }
  const sharp = await loadSharp();
  let p = sharp(img.bytes).rotate();
  if (img.hasAlpha) p = p.flatten({ background: FLATTEN_BACKGROUND });
  if (how.fit === 'cover') p = p.resize(how.width, how.height, { fit: 'cover', position: 'centre' });
  else if (how.fit === 'contain') p = p.resize(how.width, how.height, { fit: 'contain', background: PAD_BACKGROUND });
  p = img.format === 'png' ? p.png() : img.format === 'jpeg' ? p.jpeg({ quality: 95 }) : p.webp({ quality: 95 });
  const { data, info } = await p.toBuffer({ resolveWithObject: true });
  return { field: img.field, format: img.format, mimeType: IMAGE_MIME[img.format], bytes: data, width: info.width, height: info.height };
}
