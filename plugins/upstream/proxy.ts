/**
 * Proxy: forwards a policed call to its upstream over an undici keep-alive pool and streams the answer back
 * through a meter, unbuffered: each upstream chunk is metered and written to the caller's socket as it arrives
 * (undici's dispatch handler, no stream objects per call; DESIGN "Hot path"), with backpressure both ways.
 * A 2xx answer is written on the raw response (the reply is hijacked once the upstream's headers are in, so
 * Fastify's onSend hooks do not see proxied bodies; onResponse hooks still run). Upstream failures before that
 * reach the caller as GatewayErrors in the caller's protocol, never as the provider's raw body, a stack or an
 * HTML page; a failure mid-stream cuts the caller's connection, as the upstream's did.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Dispatcher } from 'undici';
import type { Call, Exchange } from '../call.js';
import type { Metrics } from '../metrics/metrics.js';
import { GatewayError } from '../../policies/errors.js';
import type { Meter } from './metering.js';
import type { Upstreams } from './pools.js';

const ERROR_BODY_LIMIT = 64 * 1024;

/** One upstream request of a call, as an endpoint builds it. */
export interface UpstreamRequest {
  readonly url: string;
  readonly method: 'GET' | 'POST';
  readonly headers: Record<string, string>;
  readonly body: string | Buffer | null;
  /** The provider's name (metrics label). */
  readonly provider: string;
  /** Longest wait for the answer to start, and longest silence inside it (provider timeout_ms). */
  readonly timeoutMs: number;
  /** Longest the whole exchange may run (provider max_duration_ms): then it is cut. */
  readonly maxDurationMs: number;
  /** The meter of a 2xx answer, given its content type. */
  meter(contentType: string | undefined): Meter;
  /** Whether the upstream's content-length is passed on (an answer forwarded byte for byte). */
  keepLength(contentType: string | undefined): boolean;
}

/** Response headers copied from upstream onto ours: content type and retry hints only (our x-request-id stays). */
function copyResponseHeaders(out: Record<string, unknown>, headers: IncomingHttpHeaders, keepLength: boolean): void {
  const ct = headers['content-type'];
  if (ct !== undefined) out['content-type'] = ct;
  const retry = headers['retry-after'];
  if (retry !== undefined) out['retry-after'] = retry;
  const upstreamId = headers['request-id'] ?? headers['x-request-id'];
  if (upstreamId !== undefined) out['x-upstream-request-id'] = upstreamId;
  if (keepLength && headers['content-length'] !== undefined) out['content-length'] = headers['content-length'];
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
    return new GatewayError('upstream_rate_limited', { cause, headers: retryAfter ? { 'retry-after': retryAfter } : undefined });
  }
  if (status === 503 || status === 529) {
    return new GatewayError('upstream_overloaded', { cause, headers: retryAfter ? { 'retry-after': retryAfter } : undefined });
  }
  if (status === 504 || status === 408) return new GatewayError('upstream_timeout', { cause });
  // 401/403/404 from the provider are the operator's configuration, not the caller's fault.
  return new GatewayError('upstream_error', { cause });
}

/** Forward the call upstream and stream the metered answer back; returns the reply, sent later. */
export function proxyCall(upstreams: Upstreams, reply: FastifyReply, call: Call, req: UpstreamRequest, metrics?: Metrics): FastifyReply {
  const { pool, path } = upstreams.target(req.url);
  const exchange: Exchange = {};
  call.exchange = exchange;
  const handler = new ProxyHandler(upstreams, reply, call, exchange, req, metrics);
  pool.dispatch({
    path,
    method: req.method,
    headers: req.headers,
    body: req.body,
    headersTimeout: req.timeoutMs,
    bodyTimeout: req.timeoutMs,
  }, handler);
  return reply;
}

const ABORTED = new Error('caller went away');
const TOO_LONG = new Error('call ran past its maximum duration');

/** One upstream exchange: status and headers, then chunks metered and written to the caller, then the end. */
class ProxyHandler implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  private readonly sent = process.hrtime.bigint();
  /** Body of a non-2xx answer, kept up to ERROR_BODY_LIMIT for the error message. */
  private errorBody: Buffer[] | null = null;
  private errorSize = 0;
  private retryAfter: string | undefined;
  private meter: Meter | undefined;
  private paused = false;
  private readonly resume = () => {
    this.paused = false;
    this.controller?.resume();
  };

  private deadline: NodeJS.Timeout | undefined;

  constructor(
    private readonly upstreams: Upstreams,
    private readonly reply: FastifyReply,
    private readonly call: Call,
    private readonly exchange: Exchange,
    private readonly req: UpstreamRequest,
    private readonly metrics: Metrics | undefined,
  ) {}

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
    const ct = headers['content-type'];
    const contentType = typeof ct === 'string' ? ct : undefined;
    const meter = this.req.meter(contentType);
    this.meter = meter;
    this.exchange.meter = meter;
    const reply = this.reply;
    const out = reply.getHeaders() as Record<string, unknown>;
    copyResponseHeaders(out, headers, this.req.keepLength(contentType));
    if (this.upstreams.closing) out.connection = 'close';
    reply.hijack();
    reply.raw.writeHead(statusCode, out as Record<string, string>);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.errorBody) {
      if (this.errorSize < ERROR_BODY_LIMIT) this.errorBody.push(chunk);
      this.errorSize += chunk.length;
      return;
    }
    const out = this.meter!.feed(chunk);
    if (out === null) return;
    const res = this.reply.raw;
    // Backpressure: a slow caller pauses the upstream until its socket drains.
    if (!res.write(out) && !this.paused && !res.destroyed) {
      this.paused = true;
      controller.pause();
      res.once('drain', this.resume);
    }
  }

  onResponseEnd(): void {
    this.done();
    if (this.errorBody) {
      const text = Buffer.concat(this.errorBody).toString('utf8').slice(0, ERROR_BODY_LIMIT);
      sendUpstreamError(this.reply, upstreamError(this.exchange.status!, text, this.retryAfter));
      return;
    }
    const tail = this.meter!.end();
    const res = this.reply.raw;
    if (tail === null) res.end();
    else res.end(tail);
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.done();
    if (err === ABORTED) return;
    const reply = this.reply;
    if (reply.raw.headersSent) {
      // Mid-answer: the caller's answer is cut as the upstream's was (billing charges what was delivered).
      reply.raw.destroy(err);
      return;
    }
    const code = (err as { code?: string }).code;
    const timeout = err === TOO_LONG || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT';
    this.exchange.status ??= timeout ? 504 : 502;
    if (!this.errorBody) this.metrics?.upstreamErrors.inc({ provider: this.req.provider, status: '0' });
    sendUpstreamError(reply, timeout ? new GatewayError('upstream_timeout', { cause: err }) : new GatewayError('upstream_error', { cause: err }));
  }

  private done(): void {
    this.exchange.abort = undefined;
    clearTimeout(this.deadline);
  }
}

/** Answer an upstream failure, unless the caller has gone or an answer has started. */
export function sendUpstreamError(reply: FastifyReply, err: GatewayError): void {
  if (reply.sent || reply.raw.destroyed) return;
  reply.send(err);
}
