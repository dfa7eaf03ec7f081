/**
 * Gate, the third phase: the endpoint quotes the call's worst case, then admission decides its rate limits and
 * places its hold in one Redis script (plugins/billing/admission.ts): 429 or 402 refuse it, holding nothing.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Admission } from '../billing/admission.js';
import type { Call } from '../call.js';
import { rateLimitHeaders } from '../../policies/limits.js';
import type { PriceTable } from '../../pricing/index.js';

/**
 * Admit a policed call: true when it goes on to forward. A call whose caller left while it was admitted is finished
 * at once, unforwarded (false).
 */
export function gateCall(admission: Admission, prices: PriceTable, finish: (call: Call) => void) {
  return async function gate(request: FastifyRequest, reply: FastifyReply): Promise<boolean> {
    const call = request.farebox;
    const policed = call.policed!;
    const { quote, tokens, owner, ttlMs } = call.endpoint!.quote(policed, prices);
    const admitted = await admission.admit({
      requestId: call.id,
      protocol: call.protocol,
      identity: call.identity!,
      family: policed.route.model.family,
      tokens,
      quote,
      chainHeader: request.headers['x-gw-billing-chain'],
      owner,
      ttlMs,
    });
    call.admitted = admitted;
    if (admitted.hold) reply.header('x-gw-billing-chain', admitted.hold.chain);
    if (admitted.decision.which !== null) reply.headers(rateLimitHeaders(admitted.decision, call.protocol));
    if (call.ended) {
      finish(call);
      reply.send();
      return false;
    }
    return true;
  };
}
