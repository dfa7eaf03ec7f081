/**
 * One image call's upstream exchange, and how its image reaches the caller (`ImageDelivery`):
 * - pass: the provider's own ImagesResponse (OpenAI protocol, b64_json) goes through byte for byte as it arrives,
 *   its 200 head (and the bytes before it) held back until the image's first characters show an image and its
 *   header its pixels, so a provider that hangs up or answers without one still gets the caller a 502, and the head
 *   can say the price of the class rendered (x-gw-price); its reader checks that the answer held a whole image.
 * - convert: a Gemini answer becomes an ImagesResponse while it is read: the 200 head and
 *   `{"created":..,"output_format":..,"data":[{"b64_json":"` are written once the image's first base64 characters
 *   show an image signature and its header its pixels, then its base64 goes out slice by slice as it arrives, and
 *   the usage closes the body. What waits for the pixels is at most the probe's 256 KiB of base64 (ImageHeadProbe):
 *   a PNG's are in its first 32 characters, a JPEG's after its metadata.
 * - store (url): the image's base64 is decoded as it arrives into one buffer, within the room reserved for it
 *   before the call (plugins/store/image-store.ts), stored in that room, and answered as `{"created":..,"data":[{"url":..}]}`.
 * So an image is held whole only where the caller asked for a URL. What billing reads (call.exchange): the image's
 * base64 characters handed to the caller (`imageChars`: an image whose delivery began is paid for, whatever the
 * caller does after), whether the provider's answer broke off without a whole image (`imageBroken`: free), the
 * image's pixels from its header (`imagePixels`: the class it is billed at), and `delivered`, set when the body that
 * carries the image (or its URL) is ended. An answer without an image is the refusal or error it was, and a
 * failure before the head is a 502 or 504; after the head the caller's answer is cut, as the provider's was, unless
 * the image was already whole (convert): then the body is closed and the image counts as delivered.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Metrics } from '../metrics/metrics.js';
import type { ImageReservation, ImageStore } from '../store/image-store.js';
import { GatewayError } from '../../policies/errors.js';
import { IMAGE_MIME, type ImageFormat } from '../../policies/image-size.js';
import { sendUpstreamError, UpstreamExchange, type ExchangeOwner } from './exchange.js';
import {
  Base64Bytes,
  ImageHeadProbe,
  type ImageAnswerEnd,
  type ImageAnswerReader,
  type ImageSink,
  type ImageUpstreamRequest,
} from './image-answer.js';
import type { Upstreams } from './pools.js';

/** How the caller receives the image. */
export type ImageDelivery =
  | { readonly kind: 'pass' }
  | { readonly kind: 'convert' }
  | {
      readonly kind: 'store';
      readonly store: ImageStore;
      readonly reservation: ImageReservation;
      readonly urlOf: (id: string) => string;
    };

/**
 * Send an image call upstream; the caller is answered by the exchange. `price` answers the x-gw-price of the image
 * once delivered, asked when the head goes out (call.exchange then knows its pixels). Returns the reply, sent later.
 */
export function exchangeImage(
  upstreams: Upstreams,
  reply: FastifyReply,
  call: ExchangeOwner,
  req: ImageUpstreamRequest,
  delivery: ImageDelivery,
  price: () => string,
  metrics?: Metrics,
): FastifyReply {
  return new ImageExchange(upstreams, reply, call, { delivered: 0 }, req, metrics, delivery, price).dispatch();
}

/**
 * The most of a passed answer held before its image's string begins: an ImagesResponse puts a few small fields
 * (created, background, a revised prompt) before `data[0].b64_json`. Past it the provider is broken: 502.
 */
const PASS_HEAD_MAX_BYTES = 1024 * 1024;

class ImageExchange extends UpstreamExchange<ImageUpstreamRequest> {
  private reader: ImageAnswerReader | undefined;
  /** The image's signature was read (pass, convert): its head waits for its pixels. */
  private imageSeen = false;
  /** The head is written (pass, convert). */
  private began = false;
  /** pass: the upstream's head, and its bytes not yet written. convert: the image's base64 not yet written. */
  private upstreamHeaders: IncomingHttpHeaders | null = null;
  private held: Buffer[] = [];
  /** pass: bytes in `held` before the image's string began (PASS_HEAD_MAX_BYTES). */
  private headBytes = 0;
  /** Image characters in `held`: handed to the caller (imageChars) when the head goes out. */
  private heldChars = 0;
  /** convert: the head of the body, written with the first slice. */
  private prefix = '';
  /** The image's string closed. */
  private imageDone = false;
  private format: ImageFormat | undefined;
  private bytes: Base64Bytes | undefined;
  private readonly probe = new ImageHeadProbe();

  constructor(
    upstreams: Upstreams,
    reply: FastifyReply,
    call: ExchangeOwner,
    exchange: { delivered: number },
    req: ImageUpstreamRequest,
    metrics: Metrics | undefined,
    private readonly delivery: ImageDelivery,
    private readonly price: () => string,
  ) {
    super(upstreams, reply, call, exchange, req, metrics);
  }

  protected override failure(status: number, text: string, retryAfter: string | undefined): GatewayError {
    return this.req.error(status, text, retryAfter);
  }

  protected start(_statusCode: number, headers: IncomingHttpHeaders): void {
    switch (this.delivery.kind) {
      case 'pass':
        this.upstreamHeaders = headers;
        this.reader = this.req.reader({
          begin: () => {
            this.imageSeen = true;
          },
          // Written by data() with the chunk it came in, once the reader has seen it.
          piece: (b64) => this.handed(b64),
          end: () => {
            this.imageDone = true;
          },
        });
        return;
      case 'convert':
        this.reader = this.req.reader(this.convertSink());
        return;
      case 'store': {
        const length = Number(headers['content-length']);
        this.bytes = new Base64Bytes(
          Number.isSafeInteger(length) ? Math.ceil((length * 3) / 4) : 0,
          this.delivery.reservation.bytes,
        );
        this.reader = this.req.reader(this.storeSink(this.bytes));
      }
    }
  }

  /**
   * Image characters on their way to the caller: counted for billing once written (held until the head goes out),
   * and the header read for the pixels.
   */
  private handed(b64: Buffer): void {
    if (this.began) this.exchange.imageChars = (this.exchange.imageChars ?? 0) + b64.length;
    else this.heldChars += b64.length;
    this.probed(b64);
  }

  /**
   * Write the head and what waited for it, once the image is certain and its pixels known (or never to be: past
   * the probe's reach; `whole`: the image's string has closed), so x-gw-price names the class billed.
   */
  private beginWhenSized(whole = false): void {
    if (!this.imageSeen || this.began || !(whole || this.probe.decided)) return;
    this.began = true;
    const pass = this.delivery.kind === 'pass';
    this.writeHead(pass ? this.upstreamHeaders : null, pass);
    const held = Buffer.concat(this.held);
    this.held = [];
    if (pass) this.write(held);
    else this.write(this.prefix + held.toString('latin1'));
    this.prefix = '';
    this.exchange.imageChars = (this.exchange.imageChars ?? 0) + this.heldChars;
    this.heldChars = 0;
  }

  private probed(b64: Buffer): void {
    if (this.exchange.imagePixels != null) return;
    this.probe.add(b64);
    this.exchange.imagePixels = this.probe.pixels;
  }

  /**
   * The 200 head on the raw response: our headers, the upstream's content type (and length, passed through), and
   * the price of the image.
   */
  private writeHead(upstream: IncomingHttpHeaders | null, pass: boolean): void {
    const out = this.reply.getHeaders() as Record<string, unknown>;
    out['x-gw-price'] = this.price();
    out['content-type'] =
      pass && typeof upstream?.['content-type'] === 'string' ? upstream['content-type'] : 'application/json';
    const upstreamId = upstream?.['x-request-id'] ?? upstream?.['request-id'];
    if (upstreamId !== undefined) out['x-upstream-request-id'] = upstreamId;
    if (pass && upstream?.['content-length'] !== undefined) out['content-length'] = upstream['content-length'];
    if (this.upstreams.closing) out.connection = 'close';
    this.reply.hijack();
    this.reply.raw.writeHead(200, out as Record<string, string>);
  }

  private convertSink(): ImageSink {
    return {
      begin: (format) => {
        this.imageSeen = true;
        this.prefix = `{"created":${Math.floor(Date.now() / 1000)},"output_format":"${format}","data":[{"b64_json":"`;
      },
      piece: (b64) => {
        // Before the head, the slice waits (copied: it may be a view of the upstream's chunk), then goes out with it.
        if (this.began) this.write(b64);
        else this.held.push(Buffer.from(b64));
        this.handed(b64);
      },
      end: () => {
        this.imageDone = true;
      },
    };
  }

  private storeSink(bytes: Base64Bytes): ImageSink {
    return {
      begin: (format) => {
        this.format = format;
      },
      piece: (b64) => {
        bytes.add(b64);
        this.probed(b64);
      },
      end: () => {
        this.imageDone = true;
      },
    };
  }

  protected data(chunk: Buffer): void {
    this.reader!.feed(chunk);
    if (this.delivery.kind === 'store') return;
    if (this.delivery.kind === 'convert') {
      this.beginWhenSized();
      return;
    }
    if (this.began) {
      this.write(chunk);
      return;
    }
    this.held.push(chunk);
    if (!this.imageSeen) {
      this.headBytes += chunk.length;
      // A provider whose answer runs on without its image: not held until the call's time runs out. Nothing was
      // written, so the caller gets a 502 and pays nothing.
      if (this.headBytes > PASS_HEAD_MAX_BYTES) {
        this.held = [];
        this.controller?.abort(new Error(`no image in the first ${PASS_HEAD_MAX_BYTES} bytes of the answer`));
        return;
      }
    }
    // Once the image's string has closed, its pixels are as known as they will be: what follows is not held.
    this.beginWhenSized(this.imageDone);
  }

  protected end(): void {
    const end = this.reader!.end();
    const res = this.reply.raw;
    switch (this.delivery.kind) {
      case 'pass':
        if (end.image) this.beginWhenSized(true);
        if (!this.began) {
          sendUpstreamError(this.reply, end.failure ?? noImage());
          return;
        }
        // The image's string closed whole: the caller holds the whole image, even if the JSON around it broke off.
        if (end.image || this.imageDone) this.exchange.delivered = 1;
        else if (this.brokenByProvider) this.exchange.imageBroken = true;
        res.end();
        return;
      case 'convert':
        if (this.imageDone) {
          this.closeConverted(end);
        } else if (this.began) {
          if (this.brokenByProvider) this.exchange.imageBroken = true;
          res.destroy();
        } else {
          sendUpstreamError(this.reply, end.failure ?? noImage());
        }
        return;
      case 'store':
        if (!end.image) sendUpstreamError(this.reply, end.failure ?? noImage());
        else if (this.bytes!.over)
          sendUpstreamError(
            this.reply,
            new GatewayError('upstream_error', {
              message: 'The image is larger than the room the gateway reserved for a URL image.',
            }),
          );
        else void this.storeAndAnswer(end, this.delivery);
    }
  }

  /** The end of a converted body: the image's string, the usage if any, and the image counted. */
  private closeConverted(end: ImageAnswerEnd | null): void {
    this.beginWhenSized(true);
    const usage = end?.usage ? `,"usage":${JSON.stringify(end.usage)}` : '';
    this.exchange.delivered = 1;
    this.reply.raw.end(`"}]${usage}}`);
  }

  private async storeAndAnswer(
    end: ImageAnswerEnd,
    delivery: Extract<ImageDelivery, { kind: 'store' }>,
  ): Promise<void> {
    const reply = this.reply;
    if (this.call.ended) return;
    const data = this.bytes!.bytes();
    this.bytes = undefined;
    let stored: { id: string; expires: number } | null;
    try {
      stored = await delivery.store.put(data, IMAGE_MIME[this.format!], delivery.reservation);
    } catch (err) {
      sendUpstreamError(
        reply,
        new GatewayError('service_unavailable', {
          message: 'The image could not be stored; retry, or ask for b64_json.',
          cause: err,
        }),
      );
      return;
    }
    if (stored === null) {
      sendUpstreamError(
        reply,
        new GatewayError('service_unavailable', {
          message: 'The image store is full; retry later, or ask for b64_json.',
          headers: { 'retry-after': '60' },
        }),
      );
      return;
    }
    const { id } = stored;
    // An image whose URL never reached the caller is removed at once.
    const forget = () => void delivery.store.remove(id, data.length).catch(() => {});
    if (this.call.ended || reply.raw.destroyed) {
      forget();
      return;
    }
    reply.raw.once('close', () => {
      if (!reply.raw.writableFinished) forget();
    });
    const body: Record<string, unknown> = {
      created: end.created ?? Math.floor(Date.now() / 1000),
      data: [{ url: delivery.urlOf(id) }],
      output_format: this.format,
    };
    if (end.usage) body.usage = end.usage;
    this.exchange.delivered = 1;
    reply
      .code(200)
      .header('content-type', 'application/json')
      .header('x-gw-price', this.price())
      .send(JSON.stringify(body));
  }

  protected override failedMidAnswer(_err: Error): boolean {
    if (this.delivery.kind === 'convert' && this.imageDone) {
      // The image is whole: the rest of the provider's answer (its usage) is not needed to deliver it.
      this.closeConverted(null);
      return true;
    }
    // pass: the image's string closed whole before the provider broke off (or ran past its time): the caller holds
    // the whole image, though not the JSON around it.
    if (this.imageDone) return false;
    // The provider broke off (or ran past its time) mid-image: what the caller got is not an image, and is free,
    // unless the caller's reading stopped it (brokenByProvider).
    if (this.brokenByProvider) this.exchange.imageBroken = true;
    return false;
  }

  /**
   * An answer that stops mid-image now is the provider's doing: not while the caller's full socket holds it back
   * (the call's time running out while the caller waits), nor just after the caller stalled (a provider gives up on
   * a connection it cannot write to, seen only once the caller reads again). Otherwise what was handed over stands,
   * as for a caller that hangs up: a reader that stalls just before an image's end would get all but its last rows.
   */
  private get brokenByProvider(): boolean {
    return !this.heldBackByCaller && !this.stalledJustBefore;
  }
}

function noImage(): GatewayError {
  return new GatewayError('upstream_error', { message: 'The model provider answered without an image.' });
}
