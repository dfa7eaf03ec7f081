/**
 * The simulated upstream providers (DESIGN.md "The simulated upstreams"): Anthropic Messages and
 * OpenAI Chat Completions, deterministic, with usage consistent with the text, prompt caching,
 * and faults on demand through `#sim:` directives (directives.ts). Serves the embedded default,
 * the tests and the benchmark.
 */
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { anthropicRoutes } from './anthropic.js';
import { SimError, anthropicErrorBody, defaultMessage, openaiErrorBody } from './errors.js';
import { newId } from './ids.js';
import { openaiRoutes } from './openai.js';
import { PromptCache } from './prompt-cache.js';
import type { RouteContext } from './route-context.js';

/** One request as the simulator received it. */
export interface RecordedRequest {
  method: string;
  /** Path and query string, as sent. */
  url: string;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
  /** Arrival time, ms since the epoch. */
  at: number;
}

/** Options of the simulator plugin. */
export interface SimulatorOptions {
  /** Log the routes append to, most recent last (shared with the caller); a new one if absent. */
  received?: RecordedRequest[];
  /** How many of the latest requests the log keeps at least (default 1000); at twice that it is cut back to it. */
  maxRecorded?: number;
}

/** A running simulator (startSimulator). */
export interface Simulator {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  url: string;
  /** Recorded requests, most recent last (the live log). */
  received: RecordedRequest[];
  /** Empties the log. */
  clear(): void;
  close(): Promise<void>;
}

const DEFAULT_MAX_RECORDED = 1000;

/** Renders any error of the routes in the protocol of its path, like the providers do. */
function sendError(err: FastifyError | SimError | Error, req: FastifyRequest, reply: FastifyReply): void {
  const status = err instanceof SimError ? err.status : ((err as FastifyError).statusCode ?? 500);
  const message = err instanceof SimError || status < 500 ? err.message : defaultMessage(status);
  const requestId = newId('req_');
  const anthropic = req.url.startsWith('/v1/messages');
  if (status === 429) reply.header('retry-after', '1');
  reply
    .code(status)
    .header(anthropic ? 'request-id' : 'x-request-id', requestId)
    .type('application/json')
    .send(
      anthropic
        ? anthropicErrorBody(status, message, requestId)
        : openaiErrorBody(status, message, err instanceof SimError ? err.param : null, err instanceof SimError ? err.code : undefined),
    );
}

/** Fastify plugin registering the simulated provider routes at root paths (not fastify-plugin wrapped). */
export default async function simulator(app: FastifyInstance, opts: SimulatorOptions): Promise<void> {
  const received = opts.received ?? [];
  const max = opts.maxRecorded ?? DEFAULT_MAX_RECORDED;
  const ctx: RouteContext = {
    cache: new PromptCache(),
    record(req) {
      received.push({ method: req.method, url: req.url, headers: req.headers, body: req.body, at: Date.now() });
      // Cut back in one step at twice the size: trimming one entry per request moved the whole log each time.
      if (received.length >= 2 * max) received.splice(0, received.length - max);
    },
  };
  app.setErrorHandler(sendError);
  anthropicRoutes(app, ctx);
  openaiRoutes(app, ctx);
  app.get('/__sim/requests', async () => received);
  app.delete('/__sim/requests', async (_req, reply) => {
    received.length = 0;
    return reply.code(204).send();
  });
}

/** Starts the simulator on its own server (default 127.0.0.1, ephemeral port). */
export async function startSimulator(opts: { host?: string; port?: number } = {}): Promise<Simulator> {
  const host = opts.host ?? '127.0.0.1';
  // forceCloseConnections: SDK clients keep sockets alive; close() must not wait for them. Bodies are parsed with
  // plain JSON.parse: the routes copy no keys into other objects, so `__proto__` in a body is data, as upstream.
  const app = Fastify({ logger: false, forceCloseConnections: true, onProtoPoisoning: 'ignore', onConstructorPoisoning: 'ignore' });
  const received: RecordedRequest[] = [];
  await app.register(simulator, { received });
  // Unknown paths answer in the protocol's error shape, like the providers' 404s.
  app.setNotFoundHandler((req, reply) => sendError(new SimError(404, `Not found: ${req.method} ${req.url.split('?')[0]}`), req, reply));
  await app.listen({ host, port: opts.port ?? 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : opts.port;
  // A wildcard listen address is reached through loopback.
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${urlHost}:${port}`,
    received,
    clear: () => {
      received.length = 0;
    },
    close: () => app.close(),
  };
}
