import t from 'tap';
import OpenAI from 'openai';
import { getCallRecord, listCallRecords } from '../plugins/billing/call-records.js';
import { readWallet } from '../plugins/billing/wallets.js';
import Fastify from 'fastify';
import { createAccount, createKey } from '../plugins/accounts/accounts.js';
import { embeddedDefault, ConfigError } from '../plugins/config.js';
import farebox, { type FareboxOptions } from '../plugins/gateway.js';
import { startSimulator } from '../plugins/simulator/index.js';
import { closeRedis, connectRedis } from '../plugins/store/redis.js';
import { closeDevChains, dropPrefix, startHarness, testPrefix } from './helpers/harness.js';
import { until } from './helpers/wait.js';

t.test('registered into an app with its own routes and onRequest hook: both keep working', async (t) => {
  let hostHookRuns = 0;
  const h = await startHarness({
    configure: (app) => {
      app.addHook('onRequest', async (_req, reply) => {
        hostHookRuns++;
        reply.header('x-host-hook', 'yes');
      });
      app.get('/internal/hello', async () => ({ hello: 'world' }));
      app.post('/internal/echo', async (req) => ({ got: req.body }));
    },
  });
  t.teardown(() => h.close());

  const hello = await fetch(`${h.url}/internal/hello`);
  t.same(await hello.json(), { hello: 'world' });
  t.equal(hello.headers.get('x-host-hook'), 'yes');
  t.equal(hello.headers.get('x-request-id'), null, "the gateway's hooks stay out of the host's routes");

  const echo = await fetch(`${h.url}/internal/echo`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"a":1}',
  });
  t.same(await echo.json(), { got: { a: 1 } }, "the host's JSON parser is untouched");

  const notFound = await fetch(`${h.url}/elsewhere`);
  t.equal(notFound.status, 404);
  t.equal(notFound.headers.get('x-request-id'), null, "the host's 404 stays the host's");

  const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
  const { data, response } = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  t.equal(data.object, 'chat.completion');
  t.equal(response.headers.get('x-host-hook'), 'yes', "the host's hook runs on gateway routes too");
  t.match(response.headers.get('x-request-id'), /^req_/);
  t.ok(hostHookRuns >= 4);
});

t.test(
  'a caller that leaves while its hold is placed: the hold is released at once, no upstream is called',
  async (t) => {
    const h = await startHarness({ chains: true });
    const reader = h.redis.duplicate();
    t.teardown(async () => {
      reader.disconnect();
      await h.close();
      await closeDevChains();
    });
    await h.fund('chain_a', 1_000_000n);
    const call = (signal?: AbortSignal) =>
      fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        signal,
        headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] }),
      });
    // A first call resolves the key into the gateway's cache: the next one goes to Redis for its hold alone.
    await (await call()).arrayBuffer();
    await until('the first call debited', async () =>
      (await listCallRecords(reader, h.account)).every((r) => r.status !== 'held'),
    );
    const before = h.sim.received.length;
    // The gateway's connection stops reading replies: the hold runs in Redis, its answer waits.
    h.redis.stream.pause();
    const controller = new AbortController();
    const pending = call(controller.signal).catch(() => 'aborted');
    const held = await until('the hold placed', async () =>
      (await listCallRecords(reader, h.account)).find((r) => r.status === 'held'),
    );
    controller.abort();
    t.equal(await pending, 'aborted');
    // Nothing must happen here, and no event says so: a short look (the release would be a Redis command away).
    await new Promise((r) => setTimeout(r, 200));
    t.equal(
      (await getCallRecord(reader, held.call_id))?.status,
      'held',
      'nothing to release before the gateway knows of its hold',
    );
    h.redis.stream.resume();
    const released = await until(
      'released',
      async () => {
        const r = await getCallRecord(reader, held.call_id);
        return r?.status === 'free' ? r : null;
      },
      5_000,
    );
    t.equal(released.priceAtomic, 0n, 'charged nothing');
    t.equal(released.released, null, 'by the call itself, not by a sweeper');
    t.equal((await readWallet(reader, h.account, 'chain_a')).held, 0n, 'nothing held');
    // As above: a call to the upstream would come at once, if at all.
    await new Promise((r) => setTimeout(r, 200));
    t.equal(h.sim.received.length, before, 'the upstream was never called');
  },
);

t.test(
  'register(farebox) and register(farebox, {}) run on the defaults farebox serve uses: the embedded default',
  async (t) => {
    const prefix = testPrefix();
    const saved = { ...process.env };
    // The environment, as `farebox serve` reads it: dev chains on ephemeral ports, this test's key prefix.
    Object.assign(process.env, { FAREBOX_DEV_CHAIN_PORT: '0', METRICS_PORT: '0', FAREBOX_REDIS_PREFIX: prefix });
    delete process.env.FAREBOX_CONFIG;
    const redis = connectRedis({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix });
    t.teardown(async () => {
      process.env = saved;
      await dropPrefix(redis, prefix);
      await closeRedis(redis);
    });
    const account = await createAccount(redis, {});
    const { key } = await createKey(redis, account.address);
    for (const options of [undefined, {}]) {
      const app = Fastify({ logger: false });
      await app.register(farebox, options as FareboxOptions);
      await app.listen({ port: 0, host: '127.0.0.1' });
      const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
      const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
      const e = await openai.chat.completions
        .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
        .catch((err: unknown) => err);
      t.ok(
        e instanceof OpenAI.APIError && e.status === 402,
        `${JSON.stringify(options)}: served and billed (an unfunded wallet gets 402)`,
      );
      const health = await fetch(`${url}/v1/health`);
      t.equal(health.status, 200, 'healthy on its Redis');
      await app.close();
    }
  },
);

t.test('bad options fail at registration, naming the option', async (t) => {
  const cases: [unknown, RegExp][] = [
    [{ config: null }, /option config/],
    [{ config: 'farebox.json' }, /option config/],
    [{ config: { providers: {} } }, /invalid config: models/],
    // Frozen, with providers and prices, yet never validated: validated all the same.
    [{ config: Object.freeze({ providers: {}, prices: {} }) }, /invalid config: models/],
    [{ redis: {} }, /option redis/],
    [{ redis: 'redis://127.0.0.1:6379' }, /option redis/],
    [{ env: 'production' }, /option env/],
    [{ env: { PORT: 3000 } }, /option env: PORT/], // a number, not a string: refused before anything listens
    [{ metrics: {} }, /option metrics/],
    [{ observer: false }, /option observer: unknown option/],
    ['config', /options must be an object/],
  ];
  for (const [options, message] of cases) {
    const app = Fastify({ logger: false });
    const err = await app
      .register(farebox, options as FareboxOptions)
      .ready()
      .then(
        () => null,
        (e: Error) => e,
      );
    t.ok(err instanceof ConfigError, `${JSON.stringify(options)}: a ConfigError`);
    t.match(err?.message, message, JSON.stringify(options));
    await app.close().catch(() => {});
  }
});

t.test('the env option supplies provider keys; the process environment is not read for them', async (t) => {
  const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
  const prefix = testPrefix();
  const input = embeddedDefault(sim.url);
  input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
  input.metrics = { port: 0 }; // not 9464: a gateway may run beside the suite
  const app = Fastify({ logger: false });
  const redis = connectRedis(input.redis as { url: string; prefix: string });
  t.teardown(async () => {
    await app.close();
    await sim.close();
    await dropPrefix(redis, prefix);
    await closeRedis(redis);
  });
  t.notOk(process.env.FAREBOX_SIM_KEY, 'not in the process environment');
  await app.register(farebox, { config: input, env: { FAREBOX_SIM_KEY: 'from-the-option' } });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const account = await createAccount(redis, {});
  const { key } = await createKey(redis, account.address);
  const openai = new OpenAI({
    baseURL: `http://127.0.0.1:${(app.server.address() as { port: number }).port}/v1`,
    apiKey: key,
    maxRetries: 0,
  });
  const data = await openai.chat.completions.create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] });
  t.equal(data.object, 'chat.completion', 'served without chains: not billed');
  t.equal(sim.received.at(-1)?.headers.authorization, 'Bearer from-the-option', "the provider got the option's key");
});
