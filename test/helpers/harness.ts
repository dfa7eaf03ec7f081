/**
 * Test harness: a simulator, a gateway on its own port and Redis key prefix, an active account and a key.
 * Everything it made in Redis is deleted on close.
 */
import { randomBytes } from 'node:crypto';
import { rmdirSync } from 'node:fs';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { buildConfig, embeddedDefault, type ConfigInput, type FareboxConfig } from '../../plugins/config.js';
import farebox from '../../plugins/gateway.js';
import { closeRedis, connectRedis, deleteKeys, redisIdentity } from '../../plugins/store/redis.js';
import { defaultSpoolDir } from '../../plugins/billing/spool.js';
import { createMetrics, type Metrics } from '../../plugins/metrics/metrics.js';
import { startSimulator, type Simulator } from '../../plugins/simulator/index.js';
import type { ChainName } from '../../plugins/chains/config.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV, startDevChains, type DevChains } from '../../plugins/chains/dev-chains.js';
import { devChainsConfig, fundOnDevChain } from '../../plugins/serve.js';

/** A running test gateway. */
export interface Harness {
  url: string;
  app: FastifyInstance;
  sim: Simulator;
  config: FareboxConfig;
  redis: Redis;
  prefix: string;
  account: string;
  key: string;
  keyId: string;
  /** The gateway's metrics (registry, and the port of /metrics when it has one of its own). */
  metrics: Metrics;
  /** Where Prometheus scrapes this gateway: its metrics port, or its own port with metrics.on_api_port. */
  metricsUrl: string;
  /** With `chains: true`: the dev chains the gateway bills on. */
  dev?: DevChains;
  /** Fund `account` (default: the harness account) on a dev chain and wait for the synced balance. */
  fund(chain: ChainName, amount: bigint, account?: string): Promise<bigint>;
  close(): Promise<void>;
}

/**
 * Every answer a harness gateway gave a test's fetch (the SDKs' too) with `x-gw-price`: its request id and the price,
 * by the gateway's URL. At close, each is checked against its call's record: the price a caller is shown is the
 * debit, in every test file that makes a billed call through a harness.
 */
const shownPrices = new Map<string, Shown[]>();
/** An answer with its price: its request id, the price, and whether it was an image (README "Images"). */
type Shown = { id: string; price: string; image: boolean };
const fetchOfNode = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const res = await fetchOfNode(input, init);
  const price = res.headers.get('x-gw-price');
  const id = res.headers.get('x-request-id');
  if (price !== null && id !== null) {
    const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url;
    const image = url.includes('/v1/images/');
    for (const [origin, shown] of shownPrices) if (url.startsWith(`${origin}/`)) shown.push({ id, price, image });
  }
  return res;
};

/**
 * The answers of `shown` whose call's record says another price (each once its debit landed; 5 s at most a call).
 * A call with no record (refused before its hold, or its record removed by the test) or still held is not compared,
 * nor is anything while Redis does not answer (a test that stopped it). An image's head says its price before the
 * image goes out: one cut before it did (the provider broke off, the caller left) is free, as the README says.
 */
async function pricesNotDebited(redis: Redis, shown: readonly Shown[]): Promise<string[]> {
  const wrong: string[] = [];
  for (const { id, price, image } of shown) {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const record = await getCallRecord(redis, id).catch(() => undefined);
      if (record === undefined) return wrong;
      if (record === null) break;
      if (record.status !== 'held') {
        if (record.price !== price && !(image && record.status === 'free'))
          wrong.push(`${id}: x-gw-price ${price}, debited ${record.price} (${record.status})`);
        break;
      }
      if (Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
  return wrong;
}

let shared: { chains: Promise<DevChains>; testMethods: boolean } | undefined;

/**
 * Dev chains for this test file (one set per process; close them with closeDevChains). They serve wallets' methods, as
 * under `farebox serve`; `testMethods` adds hardhat_* and evm_* for a file that drives the chain (the first call
 * decides for the file).
 */
export function devChains(opts: { testMethods?: boolean } = {}): Promise<DevChains> {
  const testMethods = opts.testMethods === true;
  shared ??= { chains: startDevChains({ host: '127.0.0.1', basePort: 0, testMethods }), testMethods };
  if (testMethods && !shared.testMethods)
    throw new Error('devChains: this file started its dev chains without testMethods');
  return shared.chains;
}

/** Close the test file's dev chains. */
export async function closeDevChains(): Promise<void> {
  const d = shared;
  shared = undefined;
  if (d) await (await d.chains).close();
}

/** A fresh Redis key prefix for one test file. */
export function testPrefix(): string {
  return `farebox-test:${randomBytes(6).toString('hex')}:`;
}

/**
 * Delete every key under `prefix`, and the default spool folder of gateways on `redis` with that prefix if it is
 * empty (a gateway makes it at start and leaves it; one that still holds debits is left to be seen).
 */
export async function dropPrefix(redis: Redis, prefix: string): Promise<void> {
  const scoped = redis.duplicate({ keyPrefix: prefix });
  try {
    await deleteKeys(scoped, ['*']);
  } finally {
    await closeRedis(scoped);
  }
  try {
    rmdirSync(defaultSpoolDir({ redis: redisIdentity(redis), prefix }));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'ENOENT' && code !== 'ENOTEMPTY') throw err;
  }
}

/**
 * A connection with the gateway's settings under a fresh prefix, for one test file: its keys are deleted and the
 * connection closed at the file's teardown.
 */
export async function testRedis(t: {
  teardown(fn: () => Promise<void>): void;
}): Promise<{ redis: Redis; prefix: string }> {
  const prefix = testPrefix();
  const redis = connectRedis({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix });
  t.teardown(async () => {
    await dropPrefix(redis, prefix);
    await closeRedis(redis);
  });
  await redis.ping();
  return { redis, prefix };
}

/** Start a simulator and a gateway routed to it. */
export async function startHarness(
  opts: {
    edit?: (cfg: ConfigInput) => void;
    configure?: (app: FastifyInstance) => void | Promise<void>;
    /** Bill on dev chains (real holds, debit queue, settlement). */
    chains?: boolean;
    /** Share a prefix (and so the Redis state) with another harness. */
    prefix?: string;
    /** Extra environment for the config and the plugin (metrics token, provider keys). */
    env?: Record<string, string>;
    /** A simulator to route to (left running on close), e.g. shared by a gateway and its restart. */
    sim?: Simulator;
    /** How long the harness's own simulator renders a video job, ms. */
    videoRenderMs?: number;
    /** Run as the embedded default (true, the default) or as an operator's config would. */
    embedded?: boolean;
    /** Serve HTTP/2 (cleartext, prior knowledge), as a host app's server may. */
    http2?: boolean;
  } = {},
): Promise<Harness> {
  const sim = opts.sim ?? (await startSimulator({ host: '127.0.0.1', port: 0, videoRenderMs: opts.videoRenderMs }));
  const prefix = opts.prefix ?? testPrefix();
  const input = embeddedDefault(sim.url);
  input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
  input.server = { port: 0, host: '127.0.0.1' };
  const dev = opts.chains ? await devChains() : undefined;
  if (dev) {
    input.chains = devChainsConfig(dev);
    // Tests wait for settlement: batch at once, reconcile often.
    input.billing = { batch_wait_ms: 0, reconcile_interval_ms: 500, instance_timeout_ms: 2_000 };
  }
  opts.edit?.(input);
  const env = { FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey, ...opts.env };
  const config = buildConfig(input, env, opts.embedded ?? true);
  // As the plugin opens its own: commands fail at once while Redis is away.
  const redis = connectRedis({ ...config.redis, failFast: true });
  const app = opts.http2
    ? (Fastify({ logger: false, http2: true }) as unknown as FastifyInstance)
    : Fastify({ logger: false });
  await opts.configure?.(app);
  const metrics = createMetrics();
  await app.register(farebox, { config, redis, env, metrics });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  const account = await createAccount(redis, {});
  const { key, id } = await createKey(redis, account.address);
  const shown: Shown[] = [];
  shownPrices.set(url, shown);
  return {
    url,
    app,
    sim,
    config,
    redis,
    prefix,
    account: account.address,
    key,
    keyId: id,
    dev,
    metrics,
    metricsUrl: config.metrics.on_api_port ? `${url}/metrics` : `http://127.0.0.1:${metrics.server.port}/metrics`,
    fund: (chain, amount, acct = account.address) => fundOnDevChain(redis, config.chains!, chain, acct, amount),
    async close() {
      shownPrices.delete(url);
      const wrong = opts.chains ? await pricesNotDebited(redis, shown) : [];
      await app.close();
      if (!opts.sim) await sim.close();
      if (!opts.prefix) await dropPrefix(redis, prefix);
      await redis.quit();
      if (wrong.length > 0) throw new Error(`prices shown are not the debits:\n${wrong.join('\n')}`);
    },
  };
}
