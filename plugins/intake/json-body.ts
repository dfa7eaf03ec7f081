/**
 * A JSON body's intake: read whole within the server's body limit (413 request_too_large past it), its nesting
 * bounded (refused past MAX_JSON_DEPTH before anything recursive reads it), parsed once.
 *
 * A body of SKELETON_FROM_BYTES or more on a route that forwards top-level members as the caller's bytes (the text
 * endpoints' `messages` and `system`: Endpoint.forwards) is parsed with those members as skeletons
 * (intake/json-skeleton.ts): its megabyte of conversation is crossed, not copied into strings, and goes upstream as
 * it came (routes/text.ts). Any other body is parsed by JSON.parse.
 */
import { isAscii } from 'node:buffer';
import type { FastifyRequest } from 'fastify';
import type { ContentTypeParserDoneFunction } from 'fastify/types/content-type-parser.js';
import { GatewayError } from '../../policies/errors.js';
import { closingQuote, MAX_JSON_DEPTH, parseSkeleton, TooDeep, type JsonMember } from './json-skeleton.js';

/** A body parsed with skeletons: its bytes, their text read as latin1 (indexes are byte indexes), its members. */
export interface JsonText {
  readonly bytes: Buffer;
  readonly text: string;
  /** The top-level object's members in order, duplicates included. */
  readonly members: readonly JsonMember[];
}

/** Below this size a body is parsed whole and serialized again: a splice would cost more than it saves. */
export const SKELETON_FROM_BYTES = 8 * 1024;

/** The content-type parser of application/json under /v1 (parseAs buffer, bodyLimit the server's). */
export function parseJsonBody(request: FastifyRequest, body: Buffer, done: ContentTypeParserDoneFunction): void {
  request.farebox.bodyBytes = body.length;
  // The call's endpoint, set by identify (routeOptions would build an object for each call).
  const forwards = request.farebox.endpoint?.forwards;
  const ascii = isAscii(body);
  let parsed: unknown;
  try {
    if (forwards !== undefined && body.length >= SKELETON_FROM_BYTES) {
      const text = body.toString('latin1');
      const s = parseSkeleton(body, text, ascii, forwards);
      if (s !== null) {
        request.farebox.json = { bytes: body, text, members: s.members };
        done(null, s.value);
        return;
      }
    }
    const text = body.toString(ascii ? 'latin1' : 'utf8');
    if (nestsTooDeep(text)) throw new TooDeep();
    parsed = JSON.parse(text);
  } catch (err) {
    done(
      err instanceof TooDeep
        ? new GatewayError('invalid_request', {
            message: `The request body nests deeper than ${MAX_JSON_DEPTH} levels.`,
          })
        : new GatewayError('invalid_json', { cause: err }),
      undefined,
    );
    return;
  }
  done(null, parsed);
}

/**
 * Arrays and objects nest deeper than MAX_JSON_DEPTH in a JSON text. A string's contents are skipped by searching
 * for its closing quote; text that is not JSON gives an answer that means nothing, and JSON.parse refuses it next.
 */
export function nestsTooDeep(text: string): boolean {
  const n = text.length;
  let depth = 0;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const close = closingQuote(text, i);
      if (close < 0) return false;
      i = close;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > MAX_JSON_DEPTH) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
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
