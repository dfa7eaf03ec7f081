/**
 * Registering the dashboard: bad options (and a bad `dashboard` config section) fail at registration naming the
 * option; options win over the config section; with no options at all it runs on the embedded default as the CLI
 * finds it (Redis from the environment, the chains a gateway published there), at the root of a host app.
 */
import t from 'tap';
import Fastify from 'fastify';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { getAccount } from '../../plugins/accounts/accounts.js';
import { CHAIN_NAMES } from '../../plugins/chains/config.js';
import { DEV_CHAIN_IDS } from '../../plugins/chains/dev-chains.js';
import { buildConfig, ConfigError, embeddedDefault } from '../../plugins/config.js';
import dashboard, { DashboardOptionError } from '../../plugins/dashboard/index.js';
import { keys } from '../../plugins/store/keys.js';
import { testRedis } from '../helpers/harness.js';
import { browser, send, signIn } from './browser-session.js';

const { redis, prefix } = await testRedis(t);
const base = () => {
  const input = embeddedDefault('http://127.0.0.1:9');
  input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
  return input;
};

async function registration(opts: Record<string, unknown>): Promise<unknown> {
  const app = Fastify({ logger: false });
  try {
    await app.register(dashboard, { prefix: '/d', redis, ...opts });
    await app.ready();
    return null;
  } catch (err) {
    return err;
  } finally {
    await app.close();
  }
}

t.test('a bad option fails registration, naming the option', async (t) => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ origins: ['ftp://x.test'] }, /^farebox dashboard: option origins\.0: /],
    [
      { origins: ['http://x.test/dash'] },
      /^farebox dashboard: option origins\.0: an origin: scheme, host and port, no path$/,
    ],
    [{ origins: [] }, /^farebox dashboard: option origins: /],
    [{ signup: 'maybe' }, /^farebox dashboard: option signup: /],
    [{ secureCookie: 'yes' }, /^farebox dashboard: option secureCookie: /],
    [{ sessionTtlMs: 5 }, /^farebox dashboard: option sessionTtlMs: /],
    [{ gatewayUrl: 'gateway' }, /^farebox dashboard: option gatewayUrl: /],
    [{ explorers: { chain_z: 'https://x.test' } }, /^farebox dashboard: option explorers/],
    [{ explorers: { chain_a: 'javascript:alert(1)' } }, /^farebox dashboard: option explorers\.chain_a: /],
    [{ devFund: 1 }, /^farebox dashboard: option devFund: /],
    [{ colour: 'blue' }, /^farebox dashboard: option colour: unknown option$/],
    [{ redis: {} }, /^farebox dashboard: option redis: expected an ioredis connection$/],
    [{ env: 'x' }, /^farebox dashboard: option env: /],
    [{ config: { models: [] } }, /^farebox dashboard: option config: invalid config: /],
  ];
  for (const [opts, message] of cases) {
    const err = await registration(opts);
    t.ok(err instanceof DashboardOptionError, JSON.stringify(opts));
    t.match((err as Error).message, message);
  }
  t.equal(
    await registration({
      origins: ['https://gw.example.com'],
      signup: 'closed',
      secureCookie: true,
      sessionTtlMs: 3_600_000,
      gatewayUrl: 'https://gw.example.com/',
      explorers: { chain_b: 'https://scan.example.com' },
      devFund: false,
      config: buildConfig(base(), { FAREBOX_SIM_KEY: 'k' }),
    }),
    null,
    'good options register',
  );
});

t.test("the config's dashboard section is validated with the rest, naming the field", async (t) => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ origins: ['http://x.test/path'] }, /dashboard\.origins\.0: an origin/],
    [{ path: 'dash' }, /dashboard\.path: a path such as \/dashboard/],
    [{ signup: 'sometimes' }, /dashboard\.signup/],
    [{ session_ttl_hours: 0 }, /dashboard\.session_ttl_hours/],
    [{ explorers: { chain_a: 'ftp://x' } }, /dashboard\.explorers\.chain_a/],
    [{ colour: 'blue' }, /dashboard: Unrecognized key/],
  ];
  for (const [section, message] of bad) {
    const input = { ...base(), dashboard: section };
    t.throws(() => buildConfig(input, { FAREBOX_SIM_KEY: 'k' }), ConfigError);
    try {
      buildConfig(input, { FAREBOX_SIM_KEY: 'k' });
    } catch (err) {
      t.match((err as Error).message, message);
    }
  }
  const c = buildConfig({ ...base(), dashboard: { origins: ['https://gw.example.com/'] } }, { FAREBOX_SIM_KEY: 'k' });
  t.same(c.dashboard.origins, ['https://gw.example.com'], 'kept as an origin');
  t.equal(c.dashboard.path, '/dashboard');
  t.equal(c.dashboard.enabled, true);
});

t.test('options win over the config section: a closed config, opened by the host', async (t) => {
  const chains = Object.fromEntries(
    CHAIN_NAMES.map((n) => [
      n,
      {
        chain_id: DEV_CHAIN_IDS[n],
        rpc_url: 'http://127.0.0.1:9',
        stablecoin: `0x${'1'.repeat(40)}`,
        escrow: `0x${'2'.repeat(40)}`,
      },
    ]),
  );
  const config = buildConfig(
    { ...base(), chains, dashboard: { signup: 'closed', origins: ['http://cfg.test'] } },
    { FAREBOX_SIM_KEY: 'k' },
  );
  const app = Fastify({ logger: false });
  await app.register(dashboard, { prefix: '/closed', config, redis });
  await app.register(dashboard, { prefix: '/opened', config, redis, signup: 'open', origins: ['http://host.test'] });
  t.teardown(() => app.close());
  const w = privateKeyToAccount(generatePrivateKey());
  t.equal(
    (await signIn(browser(app, '/closed', 'http://cfg.test'), w, DEV_CHAIN_IDS.chain_a)).status,
    403,
    'closed by the config',
  );
  t.equal(
    (await signIn(browser(app, '/closed', 'http://host.test'), w, DEV_CHAIN_IDS.chain_a)).json.error.code,
    'cross_site',
    "the config's origins",
  );
  const opened = await signIn(browser(app, '/opened', 'http://host.test'), w, DEV_CHAIN_IDS.chain_a);
  t.equal(opened.status, 200, opened.text);
  t.match(
    String([opened.headers['set-cookie']].flat().find((c) => String(c).startsWith('farebox_session'))),
    /; Secure;/,
    'Secure outside the embedded default',
  );
});

t.test('no options at all: the embedded default as the CLI finds it, at the root of a host app', async (t) => {
  const saved = process.env.FAREBOX_REDIS_PREFIX;
  const savedConfig = process.env.FAREBOX_CONFIG;
  process.env.FAREBOX_REDIS_PREFIX = prefix;
  delete process.env.FAREBOX_CONFIG;
  const app = Fastify({ logger: false });
  app.get('/health', async () => 'ok');
  try {
    await app.register(dashboard);
  } finally {
    if (saved === undefined) delete process.env.FAREBOX_REDIS_PREFIX;
    else process.env.FAREBOX_REDIS_PREFIX = saved;
    if (savedConfig !== undefined) process.env.FAREBOX_CONFIG = savedConfig;
  }
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const origin = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  t.equal((await app.inject('/health')).body, 'ok', "the host's routes stay");
  t.equal((await app.inject('/prices')).statusCode, 200, 'prices at the root');
  const before = await app.inject('/sign-in');
  t.match(before.body, /has not published its chains yet/);
  // What `farebox serve` publishes for the CLI.
  const chains = Object.fromEntries(
    CHAIN_NAMES.map((n) => [
      n,
      {
        chain_id: DEV_CHAIN_IDS[n],
        rpc_url: 'http://127.0.0.1:9',
        stablecoin: `0x${'1'.repeat(40)}`,
        escrow: `0x${'2'.repeat(40)}`,
      },
    ]),
  );
  await redis.set(keys.devChains, JSON.stringify(chains));
  t.match((await app.inject('/sign-in')).body, /data-action="sign-in"/);
  const b = browser(app, '', origin);
  const w = privateKeyToAccount(generatePrivateKey());
  const r = await signIn(b, w, DEV_CHAIN_IDS.chain_b);
  t.equal(r.status, 200, r.text);
  t.equal((await getAccount(redis, w.address))?.status, 'active', 'the embedded default opens accounts');
  const cookie = String([r.headers['set-cookie']].flat().find((c) => String(c).startsWith('farebox_session')));
  t.match(cookie, /; Path=\/; HttpOnly; SameSite=Lax$/, 'not Secure on the embedded default (plain http on loopback)');
  t.equal((await send(b, 'GET', '/keys')).status, 200);
  const localhost = await signIn(browser(app, '', origin.replace('127.0.0.1', 'localhost')), w, DEV_CHAIN_IDS.chain_a);
  t.equal(localhost.status, 200, 'localhost is the same server');
  t.equal((await app.inject('/nope')).statusCode, 404);
});
