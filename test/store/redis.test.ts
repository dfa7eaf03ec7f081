import t from 'tap';
import { ReplyError } from 'ioredis';
import { connectRedis, closeRedis, ifAnswering, redisUnavailable, RedisUnanswered } from '../../plugins/store/redis.js';
import { testRedis } from '../helpers/harness.js';

const { redis } = await testRedis(t);

/** Count the socket's writes to the kernel (one _write or _writev each) while `fn` runs. */
async function socketWrites(fn: () => Promise<unknown>): Promise<number> {
  const stream = redis.stream as unknown as { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void };
  const write = stream._write;
  const writev = stream._writev;
  let n = 0;
  stream._write = function (this: unknown, ...a: unknown[]) {
    n++;
    return write.apply(this, a);
  };
  stream._writev = function (this: unknown, ...a: unknown[]) {
    n++;
    return writev.apply(this, a);
  };
  try {
    await fn();
  } finally {
    stream._write = write;
    stream._writev = writev;
  }
  return n;
}

t.test('the commands of one event-loop turn leave in one socket write, in order', async (t) => {
  const writes = await socketWrites(() =>
    Promise.all(Array.from({ length: 100 }, (_, i) => redis.rpush('order', String(i)))),
  );
  t.equal(writes, 1);
  t.same(
    await redis.lrange('order', 0, -1),
    Array.from({ length: 100 }, (_, i) => String(i)),
  );
});

t.test('commands of later turns are written in their own turn', async (t) => {
  const writes = await socketWrites(async () => {
    for (let i = 0; i < 5; i++) await redis.incr('n');
  });
  t.equal(writes, 5);
  t.equal(await redis.get('n'), '5');
});

t.test('a reconnected connection coalesces too', async (t) => {
  const reconnected = new Promise((resolve) => redis.once('ready', resolve));
  redis.stream.destroy();
  await reconnected;
  const writes = await socketWrites(() => Promise.all([redis.set('a', '1'), redis.set('b', '2'), redis.get('a')]));
  t.equal(writes, 1);
  t.equal(await redis.get('b'), '2');
});

t.test(
  'redisUnavailable: Redis out of reach or not serving; not a refusal of the command, not an error of ours',
  async (t) => {
    // What ioredis rejects a command with when nothing answers on the port.
    const away = connectRedis({ url: 'redis://127.0.0.1:1', prefix: '', failFast: true });
    away.on('error', () => {});
    const err = await away.get('k').catch((e: unknown) => e);
    await closeRedis(away).catch(() => {});
    t.ok(redisUnavailable(err), String(err));
    t.ok(redisUnavailable(new Error('Connection is closed.')));
    t.ok(redisUnavailable(new RedisUnanswered('debit unanswered after 5000 ms')));
    t.ok(redisUnavailable(new ReplyError('BUSY Redis is busy running a script.')));
    t.notOk(redisUnavailable(new ReplyError('ERR Error running script: amount out of range')));
    t.notOk(redisUnavailable(new TypeError("Cannot read properties of undefined (reading 'x')")));
    t.notOk(redisUnavailable(undefined));
  },
);

t.test(
  'ifAnswering: a stopping process asks Redis nothing while it is away, and waits at most its bound',
  async (t) => {
    // Nothing listens on port 1: the connection never becomes ready.
    const away = connectRedis({ url: 'redis://127.0.0.1:1', prefix: 'farebox-test-away:' });
    away.on('error', () => {});
    t.teardown(() => away.disconnect());
    let ran = false;
    t.equal(await ifAnswering(away, 60_000, async () => (ran = true)), undefined, 'nothing answered');
    t.notOk(ran, 'and nothing asked: a command would wait through every retry');
    t.equal(await ifAnswering(redis, 60_000, () => redis.ping()), 'PONG', 'a Redis that answers is asked');
    const never = new Promise<string>(() => {});
    t.equal(
      await ifAnswering(redis, 50, () => never),
      undefined,
      'a command that never answers is given up after the bound',
    );
    t.equal(
      await ifAnswering(redis, 60_000, () => Promise.reject(new Error('refused'))),
      undefined,
      'an error is no answer',
    );
  },
);
