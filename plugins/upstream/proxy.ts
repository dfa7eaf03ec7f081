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
import { Pool, type Dispatcher } from 'undici';
import { GatewayError } from '../../policies/errors.js';
import { JsonMeter, SseMeter, type Meter } from './metering.js';
import type { CallContext } from '../call.js';
import type { Metrics } from '../metrics/metrics.js';

const VERSION = '0.1.0';
const ERROR_BODY_LIMIT = 64 * 1024;

/** Request headers sent upstream: the provider's auth, the protocol's version headers, nothing of the caller's key. */
function upstreamHeaders(call: CallContext, incoming: IncomingHttpHeaders): Record<string, string> {
  const provider = call.route!.provider;
  const h: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': `farebox/${VERSION}`,
    accept: call.rewrite?.stream ? 'text/event-stream' : 'application/json',
  };
  if (provider.protocol === 'anthropic') {
    h['x-api-key'] = provider.key;
    // SPEC names the date-valued version header `alpha-version`; real clients send `anthropic-version`.
    const version = incoming['anthropic-version'] ?? incoming['alpha-version'];
    h['anthropic-version'] = typeof version === 'string' ? version : '2023-06-01';
    const beta = incoming['anthropic-beta'];
    if (beta !== undefined) h['anthropic-beta'] = Array.isArray(beta) ? beta.join(',') : beta;
  } else {
    h.authorization = `Bearer ${provider.key}`;
  }
  return h;
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

/** undici pools, one per upstream origin (keep-alive connections shared by all calls to it). */
export class Upstreams {
  private readonly pools = new Map<string, Pool>();
  private readonly targets = new Map<string, { pool: Pool; path: string }>();
  /** The server is closing: answers carry `connection: close`. */
  closing = false;

  constructor(private readonly options: Pool.Options = { connections: 256, pipelining: 1, keepAliveTimeout: 30_000 }) {}

  /** The pool and request path of an upstream URL (parsed once per URL). */
  target(url: string): { pool: Pool; path: string } {
    let t = this.targets.get(url);
    if (!t) {
      const u = new URL(url);
      let pool = this.pools.get(u.origin);
      if (!pool) {
        pool = new Pool(u.origin, this.options);
        this.pools.set(u.origin, pool);
      }
      t = { pool, path: u.pathname + u.search };
      this.targets.set(url, t);
    }
    return t;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.pools.values()].map((p) => p.close()));
    this.pools.clear();
    this.targets.clear();
  }
}

/** Forward the call upstream and stream the metered answer back; returns the reply, sent later. */
export function proxyCall(upstreams: Upstreams, reply: FastifyReply, call: CallContext, metrics?: Metrics): FastifyReply {
  const route = call.route!;
  const { pool, path } = upstreams.target(route.url);
  const handler = new ProxyHandler(upstreams, reply, call, metrics);
  pool.dispatch({
    path,
    method: 'POST',
    headers: upstreamHeaders(call, reply.request.headers),
    body: call.upstreamBody ?? JSON.stringify(call.rewrite!.body),
    headersTimeout: route.provider.timeout_ms,
    bodyTimeout: route.provider.timeout_ms,
  }, handler);
  return reply;
}

const ABORTED = new Error('caller went away');

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

  constructor(
    private readonly upstreams: Upstreams,
    private readonly reply: FastifyReply,
    private readonly call: CallContext,
    private readonly metrics: Metrics | undefined,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    // The caller left before the upstream was reached: do not call it.
    if (this.call.ended) {
      controller.abort(ABORTED);
      return;
    }
    this.call.abortUpstream = () => controller.abort(ABORTED);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    const call = this.call;
    const provider = call.route!.provider.name;
    call.upstreamStatus = statusCode;
    this.metrics?.upstreamDuration.observe({ provider }, Number(process.hrtime.bigint() - this.sent) / 1e9);
    if (statusCode >= 300) {
      this.metrics?.upstreamErrors.inc({ provider, status: String(statusCode) });
      const ra = headers['retry-after'];
      this.retryAfter = typeof ra === 'string' ? ra : undefined;
      this.errorBody = [];
      return;
    }
    const stream = call.rewrite!.stream;
    const ct = headers['content-type'];
    const sse = typeof ct === 'string' && ct.startsWith('text/event-stream');
    const protocol = call.route!.provider.protocol;
    const meter: Meter = sse ? new SseMeter(protocol, protocol === 'openai' && !call.rewrite!.callerWantsUsage) : new JsonMeter();
    this.meter = meter;
    call.meter = meter;
    const reply = this.reply;
    const out = reply.getHeaders() as Record<string, unknown>;
    copyResponseHeaders(out, headers, !stream && !sse);
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
    this.call.abortUpstream = undefined;
    if (this.errorBody) {
      const text = Buffer.concat(this.errorBody).toString('utf8').slice(0, ERROR_BODY_LIMIT);
      sendUpstreamError(this.reply, upstreamError(this.call.upstreamStatus!, text, this.retryAfter));
      return;
    }
    const tail = this.meter!.end();
    const res = this.reply.raw;
    if (tail === null) res.end();
    else res.end(tail);
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.call.abortUpstream = undefined;
    if (err === ABORTED) return;
    const reply = this.reply;
    if (reply.raw.headersSent) {
      // Mid-answer: the caller's answer is cut as the upstream's was (billing charges what was delivered).
      reply.raw.destroy(err);
      return;
    }
    const code = (err as { code?: string }).code;
    const timeout = code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT';
    this.call.upstreamStatus ??= timeout ? 504 : 502;
    if (!this.errorBody) this.metrics?.upstreamErrors.inc({ provider: this.call.route!.provider.name, status: '0' });
    sendUpstreamError(reply, timeout ? new GatewayError('upstream_timeout', { cause: err }) : new GatewayError('upstream_error', { cause: err }));
  }
}

function sendUpstreamError(reply: FastifyReply, err: GatewayError): void {
  if (reply.sent || reply.raw.destroyed) return;
  reply.send(err);
}
