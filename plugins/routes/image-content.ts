/**
 * GET /v1/images/content/<id>: the image of a `response_format: url` call, from Redis, so any instance serves it.
 * No key: the id is the URL's secret (192 random bits); it names nothing of the operator's upstream. Gone when it
 * expires (config images.url_ttl_ms).
 */
import type { FastifyInstance } from 'fastify';
import type { ImageStore } from '../store/image-store.js';
import { GatewayError } from '../../policies/errors.js';

/** Register the image content route on the /v1 context. */
export function imageContentRoute(v1: FastifyInstance, store: ImageStore): void {
  v1.get<{ Params: { id: string } }>('/images/content/:id', async (request, reply) => {
    const image = await store.get(request.params.id);
    if (image === null) throw new GatewayError('not_found', { message: 'No such image, or its URL has expired.' });
    const maxAge = Math.max(0, Math.floor((image.expires - Date.now()) / 1000));
    reply
      .header('content-type', image.type)
      .header('content-length', image.data.length)
      .header('cache-control', `private, max-age=${maxAge}`)
      .header('expires', new Date(image.expires).toUTCString())
      .header('x-content-type-options', 'nosniff');
    return reply.send(image.data);
  });
}
