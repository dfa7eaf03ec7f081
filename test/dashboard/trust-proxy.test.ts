// Behind a proxy, `server.trust_proxy` lets `farebox serve` read the caller's address from X-Forwarded-For, so the
// dashboard's sign-in rate limit is per caller, not one bucket shared by everyone behind the proxy.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { privateKeyToAccount, generatePrivateKey } from 'viem/accounts';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../../plugins/chains/dev-chains.js';
import { embeddedDefault, type ConfigInput } from '../../plugins/config.js';
import { devChainsConfig, serve, type Server } from '../../plugins/serve.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { keys } from '../../plugins/store/keys.js';
import { closeDevChains, devChains, dropPrefix, testPrefix } from '../helpers/harness.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
const dev = await devChains();
const dir = mkdtempSync(join(tmpdir(), 'farebox-proxy-'));
const cleanup: (() => Promise<unknown>)[] = [];
t.teardown(async () => {
  for (const c of cleanup.reverse()) await c();
  await sim.close();
  await closeDevChains();
  rmSync(dir, { recursive: true, force: true });
});

const ORIGIN = 'https://gateway.example';

async function start(server: ConfigInput['server']): Promise<{ s: Server; prefix: string }> {
  const prefix = testPrefix();
  const file = join(dir, `${prefix.replace(/\W/g, '')}.json`);
  writeFileSync(
    file,
    JSON.stringify({
      ...embeddedDefault(sim.url),
      server: { port: 0, host: '127.0.0.1', ...server },
      redis: { url: REDIS_URL, prefix },
      chains: devChainsConfig(dev),
      metrics: { port: 0 },
      dashboard: { origins: [ORIGIN], signup: 'open' },
    }),
  );
  const s = await serve(
    { FAREBOX_CONFIG: file, FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey },
    { logger: false },
  );
  const redis = connectRedis({ url: REDIS_URL, prefix });
  cleanup.push(async () => {
    await s.close();
    await dropPrefix(redis, prefix);
    await redis.quit();
  });
  return { s, prefix };
}

/** Ask for a sign-in message as a browser behind the proxy at `forwardedFor` would. */
async function askNonce(s: Server, forwardedFor: string): Promise<number> {
  const res = await fetch(`${s.url}${s.config.dashboard.path}/auth/nonce`, {
    method: 'POST',
    headers: { origin: ORIGIN, 'content-type': 'application/json', 'x-forwarded-for': forwardedFor },
    body: JSON.stringify({
      address: privateKeyToAccount(generatePrivateKey()).address,
      chainId: dev.chains.chain_a.chain_id,
    }),
  });
  await res.arrayBuffer();
  return res.status;
}

async function bucket(prefix: string, ip: string): Promise<string | null> {
  const redis = connectRedis({ url: REDIS_URL, prefix });
  try {
    return await redis.get(keys.dashRate(ip));
  } finally {
    await redis.quit();
  }
}

t.test('trust_proxy set: each forwarded caller has a sign-in bucket of its own', async (t) => {
  const { s, prefix } = await start({ trust_proxy: '127.0.0.1' });
  t.equal(await askNonce(s, '203.0.113.7'), 200);
  t.equal(await askNonce(s, '203.0.113.7'), 200);
  t.equal(await askNonce(s, '198.51.100.9'), 200);
  t.same(
    [await bucket(prefix, '203.0.113.7'), await bucket(prefix, '198.51.100.9'), await bucket(prefix, '127.0.0.1')],
    ['2', '1', null],
  );
});

t.test(
  "trust_proxy unset (the default): X-Forwarded-For is not believed; the connection's address counts",
  async (t) => {
    const { s, prefix } = await start({});
    t.equal(await askNonce(s, '203.0.113.7'), 200);
    t.same([await bucket(prefix, '203.0.113.7'), await bucket(prefix, '127.0.0.1')], [null, '1']);
  },
);
