/**
 * The embedded default: the simulated upstreams and four dev chains in-process, every model of the spec routed to
 * the simulator and billed on the dev chains. `farebox serve` and the plugin registered without a config run on it.
 *
 * Dev chains keep nothing across restarts. Accounts, keys and usage records live in Redis and survive; the synced
 * balances, cursors, holds and debit queues of the old chains are cleared at start (resyncDevChains), and the watcher
 * rebuilds them from the new chains' events.
 */
import type { Redis } from 'ioredis';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from './chains/config.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV, startDevChains, type DevChains } from './chains/dev-chains.js';
import { buildConfig, embeddedDefault, withEnvironment, type ConfigEnv, type FareboxConfig } from './config.js';
import { startSimulator, type Simulator } from './simulator/index.js';
import { CHAIN_STATE_PATTERNS, keys } from './store/keys.js';
import { closeRedis, connectRedis, deleteKeys } from './store/redis.js';

/** Redis key where the embedded default publishes its dev chains for the CLI (`farebox chains`, `farebox fund`). */
export const DEV_CHAINS_KEY = keys.devChains;

/**
 * Dev chains as a config section. The watcher polls them every 500 ms: a deposit shows within that, and the settler's
 * own batches are read back as soon as they are mined (Settler onMined), so faster polls would only cost the settle
 * process and the chains CPU while idle.
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
  return {
    config: buildConfig(withEnvironment({ ...embeddedDefault('http://127.0.0.1:8090'), chains }, env), runEnv, true),
    env: runEnv,
  };
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
      // `s` in the compact layout, `status` in the first (call-records.ts).
      const statuses = await Promise.all(keys.map((key) => raw.hmget(key, 's', 'status')));
      await Promise.all(
        keys.map((key, i) => {
          const [compact, first] = statuses[i];
          const field = compact !== null ? 's' : 'status';
          const status = compact ?? first;
          const to = status === 'held' ? 'free' : status === 'pending' ? 'failed' : null;
          return to ? raw.hset(key, field, to) : null;
        }),
      );
    } while (cursor !== '0');
    await deleteKeys(redis, CHAIN_STATE_PATTERNS);
  } finally {
    await closeRedis(raw);
  }
}

/** The embedded default, running. */
export interface Embedded {
  config: FareboxConfig;
  /** The environment with the simulator's key and the dev settler key added. */
  env: ConfigEnv;
  simulator: Simulator;
  devChains: DevChains;
  close(): Promise<void>;
}

/**
 * Start the simulator and the dev chains (FAREBOX_DEV_CHAIN_PORT moves them; 0: ephemeral ports), build their config
 * with the environment over it (PORT, HOST, REDIS_URL), clear the old dev chains' state in Redis and publish the new
 * ones for the CLI.
 */
export async function startEmbedded(env: ConfigEnv): Promise<Embedded> {
  let simulator: Simulator | undefined;
  let devChains: DevChains | undefined;
  const close = async () => {
    await simulator?.close();
    await devChains?.close();
  };
  try {
    simulator = await startSimulator({ host: '127.0.0.1', port: 0 });
    devChains = await startDevChains({
      host: '127.0.0.1',
      basePort: env.FAREBOX_DEV_CHAIN_PORT ? Number(env.FAREBOX_DEV_CHAIN_PORT) : undefined,
    });
    const runEnv: ConfigEnv = {
      ...env,
      FAREBOX_SIM_KEY: 'sim-key',
      [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey,
    };
    const config = buildConfig(
      withEnvironment({ ...embeddedDefault(simulator.url), chains: devChainsConfig(devChains) }, env),
      runEnv,
      true,
    );
    const redis = connectRedis({ ...config.redis, failFast: true });
    try {
      await resyncDevChains(redis);
      await redis.set(DEV_CHAINS_KEY, JSON.stringify(config.chains));
    } finally {
      await closeRedis(redis);
    }
    return { config, env: runEnv, simulator, devChains, close };
  } catch (err) {
    await close();
    throw err;
  }
}
