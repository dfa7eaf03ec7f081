/**
 * GET /metrics for Prometheus: on the gateway's port, or on a port of its own (config metrics.port), and behind a
 * bearer token when config metrics.token_env names one.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { Metrics } from './metrics.js';

/** Whether an Authorization header passes: always, when no token is configured. */
function tokenCheck(tokenEnv: string | undefined, env: Record<string, string | undefined>): (auth: string | undefined) => boolean {
  const token = tokenEnv ? env[tokenEnv] : undefined;
  if (tokenEnv && !token) throw new Error(`metrics.token_env: environment variable ${tokenEnv} is not set`);
  return (auth) => !token || auth === `Bearer ${token}`;
}

/** Serve the registry of `metrics` as configured. */
export async function serveMetrics(
  app: FastifyInstance,
  metrics: Metrics,
  opts: { port?: number; token_env?: string; host?: string },
  env: Record<string, string | undefined>,
): Promise<void> {
  if (opts.port === undefined) {
    const allowed = tokenCheck(opts.token_env, env);
    app.get('/metrics', async (request, reply) => {
      if (!allowed(request.headers.authorization)) return reply.code(401).send('unauthorized\n');
      reply.header('content-type', metrics.registry.contentType);
      return metrics.registry.metrics();
    });
    return;
  }
  const server = await startMetricsServer(metrics, { ...opts, port: opts.port }, env);
  app.addHook('onClose', () => server.close());
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
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '127.0.0.1', () => resolve());
  });
  metrics.server.port = (server.address() as { port: number }).port;
  return {
    port: metrics.server.port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
