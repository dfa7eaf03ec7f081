/**
 * The protocol a refusal is written in: the caller's, from its path (the messages endpoints speak Anthropic's, the
 * rest OpenAI's), also for a request refused before any route knew it (plugins/phases/client-errors.ts).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Protocol } from '../../policies/errors.js';

/** The protocol of a path under /v1 (its query not counted). */
export function protocolOf(url: string): Protocol {
  const q = url.indexOf('?');
  return (q < 0 ? url : url.slice(0, q)).includes('/v1/messages') ? 'anthropic' : 'openai';
}

/**
 * The protocol of a route that belongs to neither (the model list, the account reads): the caller's SDK's,
 * Anthropic's when the request carries `anthropic-version` (its SDKs send it on every request), else OpenAI's.
 */
export function protocolOfCaller(request: { readonly headers: IncomingHttpHeaders }): Protocol {
  return request.headers['anthropic-version'] === undefined ? 'openai' : 'anthropic';
}

// A request line (RFC 9112 3): method, space, target. Empty lines before it are skipped by the parser (RFC 9112 2.2),
// so a request may start after any number of CR and LF.
const REQUEST_LINE = /(?:^|[\r\n])[A-Z]+ +([^\s]+)/g;
const ANTHROPIC_VERSION = /(?:^|[\r\n])anthropic-version[ \t]*:/i;

/**
 * The protocol of a request Node's parser refused, from what is known of it: the path of a request whose headers
 * were read (`url`, its body broke or took too long), else the last request line in the bytes the parser stopped in
 * before the byte it refused (`at`; pipelined requests may precede it), else the `anthropic-version` header that
 * Anthropic's SDKs send on every request (the request line came in an earlier packet), else OpenAI's.
 */
export function protocolOfRefused(
  packet: Buffer | undefined,
  at: number | undefined,
  url: string | undefined,
): Protocol {
  if (url !== undefined) return protocolOf(url);
  if (packet === undefined) return 'openai';
  const text = packet.toString('latin1', 0, at === undefined ? packet.length : Math.min(packet.length, at + 1));
  let target: string | undefined;
  for (const m of text.matchAll(REQUEST_LINE)) target = m[1];
  if (target !== undefined) return protocolOf(target);
  return ANTHROPIC_VERSION.test(text) ? 'anthropic' : 'openai';
}
