/**
 * Police, the second phase: the endpoint validates the body against its schema, routes the model and rewrites the
 * request for its upstream (400s); then the client and model-family rules (SPEC "Client and model-family rules",
 * 403 unsupported_client), before any money is held.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ContentTypeParserDoneFunction } from 'fastify/types/content-type-parser.js';
import { checkClientRule } from '../../policies/client-rules.js';
import { classifyClient, type ClientSignature } from '../../policies/clients.js';
import { GatewayError } from '../../policies/errors.js';
import type { PoliceContext, Policed } from '../call.js';

/**
 * Read a JSON body whole and parse it once (small bodies: the rewrite needs them parsed anyway; DESIGN "Hot path").
 * Its size in bytes bounds the call's input tokens.
 */
export function parseJsonBody(request: FastifyRequest, body: Buffer, done: ContentTypeParserDoneFunction): void {
  request.farebox.bodyBytes = body.length;
  if (nestsTooDeep(body)) {
    done(new GatewayError('invalid_request', { message: `The request body nests deeper than ${MAX_JSON_DEPTH} levels.` }), undefined);
    return;
  }
  try {
    done(null, JSON.parse(body.toString('utf8')));
  } catch (err) {
    done(new GatewayError('invalid_json', { cause: err }), undefined);
  }
}

/**
 * Deepest nesting of arrays and objects a JSON body may have: far above what a request needs (tool schemas nest a
 * dozen levels), far below what a recursive step of the call path (schema checks, rewrite, serialization) could
 * not follow.
 */
export const MAX_JSON_DEPTH = 128;

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
 * Police a call with its endpoint and the client rules. Synchronous for a JSON body (parsed already); a promise only
 * where the endpoint reads its body itself (multipart).
 */
export function policeCall(ctx: PoliceContext & { readonly clients: readonly ClientSignature[] }) {
  return function police(request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
    const policed = request.farebox.endpoint!.police(request, ctx);
    if (policed instanceof Promise) return policed.then((p) => policeClient(request, reply, p, ctx.clients));
    policeClient(request, reply, policed, ctx.clients);
  };
}

/** The client and model-family rules of a policed call (403 unsupported_client). */
function policeClient(request: FastifyRequest, reply: FastifyReply, policed: Policed, clients: readonly ClientSignature[]): void {
  const call = request.farebox;
  call.policed = policed;
  const client = classifyClient(request.headers, clients);
  call.client = client.name;
  const refusal = checkClientRule(call.endpoint!.clientRule, policed.route.model.family, client.class);
  if (refusal) throw new GatewayError('unsupported_client', { message: refusal.message });
  if (policed.headers) reply.headers(policed.headers);
}
