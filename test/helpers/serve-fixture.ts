/**
 * `farebox serve` itself, for tests of what only the standalone server sets (its Node server options): gateways on
 * config files with the embedded default's models, on dev chains and a simulator this fixture starts, all closed and
 * their Redis keys dropped when the test file ends.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../../plugins/chains/dev-chains.js';
import { embeddedDefault, type ConfigInput } from '../../plugins/config.js';
import { devChainsConfig, serve, type Server } from '../../plugins/serve.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { closeDevChains, devChains, dropPrefix, testPrefix } from './harness.js';

/** What a test file gets: its Redis (under its own prefix) and a way to start `farebox serve` with server settings. */
export interface ServeFixture {
  readonly redis: Redis;
  /** `farebox serve` on a config file with these `server` settings (ephemeral ports unless given). */
  start(server: ConfigInput['server']): Promise<Server>;
}

/** Set up the fixture for the test file `t`; everything is closed on its teardown. */
export async function serveFixture(t: { teardown(fn: () => unknown): void }, name: string): Promise<ServeFixture> {
  const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const prefix = testPrefix();
  const redis = connectRedis({ url: redisUrl, prefix });
  const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
  const dev = await devChains();
  const dir = mkdtempSync(join(tmpdir(), `farebox-${name}-`));
  const servers: Server[] = [];
  t.teardown(async () => {
    for (const s of servers) await s.close();
    await sim.close();
    await closeDevChains();
    await dropPrefix(redis, prefix);
    await redis.quit();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    redis,
    async start(server) {
      const file = join(dir, `farebox-${servers.length}.json`);
      writeFileSync(
        file,
        JSON.stringify({
          ...embeddedDefault(sim.url),
          server: { port: 0, host: '127.0.0.1', ...server },
          redis: { url: redisUrl, prefix },
          chains: devChainsConfig(dev),
          billing: { batch_wait_ms: 0 },
          metrics: { port: 0 },
          dashboard: { enabled: false },
        }),
      );
      const s = await serve(
        { FAREBOX_CONFIG: file, FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey },
        { logger: false },
      );
      servers.push(s);
      return s;
    },
  };
}
