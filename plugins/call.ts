/** The state of one call as it moves through the phases of plugins/hooks/. */
import type { KeyIdentity } from './accounts/accounts.js';
import type { Admitted } from './billing/admission.js';
import type { Endpoint, Policed } from './routes/endpoint.js';
import type { Meter } from './upstream/metering.js';
import type { Protocol } from '../policies/errors.js';

/** What the forward phase saw of the upstream exchange. */
export interface Exchange {
  /** HTTP status the upstream answered, or the gateway's own for a failure to reach it (502, 504). */
  status?: number;
  /** The meter of a 2xx answer: what reached the caller. */
  meter?: Meter;
  /** Aborts the upstream exchange while it runs (the caller went away). */
  abort?: () => void;
  /** Image calls: images whose answer (the image, or its URL) was ended. */
  delivered?: number;
  /** Image calls answered with the image itself: base64 characters of it handed to the caller's connection. */
  imageChars?: number;
  /** Image calls: the provider's answer ended or failed without a whole image (the caller got a broken one). */
  imageBroken?: boolean;
  /** Image calls: the delivered image's pixels, from its header (null: not read). */
  imagePixels?: number | null;
}

/**
 * One call as it moves through the phases (plugins/hooks/): each phase writes its own field once, and reads the
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
  /** The response has closed (answered, or the caller went away). */
  ended: boolean;
  /** The caller went away before the whole answer was written. */
  clientAborted: boolean;
  /** finish has run. */
  finished: boolean;
}

declare module 'fastify' {
  interface FastifyRequest {
    farebox: Call;
  }
}
