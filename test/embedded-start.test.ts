import t, { type Test } from 'tap';
import Fastify from 'fastify';
import { createServer, type Server } from 'node:net';
import { DEV_CHAINS_KEY, EMBEDDED_MARK, EMBEDDED_MARK_KEY } from '../plugins/embedded.js';
import { createAccount } from '../plugins/accounts/accounts.js';
import farebox from '../plugins/gateway.js';
import { serve } from '../plugins/serve.js';
import { keys } from '../plugins/store/keys.js';
import { closeRedis, connectRedis } from '../plugins/store/redis.js';
import { dropPrefix, testPrefix } from './helpers/harness.js';

// A start of the embedded default refused (a port taken, a database the server lacks, another deployment's prefix)
// says why in one line and leaves nothing in Redis under its prefix.

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = testPrefix();
const redis = connectRedis({ url: REDIS_URL, prefix });
t.teardown(async () => {
  await dropPrefix(redis, prefix);
  await closeRedis(redis);
});

// Ephemeral ports, as farebox serve's tests run it: the fixed ones (8080, 8545-8548, 9464) are never bound here.
const env = {
  FAREBOX_CONFIG: '',
  FAREBOX_REDIS_PREFIX: prefix,
  REDIS_URL,
  HOST: '127.0.0.1',
  PORT: '0',
  FAREBOX_DEV_CHAIN_PORT: '0',
  METRICS_PORT: '0',
};

/** Keys under the test's prefix. */
async function leftovers(): Promise<string[]> {
  const raw = redis.duplicate({ keyPrefix: '' });
  try {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await raw.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
    return found;
  } finally {
    await closeRedis(raw);
  }
}

/** An ephemeral port, held by a server of the test's own until released. */
async function occupy(t: Test): Promise<number> {
  const blocker: Server = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
  return (blocker.address() as { port: number }).port;
}

/** The message of a rejection, and that it is one line. */
async function refusal(t: Test, p: PromiseLike<unknown>): Promise<string> {
  const err = await Promise.resolve(p).then(
    () => null,
    (e: unknown) => e as Error,
  );
  t.ok(err, 'the start is refused');
  const message = err?.message ?? '';
  t.notMatch(message, /\n/, 'in one line');
  return message;
}

t.test('serve: a port taken is one line naming it, what it is for and the variable that moves it', async (t) => {
  const cases = [
    ['PORT', /^127\.0\.0\.1:(\d+) is in use \(the gateway's API\): set PORT \(config server\.port\)/],
    ['METRICS_PORT', /^127\.0\.0\.1:(\d+) is in use \(Prometheus metrics\): set METRICS_PORT \(config metrics\.port\)/],
    [
      'FAREBOX_DEV_CHAIN_PORT',
      /^127\.0\.0\.1:(\d+) is in use \(dev chain JSON-RPC[^)]*\): set FAREBOX_DEV_CHAIN_PORT \(chain_a's; the others take the next three\)/,
    ],
  ] as const;
  for (const [name, want] of cases) {
    const port = await occupy(t);
    const message = await refusal(t, serve({ ...env, [name]: String(port) }, { logger: false }));
    t.match(message, want, name);
    // The dev chains take the port and the next three: any of them may be the one found taken.
    const taken = Number(want.exec(message)?.[1]);
    t.ok(name === 'FAREBOX_DEV_CHAIN_PORT' ? taken >= port && taken <= port + 3 : taken === port, `${name}: its port`);
    t.same(await leftovers(), [], `${name}: nothing left in Redis`);
  }
});

t.test('the plugin: its metrics port or dev chain port taken is the same line; nothing left in Redis', async (t) => {
  for (const [name, use] of [
    ['METRICS_PORT', 'Prometheus metrics'],
    ['FAREBOX_DEV_CHAIN_PORT', 'dev chain JSON-RPC'],
  ] as const) {
    const port = await occupy(t);
    const app = Fastify({ logger: false });
    t.teardown(() => app.close());
    const message = await refusal(t, app.register(farebox, { env: { ...env, [name]: String(port) } }).ready());
    t.match(message, new RegExp(`^127\\.0\\.0\\.1:\\d+ is in use \\(${use}[^)]*\\): set ${name} `), name);
    t.same(await leftovers(), [], `${name}: no dev-chains record, no mark`);
  }
});

t.test('a REDIS_URL database the server lacks stops the start, naming REDIS_URL and the index', async (t) => {
  // An embedded default's dev state in database 0, under the same prefix: what ioredis would fall back on.
  const wallet = 'wallet:0x00000000000000000000000000000000000000bb:chain_b';
  await redis.set(EMBEDDED_MARK_KEY, EMBEDDED_MARK);
  await redis.hset(wallet, { synced: '7000000', locked: '0', pending: '0', held: '0' });
  // Far above any server's `databases` (16 by default).
  const message = await refusal(t, serve({ ...env, REDIS_URL: `${REDIS_URL}/9999` }, { logger: false }));
  t.match(message, /^REDIS_URL \(config redis\.url\) names database 9999, which redis:\/\/[^ ]+ does not have/);
  t.equal(await redis.hget(wallet, 'synced'), '7000000', "database 0's dev state is not reset");
  t.equal(await redis.get(DEV_CHAINS_KEY), null, 'nor published there');
  await redis.del(wallet, EMBEDDED_MARK_KEY);

  const app = Fastify({ logger: false });
  t.teardown(() => app.close());
  const viaPlugin = await refusal(
    t,
    app.register(farebox, { env: { ...env, REDIS_URL: `${REDIS_URL}/9999` } }).ready(),
  );
  t.match(viaPlugin, /names database 9999/, 'the plugin too');
  t.same(await leftovers(), []);
});

t.test("another deployment's keys under its prefix: refused, and left as they were", async (t) => {
  const wallet = 'wallet:0x00000000000000000000000000000000000000aa:chain_a';
  await redis.hset(wallet, { synced: '5000000', locked: '0', pending: '0', held: '0' });
  await redis.set('cursor:chain_a', '123');
  t.teardown(() => redis.del(wallet, 'cursor:chain_a'));
  const message = await refusal(t, serve(env, { logger: false }));
  t.match(
    message,
    /prefix "farebox-test:[0-9a-f]+:" holds keys the embedded default did not make \((wallet|cursor):[^)]*\), which it would reset: set FAREBOX_REDIS_PREFIX or REDIS_URL/,
  );
  t.same(await redis.hgetall(wallet), { synced: '5000000', locked: '0', pending: '0', held: '0' }, 'not reset');
  t.equal(await redis.get('cursor:chain_a'), '123');
  t.equal(await redis.get(EMBEDDED_MARK_KEY), null, 'not marked');
  t.equal(await redis.get(DEV_CHAINS_KEY), null, 'nothing published');
});

t.test(
  'accounts made before the first start keep their default chain; at later starts it resets with the balances',
  async (t) => {
    const { address } = await createAccount(redis, { defaultChain: 'chain_b' });
    const first = await serve(env, { logger: false });
    t.equal(await redis.hget(keys.account(address), 'default_chain'), 'chain_b', 'a prefix claimed at this start');
    await first.close();
    const second = await serve(env, { logger: false });
    await second.close();
    t.equal(await redis.hget(keys.account(address), 'default_chain'), 'chain_a', 'its own prefix: reset');
  },
);

t.test('a prefix it made: marked at the first start, run on again; the record withdrawn at close', async (t) => {
  const first = await serve(env, { logger: false });
  t.equal(await redis.get(EMBEDDED_MARK_KEY), EMBEDDED_MARK, 'marked');
  t.ok(await redis.get(DEV_CHAINS_KEY), 'its dev chains published');
  await first.close();
  t.equal(await redis.get(DEV_CHAINS_KEY), null, 'the record of chains that are gone is withdrawn');
  const second = await serve(env, { logger: false });
  t.teardown(() => second.close());
  t.equal(await redis.get(EMBEDDED_MARK_KEY), EMBEDDED_MARK, 'runs again on its own prefix');
});
