/**
 * Identify, the first phase of a call: a request id on every answer under /v1 (errors included), and the API key
 * (x-api-key or Authorization: Bearer) resolved to its account: 401 when missing or invalid, 403 when the account is
 * not active (SPEC Authentication).
 */
import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { KeyResolver } from '../accounts/key-resolver.js';
import { presentedKey } from '../accounts/key-resolver.js';
import type { KeyIdentity } from '../accounts/accounts.js';
import type { Call } from '../call.js';
import type { Metrics } from '../metrics/metrics.js';
import { protocolOf } from '../intake/protocol.js';
import { newRequestId } from '../request-ids.js';
import { GatewayError } from '../../policies/errors.js';

/** An onRequest hook in Fastify's callback style: nothing in it waits, so it costs the call no promise. */
export type OnRequestHook = (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => void;

/**
 * The call of every request under /v1: its id (x-request-id), and, once the response closes, its metrics and then
 * `onEnd` (the finish phase).
 */
export function identifyCall(metrics: Metrics, onEnd: (call: Call) => void): OnRequestHook {
  return function identify(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
    const { endpoint, protocolOf: protocolOfRoute } = request.routeOptions.config;
    const call: Call = {
      id: newRequestId(),
      protocol: endpoint?.protocol ?? protocolOfRoute?.(request) ?? protocolOf(request.url),
      endpoint,
      startedAt: process.hrtime.bigint(),
      bodyBytes: 0,
      // Set by the JSON body parser for a body parsed with skeletons; here so that every call has one shape.
      json: undefined,
      ended: false,
      clientAborted: false,
      unsent: false,
      finished: false,
    };
    request.farebox = call;
    reply.header('x-request-id', call.id);
    // The Anthropic SDK reads its own request-id header (error.requestID, message._request_id).
    if (call.protocol === 'anthropic') reply.header('request-id', call.id);
    // One listener per call: metrics for every answer (refusals included), then the end of the call.
    const res = reply.raw;
    let offConnection: (() => void) | undefined;
    const end = () => {
      if (call.ended) return;
      res.off('close', end);
      offConnection?.();
      call.ended = true;
      call.clientAborted = !res.writableFinished;
      // A response gets its connection once the answers before it on the connection are written; until then what it
      // is written waits in the process.
      call.unsent = call.clientAborted && res.socket === null;
      if (call.clientAborted) call.exchange?.abort?.();
      const route = endpoint?.name ?? 'other';
      metrics.requests.inc({ route, model: call.policed?.route.model.id ?? 'none', status: String(reply.statusCode) });
      metrics.requestDuration.observe({ route }, Number(process.hrtime.bigint() - call.startedAt) / 1e9);
      onEnd(call);
    };
    res.once('close', end);
    // An answer queued behind another on a pipelined connection sees no close of its own when the connection closes.
    // (An HTTP/2 stream's answer closes with its stream.)
    if (request.raw.httpVersionMajor === 1) offConnection = onConnectionClose(reply, end);
    // RFC 9112 3.2: an HTTP/1.1 request without Host is refused (Node's own refusal is off: fareboxServerOptions).
    if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
      done(new GatewayError('malformed_request', { message: 'An HTTP/1.1 request needs a Host header.' }));
      return;
    }
    done();
  };
}

/** The ends of the calls open on a connection. */
const CALLS = Symbol('farebox.calls');

/**
 * Run `fn` when the connection of `reply` closes, unless the returned function is called first. HTTP/1.1: the
 * connection's one listener runs it, with those of every call open on it (a pipelining client has several, and an
 * answer queued behind another sees no close of its own). HTTP/2: its stream's close (the socket the compatibility
 * API shows is the session's, shared by every stream).
 */
export function onConnectionClose(reply: FastifyReply, fn: () => void): () => void {
  if (reply.request.raw.httpVersionMajor !== 1) {
    reply.raw.once('close', fn);
    return () => void reply.raw.off('close', fn);
  }
  const socket: Socket & { [CALLS]?: Set<() => void> } = reply.request.raw.socket;
  let calls = socket[CALLS];
  if (calls === undefined) {
    const open = new Set<() => void>();
    socket.once('close', () => {
      for (const end of open) end();
    });
    socket[CALLS] = open;
    calls = open;
  }
  calls.add(fn);
  const open = calls;
  return () => void open.delete(fn);
}

/**
 * The key of a request resolved to its account (SPEC Authentication 3 and 4). A key in the resolver's cache answers
 * at once; only a lookup in Redis waits.
 */
export function authenticate(keys: KeyResolver): OnRequestHook {
  return function authenticateKey(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) {
    const identity = keys.resolve(presentedKey(request.headers));
    if (identity instanceof Promise) identity.then((id) => admitIdentity(request, id, done), done);
    else admitIdentity(request, identity, done);
  };
}

function admitIdentity(request: FastifyRequest, identity: KeyIdentity, done: HookHandlerDoneFunction): void {
  request.farebox.identity = identity;
  // A revoked key stays 401 (resolve), as does one past its expiry; an account that is not active is 403.
  if (identity.expiresAt !== null && Date.now() >= identity.expiresAt)
    done(
      new GatewayError('key_expired', {
        message: `The API key expired at ${new Date(identity.expiresAt).toISOString()}; create another.`,
      }),
    );
  else if (identity.status !== 'active')
    done(new GatewayError('access_not_active', { message: `Access is ${identity.status} for this account.` }));
  else done();
}
