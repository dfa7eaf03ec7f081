/**
 * Police, the second phase: the endpoint validates the body against its schema, routes the model and rewrites the
 * request for its upstream (400s); then the client and model-family rules (SPEC "Client and model-family rules",
 * 403 unsupported_client), before any money is held.
 */
import type { FastifyReply, FastifyRequest, preHandlerAsyncHookHandler } from 'fastify';
import type { ContentTypeParserDoneFunction } from 'fastify/types/content-type-parser.js';
import { checkClientRule } from '../../policies/client-rules.js';
import { classifyClient, type ClientSignature } from '../../policies/clients.js';
import { GatewayError } from '../../policies/errors.js';
import type { PoliceContext } from '../routes/endpoint.js';

/**
 * Read a JSON body whole and parse it once (small bodies: the rewrite needs them parsed anyway; DESIGN "Hot path").
 * Its size in bytes bounds the call's input tokens.
 */
export function parseJsonBody(request: FastifyRequest, body: Buffer, done: ContentTypeParserDoneFunction): void {
  request.farebox.bodyBytes = body.length;
  try {
    done(null, JSON.parse(body.toString('utf8')));
  } catch (err) {
    done(new GatewayError('invalid_json', { cause: err }), undefined);
  }
}

/** Police a call with its endpoint and the client rules. */
export function policeCall(ctx: PoliceContext & { readonly clients: readonly ClientSignature[] }): preHandlerAsyncHookHandler {
  return async function police(request: FastifyRequest, reply: FastifyReply) {
    const call = request.farebox;
    const endpoint = call.endpoint!;
    const policed = await endpoint.police(request, ctx);
    call.policed = policed;
    const client = classifyClient(request.headers, ctx.clients);
    call.client = client.name;
    const refusal = checkClientRule(endpoint.clientRule, policed.route.model.family, client.class);
    if (refusal) throw new GatewayError('unsupported_client', { message: refusal.message });
    if (policed.headers) reply.headers(policed.headers);
  };
}
