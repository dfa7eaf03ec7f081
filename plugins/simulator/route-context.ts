/** What the protocol routes share: the request log, the prompt caches, the media state, route options. */
import type { FastifyRequest } from 'fastify';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SimDirectives } from './directives.js';
import { SimError, defaultMessage } from './errors.js';
import type { MediaState } from './media-state.js';
import type { PromptCache } from './prompt-cache.js';

/** State of one simulator instance, handed to the protocol routes. */
export interface RouteContext {
  cache: PromptCache;
  media: MediaState;
  /** Logs a request; `body` replaces the parsed body (a multipart form's summary). */
  record(req: FastifyRequest, body?: unknown): void;
}

/** Options of the POST routes: request bodies up to 32 MiB (prompts with images are large). */
export const POST_ROUTE = { bodyLimit: 32 * 1024 * 1024 };

/** The parsed JSON body as an object, or 400. */
export function bodyObject(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new SimError(400, 'The request body must be a JSON object');
  return body as Record<string, unknown>;
}

/** Applies `#sim:delay_ms`, then `#sim:status` (the provider's error instead of an answer). */
export async function applyFaults(d: SimDirectives): Promise<void> {
  if (d.delayMs) await sleep(d.delayMs);
  if (d.status !== undefined) throw new SimError(d.status, defaultMessage(d.status));
}

/** `http://host:port` of the simulator as the request reached it, for the URLs it hands out. */
export function selfOrigin(req: FastifyRequest): string {
  return `http://${req.headers.host ?? '127.0.0.1'}`;
}
