/**
 * What every upstream exchange of a call shares, whatever its answer is (a metered stream, an image): the dispatch on
 * the upstream's undici pool, the hard bound on its duration, an abort when the caller goes away, the upstream's
 * non-2xx answer kept for its message, backpressure from a slow caller, and failures before the answer began
 * answered as GatewayErrors in the caller's protocol (502, 504); after it began, the caller's answer is cut as the
 * upstream's was.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Dispatcher } from 'undici';
import type { Metrics } from '../metrics/metrics.js';
import { GatewayError } from '../../policies/errors.js';
import type { Meter } from './metering.js';
import type { Upstreams } from './pools.js';

const ERROR_BODY_LIMIT = 64 * 1024;

/**
 * A caller that stops reading for this long has stalled (UpstreamExchange.stalledJustBefore): servers drop a
 * connection they cannot write to (commonly after 30-60 s). Readers that keep up hold a provider back for
 * milliseconds at a time; a slow link's for a second or two.
 */
export const CALLER_STALL_MS = 5_000;
const ABORTED = new Error('caller went away');
const TOO_LONG = new Error('call ran past its maximum duration');

/** What the forward phase saw of the upstream exchange (a call keeps it as `call.exchange`; billing reads it). */
export interface Exchange {
  /** HTTP status the upstream answered, or the gateway's own for a failure to reach it (502, 504). */
  status?: number;
  /** The meter of a 2xx answer: what reached the caller. */
  meter?: Meter;
  /** Aborts the upstream exchange while it runs (the caller went away). */
  abort?: () => void;
  /** Image calls: images whose answer (the image, or its URL) was ended. */
  delivered?: number;
  /** Image calls answered with the image itself: base64 characters of it handed to the caller's connection. */
  imageChars?: number;
  /** Image calls: the provider's answer ended or failed without a whole image (the caller got a broken one). */
  imageBroken?: boolean;
  /** Image calls: the delivered image's pixels, from its header (null: not read). */
  imagePixels?: number | null;
}

/** What an exchange knows of the call it serves: whether its response has closed, and where it keeps its Exchange. */
export interface ExchangeOwner {
  /** The response has closed (answered, or the caller went away). */
  readonly ended: boolean;
  /** Set when the exchange is dispatched. */
  exchange?: Exchange;
}

/** What any upstream request of a call carries. */
export interface ExchangeRequest {
  readonly url: string;
  readonly method: 'GET' | 'POST';
  readonly headers: Record<string, string>;
  /**
   * A body of parts is written part after part under the content-length its headers name (undici's dispatch takes
   * an Iterable body, as its documentation says, though its types leave it out).
   */
  readonly body: Dispatcher.DispatchOptions['body'] | readonly Buffer[];
  /** The provider's name (metrics label). */
  readonly provider: string;
  /** Longest wait for the answer to start, and longest silence inside it (provider timeout_ms). */
  readonly timeoutMs: number;
  /** Longest the whole exchange may run (provider max_duration_ms): then it is cut. */
  readonly maxDurationMs: number;
}

/** Answer an upstream failure, unless the caller has gone or an answer has started. */
export function sendUpstreamError(reply: FastifyReply, err: GatewayError): void {
  if (reply.sent || reply.raw.destroyed) return;
  reply.send(err);
}

/** The base of an exchange: subclasses answer the caller from a 2xx answer (`start`, `data`, `end`). */
export abstract class UpstreamExchange<R extends ExchangeRequest = ExchangeRequest>
  implements Dispatcher.DispatchHandler
{
  protected controller: Dispatcher.DispatchController | undefined;
  private readonly sent = process.hrtime.bigint();
  private deadline: NodeJS.Timeout | undefined;
  /** Body of a non-2xx answer, kept up to ERROR_BODY_LIMIT for the error message. */
  private errorBody: Buffer[] | null = null;
  private errorSize = 0;
  private retryAfter: string | undefined;
  private paused = false;
  /** When the current hold began, and when the last one of CALLER_STALL_MS or more ended (performance.now()). */
  private pausedAt = 0;
  private stallEndedAt = Number.NEGATIVE_INFINITY;
  private readonly resume = () => {
    this.paused = false;
    const now = performance.now();
    if (now - this.pausedAt >= CALLER_STALL_MS) this.stallEndedAt = now;
    this.controller?.resume();
  };

  constructor(
    protected readonly upstreams: Upstreams,
    protected readonly reply: FastifyReply,
    protected readonly call: ExchangeOwner,
    protected readonly exchange: Exchange,
    protected readonly req: R,
    protected readonly metrics: Metrics | undefined,
  ) {}

  /** Send the request; the caller is answered by the exchange. Returns the reply, sent later. */
  dispatch(): FastifyReply {
    const { pool, path } = this.upstreams.target(this.req.url);
    this.call.exchange = this.exchange;
    pool.dispatch(
      {
        path,
        method: this.req.method,
        headers: this.req.headers,
        body: this.req.body as Dispatcher.DispatchOptions['body'],
        headersTimeout: this.req.timeoutMs,
        bodyTimeout: this.req.timeoutMs,
      },
      this,
    );
    return this.reply;
  }

  /** A 2xx answer's status and headers. */
  protected abstract start(statusCode: number, headers: IncomingHttpHeaders): void;
  /** A chunk of a 2xx answer. */
  protected abstract data(chunk: Buffer): void;
  /** A 2xx answer's end. */
  protected abstract end(): void;

  /** The GatewayError of a non-2xx answer (`text`: its first 64 KiB). */
  protected failure(status: number, text: string, retryAfter: string | undefined): GatewayError {
    return upstreamError(status, text, retryAfter);
  }

  /** The upstream failed after its answer began: true when the subclass has answered the caller itself. */
  protected failedMidAnswer(_err: Error): boolean {
    return false;
  }

  /** The caller's full socket holds the upstream back (write): it stopped reading, or reads slower than it is sent. */
  protected get heldBackByCaller(): boolean {
    return this.paused;
  }

  /**
   * The caller's full socket held the upstream back for CALLER_STALL_MS or more at one time, and that ended less than
   * CALLER_STALL_MS ago. The upstream is not read meanwhile, so a provider that gave up on the stalled connection is
   * seen only after it, as the caller reads what was left in the buffers.
   */
  protected get stalledJustBefore(): boolean {
    return performance.now() - this.stallEndedAt < CALLER_STALL_MS;
  }

  /** Write to the caller; a full socket pauses the upstream until it drains (backpressure). */
  protected write(data: Buffer | string): void {
    const res = this.reply.raw;
    if (!res.write(data) && !this.paused && !res.destroyed) {
      this.paused = true;
      this.pausedAt = performance.now();
      this.controller?.pause();
      res.once('drain', this.resume);
    }
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // The caller left before the upstream was reached: do not call it.
    if (this.call.ended) {
      controller.abort(ABORTED);
      return;
    }
    this.exchange.abort = () => controller.abort(ABORTED);
    // A hard bound on the whole call: the idle timeouts do not bound a slow stream or a caller that stops reading.
    this.deadline = setTimeout(() => controller.abort(TOO_LONG), this.req.maxDurationMs);
    this.deadline.unref();
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    const provider = this.req.provider;
    this.exchange.status = statusCode;
    this.metrics?.upstreamDuration.observe({ provider }, Number(process.hrtime.bigint() - this.sent) / 1e9);
    if (statusCode >= 300) {
      this.metrics?.upstreamErrors.inc({ provider, status: String(statusCode) });
      const ra = headers['retry-after'];
      this.retryAfter = typeof ra === 'string' ? ra : undefined;
      this.errorBody = [];
      return;
    }
    this.start(statusCode, headers);
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.errorBody) {
      if (this.errorSize < ERROR_BODY_LIMIT) this.errorBody.push(chunk);
      this.errorSize += chunk.length;
      return;
    }
    this.data(chunk);
  }

  onResponseEnd(): void {
    this.done();
    if (this.errorBody) {
      const text = Buffer.concat(this.errorBody).toString('utf8').slice(0, ERROR_BODY_LIMIT);
      sendUpstreamError(this.reply, this.failure(this.exchange.status!, text, this.retryAfter));
      return;
    }
    this.end();
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.done();
    if (err === ABORTED || this.failedMidAnswer(err)) return;
    const reply = this.reply;
    if (reply.raw.headersSent) {
      // Mid-answer: the caller's answer is cut as the upstream's was (billing charges what was delivered).
      reply.raw.destroy(err);
      return;
    }
    const code = (err as { code?: string }).code;
    const timeout =
      err === TOO_LONG ||
      code === 'UND_ERR_HEADERS_TIMEOUT' ||
      code === 'UND_ERR_BODY_TIMEOUT' ||
      code === 'UND_ERR_CONNECT_TIMEOUT';
    this.exchange.status ??= timeout ? 504 : 502;
    if (!this.errorBody) this.metrics?.upstreamErrors.inc({ provider: this.req.provider, status: '0' });
    sendUpstreamError(
      reply,
      timeout
        ? new GatewayError('upstream_timeout', { cause: err })
        : new GatewayError('upstream_error', { cause: err }),
    );
  }

  private done(): void {
    this.exchange.abort = undefined;
    clearTimeout(this.deadline);
  }
}

/** The provider's own error message from an error body of either protocol, if it has one. */
function providerMessage(text: string): string | undefined {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    const m = typeof body.error === 'object' ? body.error?.message : body.message;
    return typeof m === 'string' ? m.slice(0, 1000) : undefined;
  } catch {
    return undefined;
  }
}

/** The GatewayError for an upstream's non-2xx answer. */
export function upstreamError(status: number, text: string, retryAfter: string | undefined): GatewayError {
  const message = providerMessage(text);
  const cause = new Error(`upstream ${status}: ${text.slice(0, 500)}`);
  if (status === 400 || status === 422) return new GatewayError('upstream_invalid_request', { message, cause });
  if (status === 413) return new GatewayError('request_too_large', { cause });
  if (status === 429) {
    return new GatewayError('upstream_rate_limited', {
      cause,
      headers: retryAfter ? { 'retry-after': retryAfter } : undefined,
    });
  }
  if (status === 503 || status === 529) {
    return new GatewayError('upstream_overloaded', {
      cause,
      headers: retryAfter ? { 'retry-after': retryAfter } : undefined,
    });
  }
  if (status === 504 || status === 408) return new GatewayError('upstream_timeout', { cause });
  // 401/403/404 from the provider are the operator's configuration, not the caller's fault.
  return new GatewayError('upstream_error', { cause });
}
