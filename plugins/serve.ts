/**
 * `farebox serve`: the plugin in a Fastify app of its own. Without FAREBOX_CONFIG it runs the embedded default
 * (embedded.ts), with a demo account (DEMO_KEY, a dev wallet the dashboard signs in) whose API key is printed once,
 * on first start, and which is funded on chain_a at every start.
 */
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { ServerOptions } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import type { Redis } from 'ioredis';
import { createAccount, createKey, getAccount } from './accounts/accounts.js';
import dashboard from './dashboard/index.js';
import { listeningOrigins } from './dashboard/context.js';
import { readWallet } from './billing/wallets.js';
import type { ChainName, ChainsConfig } from './chains/config.js';
import { DEV_KEYS, type DevChains } from './chains/dev-chains.js';
import { mintAndDeposit } from './chains/dev-fund.js';
import {
  DEFAULT_DASHBOARD_PATH,
  DEFAULT_METRICS_PORT,
  loadConfig,
  type ConfigEnv,
  type FareboxConfig,
} from './config.js';
import { startEmbedded, type Embedded } from './embedded.js';
import farebox from './gateway.js';
import { checkTimeoutsAfterReads, fareboxServerOptions } from './phases/client-errors.js';
import { createMetrics } from './metrics/metrics.js';
import { API_PORT, METRICS_PORT_USE, checkPortFree, portInUse } from './ports.js';
import type { Simulator } from './simulator/index.js';
import { keys } from './store/keys.js';
import { formatUsd } from '../pricing/index.js';

export { DEV_CHAINS_KEY, devChainsConfig, embeddedSettleConfig, resyncDevChains } from './embedded.js';

/** A running standalone gateway. */
export interface Server {
  app: FastifyInstance;
  config: FareboxConfig;
  /** http://host:port of the gateway. */
  url: string;
  /** Where Prometheus scrapes it (a port of its own unless metrics.on_api_port); undefined with metrics off. */
  metricsUrl?: string;
  simulator?: Simulator;
  devChains?: DevChains;
  /** The environment the gateway was started with (dev settler key added on the embedded default). */
  env: ConfigEnv;
  close(): Promise<void>;
}

/** V8's old-generation growth factor `farebox serve` runs with, as heap-growing-percent (1.5x). */
export const HEAP_GROWING_PERCENT = 50;

/**
 * V8 flags `farebox serve` and `farebox settle` run with (tuneHeap; README "In your own Fastify app", bench/README.md
 * have what they changed):
 * - `--heap-growing-percent=50`: a 1.5x old-generation growth factor instead of V8's adaptive one (up to 4x). A
 *   gateway's live heap is small and its garbage is per call, so that headroom would be most of its RSS; full GCs
 *   are cheap on a small live heap.
 * - `--no-allocation-site-pretenuring`: under load, hundreds of calls in flight survive a scavenge, and V8 then
 *   allocates their objects (request contexts, hold arguments, parser state) straight in old space from those
 *   allocation sites on. Once the load eases they still go there, die young, and fill old space, which makes every
 *   scavenge walk old-to-new references: a stall of the calls in flight.
 */
export const V8_FLAGS = [`--heap-growing-percent=${HEAP_GROWING_PERCENT}`, '--no-allocation-site-pretenuring'] as const;

/** A V8 flag's name as node's command line may spell it: `--no-foo_bar=1` -> `foo-bar`. */
function flagName(arg: string): string {
  return arg.replace(/^--/, '').replace(/=.*$/, '').replace(/_/g, '-').replace(/^no-/, '');
}

/**
 * Set V8_FLAGS. V8 reads both as it runs, so setting them at start works (GC traces show either take effect).
 * `farebox serve` and `farebox settle` call this; an operator's own value of either, on node's command line or in
 * NODE_OPTIONS, wins, and a host app that registers the plugin keeps its own settings. Returns the flags it set.
 */
export function tuneHeap(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions = process.env.NODE_OPTIONS ?? '',
): string[] {
  const given = new Set([...execArgv, ...nodeOptions.split(/\s+/).filter(Boolean)].map(flagName));
  const set = V8_FLAGS.filter((f) => !given.has(flagName(f)));
  for (const f of set) setFlagsFromString(f);
  return set;
}

/**
 * The Fastify options that bound how long a request may take to arrive (config server; README "Slow clients"): a
 * client that trickles its headers or its body, or stalls, is cut by the timeouts, never by the answer's length.
 */
export function serverTimeouts(
  server: FareboxConfig['server'],
): Pick<FastifyServerOptions, 'requestTimeout' | 'keepAliveTimeout'> & { http: ServerOptions } {
  const shortest = Math.min(server.headers_timeout_ms, server.request_timeout_ms);
  return {
    // Fastify's default, 0, would let a request body trickle forever.
    requestTimeout: server.request_timeout_ms,
    keepAliveTimeout: server.keep_alive_timeout_ms,
    http: {
      headersTimeout: server.headers_timeout_ms,
      requestTimeout: server.request_timeout_ms,
      // Node checks both timeouts on this interval, 30 s unless set: a stall would outlive them by as much.
      connectionsCheckingInterval: Math.max(50, Math.min(1_000, Math.floor(shortest / 4))),
    },
  };
}

/** Options of serve(). */
export interface ServeOptions {
  /**
   * false: no log at all. Default: JSON logs at LOG_LEVEL: info with a config, warn on the embedded default (its
   * greeting says where everything is; what needs action is a warn).
   */
  logger?: boolean;
  /** Told what a slow start is doing (the embedded default's dev chains), then null before the server logs. */
  onProgress?: (status: string | null) => void;
}

/** Start the gateway standalone on config.server.host:port. */
export async function serve(env: ConfigEnv = process.env, opts: ServeOptions = {}): Promise<Server> {
  let embedded: Embedded | undefined;
  let app: FastifyInstance | undefined;
  try {
    let config: FareboxConfig;
    let runEnv: ConfigEnv = env;
    if (!env.FAREBOX_CONFIG) {
      // Its fixed ports first, before the dev chains start and Redis is touched: a port taken stops it with nothing
      // written (the config's defaults: 8080, and 9464 unless the API port is ephemeral).
      // A port that is no port is left to the config's check, which names it.
      const host = env.HOST ?? '127.0.0.1';
      const apiPort = env.PORT !== undefined ? Number(env.PORT) : 8080;
      const metricsPort =
        env.METRICS_PORT !== undefined ? Number(env.METRICS_PORT) : apiPort === 0 ? 0 : DEFAULT_METRICS_PORT;
      for (const [port, use] of [
        [apiPort, API_PORT],
        [metricsPort, METRICS_PORT_USE],
      ] as const) {
        if (Number.isInteger(port) && port >= 0 && port <= 65535) await checkPortFree(host, port, use);
      }
      opts.onProgress?.('starting the simulated upstreams and four dev chains');
      try {
        embedded = await startEmbedded(env);
      } finally {
        opts.onProgress?.(null);
      }
      ({ config, env: runEnv } = embedded);
    } else {
      config = loadConfig(env);
    }
    const timeouts = serverTimeouts(config.server);
    app = Fastify({
      logger: opts.logger === false ? false : { level: env.LOG_LEVEL ?? (embedded ? 'warn' : 'info') },
      // Per-request log lines cost CPU on every call: off unless LOG_REQUESTS=1.
      logController: new LogController({ disableRequestLogging: env.LOG_REQUESTS !== '1' }),
      // The gateway answers 404s under /v1 itself; the router should not split hairs about slashes.
      routerOptions: { ignoreTrailingSlash: true },
      // What the HTTP parser and the router refuse gets a request id and the caller's error shape too.
      ...fareboxServerOptions,
      trustProxy: config.server.trust_proxy,
      ...timeouts,
      http: { ...fareboxServerOptions.http, ...timeouts.http },
    });
    checkTimeoutsAfterReads(app.server, timeouts.http.connectionsCheckingInterval!);
    if (config.server.max_connections > 0) app.server.maxConnections = config.server.max_connections;
    // While stopping, answers tell keep-alive clients the connection closes (RFC 9112 9.6): an open socket would
    // hold close() for the keep-alive timeout (server.keep_alive_timeout_ms).
    let closing = false;
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (closing) reply.header('connection', 'close');
      done(null, payload);
    });
    const metrics = createMetrics();
    await app.register(farebox, { config, env: runEnv, metrics });
    if (config.dashboard.enabled) await app.register(dashboard, { prefix: config.dashboard.path, config, env: runEnv });
    await app.listen({ port: config.server.port, host: config.server.host }).catch((err: unknown) => {
      throw portInUse(err, API_PORT);
    });
    // The dev chains answer web pages of the dashboard's origins alone (dev-rpc-server.ts).
    if (config.dashboard.enabled) embedded?.devChains.allowOrigins(config.dashboard.origins ?? listeningOrigins(app));
    const address = app.server.address();
    const port = typeof address === 'object' && address ? address.port : config.server.port;
    const origin = (p: number) =>
      `http://${config.server.host.includes(':') ? `[${config.server.host}]` : config.server.host}:${p}`;
    const url = origin(port);
    let metricsUrl: string | undefined;
    if (config.metrics.enabled)
      metricsUrl = config.metrics.on_api_port ? `${url}/metrics` : `${origin(metrics.server.port!)}/metrics`;
    if (metricsUrl) app.log.info({ url: metricsUrl }, 'metrics served');
    const started = app;
    return {
      app: started,
      config,
      url,
      metricsUrl,
      simulator: embedded?.simulator,
      devChains: embedded?.devChains,
      env: runEnv,
      async close() {
        closing = true;
        // Sockets of calls in flight: drop each as soon as its call ends.
        const idle = setInterval(() => started.server.closeIdleConnections(), 100);
        try {
          await started.close();
        } finally {
          clearInterval(idle);
        }
        await embedded?.close();
      },
    };
  } catch (err) {
    await app?.close().catch(() => {});
    await embedded?.abandon().catch(() => {});
    throw err;
  }
}

/** Options of fundOnDevChain. */
export interface DevFundOptions {
  /** How long to wait for the gateway's watcher to apply the deposit. Default 15 s. */
  timeoutMs?: number;
  /** Told what it is doing as each step starts, for a progress line. */
  onProgress?: (status: string) => void;
}

/** Fund `account` on a dev chain and wait until the gateway's synced balance shows it. */
export async function fundOnDevChain(
  redis: Redis,
  chains: ChainsConfig,
  chain: ChainName,
  account: string,
  amount: bigint,
  opts: DevFundOptions = {},
): Promise<bigint> {
  const say = opts.onProgress;
  const onchain = await mintAndDeposit(chains[chain], account as `0x${string}`, amount, {
    onStep:
      say &&
      ((step) =>
        say(
          `${chain}: ${step === 'minting' ? `minting ${formatUsd(amount)} test USD` : `depositing it for ${account}`}`,
        )),
  });
  say?.(`${chain}: deposited; waiting for the gateway's watcher to see it`);
  const deadline = Date.now() + (opts.timeoutMs ?? 15_000);
  for (;;) {
    const w = await readWallet(redis, account, chain);
    if (w.synced >= onchain) return w.synced;
    if (Date.now() > deadline)
      throw new Error(
        `${chain}: deposited, but the gateway's synced balance still shows ${w.synced}; is the gateway running?`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The demo account of the embedded default: dev caller #0 of the dev chains' well-known keys (DEV_KEYS), so that a
 * browser wallet can import its key and sign in to the dashboard as it. A public key on dev chains alone: it holds
 * test USD, never money.
 */
export const DEMO_KEY = DEV_KEYS.callers[0];

/**
 * On the embedded default: make the demo account (DEMO_KEY) on first start, fund it on chain_a, and return the lines
 * to print (its wallet key, where metrics are scraped, then the dashboard's URL, last). A demo account of an older
 * start that is not DEMO_KEY's (nobody holds its key) stays an ordinary account; DEMO_KEY's becomes the demo one.
 */
export async function demoGreeting(
  redis: Redis,
  url: string,
  chains: ChainsConfig,
  metricsUrl?: string,
  onProgress?: (status: string) => void,
): Promise<string[]> {
  const address = DEMO_KEY.address.toLowerCase();
  const first = (await redis.get(keys.demoAccount)) !== address;
  if (!(await getAccount(redis, address))) await createAccount(redis, { address });
  const funded = await fundOnDevChain(redis, chains, 'chain_a', address, 10_000_000n, { onProgress });
  const head = `farebox: embedded default at ${url} (simulated upstreams, dev chains). Demo account ${address}, ${Number(funded) / 1e6} USD on chain_a.`;
  const wallet = `  Demo wallet key (a well-known dev key: dev chains only, never real money), to import in a browser wallet: ${DEMO_KEY.privateKey}`;
  const board = `  Dashboard: ${url}${DEFAULT_DASHBOARD_PATH}/ (sign in with the demo wallet key above, or a wallet of your own; it offers to add the dev chains)`;
  const tail = metricsUrl ? [wallet, `  Metrics: ${metricsUrl} (Prometheus)`, board] : [wallet, board];
  if (!first) {
    return [head, `  A new key for it: node_modules/.bin/farebox key create --account ${address}`, ...tail];
  }
  await redis.set(keys.demoAccount, address);
  const { key } = await createKey(redis, address);
  return [
    `${head} Its key, shown once:`,
    '',
    `  export FAREBOX_KEY=${key}`,
    `  curl ${url}/v1/chat/completions -H "authorization: Bearer $FAREBOX_KEY" -H 'content-type: application/json' \\`,
    `    -d '{"model":"gamma-k3","messages":[{"role":"user","content":"Say hello"}]}'`,
    '',
    ...tail,
  ];
}
