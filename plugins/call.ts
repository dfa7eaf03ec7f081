/**
 * A call and the contract it runs through: the state of one call as it moves through the phases
 * (plugins/phases/); and what an endpoint module (plugins/routes/) declares, so that every kind of call runs the same
 * phases: its path and protocol, how it polices a request (schema, model route, rewrite), what the call may cost at
 * worst (quote), what it prepares once its hold is placed (optional), how it forwards the call and meters the
 * answer, and what the finished call is billed. Adding an endpoint adds a module to plugins/routes/, not a copy of the
 * call path. The call and the endpoint name each other (a call carries its endpoint; an endpoint's functions take
 * the call), so they are declared together.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { KeyIdentity } from './accounts/accounts.js';
import type { Admitted } from './billing/admission.js';
import type { Bill, Quote } from './billing/billing.js';
import type { FareboxConfig } from './config.js';
import type { JsonText } from './intake/json-body.js';
import type { VideoJobs } from './jobs/video-jobs.js';
import type { Metrics } from './metrics/metrics.js';
import type { ImageStore } from './store/image-store.js';
import type { Exchange } from './upstream/exchange.js';
import type { Upstreams } from './upstream/pools.js';
import type { ModelCatalog, ModelRoute } from '../policies/catalog.js';
import type { ClientRuleEndpoint } from '../policies/client-rules.js';
import type { Protocol } from '../policies/errors.js';
import type { PriceTable } from '../pricing/index.js';

/**
 * One call as it moves through the phases (plugins/phases/): each phase writes its own field once, and reads the
 * fields of the phases before it. Created by identify; final when the response closes.
 */
export interface Call {
  /** Request id, returned as x-request-id; also the call id billing charges once. */
  readonly id: string;
  readonly protocol: Protocol;
  /** The endpoint module of the route (undefined for health and 404s). */
  readonly endpoint: Endpoint | undefined;
  /** process.hrtime.bigint() at onRequest. */
  readonly startedAt: bigint;
  /** Size of the request body as read (the JSON parser sets it). */
  bodyBytes: number;
  /** A JSON body as it arrived, its text and top-level members: the JSON parser sets it, police reads and drops it. */
  json?: JsonText;
  /** identify: the key's account. */
  identity?: KeyIdentity;
  /** police: the validated, routed, rewritten request. */
  policed?: Policed;
  /** police: the client class the signatures recognised. */
  client?: string;
  /** gate: the admitted call (its hold and rate-limit decision). */
  admitted?: Admitted;
  /** forward: the upstream exchange. */
  exchange?: Exchange;
  /**
   * The bill the caller was shown before the call ended (x-gw-price on an answer written whole, usage.cost in a
   * stream's usage event): finish debits it as it is, so what the caller saw is what it pays.
   */
  bill?: Bill;
  /** The response has closed (answered, or the caller went away). */
  ended: boolean;
  /** The caller went away before the whole answer was written. */
  clientAborted: boolean;
  /**
   * Nothing of the answer reached the caller's connection: it waited behind another answer on a pipelined connection
   * that closed first (what was written into it never left the process).
   */
  unsent: boolean;
  /** finish has run. */
  finished: boolean;
}

/** The endpoints of the call path (the `route` label of the metrics). */
export type EndpointName =
  | 'messages'
  | 'count_tokens'
  | 'chat_completions'
  | 'image_generations'
  | 'image_edits'
  | 'videos';

/** What police made of a request: every endpoint's own result extends this. */
export interface Policed {
  readonly route: ModelRoute;
  /** Response headers police decided (x-gw-clamped-max-tokens). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** What a call may cost: the hold (absent: the call is never billed) and the tokens its token limits count. */
export interface Quoted {
  readonly quote?: Quote;
  readonly tokens: number;
  /** Who owns the hold and for how long, when not the instance running the call: a job (`job:<id>`) until its deadline. */
  readonly owner?: string;
  readonly ttlMs?: number;
}

/** What police reads besides the request. */
export interface PoliceContext {
  readonly catalog: ModelCatalog;
  /** Video job settings (config `videos`). */
  readonly videos: FareboxConfig['videos'];
  /** Whether url image answers are served (an origin for their URLs is known: routes/images.ts imageUrlOrigin). */
  readonly imageUrls: boolean;
}

/** What prepare uses besides the call. */
export interface PrepareContext {
  readonly metrics: Metrics;
}

/** What forward uses besides the call. */
export interface ForwardContext {
  /** The prices a call's answer shows (x-gw-price, usage.cost): the same table finish bills with. */
  readonly prices: PriceTable;
  readonly upstreams: Upstreams;
  readonly metrics: Metrics;
  /** Where url images are kept, and the origin their URLs name (routes/images.ts imageUrlOrigin; null: none served). */
  readonly images: { readonly store: ImageStore; readonly origin: ((request: FastifyRequest) => string) | null };
  /** Video jobs: the store a submit records its job in, and the provider adapters. */
  readonly videos: VideoJobs;
}

/** One endpoint of the call path. */
export interface Endpoint<P extends Policed = Policed> {
  readonly name: EndpointName;
  readonly method: 'GET' | 'POST';
  /** Path under /v1. */
  readonly path: string;
  /** The caller's protocol: errors take its shape. */
  readonly protocol: Protocol;
  /** false: never billed (count_tokens), so its answers carry no x-gw-price. Default: billed. */
  readonly billed?: false;
  /** The endpoint as the client rules name it (SPEC "Client and model-family rules"). */
  readonly clientRule: ClientRuleEndpoint;
  /**
   * How the body arrives: JSON, parsed before police (the default); multipart/form-data only, which police reads; or
   * either. Endpoints that take multipart are routed in a context with @fastify/multipart (intake/multipart.ts).
   */
  readonly body?: 'json' | 'multipart' | 'json-or-multipart';
  /**
   * Top-level members of a JSON body that forward sends upstream as the caller's bytes: the body parser gives them
   * as skeletons (intake/json-skeleton.ts), which police may check but never serialize.
   */
  readonly forwards?: ReadonlySet<string>;
  /** Validate the request against the endpoint's schema, route its model, rewrite it for the upstream (400s). */
  police(request: FastifyRequest, ctx: PoliceContext): P | Promise<P>;
  /** Its worst-case price and token estimate, from the policed request only. */
  quote(policed: P, prices: PriceTable): Quoted;
  /**
   * Work the call needs before forward that a refused call must not cost the gateway (the full decode of reference
   * images), run only once its hold is placed: the policed request as forward takes it, or undefined when there is
   * nothing to do. A refusal here (400) is answered as police's are, and the hold released: the call costs nothing.
   * Endpoints without it (text) cost no promise for it.
   */
  prepare?(call: Call, policed: P, ctx: PrepareContext): Promise<P> | undefined;
  /** Call the upstream and answer the caller, metering what reaches them (call.exchange). */
  forward(call: Call, policed: P, reply: FastifyReply, ctx: ForwardContext): FastifyReply | Promise<unknown>;
  /** What the finished call is debited; null when a job took its hold over and debits it later. */
  bill(call: Call, policed: P, prices: PriceTable): Bill | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    farebox: Call;
  }
  interface FastifyContextConfig {
    /** The endpoint module of a route of the call path (read by identify). */
    endpoint?: Endpoint;
    /**
     * A route outside the call path that speaks both protocols (GET /v1/models): the caller's, from its request
     * (read by identify; without it, the path's: intake/protocol.ts).
     */
    protocolOf?: (request: FastifyRequest) => Protocol;
  }
}
