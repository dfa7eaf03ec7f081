/**
 * What the image adapters (protocols/<name>/images.ts) share: the reference images and caller fields they take, an
 * upstream request, a reader of a 2xx answer that hands the image's base64 to a sink as it arrives, and the first
 * characters of that base64 checked for an image before anyone is told there is one (so a 200 head is written only
 * once an image is certain).
 */
import type { Readable } from 'node:stream';
import type { ExchangeRequest } from './exchange.js';
import { imageFormat, imageSize, type ImageFormat } from '../../policies/image-size.js';
import { GatewayError } from '../../policies/errors.js';

/** A reference image of an edit, as police read and checked it. */
export interface ReferenceImage {
  readonly bytes: Buffer;
  readonly format: ImageFormat;
}

/** What the caller's own fields become upstream: those sent, and those dropped (named in x-gw-dropped-fields). */
export interface CallerFields {
  readonly fields: Readonly<Record<string, unknown>>;
  readonly dropped: readonly string[];
}

/** The 400 of a field the image endpoints do not take. */
export function unknownField(name: string): GatewayError {
  return new GatewayError('invalid_request', {
    param: name.slice(0, 100),
    message: `${name.slice(0, 100)}: not a field of the image endpoints (SPEC "Image generation request"; see README "Images" for the provider fields taken).`,
  });
}

/** Receives one image's base64 as the answer is read. */
export interface ImageSink {
  /** An image is certain: its base64 starts with the signature of `format`. */
  begin(format: ImageFormat): void;
  /** The next base64 characters of it. */
  piece(b64: Buffer): void;
  /** Its base64 string ended. */
  end(): void;
}

/** What a reader found once the answer ended. */
export interface ImageAnswerEnd {
  /** A whole image was read: its string began with an image signature and closed, in a whole JSON answer. */
  readonly image: boolean;
  /** The provider's `created` (Unix seconds), if it gave one. */
  readonly created?: number;
  /** Usage in OpenAI's ImageGenUsage shape, when the provider reported it. */
  readonly usage?: Record<string, unknown>;
  /** Why there is no image: a refusal (400 content_refused) or a failure (502); null with an image. */
  readonly failure: GatewayError | null;
}

/** Reads one protocol's 2xx answer, chunk by chunk. */
export interface ImageAnswerReader {
  feed(chunk: Buffer): void;
  end(): ImageAnswerEnd;
}

/** One upstream image call, as an adapter builds it. */
export interface ImageUpstreamRequest extends ExchangeRequest {
  /** The body; a stream when it carries reference images (content-length set in headers). */
  readonly body: string | Readable;
  /** A reader of the 2xx answer, reporting the image to `sink`. */
  reader(sink: ImageSink): ImageAnswerReader;
  /** The GatewayError of a non-2xx answer (`body`: its first 64 KiB). */
  error(status: number, body: string, retryAfter: string | undefined): GatewayError;
}

/** Base64 characters that hold 12 bytes: enough for any signature imageFormat knows. */
const SNIFF_CHARS = 16;

/**
 * Between a reader and its sink: holds the first 16 base64 characters of a string, decodes them, and begins the
 * sink only if they start an image; a string that does not is dropped.
 */
export class ImageString {
  private held: Buffer[] = [];
  private heldChars = 0;
  private state: 'sniffing' | 'image' | 'other' = 'sniffing';
  /** The string closed. */
  ended = false;

  constructor(private readonly sink: ImageSink) {}

  /** Whether the string began with an image signature. */
  get isImage(): boolean {
    return this.state === 'image';
  }

  piece(p: Buffer): void {
    if (this.state === 'image') {
      this.sink.piece(p);
      return;
    }
    if (this.state === 'other') return;
    this.held.push(Buffer.from(p));
    this.heldChars += p.length;
    if (this.heldChars >= SNIFF_CHARS) this.decide();
  }

  end(): void {
    if (this.state === 'sniffing') this.decide();
    this.ended = true;
    if (this.state === 'image') this.sink.end();
  }

  private decide(): void {
    const head = Buffer.concat(this.held);
    const format = imageFormat(Buffer.from(head.toString('latin1', 0, SNIFF_CHARS), 'base64'));
    this.held = [];
    if (format === null) {
      this.state = 'other';
      return;
    }
    this.state = 'image';
    this.sink.begin(format);
    this.sink.piece(head);
  }
}

/** Base64 characters kept to find an image's pixel size: a JPEG's frame header may follow tens of KB of metadata. */
const HEAD_CHARS = 256 * 1024;

/** Reads an image's pixel size from the first pieces of its base64, as they pass, keeping at most HEAD_CHARS. */
export class ImageHeadProbe {
  private held: Buffer[] = [];
  private chars = 0;
  private done = false;
  /** width x height, once read; null until then (or for good, past HEAD_CHARS). */
  pixels: number | null = null;

  /** `pixels` is final: read, or given up past HEAD_CHARS. */
  get decided(): boolean {
    return this.done;
  }

  add(b64: Buffer): void {
    if (this.done) return;
    this.held.push(Buffer.from(b64));
    this.chars += b64.length;
    const whole = Math.min(this.chars, HEAD_CHARS) & ~3;
    if (whole < 32) return;
    const head = Buffer.concat(this.held);
    const size = imageSize(Buffer.from(head.toString('latin1', 0, whole), 'base64'));
    if (size !== null) this.pixels = size.width * size.height;
    if (size !== null || this.chars >= HEAD_CHARS) {
      this.done = true;
      this.held = [];
    } else {
      this.held = [head];
    }
  }
}

/** Decodes base64 pieces into one Buffer as they come: four characters at a time, the rest carried over. */
export class Base64Bytes {
  private buf: Buffer;
  private size = 0;
  private carry = '';
  /** More than `max` bytes arrived: the image is not kept. */
  over = false;

  constructor(
    /** Bytes the image can take at most (from the answer's content-length), to allocate once; 0: unknown. */
    capacity: number,
    private readonly max: number,
  ) {
    this.buf = Buffer.allocUnsafe(Math.min(Math.max(capacity, 64 * 1024), max));
  }

  add(b64: Buffer): void {
    if (this.over) return;
    const text = this.carry + b64.toString('latin1');
    const whole = text.length - (text.length % 4);
    this.carry = text.slice(whole);
    if (whole === 0) return;
    const need = this.size + (whole / 4) * 3;
    if (need > this.max) {
      this.over = true;
      return;
    }
    if (need > this.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.min(this.max, Math.max(need, this.buf.length * 2)));
      this.buf.copy(bigger, 0, 0, this.size);
      this.buf = bigger;
    }
    this.size += this.buf.write(text.slice(0, whole), this.size, 'base64');
  }

  /** The decoded bytes (a view, not a copy). */
  bytes(): Buffer {
    if (this.carry !== '' && !this.over) {
      if (this.size + 3 > this.buf.length) {
        const bigger = Buffer.allocUnsafe(this.size + 3);
        this.buf.copy(bigger, 0, 0, this.size);
        this.buf = bigger;
      }
      this.size += this.buf.write(this.carry, this.size, 'base64');
      this.carry = '';
    }
    return this.buf.subarray(0, this.size);
  }
}
