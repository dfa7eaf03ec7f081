/**
 * The simulated upstream providers (DESIGN.md "The simulated upstreams"): Anthropic Messages, OpenAI
 * Chat Completions, OpenAI Images and Videos, Gemini generateContent images and Veo long-running video
 * generation; deterministic, with usage consistent with the output, prompt caching, real PNGs and
 * MP4s, and faults on demand through `#sim:` directives (directives.ts). Serves the embedded default,
 * the tests and the benchmark.
 */
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { createHash, timingSafeEqual } from 'node:crypto';
import { anthropicRoutes } from './anthropic.js';
import { SimError, anthropicErrorBody, defaultMessage, geminiErrorBody, openaiErrorBody } from './errors.js';
import { geminiRoutes } from './gemini.js';
import { newId } from './ids.js';
import { MediaState } from './media-state.js';
import { MULTIPART_LIMITS, multipartPlugin } from './multipart.js';
import { openaiImageRoutes } from './openai-images.js';
import { openaiVideoRoutes } from './openai-videos.js';
import { openaiRoutes } from './openai.js';
import { PromptCache } from './prompt-cache.js';
import type { ReceivedImages } from './received-images.js';
import type { RouteContext } from './route-context.js';

/** The received-images log's entries (Simulator.images.received). */
export type { ReceivedImage, ReceivedImages } from './received-images.js';

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
  /** Log of the reference images requests carried, most recent last (shared with the caller); a new one if absent. */
  receivedImages?: ReceivedImages[];
  /** How many of the latest requests with images that log keeps at least (default 100), cut back as the request log is. */
  maxRecordedImages?: number;
  /** How long a video job renders before it completes, ms (default 2000; real renders take 1 to 5 minutes). */
  videoRenderMs?: number;
  /**
   * Serves the request log at GET/DELETE /__sim/requests to callers with `Authorization: Bearer <token>`.
   * Absent (the default): no such route, since the log holds every header, provider keys included.
   */
  inspectToken?: string;
}

/** A running simulator (startSimulator). */
export interface Simulator {
  /** `http://127.0.0.1:PORT`, no trailing slash. */
  url: string;
  /** Recorded requests, most recent last (the live log). */
  received: RecordedRequest[];
  /** Reference images received, per request, decoded (the live log). */
  images: { received: ReceivedImages[] };
  /** Empties both logs. */
  clear(): void;
  close(): Promise<void>;
}

const DEFAULT_MAX_RECORDED = 1000;
const DEFAULT_MAX_RECORDED_IMAGES = 100;
const DEFAULT_VIDEO_RENDER_MS = 2000;

/** Renders any error of the routes in the protocol of its path, like the providers do. */
function sendError(err: FastifyError | SimError | Error, req: FastifyRequest, reply: FastifyReply): void {
  const status = err instanceof SimError ? err.status : ((err as FastifyError).statusCode ?? 500);
  const message = err instanceof SimError || status < 500 ? err.message : defaultMessage(status);
  const requestId = newId('req_');
  if (status === 429) reply.header('retry-after', '1');
  reply.code(status).type('application/json');
  if (req.url.startsWith('/v1beta/')) {
    reply.send(geminiErrorBody(status, message));
  } else if (req.url.startsWith('/v1/messages')) {
    reply.header('request-id', requestId).send(anthropicErrorBody(status, message, requestId));
  } else {
    const sim = err instanceof SimError ? err : undefined;
    reply
      .header('x-request-id', requestId)
      .send(openaiErrorBody(status, message, sim?.param ?? null, sim?.code, sim?.type));
  }
}

/** Whether a request carries `Authorization: Bearer <token>` (compared in constant time). */
function bearerIs(req: FastifyRequest, token: string): boolean {
  const auth = req.headers.authorization;
  if (typeof auth !== 'string' || !auth.startsWith('Bearer ')) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(auth.slice('Bearer '.length)), digest(token));
}

/** Fastify plugin registering the simulated provider routes at root paths (not fastify-plugin wrapped). */
export default async function simulator(app: FastifyInstance, opts: SimulatorOptions): Promise<void> {
  const received = opts.received ?? [];
  const max = opts.maxRecorded ?? DEFAULT_MAX_RECORDED;
  const media = new MediaState(
    opts.receivedImages ?? [],
    opts.maxRecordedImages ?? DEFAULT_MAX_RECORDED_IMAGES,
    opts.videoRenderMs ?? DEFAULT_VIDEO_RENDER_MS,
  );
  const ctx: RouteContext = {
    cache: new PromptCache(),
    media,
    record(req, body = req.body) {
      received.push({ method: req.method, url: req.url, headers: req.headers, body, at: Date.now() });
      // Cut back in one step at twice the size: trimming one entry per request moved the whole log each time.
      if (received.length >= 2 * max) received.splice(0, received.length - max);
    },
  };
  app.setErrorHandler(sendError);
  // Inside this plugin only: the multipart parser serves image edits and video submits.
  await app.register(await multipartPlugin(), { limits: MULTIPART_LIMITS });
  app.addHook('onClose', () => media.close());
  anthropicRoutes(app, ctx);
  openaiRoutes(app, ctx);
  openaiImageRoutes(app, ctx);
  openaiVideoRoutes(app, ctx);
  geminiRoutes(app, ctx);
  const token = opts.inspectToken;
  if (token !== undefined && token !== '') {
    const inspect = (req: FastifyRequest) => {
      if (!bearerIs(req, token)) throw new SimError(401, "The request log needs the simulator's inspect token.");
    };
    app.get('/__sim/requests', async (req) => {
      inspect(req);
      return received;
    });
    app.delete('/__sim/requests', async (req, reply) => {
      inspect(req);
      received.length = 0;
      return reply.code(204).send();
    });
  }
}

/** Options of startSimulator: where to listen, and the plugin's options. */
export interface StartOptions
  extends Pick<SimulatorOptions, 'maxRecorded' | 'maxRecordedImages' | 'videoRenderMs' | 'inspectToken'> {
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (ephemeral). */
  port?: number;
}

/** Starts the simulator on its own server (default 127.0.0.1, ephemeral port). */
export async function startSimulator(opts: StartOptions = {}): Promise<Simulator> {
  const host = opts.host ?? '127.0.0.1';
  // forceCloseConnections: SDK clients keep sockets alive; close() must not wait for them. Bodies are parsed with
  // plain JSON.parse: the routes copy no keys into other objects, so `__proto__` in a body is data, as upstream.
  const app = Fastify({
    logger: false,
    forceCloseConnections: true,
    onProtoPoisoning: 'ignore',
    onConstructorPoisoning: 'ignore',
  });
  const received: RecordedRequest[] = [];
  const receivedImages: ReceivedImages[] = [];
  const { host: _host, port: _port, ...plugin } = opts;
  await app.register(simulator, { ...plugin, received, receivedImages });
  // Unknown paths answer in the protocol's error shape, like the providers' 404s.
  app.setNotFoundHandler((req, reply) =>
    sendError(new SimError(404, `Not found: ${req.method} ${req.url.split('?')[0]}`), req, reply),
  );
  await app.listen({ host, port: opts.port ?? 0 });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : opts.port;
  // A wildcard listen address is reached through loopback.
  const urlHost = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${urlHost}:${port}`,
    received,
    images: { received: receivedImages },
    clear: () => {
      received.length = 0;
      receivedImages.length = 0;
    },
    close: () => app.close(),
  };
}
