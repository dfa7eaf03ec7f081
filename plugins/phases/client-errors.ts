/**
 * Answers for what Node's HTTP parser or Fastify's router refuse before any route runs (oversized headers, a CRLF
 * in a header, a broken chunked body, a request that took too long to arrive, a URL that does not decode): with an
 * `x-request-id` and the caller's protocol's error shape, like every other answer under /v1. Fastify takes these as
 * server options (`clientErrorHandler`, `frameworkErrors`), so `farebox serve` sets them and a host app passes
 * `fareboxServerOptions` to its own `Fastify()`. When a request took too long to arrive is decided after the loop has
 * read its sockets (`checkTimeoutsAfterReads`, which `farebox serve` and a host app call on their server).
 */
import { STATUS_CODES, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { protocolOf, protocolOfRefused } from '../intake/protocol.js';
import { newRequestId } from '../request-ids.js';
import { GatewayError, renderError, type ErrorCode } from '../../policies/errors.js';

const CODE_OF: Record<string, ErrorCode> = {
  ERR_HTTP_REQUEST_TIMEOUT: 'request_timeout',
  HPE_HEADER_OVERFLOW: 'headers_too_large',
};

/** Node's `clientError`: answer, then close the connection (its stream cannot be trusted to continue). */
export function clientErrorHandler(error: Error, socket: Socket): void {
  const err = error as Error & { code?: string; rawPacket?: unknown; bytesParsed?: number };
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const ge = new GatewayError(CODE_OF[err.code ?? ''] ?? 'malformed_request', { cause: err });
  // A request whose headers were read (its body broke or took too long) has an answer pending with its URL.
  const pending = (socket as { _httpMessage?: { req?: IncomingMessage } })._httpMessage?.req;
  const url = pending && !pending.complete ? pending.url : undefined;
  const protocol = protocolOfRefused(Buffer.isBuffer(err.rawPacket) ? err.rawPacket : undefined, err.bytesParsed, url);
  const body = renderError(ge, protocol);
  const id = newRequestId();
  const head = [
    `HTTP/1.1 ${ge.status} ${STATUS_CODES[ge.status] ?? 'Error'}`,
    'content-type: application/json',
    `content-length: ${Buffer.byteLength(body)}`,
    `x-request-id: ${id}`,
    // The Anthropic SDK reads its own request-id header, as identify sets it.
    ...(protocol === 'anthropic' ? [`request-id: ${id}`] : []),
    ...(ge.status === 408 ? [] : ['x-should-retry: false']),
    'connection: close',
  ];
  // A socket the server already answered on cannot take a second status line.
  if (socket.writable && !(socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent) {
    socket.end(`${head.join('\r\n')}\r\n\r\n${body}`);
  }
  socket.destroy(err);
}

/** Fastify's router errors (a URL that does not decode), in our shape. */
export function frameworkErrors(error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const ge = new GatewayError(error.code === 'FST_ERR_BAD_URL' ? 'malformed_request' : 'invalid_request', {
    cause: error,
  });
  const protocol = protocolOf(request.url);
  const id = newRequestId();
  reply
    .code(ge.status)
    .header('content-type', 'application/json')
    .header('x-request-id', id)
    .header('x-should-retry', 'false');
  if (protocol === 'anthropic') reply.header('request-id', id);
  reply.send(renderError(ge, protocol));
}

/**
 * Node's `checkExpectation` (an `Expect` other than 100-continue), which Node would answer with a bare 417: in our
 * shape, with a request id. The plugin listens for it on its server.
 */
export function answerExpectation(req: IncomingMessage, res: ServerResponse): void {
  const ge = new GatewayError('expectation_failed');
  const protocol = protocolOf(req.url ?? '');
  const body = renderError(ge, protocol);
  const id = newRequestId();
  res.writeHead(ge.status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'x-request-id': id,
    'x-should-retry': 'false',
    ...(protocol === 'anthropic' ? { 'request-id': id } : {}),
  });
  res.end(body);
}

/**
 * Server options of `farebox serve` that a host app registering the plugin should pass to its own `Fastify()`.
 * Node answers an HTTP/1.1 request without `Host` with a bare 400 unless told not to; the gateway refuses it
 * itself (identify.ts), in the caller's shape.
 */
export const fareboxServerOptions: Pick<FastifyServerOptions, 'clientErrorHandler' | 'frameworkErrors'> & {
  http: { requireHostHeader: false };
} = {
  clientErrorHandler,
  frameworkErrors,
  http: { requireHostHeader: false },
};

/**
 * Node checks the header and request timeouts from a timer, and timers run before the event loop reads its sockets:
 * after a stall of the loop (a burst of calls on a busy machine), a connection accepted before the stall was answered
 * 408 although its request had been waiting in the socket all along, its clock counted from the connection's opening.
 * This moves Node's check to just after the loop's next read of the sockets, and cuts only what was past its timeout
 * when the timer fired: a request that had arrived by then has been read, and a client that sent nothing, or trickles,
 * is cut as before, later by one pass of the loop at most. The check is Node's own (its list of connections, its
 * clocks, its 408 through `clientError`); on a Node whose server keeps them under other names, Node's check stays.
 */
export function checkTimeoutsAfterReads(server: HttpServer, intervalMs: number): void {
  const install = () => {
    const own = server as unknown as Record<symbol, unknown>;
    const symbols = Object.getOwnPropertySymbols(server);
    const listKey = symbols.find((s) => s.description === 'http.server.connections');
    const timerKey = symbols.find((s) => s.description === 'http.server.connectionsCheckingInterval');
    const list = listKey && (own[listKey] as ConnectionsList | undefined);
    if (!timerKey || typeof list?.expired !== 'function') return;
    clearInterval(own[timerKey] as NodeJS.Timeout);
    // Under Node's key, so that the server's close clears it as it clears its own.
    own[timerKey] = setInterval(() => {
      const firedAt = performance.now();
      // setImmediate runs after the loop's next poll, which reads every socket with data to read.
      setImmediate(() => {
        const { headersTimeout, requestTimeout } = server;
        if (headersTimeout === 0 && requestTimeout === 0) return;
        // The deadlines as they were when the timer fired: Node counts from now, so each grows by the time since.
        const since = Math.ceil(performance.now() - firedAt);
        const expired = list.expired(
          headersTimeout && headersTimeout + since,
          requestTimeout && requestTimeout + since,
        );
        for (const parser of expired)
          parser.socket?.emit(
            'error',
            Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }),
          );
      });
    }, intervalMs).unref();
  };
  // Node starts its check on 'listening', before this listener.
  server.on('listening', install);
  if (server.listening) install();
}

/** What checkTimeoutsAfterReads uses of Node's list of a server's connections (node_http_parser.cc). */
interface ConnectionsList {
  /** Parsers past a deadline (counted from the message's first byte, or the connection's opening), taken off the list. */
  expired(headersTimeoutMs: number, requestTimeoutMs: number): { socket?: { emit(e: 'error', err: Error): void } }[];
}
