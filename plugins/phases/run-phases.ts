/** runPhases: the route handler of every endpoint, which runs the phases after identify in order. */
import type { FastifyReply, FastifyRequest } from 'fastify';

type Phase<T> = (request: FastifyRequest, reply: FastifyReply) => T;

/**
 * The route handler of every endpoint: police, then gate, then prepare (only where the endpoint has it: undefined
 * otherwise, no promise made), then forward. It returns nothing and Fastify waits on no promise of it: the call is
 * answered by its upstream exchange (or by its endpoint), a refusal or failure by the route's error handler. As
 * preHandler hooks and an async handler, police and gate would cost every call several promises, a pass of Fastify's
 * hook runner and the stream listeners Fastify puts on a reply it awaits.
 */
export function runPhases(
  police: Phase<void | Promise<void>>,
  gate: Phase<Promise<boolean>>,
  prepare: Phase<Promise<boolean> | undefined>,
  forward: Phase<unknown>,
): Phase<void> {
  const fail = (reply: FastifyReply, err: unknown) => {
    if (!reply.sent) reply.send(err instanceof Error ? err : new Error(String(err)));
  };
  const forwardNow = (request: FastifyRequest, reply: FastifyReply) => {
    try {
      const out = forward(request, reply);
      if (out instanceof Promise) out.catch((err: unknown) => fail(reply, err));
    } catch (err) {
      fail(reply, err);
    }
  };
  const prepareThenForward = (request: FastifyRequest, reply: FastifyReply) => {
    let preparing: Promise<boolean> | undefined;
    try {
      preparing = prepare(request, reply);
    } catch (err) {
      fail(reply, err);
      return;
    }
    if (preparing === undefined) forwardNow(request, reply);
    else
      preparing.then(
        (ready) => ready && forwardNow(request, reply),
        (err: unknown) => fail(reply, err),
      );
  };
  const gateThenForward = (request: FastifyRequest, reply: FastifyReply) => {
    gate(request, reply).then(
      (admitted) => {
        if (admitted) prepareThenForward(request, reply);
      },
      (err: unknown) => fail(reply, err),
    );
  };
  return function phases(request: FastifyRequest, reply: FastifyReply): void {
    // A throw of the synchronous police reaches Fastify, which answers it as any handler's error.
    const policing = police(request, reply);
    if (policing === undefined) gateThenForward(request, reply);
    else
      policing.then(
        () => gateThenForward(request, reply),
        (err: unknown) => fail(reply, err),
      );
  };
}
