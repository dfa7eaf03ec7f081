/**
 * Forward, the fifth phase: the endpoint calls its upstream and answers the caller, metering what reaches them as it
 * streams. runPhases (run-phases.ts), the route handler of every endpoint, runs police, gate, prepare (where the
 * endpoint has it) and forward in order.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ForwardContext } from '../call.js';

/**
 * Forward a gated call: the endpoint answers the caller, later (the reply, answered by its upstream exchange), or
 * through a promise where it waits on more than one exchange (a video submit records its job).
 */
export function forwardCall(ctx: ForwardContext) {
  return function forward(request: FastifyRequest, reply: FastifyReply) {
    const call = request.farebox;
    ctx.metrics.overhead.observe(
      { route: call.endpoint!.name },
      Number(process.hrtime.bigint() - call.startedAt) / 1e9,
    );
    return call.endpoint!.forward(call, call.policed!, reply, ctx);
  };
}
