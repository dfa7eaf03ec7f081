/**
 * A test gateway (test/helpers/harness.ts, billing on the dev chains) with the dashboard registered by the host
 * app under /dash, as a platform team would: explicit options, its own prefix, the gateway's Redis state.
 */
import type { Test } from 'tap';
import { buildConfig, embeddedDefault, type FareboxConfig } from '../../plugins/config.js';
import dashboard, { type DashboardOptions } from '../../plugins/dashboard/index.js';
import { devChainsConfig } from '../../plugins/serve.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { closeDevChains, devChains, dropPrefix, startHarness, testPrefix, type Harness } from '../helpers/harness.js';
import { browser, type TestBrowser } from './browser-session.js';

/** The gateway, and a way to open browsers on its dashboard. */
export interface DashboardGateway {
  h: Harness;
  /** The config the dashboard was given (the gateway's Redis prefix and chains). */
  config: FareboxConfig;
  /** A browser whose pages come from the gateway's own origin. */
  browser(): TestBrowser;
}

/** Start it; everything it made is removed at the test file's end. */
export async function startDashboardGateway(
  t: Test,
  options: Omit<DashboardOptions, 'config'> = {},
): Promise<DashboardGateway> {
  const prefix = testPrefix();
  const input = embeddedDefault('http://127.0.0.1:9');
  input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
  input.chains = devChainsConfig(await devChains());
  const config = buildConfig(input, { FAREBOX_SIM_KEY: 'k' }, false);
  const h = await startHarness({
    chains: true,
    prefix,
    configure: async (app) => {
      await app.register(dashboard, { prefix: '/dash', config, signup: 'open', devFund: true, ...options });
    },
  });
  t.teardown(async () => {
    await h.close();
    const r = connectRedis({ url: input.redis!.url!, prefix });
    await dropPrefix(r, prefix);
    await r.quit();
    await closeDevChains();
  });
  return { h, config, browser: () => browser(h.app, '/dash', h.url) };
}
