/**
 * Prepare, the fourth phase, between gate and forward, for the endpoints that declare it (the others skip it at no
 * cost): work a refused call must not cost the gateway (the full decode of reference images) runs only once the
 * call's hold is placed, so a caller without funds never makes the gateway decode anything. A refusal here (400)
 * reaches the route's error handler in the caller's protocol; its response closing finishes the call at 0, releasing
 * the hold.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Call, PrepareContext } from '../call.js';

/**
 * Prepare a gated call: undefined when its endpoint has nothing to prepare (no promise made), else whether it goes
 * on to forward. A call whose caller left while it was prepared is finished at once, unforwarded (false).
 */
export function prepareCall(ctx: PrepareContext, finish: (call: Call) => void) {
  return function prepare(request: FastifyRequest, reply: FastifyReply): Promise<boolean> | undefined {
    const call = request.farebox;
    const endpoint = call.endpoint!;
    if (endpoint.prepare === undefined) return undefined;
    const preparing = endpoint.prepare(call, call.policed!, ctx);
    if (preparing === undefined) return undefined;
    const left = () => {
      finish(call);
      reply.send();
      return false;
    };
    return preparing.then(
      (policed) => {
        call.policed = policed;
        return call.ended ? left() : true;
      },
      (err: unknown) => {
        // A caller gone meanwhile gets no answer: its decodes stopped (CallerLeft) or failed unseen.
        if (call.ended) return left();
        throw err;
      },
    );
  };
}
