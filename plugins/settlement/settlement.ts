/**
 * Settlement beside the call path: the settler (DESIGN step 6) and the chain watcher (step 7) of one process.
 * A gateway runs them in its own process when `billing.settler` / `billing.watcher` are on (the default);
 * `farebox settle` runs them alone (startSettleProcess), so that their CPU and garbage stay off the gateways'
 * event loops. Any number of either may run against one Redis: settlers share the debit streams as a consumer
 * group, watchers take a lease per chain.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { ChainWatcher } from './chain-watcher.js';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from '../chains/config.js';
import { createEvmChain } from '../chains/evm.js';
import type { SettlementChain } from '../chains/port.js';
import type { FareboxConfig } from '../config.js';
import { createMetrics, initSeries, type Metrics } from '../metrics/metrics.js';
import { startMetricsServer } from '../metrics/metrics-route.js';
import { closeRedis, connectRedis, logRedisErrors } from '../store/redis.js';
import { Settler } from './settler.js';
import type { Log } from '../log.js';

/** The settler and the watcher of one process, each present only when configured. */
export class Settlement {
  readonly settler: Settler | undefined;
  readonly watcher: ChainWatcher | undefined;

  constructor(
    redis: Redis,
    chainsConfig: ChainsConfig,
    billing: FareboxConfig['billing'],
    /** The settler's consumer name and the watcher's lease holder. */
    instance: string,
    metrics: Metrics,
    log: Log,
    env: Record<string, string | undefined>,
  ) {
    if (!billing.settler && !billing.watcher) return;
    const chains: Partial<Record<ChainName, SettlementChain>> = {};
    for (const name of CHAIN_NAMES) {
      const onFeeCapped = () => metrics.settlementFeeCapped.inc({ chain: name });
      chains[name] = createEvmChain(name, chainsConfig[name], { env, onFeeCapped });
    }
    if (billing.watcher) {
      this.watcher = new ChainWatcher(
        redis,
        chains,
        instance,
        {
          pollMs: Math.min(...CHAIN_NAMES.map((n) => chainsConfig[n].poll_interval_ms)),
          reconcileMs: billing.reconcile_interval_ms,
          startBlocks: Object.fromEntries(CHAIN_NAMES.map((n) => [n, BigInt(chainsConfig[n].deploy_block)])),
          retentionMs: billing.retention_days * 86_400_000,
        },
        metrics,
        log,
      );
    }
    if (billing.settler) {
      const watcher = this.watcher;
      this.settler = new Settler(
        redis,
        chains,
        instance,
        {
          batchSize: billing.batch_size,
          batchesInFlight: billing.batches_in_flight,
          batchesUnmined: billing.batches_unmined,
          batchWaitMs: billing.batch_wait_ms,
          claimIdleMs: billing.claim_idle_ms,
          // A mined batch is read back at once by this process's watcher (when it holds that chain's lease).
          onMined: watcher && ((chain) => watcher.wake(chain)),
        },
        metrics,
        log,
      );
    }
  }

  async start(): Promise<void> {
    await this.settler?.start();
    this.watcher?.start();
  }

  async stop(): Promise<void> {
    await this.watcher?.stop();
    await this.settler?.stop();
  }
}

/** A running `farebox settle`. */
export interface SettleProcess {
  /** http://host:port/metrics, when metrics are served. */
  metricsUrl?: string;
  instance: string;
  close(): Promise<void>;
}

/** One JSON line per entry on stderr: the settle process has no Fastify logger. */
const stderrLog: Log = {
  error: (obj, msg) => process.stderr.write(JSON.stringify({ level: 'error', msg, ...serializable(obj) }) + '\n'),
  warn: (obj, msg) => process.stderr.write(JSON.stringify({ level: 'warn', msg, ...serializable(obj) }) + '\n'),
  info: (obj, msg) => process.stderr.write(JSON.stringify({ level: 'info', msg, ...serializable(obj) }) + '\n'),
};

function serializable(obj: object): object {
  const err = (obj as { err?: Error }).err;
  return err instanceof Error ? { ...obj, err: { message: err.message, stack: err.stack } } : obj;
}

/**
 * Settle and watch on `config` with no gateway in the process: both parts on, whatever `billing.settler` and
 * `billing.watcher` say (those tell the gateways whether to settle too). Metrics on `metricsPort` (0 = ephemeral),
 * behind config.metrics.token_env when set; none when `metricsPort` is undefined.
 */
export async function startSettleProcess(
  config: FareboxConfig,
  env: Record<string, string | undefined>,
  opts: { metricsPort?: number; log?: Log } = {},
): Promise<SettleProcess> {
  if (!config.chains) throw new Error('no chains configured: nothing to settle');
  const log = opts.log ?? stderrLog;
  const instance = `settle-${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const metrics = createMetrics();
  initSeries(metrics, CHAIN_NAMES, []);
  const redis = logRedisErrors(connectRedis(config.redis), (err) => log.error({ err }, 'redis connection'));
  const settlement = new Settlement(
    redis,
    config.chains,
    { ...config.billing, settler: true, watcher: true },
    instance,
    metrics,
    log,
    env,
  );
  let server: Awaited<ReturnType<typeof startMetricsServer>> | undefined;
  try {
    if (opts.metricsPort !== undefined) {
      server = await startMetricsServer(
        metrics,
        { port: opts.metricsPort, host: config.server.host, token_env: config.metrics.token_env },
        env,
      );
    }
    await settlement.start();
  } catch (err) {
    await server?.close();
    await closeRedis(redis);
    throw err;
  }
  const host = config.server.host.includes(':') ? `[${config.server.host}]` : config.server.host;
  return {
    instance,
    metricsUrl: server ? `http://${host}:${server.port}/metrics` : undefined,
    async close() {
      await settlement.stop();
      await server?.close();
      await closeRedis(redis);
    },
  };
}
