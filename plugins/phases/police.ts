/**
 * Police, the second phase: the endpoint validates the body against its schema, routes the model and rewrites the
 * request for its upstream (400s); then the key's model allow-list (403 model_not_allowed) and the client and
 * model-family rules (SPEC "Client and model-family rules", 403 unsupported_client), before any money is held.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { checkClientRule } from '../../policies/client-rules.js';
import { classifyClient, type ClientSignature } from '../../policies/clients.js';
import { GatewayError } from '../../policies/errors.js';
import { modelAllowed } from '../accounts/key-limits.js';
import type { PoliceContext, Policed } from '../call.js';

/**
 * Police a call with its endpoint and the client rules. Synchronous for a JSON body (parsed already); a promise only
 * where the endpoint reads its body itself (multipart).
 */
export function policeCall(ctx: PoliceContext & { readonly clients: readonly ClientSignature[] }) {
  return function police(request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
    const policed = request.farebox.endpoint!.police(request, ctx);
    // The body's text, bytes and members were police's to read. (request.body stays: a host's hooks may read it.)
    request.farebox.json = undefined;
    if (policed instanceof Promise) return policed.then((p) => policeClient(request, reply, p, ctx.clients));
    policeClient(request, reply, policed, ctx.clients);
  };
}

/** The key's allow-list and the client and model-family rules of a policed call (403s). */
function policeClient(
  request: FastifyRequest,
  reply: FastifyReply,
  policed: Policed,
  clients: readonly ClientSignature[],
): void {
  const call = request.farebox;
  call.policed = policed;
  const model = policed.route.model.id;
  if (!modelAllowed(call.identity!.models, model)) {
    throw new GatewayError('model_not_allowed', {
      param: 'model',
      message: `This API key may not call ${model}: it may call ${call.identity!.models!.join(', ')}.`,
    });
  }
  const client = classifyClient(request.headers, clients);
  call.client = client.name;
  const refusal = checkClientRule(call.endpoint!.clientRule, policed.route.model.family, client.class);
  if (refusal) throw new GatewayError('unsupported_client', { message: refusal.message });
  if (policed.headers) reply.headers(policed.headers);
}
