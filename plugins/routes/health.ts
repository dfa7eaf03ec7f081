/** GET /v1/health: readiness, no key needed: 200 when Redis answers, else 503. */
import type { FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import { redisAnswers } from '../store/redis.js';

/** Register the health route on the /v1 context. */
export function healthRoute(v1: FastifyInstance, redis: Redis): void {
  v1.get('/health', async (_request, reply) => {
    const ok = await redisAnswers(redis);
    reply.code(ok ? 200 : 503);
    return { status: ok ? 'ok' : 'unavailable', redis: ok ? 'ok' : 'unreachable' };
  });
}
