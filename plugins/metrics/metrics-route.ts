/**
 * GET /metrics for Prometheus. By default on a port of its own (config metrics.port, 9464), off the API port: the
 * metrics tell what every chain and model is charged and how often each is called. On the API port only when the
 * config says so (metrics.on_api_port), and then only behind the bearer token of metrics.token_env.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { DEFAULT_METRICS_PORT } from '../config.js';
import { METRICS_PORT_USE, portInUse } from '../ports.js';
import type { Metrics } from './metrics.js';

/** Where and how /metrics is served (config metrics, with server.host). */
export interface MetricsServing {
  /** Port of its own (0 = ephemeral); absent = 9464. Ignored with `on_api_port`. */
  port?: number;
  /** On the gateway's port instead, behind the token (which is then required). */
  on_api_port?: boolean;
  /** Name of the env var holding the bearer token. */
  token_env?: string;
  /** Address the port of its own binds to (the server's host). */
  host?: string;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Whether an Authorization header passes: always, when no token is configured. */
function tokenCheck(
  tokenEnv: string | undefined,
  env: Record<string, string | undefined>,
): (auth: string | undefined) => boolean {
  const token = tokenEnv ? env[tokenEnv] : undefined;
  if (tokenEnv && !token) throw new Error(`metrics.token_env: environment variable ${tokenEnv} is not set`);
  if (!token) return () => true;
  const want = digest(`Bearer ${token}`);
  // Compared in constant time: the token guards every account's spend.
  return (auth) => auth !== undefined && timingSafeEqual(digest(auth), want);
}

/** Serve the registry of `metrics` as configured; returns how to close the port of its own, if one was opened. */
export async function serveMetrics(
  app: FastifyInstance,
  metrics: Metrics,
  opts: MetricsServing,
  env: Record<string, string | undefined>,
): Promise<(() => Promise<void>) | undefined> {
  if (opts.on_api_port) {
    if (!opts.token_env)
      throw new Error('metrics.token_env: required with metrics.on_api_port (the API port is public)');
    const allowed = tokenCheck(opts.token_env, env);
    app.get('/metrics', async (request, reply) => {
      if (!allowed(request.headers.authorization)) return reply.code(401).send('unauthorized\n');
      reply.header('content-type', metrics.registry.contentType);
      return metrics.registry.metrics();
    });
    return undefined;
  }
  const server = await startMetricsServer(metrics, { ...opts, port: opts.port ?? DEFAULT_METRICS_PORT }, env).catch(
    (err: unknown) => {
      throw portInUse(err, METRICS_PORT_USE);
    },
  );
  app.addHook('onClose', () => server.close());
  return () => server.close();
}

/** GET /metrics on a port of its own (0 = ephemeral); behind a bearer token when `opts.token_env` names one. */
export async function startMetricsServer(
  metrics: Metrics,
  opts: { port: number; token_env?: string; host?: string },
  env: Record<string, string | undefined>,
): Promise<{ port: number; close(): Promise<void> }> {
  const allowed = tokenCheck(opts.token_env, env);
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    if (!allowed(req.headers.authorization)) {
      res.writeHead(401).end('unauthorized\n');
      return;
    }
    metrics.registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text),
      () => res.writeHead(500).end(),
    );
  });
  // A scrape is one small GET: a client that takes longer to send it is cut.
  server.headersTimeout = 10_000;
  server.requestTimeout = 10_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '127.0.0.1', () => resolve());
  });
  metrics.server.port = (server.address() as { port: number }).port;
  return {
    port: metrics.server.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Prometheus keeps its scrape connections open: they must not hold the gateway's close.
        server.closeAllConnections();
      }),
  };
}
