/**
 * The state of one call as it moves through the hooks (identify, police, gate, proxy, settle), and the seam
 * through which billing sees it.
 */
import { randomBytes } from 'node:crypto';
import type { KeyIdentity } from './accounts/accounts.js';
import type { Protocol } from '../policies/errors.js';
import type { Meter } from './upstream/metering.js';
import type { PreparedAdjust, PreparedLimits } from './billing/rate-limit.js';
import type { ModelRoute, TextEndpoint } from '../policies/catalog.js';
import type { RewriteResult } from '../policies/rewrite.js';

const COUNTER_END = 2 ** 32;

/**
 * Request ids: `req_` and 32 hex digits, a 96-bit random prefix (drawn at the first id and again every 2^32 ids)
 * followed by a 32-bit counter. The call id billing charges is this 128-bit number (callIdOf), so an instance's
 * consecutive calls get consecutive call ids, whose statuses the escrow keeps 128 to a storage word.
 */
export class RequestIds {
  private prefix = randomBytes(12).toString('hex');

  /** `counter`: where the count starts (tests start near the end to see a new prefix drawn). */
  constructor(private counter = 0) {}

  next(): string {
    if (this.counter >= COUNTER_END) {
      this.prefix = randomBytes(12).toString('hex');
      this.counter = 0;
    }
    const n = (this.counter++).toString(16);
    return `req_${this.prefix}${'00000000'.slice(n.length)}${n}`;
  }
}

const processIds = new RequestIds();

/** A new request id of this process (RequestIds). */
export function newRequestId(): string {
  return processIds.next();
}

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
   * Such an observer also corrects the call's token limits in its settlement, with what `correctLimits` prepares
   * from the tokens it bills (RateLimiter.prepareAdjust).
   */
  gate(call: CallContext, reply: import('fastify').FastifyReply, limits?: PreparedLimits): Promise<readonly number[] | void>;
  readonly decidesLimits?: boolean;
  /** Settle: once, when the response has closed, whatever happened. Must not throw. */
  settle(call: CallContext, correctLimits?: (billedTokens: number) => PreparedAdjust | null): Promise<void>;
}

declare module 'fastify' {
  interface FastifyRequest {
    farebox: CallContext;
  }
}
