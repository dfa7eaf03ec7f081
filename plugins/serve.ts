/**
 * `farebox serve`: the plugin in a Fastify app of its own. Without FAREBOX_CONFIG it runs the embedded
 * default: the simulated upstreams in-process, and a demo account whose key is printed once, on first start.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import { createAccount, createKey, getAccount } from './accounts.js';
import { loadConfig, type ConfigEnv, type FareboxConfig } from './config.js';
import farebox from './gateway.js';
import { startSimulator, type Simulator } from './simulator/index.js';

/** A running standalone gateway. */
export interface Server {
  app: FastifyInstance;
  config: FareboxConfig;
  /** http://host:port of the gateway. */
  url: string;
  simulator?: Simulator;
  close(): Promise<void>;
}

/** Start the gateway standalone on config.server.host:port. */
export async function serve(env: ConfigEnv = process.env, opts: { logger?: boolean } = {}): Promise<Server> {
  const simulator = env.FAREBOX_CONFIG ? undefined : await startSimulator({ host: '127.0.0.1', port: 0 });
  let app: FastifyInstance | undefined;
  try {
    const config = loadConfig(env, simulator?.url);
    app = Fastify({
      logger: opts.logger === false ? false : { level: env.LOG_LEVEL ?? 'info' },
      disableRequestLogging: env.LOG_REQUESTS !== '1',
      // The gateway answers 404s under /v1 itself; the router should not split hairs about slashes.
      routerOptions: { ignoreTrailingSlash: true },
    });
    await app.register(farebox, { config });
    await app.listen({ port: config.server.port, host: config.server.host });
    const address = app.server.address();
    const port = typeof address === 'object' && address ? address.port : config.server.port;
    const url = `http://${config.server.host.includes(':') ? `[${config.server.host}]` : config.server.host}:${port}`;
    const server: Server = {
      app,
      config,
      url,
      simulator,
      async close() {
        await app!.close();
        await simulator?.close();
      },
    };
    return server;
  } catch (err) {
    await app?.close().catch(() => {});
    await simulator?.close();
    throw err;
  }
}

/** On the embedded default: make the demo account on first start and return the lines to print. */
export async function demoGreeting(redis: Redis, url: string): Promise<string[]> {
  const marker = await redis.get('demo:account');
  if (marker && (await getAccount(redis, marker))) {
    return [
      `farebox: embedded default at ${url} (simulated upstreams). Demo account ${marker}.`,
      `  A new key for it: npx farebox key create --account ${marker}`,
    ];
  }
  const account = await createAccount(redis, {});
  await redis.set('demo:account', account.address);
  const { key } = await createKey(redis, account.address);
  return [
    `farebox: embedded default at ${url} (simulated upstreams). Demo account ${account.address}; its key, shown once:`,
    '',
    `  export FAREBOX_KEY=${key}`,
    `  curl ${url}/v1/chat/completions -H "authorization: Bearer $FAREBOX_KEY" -H 'content-type: application/json' \\`,
    `    -d '{"model":"gamma-k3","messages":[{"role":"user","content":"Say hello"}]}'`,
    '',
  ];
}
