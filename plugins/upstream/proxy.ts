/**
 * Proxy: forwards a policed call to its upstream over an undici keep-alive pool and streams the answer back
 * through a meter, unbuffered: each upstream chunk is metered and written to the caller's socket as it arrives
 * (undici's dispatch handler, no stream objects per call; DESIGN "Hot path"), with backpressure both ways. The one
 * exception is a priced JSON answer (UpstreamRequest.price): held whole, then written with its x-gw-price.
 * A 2xx answer is written on the raw response (the reply is hijacked once the upstream's headers are in, so
 * Fastify's onSend hooks do not see proxied bodies; onResponse hooks still run). Upstream failures before that
 * reach the caller as GatewayErrors in the caller's protocol, never as the provider's raw body, a stack or an
 * HTML page; a failure mid-stream cuts the caller's connection, as the upstream's did.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Metrics } from '../metrics/metrics.js';
import { UpstreamExchange, type ExchangeOwner, type ExchangeRequest } from './exchange.js';
import { JSON_ANSWER_MAX_BYTES, SseMeter, type Meter } from './metering.js';
import type { Upstreams } from './pools.js';

export { sendUpstreamError, upstreamError } from './exchange.js';

/** One upstream request of a call whose answer streams through a meter. */
export interface UpstreamRequest extends ExchangeRequest {
  /** The meter of a 2xx answer, given its content type. */
  meter(contentType: string | undefined): Meter;
  /** Whether the upstream's content-length is passed on (an answer forwarded byte for byte). */
  keepLength(contentType: string | undefined): boolean;
  /**
   * The price of a 2xx JSON (not event-stream) answer once it is whole (x-gw-price; it fixes the call's bill): given,
   * such an answer is held until its end, then written with the header.
   */
  price?(): string;
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

/**
 * How long the chunks that follow a write wait to go out together. A provider streaming at reading pace (tens of
 * events a second) has each event written as it arrives, as the window has closed by the next; a burst (a fast
 * model, events queued in the network) leaves in one metered block and one write per window instead of a read, a
 * meter pass and a system call per event.
 */
export const WRITE_WINDOW_MS = 1;
const EMPTY = Buffer.alloc(0);
/** How long a cut answer's last writes may take to leave before the cut (ProxyHandler.failedMidAnswer). */
const CUT_AFTER_MS = 1_000;
/** The most a window holds: past it, what waits is written at once. */
const MAX_WAITING_BYTES = 64 * 1024;

/**
 * One metered exchange: each 2xx chunk metered and written to the caller as it arrives, then the end. A chunk that
 * arrives within WRITE_WINDOW_MS of the last write waits for the window's end and goes out with the others, metered
 * then: what the meter counts is what was written to the caller. Chunks still waiting when the caller leaves are
 * neither written nor counted; when the upstream fails, they are written (and counted) before the answer is cut.
 */
class ProxyHandler extends UpstreamExchange<UpstreamRequest> {
  private meter: Meter | undefined;
  /**
   * A priced JSON answer, held until its end: its status and headers, and its chunks. Its price is in its body's
   * usage, read at the end, and a header must go before the body. A provider produces a non-streamed answer whole
   * before it sends it, so holding it costs the caller its transfer time only; its size is bounded by the call's
   * max_tokens (a text answer of the gateway's ceiling is a few MB of JSON), and JsonMeter keeps it whole for its
   * usage anyway. Nothing is written, nor metered, until the end: a caller that leaves first is charged nothing.
   */
  private held: { statusCode: number; headers: IncomingHttpHeaders; chunks: Buffer[]; bytes: number } | undefined;
  /** An event stream: its chunks wait in windows. A JSON answer's are written as they come (one or a few). */
  private windowed = false;
  private waiting: Buffer[] = [];
  private waitingBytes = 0;
  /** Set while a window is open: chunks wait in `waiting` until it fires. */
  private window: NodeJS.Timeout | undefined;
  private readonly windowEnd = () => {
    const res = this.reply.raw;
    if (this.waiting.length === 0 || res.destroyed || res.writableEnded) {
      this.take();
      this.window = undefined;
      return;
    }
    this.deliver(Buffer.concat(this.take()));
    this.window = setTimeout(this.windowEnd, WRITE_WINDOW_MS);
  };

  protected start(statusCode: number, headers: IncomingHttpHeaders): void {
    const ct = headers['content-type'];
    const contentType = typeof ct === 'string' ? ct : undefined;
    const meter = this.req.meter(contentType);
    this.meter = meter;
    this.exchange.meter = meter;
    this.windowed = meter instanceof SseMeter;
    if (!this.windowed && this.req.price !== undefined) {
      this.held = { statusCode, headers, chunks: [], bytes: 0 };
      return;
    }
    this.writeHead(statusCode, headers, this.req.keepLength(contentType), undefined);
  }

  /** Our head on the raw response: the reply's headers, the upstream's copied ones, and `extra`. */
  private writeHead(
    statusCode: number,
    headers: IncomingHttpHeaders,
    keepLength: boolean,
    extra: Record<string, string> | undefined,
  ): void {
    const reply = this.reply;
    const out = reply.getHeaders() as Record<string, unknown>;
    copyResponseHeaders(out, headers, keepLength);
    if (extra !== undefined) Object.assign(out, extra);
    if (this.upstreams.closing) out.connection = 'close';
    reply.hijack();
    reply.raw.writeHead(statusCode, out as Record<string, string>);
  }

  protected data(chunk: Buffer): void {
    const held = this.held;
    if (held !== undefined) {
      // Past JSON_ANSWER_MAX_BYTES, a provider that sends no end (or more than any answer): the caller gets a 502
      // and pays nothing, rather than the gateway holding it in memory until the call's deadline.
      if (held.bytes > JSON_ANSWER_MAX_BYTES) return;
      held.bytes += chunk.length;
      if (held.bytes > JSON_ANSWER_MAX_BYTES) {
        held.chunks = [];
        this.controller?.abort(new Error(`a JSON answer over ${JSON_ANSWER_MAX_BYTES} bytes`));
        return;
      }
      held.chunks.push(chunk);
      return;
    }
    if (this.window !== undefined) {
      // A caller that reads: the chunk waits for the window. One that does not (its socket full): written at once,
      // so the write sees the full socket and pauses the upstream; waiting would read the whole answer into memory
      // and meter it as written.
      if (!this.reply.raw.writableNeedDrain && this.waitingBytes + chunk.length <= MAX_WAITING_BYTES) {
        this.waiting.push(chunk);
        this.waitingBytes += chunk.length;
        return;
      }
      this.deliver(this.waiting.length > 0 ? Buffer.concat([...this.take(), chunk]) : chunk);
      return;
    }
    this.deliver(chunk);
    if (this.windowed) this.window = setTimeout(this.windowEnd, WRITE_WINDOW_MS);
  }

  protected end(): void {
    if (this.held !== undefined) {
      this.endHeld(this.held);
      return;
    }
    clearTimeout(this.window);
    this.window = undefined;
    const res = this.reply.raw;
    if (this.waiting.length > 0) {
      const waiting = this.take();
      // A caller gone meanwhile is not written what waited, so it is not counted.
      if (!res.destroyed) this.deliver(Buffer.concat(waiting));
    }
    // The last chunks took an event past the meter's bound: the answer is cut, as it is mid-stream (deliver).
    if (this.overflowed()) {
      if (!res.destroyed) this.cutOnceWritten(overflowError());
      return;
    }
    const tail = this.meter!.end();
    if (tail === null) res.end();
    else res.end(tail);
  }

  /**
   * The upstream failed or ran past its time (not the caller leaving): what it sent before is written first, as it
   * would have been without the window, and the answer is cut once all that was written has left for the caller's
   * socket (cutOnceWritten), so the caller receives what it is charged for.
   */
  protected override failedMidAnswer(err: Error): boolean {
    clearTimeout(this.window);
    this.window = undefined;
    const waiting = this.take();
    const res = this.reply.raw;
    if (!res.headersSent || res.destroyed) return false;
    if (waiting.length > 0) this.deliver(Buffer.concat(waiting));
    this.cutOnceWritten(err);
    return true;
  }

  /**
   * Cut the caller's answer with `err` once what was written to it has left for its socket: at once when nothing
   * waits in Node's buffers, else when the last write has gone out or CUT_AFTER_MS later, for a caller that does not
   * read. Destroyed at once, the bytes still buffered (metered, and so charged) would be thrown away.
   */
  private cutOnceWritten(err: Error): void {
    const res = this.reply.raw;
    const socket = res.socket;
    if (socket === null || res.writableLength === 0) {
      res.destroy(err);
      return;
    }
    const cut = () => {
      clearTimeout(timer);
      res.destroy(err);
    };
    const timer = setTimeout(cut, CUT_AFTER_MS).unref();
    // A write of nothing calls back once everything written before it has left.
    socket.write('', cut);
  }

  /** A held answer's end: metered whole, priced, then written with its x-gw-price and length in one write. */
  private endHeld(held: NonNullable<ProxyHandler['held']>): void {
    this.held = undefined;
    if (this.reply.raw.destroyed || held.bytes > JSON_ANSWER_MAX_BYTES) return;
    const body = Buffer.concat(held.chunks, held.bytes);
    const meter = this.meter!;
    const out = meter.feed(body);
    const tail = meter.end();
    const whole = tail === null ? (out ?? EMPTY) : Buffer.concat(out === null ? [tail] : [out, tail]);
    const price = this.req.price!();
    this.writeHead(held.statusCode, held.headers, false, {
      'content-length': String(whole.length),
      'x-gw-price': price,
    });
    this.reply.raw.end(whole);
  }

  /** The waiting chunks, taken. */
  private take(): Buffer[] {
    const w = this.waiting;
    this.waiting = [];
    this.waitingBytes = 0;
    return w;
  }

  private deliver(chunk: Buffer): void {
    const out = this.meter!.feed(chunk);
    if (out !== null) this.write(out);
    // An event past the meter's bound: the upstream is broken, and the answer is cut after what it delivered whole
    // (the chunk that passed the bound may have ended events before it: those went out above).
    if (this.overflowed()) this.controller?.abort(overflowError());
  }

  /** The meter dropped an event past its bound (SseMeter.overflowed): nothing more goes out. */
  private overflowed(): boolean {
    return this.meter instanceof SseMeter && this.meter.overflowed;
  }
}

function overflowError(): Error {
  return new Error(`an event-stream event over ${JSON_ANSWER_MAX_BYTES} bytes`);
}
