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
import type { Metrics } from '../metrics/metrics.js';
import { UpstreamExchange, type ExchangeOwner, type ExchangeRequest } from './exchange.js';
import type { Meter } from './metering.js';
import type { Upstreams } from './pools.js';

export { sendUpstreamError, upstreamError } from './exchange.js';

/** One upstream request of a call whose answer streams through a meter. */
export interface UpstreamRequest extends ExchangeRequest {
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

/** Forward the call upstream and stream the metered answer back; returns the reply, sent later. */
export function proxyCall(
  upstreams: Upstreams,
  reply: FastifyReply,
  call: ExchangeOwner,
  req: UpstreamRequest,
  metrics?: Metrics,
): FastifyReply {
  return new ProxyHandler(upstreams, reply, call, {}, req, metrics).dispatch();
}

/** One metered exchange: each 2xx chunk metered and written to the caller as it arrives, then the end. */
class ProxyHandler extends UpstreamExchange<UpstreamRequest> {
  private meter: Meter | undefined;

  protected start(statusCode: number, headers: IncomingHttpHeaders): void {
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

  protected data(chunk: Buffer): void {
    const out = this.meter!.feed(chunk);
    if (out !== null) this.write(out);
  }

  protected end(): void {
    const tail = this.meter!.end();
    const res = this.reply.raw;
    if (tail === null) res.end();
    else res.end(tail);
  }
}
