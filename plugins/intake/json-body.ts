/**
 * A JSON body's intake: read whole within the server's body limit (413 request_too_large past it), refused before
 * it is parsed when it nests too deep, then parsed once (the rewrite needs it parsed anyway; DESIGN "Hot path"). Its
 * size in bytes bounds the call's input tokens.
 */
import type { FastifyRequest } from 'fastify';
import type { ContentTypeParserDoneFunction } from 'fastify/types/content-type-parser.js';
import { GatewayError } from '../../policies/errors.js';

/**
 * Deepest nesting of arrays and objects a JSON body may have: far above what a request needs (tool schemas nest a
 * dozen levels), far below what a recursive step of the call path (schema checks, rewrite, serialization) could
 * not follow.
 */
export const MAX_JSON_DEPTH = 128;

/** The content-type parser of application/json under /v1 (parseAs buffer, bodyLimit the server's). */
export function parseJsonBody(request: FastifyRequest, body: Buffer, done: ContentTypeParserDoneFunction): void {
  request.farebox.bodyBytes = body.length;
  if (nestsTooDeep(body)) {
    done(
      new GatewayError('invalid_request', { message: `The request body nests deeper than ${MAX_JSON_DEPTH} levels.` }),
      undefined,
    );
    return;
  }
  try {
    done(null, JSON.parse(body.toString('utf8')));
  } catch (err) {
    done(new GatewayError('invalid_json', { cause: err }), undefined);
  }
}

/** Whether the JSON text nests arrays and objects deeper than MAX_JSON_DEPTH (brackets inside strings not counted). */
export function nestsTooDeep(b: Buffer): boolean {
  let depth = 0;
  for (let i = 0; i < b.length; i++) {
    const c = b[i]!;
    if (c === 0x22) {
      // Skip the string, and any escaped character in it.
      for (i++; i < b.length && b[i] !== 0x22; i++) if (b[i] === 0x5c) i++;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_JSON_DEPTH) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

/**
 * Fastify's refusal of a body before any route code reads it (over the body limit, a content type no parser takes,
 * an empty or broken JSON body) as the caller's error; undefined for any other error.
 */
export function bodyError(err: { code?: string }, contentType = 'application/json'): GatewayError | undefined {
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new GatewayError('request_too_large', { cause: err });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new GatewayError('invalid_request', { message: `Content-Type must be ${contentType}.`, cause: err });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new GatewayError('invalid_json', { cause: err });
  }
  return undefined;
}
