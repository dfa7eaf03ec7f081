/**
 * Forward, the fourth phase (the route's handler): the endpoint calls its upstream and answers the caller, metering
 * what reaches them as it streams.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ForwardContext } from '../routes/endpoint.js';

/** The handler of every endpoint route. */
export function forwardCall(ctx: ForwardContext) {
  return function forward(request: FastifyRequest, reply: FastifyReply) {
    const call = request.farebox;
    ctx.metrics.overhead.observe({ route: call.endpoint!.name }, Number(process.hrtime.bigint() - call.startedAt) / 1e9);
    return call.endpoint!.forward(call, call.policed!, reply, ctx);
  };
}
