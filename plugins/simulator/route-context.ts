/** What the protocol routes share: the request log, the prompt caches, route options. */
import type { FastifyRequest } from 'fastify';
import { SimError } from './errors.js';
import type { PromptCache } from './prompt-cache.js';

/** State of one simulator instance, handed to the protocol routes. */
export interface RouteContext {
  cache: PromptCache;
  record(req: FastifyRequest): void;
}

/** Options of the POST routes: request bodies up to 32 MiB (prompts with images are large). */
export const POST_ROUTE = { bodyLimit: 32 * 1024 * 1024 };

/** The parsed JSON body as an object, or 400. */
export function bodyObject(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw new SimError(400, 'The request body must be a JSON object');
  return body as Record<string, unknown>;
}
