/**
 * `farebox serve`: the plugin in a Fastify app of its own. Without FAREBOX_CONFIG it runs the embedded
 * default: the simulated upstreams and four dev chains in-process, and a demo account whose key is printed once,
 * on first start, and which is funded on chain_a at every start.
 *
 * Dev chains keep nothing across restarts. Accounts, keys and usage records live in Redis and survive; the
 * synced balances, cursors, holds and debit queues of the old chains are cleared at start (resyncDevChains), and
 * the watcher rebuilds them from the new chains' events.
 */
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import { setFlagsFromString } from 'node:v8';
import type { Redis } from 'ioredis';
import { createAccount, createKey, getAccount } from './accounts/accounts.js';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from './chains/config.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV, startDevChains, type DevChains } from './chains/dev-chains.js';
import { mintAndDeposit } from './chains/dev-fund.js';
import { buildConfig, DEFAULT_DASHBOARD_PATH, embeddedDefault, loadConfig, type ConfigEnv, type FareboxConfig } from './config.js';
import dashboard from './dashboard/index.js';
import farebox from './gateway.js';
import { CHAIN_STATE_PATTERNS, keys } from './store/keys.js';
import { closeRedis, connectRedis, deleteKeys } from './store/redis.js';
import { startSimulator, type Simulator } from './simulator/index.js';
import { readWallet } from './billing/wallets.js';

/** A running standalone gateway. */
export interface Server {
  app: FastifyInstance;
  config: FareboxConfig;
  /** http://host:port of the gateway. */
  url: string;
  simulator?: Simulator;
  devChains?: DevChains;
  /** The environment the gateway was started with (dev settler key added on the embedded default). */
  env: ConfigEnv;
  close(): Promise<void>;
}

/** V8's old-generation growth factor `farebox serve` runs with, as heap-growing-percent (1.5x). */
export const HEAP_GROWING_PERCENT = 50;

/**
 * V8 flags `farebox serve` and `farebox settle` run with (tuneHeap):
 * - `--heap-growing-percent=50`: a 1.5x old-generation growth factor instead of V8's adaptive one (up to 4x). A
 *   gateway's live heap is small (~30 MiB) and its garbage is per call, so that headroom was most of its RSS: in the
 *   bench, peak RSS went from ~260 MiB to ~165 and the growth between 1,000 and 10,000 calls from ~38 MiB to ~15, at
 *   the same CPU per call (full GCs are cheap on a small live heap).
 * - `--no-allocation-site-pretenuring`: under load, hundreds of calls in flight survive a scavenge, and V8 then
 *   allocates their objects (request contexts, hold arguments, parser state) straight in old space from those
 *   allocation sites on. Once the load eases they still go there, die young, and fill old space: ~1.4 MiB per
 *   scavenge one call at a time, and scavenges of 4-17 ms (old-to-new references to walk) instead of 1-2 ms, each a
 *   stall of the calls in flight. Under load the CPU per call was the same either way.
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
export function tuneHeap(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ''): string[] {
  const given = new Set([...execArgv, ...nodeOptions.split(/\s+/).filter(Boolean)].map(flagName));
  const set = V8_FLAGS.filter((f) => !given.has(flagName(f)));
  for (const f of set) setFlagsFromString(f);
  return set;
}

/** Redis key where the embedded default publishes its dev chains for the CLI (`farebox chains`, `farebox fund`). */
export const DEV_CHAINS_KEY = keys.devChains;

/**
 * Dev chains as a config section. The watcher polls them every 500 ms: a deposit shows within that, and the settler's
 * own batches are read back as soon as they are mined (Settler onMined). Every 100 ms, the polls of the four chains
 * cost the settle process and the chains ~50 ms of CPU a second each, idle.
 */
export function devChainsConfig(dev: DevChains): ChainsConfig {
  const out = {} as Record<ChainName, ChainsConfig[ChainName]>;
  for (const name of CHAIN_NAMES) {
    const { provider: _p, name: _n, ...c } = dev.chains[name];
    out[name] = { ...c, poll_interval_ms: 500 };
  }
  return out;
}

/**
 * The embedded default's config for a process that only settles (`farebox settle` beside `npm start`): the dev
 * chains a gateway published in Redis and the dev settler key. Such a process calls no upstream, so the simulator's
 * address and key in it are placeholders.
 */
export function embeddedSettleConfig(chains: ChainsConfig, env: ConfigEnv): { config: FareboxConfig; env: ConfigEnv } {
  const runEnv = { ...env, FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey };
  return { config: buildConfig({ ...embeddedDefault('http://127.0.0.1:8090'), chains }, runEnv, true), env: runEnv };
}

/** Clear what Redis knows of the previous dev chains: they start empty, so their balances and debits are gone. */
export async function resyncDevChains(redis: Redis): Promise<void> {
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  const raw = redis.duplicate({ keyPrefix: '' });
  try {
    // Calls whose money lived on the old chains: their records must not wait forever as held or pending.
    let cursor = '0';
    do {
      const [next, keys] = await raw.scan(cursor, 'MATCH', `${prefix}call:*`, 'COUNT', 1000);
      cursor = next;
      const statuses = await Promise.all(keys.map((key) => raw.hget(key, 'status')));
      await Promise.all(keys.map((key, i) => {
        const to = statuses[i] === 'held' ? 'free' : statuses[i] === 'pending' ? 'failed' : null;
        return to ? raw.hset(key, 'status', to) : null;
      }));
    } while (cursor !== '0');
    await deleteKeys(redis, CHAIN_STATE_PATTERNS);
  } finally {
    await closeRedis(raw);
  }
}

/** Start the gateway standalone on config.server.host:port. */
export async function serve(env: ConfigEnv = process.env, opts: { logger?: boolean } = {}): Promise<Server> {
  const embedded = !env.FAREBOX_CONFIG;
  let simulator: Simulator | undefined;
  let devChains: DevChains | undefined;
  let app: FastifyInstance | undefined;
  try {
    let config: FareboxConfig;
    let runEnv: ConfigEnv = env;
    if (embedded) {
      simulator = await startSimulator({ host: '127.0.0.1', port: 0 });
      devChains = await startDevChains({ host: '127.0.0.1', basePort: env.FAREBOX_DEV_CHAIN_PORT ? Number(env.FAREBOX_DEV_CHAIN_PORT) : undefined });
      runEnv = { ...env, FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey };
      config = buildConfig({ ...embeddedDefault(simulator.url), chains: devChainsConfig(devChains) }, runEnv, true);
      const redis = connectRedis({ ...config.redis, failFast: true });
      try {
        await resyncDevChains(redis);
        await redis.set(DEV_CHAINS_KEY, JSON.stringify(config.chains));
      } finally {
        await closeRedis(redis);
      }
    } else {
      config = loadConfig(env);
    }
    app = Fastify({
      logger: opts.logger === false ? false : { level: env.LOG_LEVEL ?? 'info' },
      // Per-request log lines cost CPU on every call: off unless LOG_REQUESTS=1.
      logController: new LogController({ disableRequestLogging: env.LOG_REQUESTS !== '1' }),
      // The gateway answers 404s under /v1 itself; the router should not split hairs about slashes.
      routerOptions: { ignoreTrailingSlash: true },
    });
    // While stopping, answers tell keep-alive clients the connection closes (RFC 9112 9.6): an open socket would
    // hold close() for the keep-alive timeout (72 s).
    let closing = false;
    app.addHook('onSend', (_request, reply, payload, done) => {
      if (closing) reply.header('connection', 'close');
      done(null, payload);
    });
    await app.register(farebox, { config, env: runEnv });
    if (config.dashboard.enabled) await app.register(dashboard, { prefix: config.dashboard.path, config, env: runEnv });
    await app.listen({ port: config.server.port, host: config.server.host });
    const address = app.server.address();
    const port = typeof address === 'object' && address ? address.port : config.server.port;
    const url = `http://${config.server.host.includes(':') ? `[${config.server.host}]` : config.server.host}:${port}`;
    const started = app;
    return {
      app: started,
      config,
      url,
      simulator,
      devChains,
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
        await simulator?.close();
        await devChains?.close();
      },
    };
  } catch (err) {
    await app?.close().catch(() => {});
    await simulator?.close();
    await devChains?.close();
    throw err;
  }
}

/** Fund `account` on a dev chain and wait until the gateway's synced balance shows it. */
export async function fundOnDevChain(redis: Redis, chains: ChainsConfig, chain: ChainName, account: string, amount: bigint, timeoutMs = 15_000): Promise<bigint> {
  const onchain = await mintAndDeposit(chains[chain], account as `0x${string}`, amount);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const w = await readWallet(redis, account, chain);
    if (w.synced >= onchain) return w.synced;
    if (Date.now() > deadline) throw new Error(`${chain}: deposited, but the gateway's synced balance still shows ${w.synced}; is the gateway running?`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** On the embedded default: make the demo account on first start and return the lines to print (the dashboard's URL last). */
export async function demoGreeting(redis: Redis, url: string, chains: ChainsConfig): Promise<string[]> {
  const marker = await redis.get(keys.demoAccount);
  const existing = marker ? await getAccount(redis, marker) : null;
  const address = existing ? existing.address : (await createAccount(redis, {})).address;
  const funded = await fundOnDevChain(redis, chains, 'chain_a', address, 10_000_000n);
  const head = `farebox: embedded default at ${url} (simulated upstreams, dev chains). Demo account ${address}, ${Number(funded) / 1e6} USD on chain_a.`;
  const board = `  Dashboard: ${url}${DEFAULT_DASHBOARD_PATH}/ (sign in with a browser wallet; it offers to add the dev chains)`;
  if (existing) {
    return [head, `  A new key for it: npx farebox key create --account ${address}`, board];
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
    board,
  ];
}
