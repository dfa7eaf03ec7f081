/**
 * The embedded default: the simulated upstreams and four dev chains in-process, every model of the spec routed to
 * the simulator and billed on the dev chains. `farebox serve` and the plugin registered without a config run on it.
 *
 * Dev chains keep nothing across restarts. Accounts, keys and usage records live in Redis and survive; the synced
 * balances, cursors, holds and debit queues of the old chains are cleared at start (resyncDevChains), and the watcher
 * rebuilds them from the new chains' events. Each account's default chain goes back to chain_a with them: its
 * balances are gone, and the demo account is funded on chain_a again.
 *
 * It resets only a prefix it made: one holding its mark (keys.embeddedMark), or one where the reset would touch
 * nothing, where it sets the mark (claimPrefix). Chain state or call records under its prefix without the mark are
 * another deployment's, and it refuses to start there.
 */
import type { Redis } from 'ioredis';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from './chains/config.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV, startDevChains, type DevChains } from './chains/dev-chains.js';
import { buildConfig, embeddedDefault, withEnvironment, type ConfigEnv, type FareboxConfig } from './config.js';
import { startSimulator, type Simulator } from './simulator/index.js';
import { DEV_CHAIN_PORTS, portInUse } from './ports.js';
import { CHAIN_STATE_PATTERNS, keys } from './store/keys.js';
import { checkDatabase, closeRedis, connectRedis, deleteKeys, redisIdentity } from './store/redis.js';

/** Redis key where the embedded default publishes its dev chains for the CLI (`farebox chains`, `farebox fund`). */
export const DEV_CHAINS_KEY = keys.devChains;
/** Redis key marking a prefix as the embedded default's, and its value. */
export const EMBEDDED_MARK_KEY = keys.embeddedMark;
export const EMBEDDED_MARK = 'farebox embedded default';

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

/**
 * Clear what Redis knows of the previous dev chains: they start empty, so their balances and debits are gone, and
 * (`defaultChains`, on a prefix the embedded default had made before this start) every account's default chain is
 * chain_a again.
 */
export async function resyncDevChains(redis: Redis, opts: { defaultChains?: boolean } = {}): Promise<void> {
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
    // Balances start at nothing on every chain: a default chain chosen for its balance would bill where none is.
    if (opts.defaultChains === false) return;
    const accounts = await redis.smembers(keys.accounts);
    const live = await Promise.all(accounts.map((a) => redis.exists(keys.account(a))));
    await Promise.all(
      accounts.map((a, i) => (live[i] ? redis.hset(keys.account(a), 'default_chain', 'chain_a') : null)),
    );
  } finally {
    await closeRedis(raw);
  }
}

/** Keys resyncDevChains resets, as SCAN patterns under the prefix: the chains' state and the call records. */
const RESET_PATTERNS = [...CHAIN_STATE_PATTERNS, 'call:*'];

/** A key under the connection's prefix that resyncDevChains would reset, or null (one SCAN, never KEYS). */
async function resettableKey(redis: Redis): Promise<string | null> {
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  const resets = (key: string) =>
    RESET_PATTERNS.some((p) => (p.endsWith('*') ? key.startsWith(p.slice(0, -1)) : key === p));
  const raw = redis.duplicate({ keyPrefix: '' });
  try {
    let cursor = '0';
    do {
      const [next, found] = await raw.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      const hit = found.map((k) => k.slice(prefix.length)).find(resets);
      if (hit !== undefined) return hit;
    } while (cursor !== '0');
    return null;
  } finally {
    await closeRedis(raw);
  }
}

/**
 * Make sure the connection's prefix is the embedded default's before anything there is reset: its mark, else (a
 * prefix from before the mark) its dev-chains record, else no key the reset would touch (accounts and keys made
 * before the first start are kept), where the mark is set. Returns whether this call set the mark; throws, naming
 * the place and a key found, on another deployment's prefix.
 */
export async function claimPrefix(redis: Redis): Promise<boolean> {
  const mark = await redis.get(EMBEDDED_MARK_KEY);
  if (mark === EMBEDDED_MARK) return false;
  if (mark === null && (await redis.exists(DEV_CHAINS_KEY))) {
    await redis.set(EMBEDDED_MARK_KEY, EMBEDDED_MARK);
    return false;
  }
  const found = mark === null ? await resettableKey(redis) : EMBEDDED_MARK_KEY;
  if (found === null && (await redis.set(EMBEDDED_MARK_KEY, EMBEDDED_MARK, 'NX')) === 'OK') return true;
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  throw new Error(
    `${redisIdentity(redis)} prefix "${prefix}" holds keys the embedded default did not make (${found ?? EMBEDDED_MARK_KEY}), which it would reset: set FAREBOX_REDIS_PREFIX or REDIS_URL to a place of its own, or FAREBOX_CONFIG to run that deployment`,
  );
}

/** The embedded default, running. */
export interface Embedded {
  config: FareboxConfig;
  /** The environment with the simulator's key and the dev settler key added. */
  env: ConfigEnv;
  simulator: Simulator;
  devChains: DevChains;
  /** Stop the simulator and the dev chains, and withdraw their dev-chains record (once; again: nothing). */
  close(): Promise<void>;
  /** For a start that failed after this one: close, and remove the mark this start set if no chain state came since. */
  abandon(): Promise<void>;
}

/**
 * Start the simulator and the dev chains (FAREBOX_DEV_CHAIN_PORT moves them; 0: ephemeral ports), build their config
 * with the environment over it (PORT, HOST, REDIS_URL), check that Redis has the URL's database and that the prefix
 * is the embedded default's (claimPrefix), clear the old dev chains' state there and publish the new ones for the
 * CLI. A start that fails leaves nothing in Redis it wrote.
 */
export async function startEmbedded(env: ConfigEnv): Promise<Embedded> {
  let simulator: Simulator | undefined;
  let devChains: DevChains | undefined;
  let config: FareboxConfig | undefined;
  let published: string | undefined;
  let marked = false;
  let closed: Promise<void> | undefined;
  // The record names chains that are gone once they stop: it goes with them, unless a newer start replaced it.
  const withdraw = async (markToo: boolean) => {
    if (!config || (!published && !(markToo && marked))) return;
    const redis = connectRedis({ ...config.redis, failFast: true });
    try {
      if (published && (await redis.get(DEV_CHAINS_KEY)) === published) await redis.del(DEV_CHAINS_KEY);
      // Unless the gateway wrote chain state meanwhile: that prefix is the embedded default's.
      if (markToo && marked && (await resettableKey(redis)) === null) await redis.del(EMBEDDED_MARK_KEY);
    } finally {
      await closeRedis(redis);
    }
  };
  // Each part stopped whatever another's close does; what failed is thrown after.
  const stop = async (markToo: boolean) => {
    const results = await Promise.allSettled([simulator?.close(), devChains?.close()]);
    await withdraw(markToo).catch(() => {});
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  };
  const close = () => (closed ??= stop(false));
  const abandon = () => (closed ??= stop(true));
  try {
    simulator = await startSimulator({ host: '127.0.0.1', port: 0 });
    devChains = await startDevChains({
      host: '127.0.0.1',
      basePort: env.FAREBOX_DEV_CHAIN_PORT ? Number(env.FAREBOX_DEV_CHAIN_PORT) : undefined,
    }).catch((err: unknown) => {
      throw portInUse(err, DEV_CHAIN_PORTS);
    });
    const runEnv: ConfigEnv = {
      ...env,
      FAREBOX_SIM_KEY: 'sim-key',
      [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey,
    };
    config = buildConfig(
      withEnvironment({ ...embeddedDefault(simulator.url), chains: devChainsConfig(devChains) }, env),
      runEnv,
      true,
    );
    const redis = connectRedis({ ...config.redis, failFast: true });
    try {
      await checkDatabase(redis);
      marked = await claimPrefix(redis);
      // A prefix claimed just now held no chain state: its accounts (made before the first start) keep their defaults.
      await resyncDevChains(redis, { defaultChains: !marked });
      const record = JSON.stringify(config.chains);
      await redis.set(DEV_CHAINS_KEY, record);
      published = record;
    } finally {
      await closeRedis(redis);
    }
    return { config, env: runEnv, simulator, devChains, close, abandon };
  } catch (err) {
    await abandon().catch(() => {});
    throw err;
  }
}
