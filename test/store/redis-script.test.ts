import { randomBytes } from 'node:crypto';
import t from 'tap';
import { Command } from 'ioredis';
import { LuaScript } from '../../plugins/store/redis-script.js';
import { testRedis } from '../helpers/harness.js';

const { redis, prefix } = await testRedis(t);

// A script of its own per run (a comment with random bytes): no other test or earlier run has loaded it.
const fresh = () =>
  new LuaScript(`-- ${randomBytes(8).toString('hex')}\nredis.call('SET', KEYS[1], ARGV[1])\nreturn {KEYS, ARGV}`);

t.test('encodes the command ioredis would send, EVAL with the source on a new socket, then EVALSHA', async (t) => {
  const script = fresh();
  const socket = {};
  const keys = ['a:1', 'wallet:0xabc:chain_a', '', 'kéy'];
  const args = [
    'req_1',
    1234567890123,
    '',
    0,
    'ünïcode ✓',
    '{"x":1}',
    1e12,
    'a'.repeat(64),
    'b'.repeat(65),
    `${'é'.repeat(40)}😀`,
  ];
  const ioredisForm = (name: string, first: string) =>
    Buffer.from(
      new Command(name, [first, keys.length, ...keys.map((k) => prefix + k), ...args]).toWritable(
        socket as never,
      ) as string,
    );
  t.same(script.encode(socket, prefix, keys, args), ioredisForm('eval', script.lua));
  t.same(script.encode(socket, prefix, keys, args), ioredisForm('evalsha', script.sha));
  t.same(
    script.encode({}, prefix, keys, args),
    ioredisForm('eval', script.lua),
    'another socket gets the source again',
  );
  t.same(script.encode(socket, '', [], []), Buffer.from(`*3\r\n$7\r\nevalsha\r\n$40\r\n${script.sha}\r\n$1\r\n0\r\n`));
  // All ASCII (the usual case, encoded as one string) and ten or more keys (a two-digit key count).
  const asciiKeys = Array.from({ length: 12 }, (_, i) => `k${i}:${'x'.repeat(i * 9)}`);
  const asciiArgs = ['req_1', 1234567890123, '', 0, -5, 1.5, '{"x":1}', 'z'.repeat(300), `tab\there`, '\u007f'];
  const asciiForm = new Command('evalsha', [
    script.sha,
    asciiKeys.length,
    ...asciiKeys.map((k) => prefix + k),
    ...asciiArgs,
  ]).toWritable(socket as never);
  t.same(script.encode(socket, prefix, asciiKeys, asciiArgs), Buffer.from(asciiForm as string));
  t.same(
    script.encode(socket, prefix, ['é'], []),
    Buffer.from(new Command('evalsha', [script.sha, 1, `${prefix}é`]).toWritable(socket as never) as string),
    'one non-ASCII key',
  );
});

t.test('runs under the connection prefix and returns the reply', async (t) => {
  const script = fresh();
  for (let i = 0; i < 3; i++) {
    const reply = await script.run<[string[], string[]]>(redis, ['k'], [`v${i}`, 42]);
    t.same(reply, [[`${prefix}k`], [`v${i}`, '42']]);
    t.equal(await redis.get('k'), `v${i}`);
  }
});

t.test('a socket that lost the script (NOSCRIPT) gets it again, once', async (t) => {
  const script = fresh();
  // Taken for loaded on this socket, as after a SCRIPT FLUSH or a Redis restart: the EVALSHA is refused.
  script.encode(redis.stream, prefix, [], []);
  t.same(await script.run(redis, ['k'], ['after-noscript']), [[`${prefix}k`], ['after-noscript']]);
  t.same(await script.run(redis, ['k'], ['next']), [[`${prefix}k`], ['next']]);
});

t.test('a new connection after a drop loads the script again', async (t) => {
  const script = fresh();
  await script.run(redis, ['k'], ['before']);
  const reconnected = new Promise((resolve) => redis.once('ready', resolve));
  redis.stream.destroy();
  await reconnected;
  t.same(await script.run(redis, ['k'], ['after']), [[`${prefix}k`], ['after']]);
});

t.test('Redis errors reach the caller', async (t) => {
  const failing = new LuaScript("return redis.error_reply('amount out of range')");
  await t.rejects(failing.run(redis, [], []), /amount out of range/);
});
