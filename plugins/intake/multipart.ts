/**
 * The one reader of multipart/form-data uploads (image edits, video submits): text fields and image files, each
 * endpoint with its own limits (intake/limits.ts), enforced while the bytes arrive: a part over its limit stops the
 * read, the rest is never buffered, and the connection is closed behind the answer (closeUnreadUpload). A file's
 * format is decided by its first bytes (PNG, JPEG or WebP, whatever the part's declared type says) and its pixel size
 * by its header (policies/image-size.ts probeHeader), all before any hold; nothing is decoded here (intake/images.ts,
 * once the hold is placed).
 *
 * One set of refusals for every endpoint:
 * - 413 reference_too_large: a file over its bytes, or the files over their total. A byte limit passed is 413 as the
 *   body's own limit is (request_too_large, RFC 9110 15.5.14 "Content Too Large"): the request is refused for its
 *   size alone, before it was read to its end, and its connection is closed (which a 413 lets the server do).
 * - 400 too_many_references: more files than the endpoint takes.
 * - 400 invalid_reference_image: a file that is empty, not PNG, JPEG or WebP by its bytes, whose header cannot be read
 *   or announces more pixels than taken.
 * - 400 invalid_request: a body that is not a readable form, a file in a field not taken, a text field over its bytes
 *   (as the same field in a JSON body is refused by its schema), too many fields or parts.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { GatewayError } from '../../policies/errors.js';
import { imageFormat, probeHeader, type ImageFormat } from '../../policies/image-size.js';

/** Limits of one endpoint's uploads, enforced while they are read. */
export interface UploadLimits {
  /** File fields taken, as sent -> as reported (`image[]` -> `image`); a file in any other field is refused. */
  readonly files: Readonly<Record<string, string>>;
  /** Most files in all. */
  readonly maxFiles: number;
  /** Most bytes of one file. */
  readonly maxFileBytes: number;
  /** Most bytes of all files together. */
  readonly maxTotalBytes: number;
  /** Most text fields, and bytes of one. */
  readonly maxFields: number;
  readonly maxFieldBytes: number;
  /** Most pixels of one image, as its header announces them. */
  readonly maxPixels: number;
}

/** One uploaded image file, its format read from its bytes. */
export interface UploadedImage {
  /** The field it came in, as `UploadLimits.files` reports it. */
  readonly field: string;
  /** Its position among the files of its field, from 1. */
  readonly index: number;
  readonly filename: string;
  readonly format: ImageFormat;
  readonly bytes: Buffer;
}

/** An upload: its text fields (a repeated field: the last value) and its image files in the order sent. */
export interface UploadForm {
  readonly fields: Record<string, string>;
  readonly files: UploadedImage[];
}

type Part =
  | { type: 'file'; fieldname: string; filename: string; file: AsyncIterable<Buffer> & { truncated?: boolean } }
  | { type: 'field'; fieldname: string; value: unknown; valueTruncated?: boolean; fieldnameTruncated?: boolean };

interface MultipartRequest {
  isMultipart(): boolean;
  parts(opts?: { limits?: Record<string, number>; throwFileSizeLimit?: boolean }): AsyncIterableIterator<Part>;
}

/**
 * Register @fastify/multipart in `app`'s context, once (the image and video endpoints share it). Files are read
 * only by readUpload, which gives each upload its endpoint's limits.
 */
export async function registerMultipart(app: FastifyInstance): Promise<void> {
  if (app.hasRequestDecorator('isMultipart')) return;
  const multipart = (await import('@fastify/multipart')).default;
  await app.register(multipart, { throwFileSizeLimit: false });
}

/** Whether the request carries multipart/form-data (only after registerMultipart). */
export function isMultipartRequest(request: FastifyRequest): boolean {
  const r = request as unknown as Partial<MultipartRequest>;
  return typeof r.isMultipart === 'function' && r.isMultipart();
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

const MiB = 1024 * 1024;

/** A byte limit as written: whole decimal megabytes (7 MB), else binary ones (3.5 MB), and the exact bytes. */
export function mb(bytes: number): string {
  const n = bytes % 1_000_000 === 0 ? bytes / 1_000_000 : +(bytes / MiB).toFixed(2);
  return `${n} MB (${bytes.toLocaleString('en-US')} bytes)`;
}

/** A pixel limit as written: a square's sides (8192 x 8192 pixels), else megapixels (40 megapixels). */
export function pixels(max: number): string {
  const side = Math.sqrt(max);
  return Number.isInteger(side) ? `${side} x ${side} pixels` : `${max / 1e6} megapixels`;
}

/** The 400 of one uploaded image, naming it (`input_reference 2`). */
export function refuseImage(img: { readonly field: string; readonly index: number }, why: string): GatewayError {
  return new GatewayError('invalid_reference_image', { param: img.field, message: `${img.field} ${img.index}${why}` });
}

/**
 * Read an upload within `limits`, refusing as soon as one is passed: a file over maxFileBytes or a total over
 * maxTotalBytes stops the read at that byte, a file whose first bytes are not PNG, JPEG or WebP stops it there; a file
 * whose header cannot be read or announces more than maxPixels is refused when it ends. `onField` sees each text field
 * as it arrives (it may throw: an unknown model is refused before any file is read).
 */
export async function readUpload(
  request: FastifyRequest,
  limits: UploadLimits,
  onField?: (name: string, value: string) => void,
): Promise<UploadForm> {
  const fields: Record<string, string> = {};
  const files: UploadedImage[] = [];
  const perField = new Map<string, number>();
  let total = 0;
  const parts = (request as unknown as MultipartRequest).parts({
    // One past each of the gateway's limits, so that passing it is seen here (busboy only truncates at its own).
    limits: {
      fileSize: limits.maxFileBytes + 1,
      files: limits.maxFiles + 1,
      fields: limits.maxFields + 1,
      fieldSize: limits.maxFieldBytes + 1,
      parts: limits.maxFiles + limits.maxFields + 2,
      fieldNameSize: 200,
      headerPairs: 100,
    },
    throwFileSizeLimit: false,
  });
  try {
    for await (const part of parts) {
      if (part.type === 'field') {
        if (Object.keys(fields).length >= limits.maxFields && !Object.hasOwn(fields, part.fieldname)) {
          throw new GatewayError('invalid_request', { message: `At most ${limits.maxFields} text fields.` });
        }
        const value = String(part.value);
        if (part.valueTruncated || part.fieldnameTruncated || Buffer.byteLength(value) > limits.maxFieldBytes) {
          throw new GatewayError('invalid_request', {
            param: part.fieldname,
            message: `${part.fieldname}: at most ${limits.maxFieldBytes.toLocaleString('en-US')} bytes.`,
          });
        }
        fields[part.fieldname] = value;
        onField?.(part.fieldname, value);
        continue;
      }
      const field = Object.hasOwn(limits.files, part.fieldname) ? limits.files[part.fieldname]! : undefined;
      if (field === undefined) {
        throw new GatewayError('invalid_request', {
          param: part.fieldname,
          message: `Unexpected file field ${JSON.stringify(part.fieldname)}; files go in ${Object.keys(limits.files).join(', ')}.`,
        });
      }
      if (files.length >= limits.maxFiles) {
        throw new GatewayError('too_many_references', {
          param: field,
          message: `At most ${limits.maxFiles} image files in one request.`,
        });
      }
      const index = (perField.get(field) ?? 0) + 1;
      perField.set(field, index);
      files.push(await readFile(part, { field, index }, limits, total));
      total += files.at(-1)!.bytes.length;
    }
  } catch (err) {
    throw formError(err);
  }
  return { fields, files };
}

/** Read one file within the limits; `before` is what the files before it took. */
async function readFile(
  part: Extract<Part, { type: 'file' }>,
  at: { field: string; index: number },
  limits: UploadLimits,
  before: number,
): Promise<UploadedImage> {
  const name = `${at.field} ${at.index}`;
  const tooLarge = (message: string) => new GatewayError('reference_too_large', { param: at.field, message });
  const chunks: Buffer[] = [];
  let size = 0;
  let format: ImageFormat | null = null;
  for await (const chunk of part.file) {
    size += chunk.length;
    if (size > limits.maxFileBytes) throw tooLarge(`${name} is over ${mb(limits.maxFileBytes)}.`);
    if (before + size > limits.maxTotalBytes)
      throw tooLarge(`The image files are over ${mb(limits.maxTotalBytes)} in total.`);
    chunks.push(chunk);
    // Refused by its first bytes, before the rest of it is read.
    if (format === null && size >= 12) {
      format = imageFormat(chunks.length === 1 ? chunk : Buffer.concat(chunks));
      if (format === null) throw refuseImage(at, ' is not a PNG, JPEG or WebP image (by its bytes).');
    }
  }
  if (part.file.truncated) throw tooLarge(`${name} is over ${mb(limits.maxFileBytes)}.`);
  if (size === 0) throw refuseImage(at, ' is empty.');
  const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
  // What the header says is all that is known before the hold; the pixels are decoded after it (intake/images.ts).
  const probe = probeHeader(bytes, limits.maxPixels);
  if (probe.ok) return { ...at, filename: part.filename, format: probe.format, bytes };
  if (probe.why === 'format') throw refuseImage(at, ' is not a PNG, JPEG or WebP image (by its bytes).');
  if (probe.why === 'header') throw refuseImage(at, `: its ${probe.format.toUpperCase()} header cannot be read.`);
  throw refuseImage(at, `: ${probe.width}x${probe.height} is over ${pixels(limits.maxPixels)}.`);
}

/** A multipart parser's failure as the caller's 400 (busboy and @fastify/multipart say what broke). */
function formError(err: unknown): unknown {
  if (err instanceof GatewayError) return err;
  const e = err as { code?: string; message?: string };
  if (e.code === 'FST_FILES_LIMIT') return new GatewayError('too_many_references', { cause: err });
  if (e.code === 'FST_PARTS_LIMIT' || e.code === 'FST_FIELDS_LIMIT')
    return new GatewayError('invalid_request', { param: 'body', message: 'The form has too many parts.', cause: err });
  if (
    e.code?.startsWith('FST_') ||
    /multipart|Part terminated|Unexpected end of form|Malformed/i.test(e.message ?? '')
  ) {
    return new GatewayError('invalid_request', {
      param: 'body',
      message: `The multipart/form-data body could not be read: ${String(e.message ?? 'malformed').slice(0, 200)}.`,
      cause: err,
    });
  }
  return err;
}
