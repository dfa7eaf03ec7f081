/**
 * One error type for everything the gateway refuses or fails at, and one list of its codes.
 * `message` is always safe to show a caller; `cause` goes to the logs only.
 * The README's "Errors" table documents this list; test/phases/identify.test.ts keeps the two in step.
 */

/** Every error code the gateway answers with: HTTP status and the default safe message. */
export const ERROR_CODES = {
  invalid_request: { status: 400, message: 'The request is not valid.' },
  invalid_json: { status: 400, message: 'The request body is not valid JSON.' },
  malformed_request: { status: 400, message: 'The HTTP request is malformed.' },
  unknown_model: { status: 400, message: 'The model is not served by this gateway.' },
  wrong_endpoint: { status: 400, message: 'The model is not served on this endpoint.' },
  too_many_stop_sequences: { status: 400, message: 'At most 4 stop sequences are allowed.' },
  invalid_reasoning_effort: { status: 400, message: 'reasoning_effort has a value the model does not accept.' },
  invalid_billing_chain: {
    status: 400,
    message: 'x-gw-billing-chain must be chain_a, chain_b, chain_c, chain_d or auto.',
  },
  unsupported_tool: {
    status: 400,
    message: 'A tool of this request is not supported: its cost cannot be bounded before the call.',
  },
  unsupported_parameter: {
    status: 400,
    message: 'A parameter of this request is not supported: its cost is not in the price table.',
  },
  context_window_exceeded: { status: 400, message: "The request cannot fit the model's context window." },
  charge_cap_exceeded: {
    status: 400,
    message: 'The worst-case price of this call is above what one charge may take on its chain.',
  },
  upstream_invalid_request: { status: 400, message: 'The model provider refused the request as invalid.' },
  content_refused: { status: 400, message: "The model provider's safety system refused the prompt or the image." },
  unsupported_video_size: { status: 400, message: 'The model does not take this video size.' },
  unsupported_video_seconds: { status: 400, message: 'The model does not take this video duration.' },
  missing_input_reference: { status: 400, message: 'The model needs an input_reference (a starting frame).' },
  too_many_references: { status: 400, message: 'More reference images than the endpoint or the model takes.' },
  invalid_last_reference: {
    status: 400,
    message: 'last_reference goes with exactly one input_reference, on a model that takes a last frame.',
  },
  invalid_reference_image: {
    status: 400,
    message: 'A reference image is not a PNG, JPEG or WebP image the gateway can read.',
  },
  // A byte limit passed is 413, as the body's own (request_too_large): see plugins/intake/multipart.ts.
  reference_too_large: {
    status: 413,
    message: 'A reference image, or the reference images together, are over their size limit.',
  },
  missing_api_key: { status: 401, message: 'An API key is required: send x-api-key or Authorization: Bearer.' },
  invalid_api_key: { status: 401, message: 'The API key is not valid.' },
  key_expired: { status: 401, message: 'The API key has expired.' },
  insufficient_funds: { status: 402, message: 'The wallet does not cover the worst-case price of this call.' },
  key_limit_exceeded: {
    status: 402,
    message: "What is left of the API key's spend limit does not cover the worst-case price of this call.",
  },
  access_not_active: { status: 403, message: 'Access is not active for this account.' },
  unsupported_client: { status: 403, message: 'This client is not supported for this model.' },
  model_not_allowed: { status: 403, message: 'This API key may not call this model.' },
  not_found: { status: 404, message: 'No such endpoint.' },
  model_not_found: { status: 404, message: 'No model with this id.' },
  video_not_found: { status: 404, message: 'No video job with this id.' },
  call_not_found: { status: 404, message: 'No call with this request id.' },
  video_not_ready: {
    status: 409,
    message: 'The video is not rendered yet: poll the job until its status is completed.',
  },
  video_failed: { status: 409, message: 'The video job failed: it has no content.' },
  video_expired: { status: 410, message: 'The video is no longer available for download.' },
  request_too_large: { status: 413, message: 'The request body is too large.' },
  request_timeout: { status: 408, message: 'The request took too long to arrive.' },
  headers_too_large: { status: 431, message: 'The request headers are too large.' },
  expectation_failed: { status: 417, message: 'The Expect header cannot be met: only 100-continue is.' },
  invalid_range: { status: 416, message: 'The requested byte range is not within the video.' },
  rate_limited: { status: 429, message: 'Rate limit reached; retry after the time in Retry-After.' },
  upstream_rate_limited: { status: 429, message: 'The model provider is rate limiting; retry later.' },
  internal_error: { status: 500, message: 'Internal error.' },
  upstream_error: { status: 502, message: 'The model provider failed to answer.' },
  service_unavailable: { status: 503, message: 'The gateway cannot serve requests right now.' },
  chain_settlement_behind: {
    status: 503,
    message: "Settlement on the call's billing chain is behind; it takes no new calls until its debits are charged.",
  },
  upstream_overloaded: { status: 503, message: 'The model provider is overloaded; retry later.' },
  upstream_timeout: { status: 504, message: 'The model provider did not answer in time.' },
} as const satisfies Record<string, { status: number; message: string }>;

/** A code of ERROR_CODES. */
export type ErrorCode = keyof typeof ERROR_CODES;

/** Options of a GatewayError beyond its code. */
export interface GatewayErrorOptions {
  /** Safe, caller-facing message; defaults to the code's message. */
  message?: string;
  /** The request field at fault (OpenAI's `param`). */
  param?: string;
  /** Extra response headers (Retry-After, rate-limit headers). */
  headers?: Record<string, string>;
  /** Internal cause, logged, never shown. */
  cause?: unknown;
}

/** An error the gateway answers with: a code from ERROR_CODES, its status and a safe message. */
export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly param: string | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, opts: GatewayErrorOptions = {}) {
    super(opts.message ?? ERROR_CODES[code].message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'GatewayError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
    this.param = opts.param;
    this.headers = opts.headers;
  }
}

/** The wire protocol a caller speaks; each owns its error shape. */
export type Protocol = 'anthropic' | 'openai';

// Anthropic's error types by HTTP status (its API errors page).
const ANTHROPIC_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  408: 'timeout_error',
  409: 'invalid_request_error',
  410: 'not_found_error',
  413: 'request_too_large',
  416: 'invalid_request_error',
  417: 'invalid_request_error',
  431: 'invalid_request_error',
  429: 'rate_limit_error',
  500: 'api_error',
  502: 'api_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

// OpenAI's `type` values: invalid_request_error for client faults, server_error for ours.
const OPENAI_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'invalid_request_error',
  408: 'invalid_request_error',
  409: 'invalid_request_error',
  410: 'invalid_request_error',
  413: 'invalid_request_error',
  416: 'invalid_request_error',
  417: 'invalid_request_error',
  431: 'invalid_request_error',
  429: 'rate_limit_error',
};

/** The JSON body of an error in the caller's protocol. */
export function renderError(err: GatewayError, protocol: Protocol): string {
  if (protocol === 'anthropic') {
    const type = ANTHROPIC_TYPES[err.status] ?? 'api_error';
    return JSON.stringify({ type: 'error', error: { type, message: err.message, code: err.code } });
  }
  const type = OPENAI_TYPES[err.status] ?? 'server_error';
  return JSON.stringify({ error: { message: err.message, type, param: err.param ?? null, code: err.code } });
}

/** Whether a retry of the same request can succeed; the SDKs obey `x-should-retry: false`. */
export function isRetryable(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}
