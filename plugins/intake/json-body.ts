/**
 * A JSON body's intake: read whole within the server's body limit (413 request_too_large past it), turned into text
 * once (bytes copied as they are when they are all ASCII), scanned once for its nesting depth (refused past
 * MAX_JSON_DEPTH before it is parsed) and the place of each top-level member, then parsed once. The text and the
 * members let a rewrite forward the caller's own bytes for what it leaves unchanged (routes/text.ts): a megabyte of
 * messages is neither serialized again nor copied into a second string (DESIGN "Hot path").
 */
import { isAscii } from 'node:buffer';
import type { FastifyRequest } from 'fastify';
import type { ContentTypeParserDoneFunction } from 'fastify/types/content-type-parser.js';
import { GatewayError } from '../../policies/errors.js';

/**
 * Deepest nesting of arrays and objects a JSON body may have: far above what a request needs (tool schemas nest a
 * dozen levels), far below what a recursive step of the call path (schema checks, rewrite, serialization) could
 * not follow.
 */
export const MAX_JSON_DEPTH = 128;

/** One member of a body's top-level object: `"key": value` is text.slice(start, end). */
export interface JsonMember {
  /** The key as written between its quotes (escapes not decoded). */
  readonly key: string;
  /** Index of the key's opening quote. */
  readonly start: number;
  /** Index just past the value (before the comma or brace that follows, whitespace included). */
  readonly end: number;
}

/** A JSON body as it arrived: its bytes, its text, and its top-level members. */
export interface JsonText {
  readonly bytes: Buffer;
  readonly text: string;
  /** Every byte is ASCII: an index into `text` is an index into `bytes`. */
  readonly ascii: boolean;
  /** The top-level object's members in order, duplicates included; null when the body is not an object. */
  readonly members: readonly JsonMember[] | null;
}

/** The content-type parser of application/json under /v1 (parseAs buffer, bodyLimit the server's). */
export function parseJsonBody(request: FastifyRequest, body: Buffer, done: ContentTypeParserDoneFunction): void {
  request.farebox.bodyBytes = body.length;
  const ascii = isAscii(body);
  const text = body.toString(ascii ? 'latin1' : 'utf8');
  const members = scanJson(text);
  if (members === TOO_DEEP) {
    done(
      new GatewayError('invalid_request', { message: `The request body nests deeper than ${MAX_JSON_DEPTH} levels.` }),
      undefined,
    );
    return;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    done(new GatewayError('invalid_json', { cause: err }), undefined);
    return;
  }
  request.farebox.json = { bytes: body, text, ascii, members };
  done(null, parsed);
}

/** scanJson's answer for a text that nests deeper than MAX_JSON_DEPTH. */
export const TOO_DEEP = 'too deep';

/**
 * One pass over a JSON text: TOO_DEEP when arrays and objects nest deeper than MAX_JSON_DEPTH, else the members of
 * its top-level object (null when it is not an object). A string's contents are skipped by searching for its closing
 * quote. Text that is not JSON gives members that mean nothing; JSON.parse refuses it next.
 */
export function scanJson(text: string): JsonMember[] | null | typeof TOO_DEEP {
  const n = text.length;
  let depth = 0;
  let object = false;
  const members: JsonMember[] = [];
  // A member being read: its key and start, set at its key's quote; closed by the comma or brace at depth 1.
  let key: string | null = null;
  let start = 0;
  let atKey = false;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const close = closingQuote(text, i);
      if (atKey) {
        key = text.slice(i + 1, close < 0 ? n : close);
        start = i;
        atKey = false;
      }
      if (close < 0) break;
      i = close;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > MAX_JSON_DEPTH) return TOO_DEEP;
      if (depth === 1 && c === 0x7b) {
        object = true;
        atKey = true;
      }
    } else if (c === 0x7d || c === 0x5d) {
      if (depth === 1 && key !== null) {
        members.push({ key, start, end: i });
        key = null;
      }
      depth--;
    } else if (c === 0x2c && depth === 1) {
      if (key !== null) members.push({ key, start, end: i });
      key = null;
      atKey = true;
    }
  }
  return object ? members : null;
}

/** Index of the quote that closes the string opened at `open`, or -1 when it is never closed. */
function closingQuote(text: string, open: number): number {
  let j = open;
  for (;;) {
    j = text.indexOf('"', j + 1);
    if (j < 0) return -1;
    // A quote after an odd run of backslashes is escaped.
    let k = j - 1;
    while (text.charCodeAt(k) === 0x5c) k--;
    if ((j - 1 - k) % 2 === 0) return j;
  }
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
