/**
 * Error bodies of the protocols, as the providers document them:
 * Anthropic `{type:'error', error:{type,message}, request_id}` (docs "Errors"),
 * OpenAI `{error:{message,type,param,code}}` (openapi ErrorResponse),
 * Gemini API `{error:{code,message,status}}` (ai.google.dev "API troubleshooting": google.rpc.Status over HTTP).
 */

/** A request the simulated provider refuses; rendered in the protocol of the route. */
export class SimError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    /** OpenAI `code`; undefined: the one the status implies. */
    readonly code?: string | null,
    /** OpenAI `type`; undefined: the one the status implies. */
    readonly type?: string,
  ) {
    super(message);
  }
}

const ANTHROPIC_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  409: 'conflict_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

const DEFAULT_MESSAGES: Record<number, string> = {
  400: 'Invalid request',
  401: 'Invalid authentication',
  402: 'Billing error',
  403: 'Permission denied',
  404: 'Not found',
  413: 'Request too large',
  429: 'Rate limit exceeded',
  500: 'Internal server error',
  502: 'Bad gateway',
  503: 'Service unavailable',
  504: 'Request timed out',
  529: 'Overloaded',
};

/** The Anthropic error type of an HTTP status (other 4xx: invalid_request_error, other 5xx: api_error). */
export function anthropicErrorType(status: number): string {
  return ANTHROPIC_TYPES[status] ?? (status < 500 ? 'invalid_request_error' : 'api_error');
}

/** A safe default message for a status. */
export function defaultMessage(status: number): string {
  return DEFAULT_MESSAGES[status] ?? `HTTP ${status}`;
}

/** Anthropic error body. */
export function anthropicErrorBody(status: number, message: string, requestId: string): string {
  return JSON.stringify({ type: 'error', error: { type: anthropicErrorType(status), message }, request_id: requestId });
}

/** OpenAI error type and code of a status, as the OpenAI API answers them. */
function openaiKind(status: number): [type: string, code: string | null] {
  if (status === 401) return ['invalid_request_error', 'invalid_api_key'];
  if (status === 429) return ['requests', 'rate_limit_exceeded'];
  if (status >= 500) return ['server_error', null];
  return ['invalid_request_error', null];
}

/** OpenAI error body; `code` and `type` undefined: the ones the status implies. */
export function openaiErrorBody(
  status: number,
  message: string,
  param: string | null,
  code?: string | null,
  type?: string,
): string {
  const [defaultType, defaultCode] = openaiKind(status);
  return JSON.stringify({
    error: { message, type: type ?? defaultType, param, code: code === undefined ? defaultCode : code },
  });
}

/** The canonical google.rpc.Code name the Gemini API pairs with an HTTP status (ai.google.dev "API troubleshooting"). */
const GOOGLE_STATUS: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  409: 'ABORTED',
  429: 'RESOURCE_EXHAUSTED',
  499: 'CANCELLED',
  500: 'INTERNAL',
  501: 'UNIMPLEMENTED',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

/** The google.rpc.Code name of an HTTP status (other 4xx: INVALID_ARGUMENT, other 5xx: INTERNAL). */
export function googleStatus(status: number): string {
  return GOOGLE_STATUS[status] ?? (status < 500 ? 'INVALID_ARGUMENT' : 'INTERNAL');
}

/** Gemini API error body. */
export function geminiErrorBody(status: number, message: string): string {
  return JSON.stringify({ error: { code: status, message, status: googleStatus(status) } });
}
