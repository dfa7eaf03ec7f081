/**
 * Proxy: forwards a policed call to its upstream with @fastify/reply-from (undici keep-alive pools) and streams
 * the answer back through a meter, unbuffered. Upstream failures reach the caller as GatewayErrors in the
 * caller's protocol, never as the provider's raw body, a stack or an HTML page.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Readable } from 'node:stream';
import { GatewayError } from './errors.js';
import { JsonMeter, SseMeter, type Meter } from './metering.js';
import type { CallContext } from './call.js';
import type { Metrics } from './metrics.js';

const VERSION = '0.1.0';
const ERROR_BODY_LIMIT = 64 * 1024;

/** Request headers sent upstream: the provider's auth, the protocol's version headers, nothing of the caller's key. */
function upstreamHeaders(call: CallContext, incoming: Record<string, string | string[] | undefined>): Record<string, string> {
  const provider = call.route!.provider;
  const h: Record<string, string> = {
    host: new URL(call.route!.url).host,
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

/** Response headers copied from upstream: content type and retry hints only (our x-request-id stays). */
function responseHeaders(headers: Record<string, string | string[] | undefined>, keepLength: boolean): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const ct = headers['content-type'];
  if (ct !== undefined) out['content-type'] = ct;
  const retry = headers['retry-after'];
  if (retry !== undefined) out['retry-after'] = retry;
  const upstreamId = headers['request-id'] ?? headers['x-request-id'];
  if (upstreamId !== undefined) out['x-upstream-request-id'] = upstreamId;
  if (keepLength && headers['content-length'] !== undefined) out['content-length'] = headers['content-length'];
  return out;
}

async function readLimited(stream: Readable, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    if (size < limit) chunks.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(chunks).toString('utf8').slice(0, limit);
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

/** Forward the call upstream and stream the metered answer back; resolves when the reply is handed over. */
export function proxyCall(request: FastifyRequest, reply: FastifyReply, call: CallContext, metrics?: Metrics): FastifyReply {
  const route = call.route!;
  const rewrite = call.rewrite!;
  const provider = route.provider.name;
  const sent = process.hrtime.bigint();
  return reply.from(route.url, {
    body: call.upstreamBody ?? JSON.stringify(rewrite.body),
    contentType: 'application/json',
    timeout: route.provider.timeout_ms,
    retriesCount: 0,
    rewriteRequestHeaders: (req) => upstreamHeaders(call, req.headers),
    rewriteHeaders: (headers) => responseHeaders(headers, !rewrite.stream),
    onError: (rep, { error }) => {
      const status = (error as { statusCode?: number }).statusCode ?? 502;
      call.upstreamStatus = status;
      metrics?.upstreamErrors.inc({ provider, status: '0' });
      rep.send(status === 504 ? new GatewayError('upstream_timeout', { cause: error }) : new GatewayError('upstream_error', { cause: error }));
    },
    onResponse: (_req, r, raw) => {
      const rep = r as unknown as FastifyReply;
      // reply-from hands over undici's answer: status, headers and the body stream.
      const res = raw as unknown as { statusCode: number; headers: Record<string, string | string[] | undefined>; stream: Readable };
      const upstream = res.stream;
      call.upstreamStatus = res.statusCode;
      call.upstream = upstream;
      metrics?.upstreamDuration.observe({ provider }, Number(process.hrtime.bigint() - sent) / 1e9);
      if (res.statusCode >= 300) {
        metrics?.upstreamErrors.inc({ provider, status: String(res.statusCode) });
        const retryAfter = res.headers['retry-after'];
        readLimited(upstream, ERROR_BODY_LIMIT).then(
          (text) => sendUpstreamError(rep, upstreamError(res.statusCode, text, typeof retryAfter === 'string' ? retryAfter : undefined)),
          (err) => sendUpstreamError(rep, new GatewayError('upstream_error', { cause: err })),
        );
        return;
      }
      const ct = String(res.headers['content-type'] ?? '');
      const meter: Meter = ct.startsWith('text/event-stream')
        ? new SseMeter(route.provider.protocol, route.provider.protocol === 'openai' && !rewrite.callerWantsUsage)
        : new JsonMeter();
      call.meter = meter;
      // pipe() per request, not pipeline(): on Node 20 pipeline allocates an AbortController each time.
      upstream.on('error', (err) => meter.destroy(err));
      meter.on('close', () => {
        if (!upstream.destroyed) upstream.destroy();
      });
      upstream.pipe(meter);
      rep.send(meter);
    },
  });
}

function sendUpstreamError(reply: FastifyReply, err: GatewayError): void {
  if (reply.sent) return;
  reply.removeHeader('content-type');
  reply.removeHeader('content-length');
  reply.removeHeader('x-upstream-request-id');
  reply.send(err);
}
