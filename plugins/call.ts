/**
 * The state of one call as it moves through the hooks (identify, police, gate, proxy, settle), and the seam
 * through which billing sees it.
 */
import type { KeyIdentity } from './accounts.js';
import type { Protocol } from './errors.js';
import type { Meter } from './metering.js';
import type { PreparedLimits } from './rate-limit.js';
import type { ModelRoute, TextEndpoint } from '../policies/models.js';
import type { RewriteResult } from '../policies/rewrite.js';

/** One call: created in onRequest, final when the response closes. */
export interface CallContext {
  /** Request id, returned as x-request-id; also the call id billing charges once. */
  readonly id: string;
  readonly protocol: Protocol;
  /** process.hrtime.bigint() at onRequest. */
  readonly startedAt: bigint;
  endpoint?: TextEndpoint;
  identity?: KeyIdentity;
  /** The parsed JSON body's size in bytes (bounds the input tokens). */
  bodyBytes: number;
  route?: ModelRoute;
  rewrite?: RewriteResult;
  /** The rewritten body as sent upstream (serialized once). */
  upstreamBody?: string;
  /** Upper bound on the call's input-side tokens (billing.ts inputTokensBound), computed once. */
  inputBound?: number;
  /** The client class the policies recognised. */
  client?: string;
  /** HTTP status the upstream answered, or the proxy's own for connection failures. */
  upstreamStatus?: number;
  /** Aborts the upstream exchange while it runs (the caller went away). */
  abortUpstream?: () => void;
  meter?: Meter;
  /** The caller went away before the whole answer was written. */
  clientAborted: boolean;
  /** The response has closed (answered, or the caller went away). */
  ended?: boolean;
  /** Run once when the response has closed, after the metrics (the route's settlement). */
  onEnd?: () => void;
  /** Billing's own state of the call (hold, chain). */
  billing?: unknown;
  /** Tokens the call was billed for, once settled (rate limits correct their estimate with it). */
  billedTokens?: number;
}

/** What billing plugs into the call path (DESIGN "The path of one call", steps 3 and 5). */
export interface CallObserver {
  /**
   * Gate: after policies, before the upstream is called; throws a GatewayError (402) to refuse. An observer that
   * `decidesLimits` also decides the call's rate limits in the same step (given as `limits`) and returns the
   * decision's reply (RateLimiter.decide); a call the limits refuse is then not held, and not refused by the gate.
   */
  gate(call: CallContext, reply: import('fastify').FastifyReply, limits?: PreparedLimits): Promise<readonly number[] | void>;
  readonly decidesLimits?: boolean;
  /** Settle: once, when the response has closed, whatever happened. Must not throw. */
  settle(call: CallContext): Promise<void>;
}

declare module 'fastify' {
  interface FastifyRequest {
    farebox: CallContext;
  }
}
