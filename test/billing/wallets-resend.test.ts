// A hold or a settlement that reaches Redis but whose reply is lost with the connection is resent by ioredis once it
// has reconnected (once, on the gateway's fail-fast connection): the second run must answer as the first did and
// change nothing. Last, the same through the gateway with the official OpenAI SDK: the caller sees 200, not 402.
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { RateLimiter } from '../../plugins/billing/rate-limit.js';
import { limitsConfigSchema } from '../../policies/limits.js';
import { debitHold, placeHold, readWallet, type HoldInput } from '../../plugins/billing/wallets.js';
import { countQueuedDebits, getCallRecord } from '../../plugins/billing/call-records.js';
import { keys } from '../../plugins/store/keys.js';
import { holdFor, setSyncedBalance } from '../helpers/money.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { closeDevChains, startHarness, testRedis } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

const { redis, prefix } = await testRedis(t);

/**
 * A TCP relay to Redis that can drop a connection in place of forwarding Redis's next reply: at once
 * (`dropNextReply`), or on the connection that next sends a command containing `dropAfter`. The connection is cut
 * 50 ms after that reply, forwarding nothing more, so every command it had sent has run in Redis.
 */
async function lossyRelay(t: Test) {
  const target = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  const sockets = new Set<net.Socket>();
  const relay = {
    dropNextReply: false,
    dropAfter: null as string | null,
    drops: 0,
    /** Everything clients sent, in order. */
    sent: [] as Buffer[],
    connections: 0,
    url: '',
  };
  const server = net.createServer((client) => {
    relay.connections++;
    const upstream = net.connect(Number(target.port || 6379), target.hostname);
    sockets.add(client).add(upstream);
    let armed = false;
    let cut = false;
    client.on('data', (d) => {
      relay.sent.push(d);
      if (relay.dropAfter !== null && d.includes(relay.dropAfter)) {
        relay.dropAfter = null;
        armed = true;
      }
      upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (relay.dropNextReply || armed) {
        relay.dropNextReply = false;
        armed = false;
        cut = true;
        relay.drops++;
        setTimeout(() => {
          client.destroy();
          upstream.destroy();
        }, 50);
      }
      if (!cut) client.write(d);
    });
    for (const s of [client, upstream]) {
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  relay.url = url.toString();
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return relay;
}

/** Times `text` occurs in what clients sent. */
const occurrences = (sent: Buffer[], text: string) => Buffer.concat(sent).toString('latin1').split(text).length - 1;

const account = `0x${randomBytes(20).toString('hex')}`;
let seq = 0;
const hold = (amount: bigint): HoldInput =>
  holdFor(account, amount, {
    requestId: `req_${randomBytes(16).toString('hex')}_${seq++}`,
    owner: 'resend-test',
    keyId: 'key_resend',
    now: Date.now(),
  });

await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);

t.test('a hold run twice answers placed both times and holds once; the rate limits are charged once', async (t) => {
  const limiter = new RateLimiter(
    redis,
    limitsConfigSchema.parse({ default: { key: { rpm: 10 }, account: { rpm: null } } }),
  );
  const h = hold(300_000n);
  const limits = limiter.prepare({ keyId: h.keyId, account, family: 'gamma', tokens: 100, now: h.now })!;
  const first = await placeHold(redis, h, limits);
  const again = await placeHold(redis, h, limits);
  t.same(first, { placed: true, available: 700_000n, limits: first.limits });
  t.match(limiter.decide(limits, first.limits), { allowed: true, which: 'key_requests', remaining: 9 });
  t.same(again, first, 'the same answer, rate-limit decision included');
  t.equal((await readWallet(redis, account, 'chain_a')).held, 300_000n, 'held once');
  const next = await placeHold(redis, hold(1n), limits);
  t.match(
    limiter.decide(limits, next.limits),
    { allowed: true, remaining: 8 },
    'the next call finds one request used before it, not two',
  );

  const other = await placeHold(redis, { ...h, amount: 200_000n });
  t.same(
    other,
    { placed: false, available: 699_999n, duplicate: true, rateLimited: false, limits: other.limits },
    'another hold under the id is a duplicate',
  );
  const otherOwner = await placeHold(redis, { ...h, owner: 'another' });
  t.equal(otherOwner.placed, false, 'so is one from another owner');

  await debitHold(redis, {
    requestId: h.requestId,
    callId: h.callId,
    account,
    chain: 'chain_a',
    owner: h.owner,
    price: 0n,
    usageJson: '{}',
    retentionMs: 3_600_000,
  });
  t.equal((await readWallet(redis, account, 'chain_a')).held, 1n, 'released; the 1-unit hold remains');
});

t.test('a hold whose reply a dropped connection lost is resent and answers placed', async (t) => {
  const relay = await lossyRelay(t);
  const r = connectRedis({ url: relay.url, prefix, failFast: true });
  t.teardown(() => closeRedis(r));
  await r.ping();
  const before = await readWallet(redis, account, 'chain_a');
  const h = hold(50_000n);
  relay.dropNextReply = true;
  const result = await placeHold(r, h);
  t.equal(relay.connections, 2, 'the connection was dropped and made again');
  t.equal(occurrences(relay.sent, keys.call(h.callId)), 2, 'the hold went out twice');
  t.match(result, { placed: true, available: before.available - 50_000n }, 'placed, with the balance after it');
  const after = await readWallet(redis, account, 'chain_a');
  t.equal(after.held - before.held, 50_000n, 'held once');
  t.equal((await getCallRecord(redis, h.requestId))?.status, 'held', 'one hold, held');
});

t.test('a debit whose reply was lost is resent and answers with the amount debited, once', async (t) => {
  const relay = await lossyRelay(t);
  const r = connectRedis({ url: relay.url, prefix, failFast: true });
  t.teardown(() => closeRedis(r));
  const h = hold(40_000n);
  t.ok((await placeHold(r, h)).placed);
  const before = await readWallet(redis, account, 'chain_a');
  const debitsBefore = await countQueuedDebits(redis, 'chain_a');
  relay.dropNextReply = true;
  const done = await debitHold(r, {
    requestId: h.requestId,
    callId: h.callId,
    account,
    chain: 'chain_a',
    owner: h.owner,
    price: 12_345n,
    usageJson: '{"output_tokens":3}',
    retentionMs: 3_600_000,
  });
  t.equal(relay.connections, 2, 'the connection was dropped and made again');
  t.same(done, { debited: 12_345n, capped: false, late: false });
  const after = await readWallet(redis, account, 'chain_a');
  t.equal(before.held - after.held, 40_000n, 'the hold released once');
  t.equal(after.pending - before.pending, 12_345n, 'debited once');
  t.equal((await countQueuedDebits(redis, 'chain_a')) - debitsBefore, 1, 'one debit queued');

  // A debit with no hold and no debit of its own (a released hold) still answers null.
  t.equal(
    await debitHold(redis, {
      ...h,
      callId: callIdOf(`${h.requestId}x`),
      requestId: `${h.requestId}x`,
      price: 5n,
      usageJson: '{}',
      retentionMs: 1000,
    }),
    null,
  );
});

t.test('through the gateway: a call whose hold reply was lost answers 200 and is charged once', async (t) => {
  const relay = await lossyRelay(t);
  // The gateway's Redis goes through the relay.
  const h = await startHarness({ chains: true, edit: (c) => void (c.redis = { ...c.redis!, url: relay.url }) });
  t.teardown(async () => {
    await h.close();
    await closeDevChains();
  });
  await h.fund('chain_a', 2_000_000n);
  const before = await readWallet(h.redis, h.account, 'chain_a');
  const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
  // The next command carrying a usage index key is a hold (settlements carry none).
  relay.dropAfter = 'usage-idx:';
  const { data, response } = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi #sim:tokens=5' }] })
    .withResponse();
  t.equal(relay.drops, 1, 'the connection was cut after the hold ran');
  t.equal(response.status, 200, 'not a 402');
  t.ok(data.choices[0]!.message.content, 'the answer');
  const id = response.headers.get('x-request-id')!;
  const rec = await until(`settled ${id}`, async () => {
    const r = await getCallRecord(h.redis, id);
    return r?.status === 'settled' ? r : null;
  });
  // Two holds and one debit name the wallet, then the call's record (the test's own reads name the record alone).
  const scriptRuns = Buffer.concat(relay.sent)
    .toString('latin1')
    .split(`${keys.wallet(h.account, 'chain_a')}\r\n`)
    .filter((after) => /^\$\d+\r\n[^\r]*call:(0x[0-9a-f]+)\r\n/.exec(after)?.[1] === callIdOf(id)).length;
  t.equal(scriptRuns, 3, 'the hold went out twice');
  const w = await until('nothing held or pending', async () => {
    const x = await readWallet(h.redis, h.account, 'chain_a');
    return x.held === 0n && x.pending === 0n ? x : null;
  });
  t.equal(before.synced - w.synced, rec.priceAtomic, "charged the call's price once");
  t.equal(
    w.synced,
    await createEvmChain('chain_a', h.config.chains!.chain_a).balanceOf(h.account as `0x${string}`),
    'as onchain',
  );
});
