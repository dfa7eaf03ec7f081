// The debit spool: what waits reaches Redis in order; a debit Redis refuses outright is set aside, not retried,
// and the debits behind it still go through.
import t from 'tap';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { ReplyError } from 'ioredis';
import { Billing, DebitNotReached } from '../../plugins/billing/billing.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { connectRedis, redisUnavailable } from '../../plugins/store/redis.js';
import { makeUsage } from '../../pricing/index.js';
import { DebitSpool, type SpooledDebit } from '../../plugins/billing/spool.js';

const dir = mkdtempSync(join(tmpdir(), 'farebox-spool-unit-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const quiet = { error() {}, warn() {} };

/** A client of a port nothing listens on: every command fails at once, as while Redis is down. */
async function redisDown(prefix: string) {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((done) => probe.close(done));
  const r = connectRedis({ url: `redis://127.0.0.1:${port}`, prefix, failFast: true });
  r.on('error', () => {});
  return r;
}

const debit = (n: number): SpooledDebit => ({
  requestId: `req_${n}`, callId: `call_${n}`, account: '0xabc', chain: 'chain_a', owner: 'i', price: BigInt(n),
  usageJson: '{}', retentionMs: 1_000, model: 'm',
});

t.test('Redis being away is retried; an error reply of Redis itself is not', async (t) => {
  const closed = Object.assign(new Error('Connection is closed.'), {});
  t.ok(redisUnavailable(closed));
  t.ok(redisUnavailable(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' })));
  t.ok(redisUnavailable(new Error('Command timed out')));
  t.ok(redisUnavailable(new ReplyError('LOADING Redis is loading the dataset in memory')));
  t.ok(redisUnavailable(new ReplyError('READONLY You can\'t write against a read only replica.')));
  t.notOk(redisUnavailable(new ReplyError('ERR user_script:42: Script attempted to access nonexistent global variable')));
});

t.test('a refused debit is set aside in the .refused file and the ones behind it reach Redis', async (t) => {
  let away = true;
  const taken: string[] = [];
  const refused: string[] = [];
  const spool = new DebitSpool(dir, `host-1-abcdef`, 100, async (d) => {
    if (away) throw new Error('Connection is closed.');
    if (d.requestId === 'req_2') throw new ReplyError('ERR Error running script: bad number');
    taken.push(d.requestId);
    return { debited: d.price, capped: false, late: false };
  }, redisUnavailable, {
    spooled() {}, drained() {}, lost() {}, resized() {},
    refused: (d) => refused.push(d.requestId),
  }, quiet);
  for (const n of [1, 2, 3]) spool.add(debit(n));
  await new Promise((r) => setTimeout(r, 50));
  t.equal(spool.size, 3, 'all wait while Redis is away');
  away = false;
  t.ok(await spool.flush(5_000), 'the spool empties');
  t.same(taken, ['req_1', 'req_3'], 'in order, past the refused one');
  t.same(refused, ['req_2']);
  t.same(readdirSync(dir), ['host-1-abcdef.refused'], 'the queue file is gone; the refused debit is kept');
  const kept = JSON.parse(readFileSync(join(dir, 'host-1-abcdef.refused'), 'utf8').trim()) as { requestId: string; price: string };
  t.match(kept, { requestId: 'req_2', price: '2' });
  await spool.stop();
});

t.test('a debit sent to a Redis that never answers is spooled after 5 s, not held for the whole outage', async (t) => {
  // A server that takes connections and says nothing: a Redis gone silent (or a connection that died unanswered).
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const port = (silent.address() as AddressInfo).port;
  const r = connectRedis({ url: `redis://127.0.0.1:${port}`, prefix: 'spool-test:' });
  r.on('error', () => {});
  const spoolDir = join(dir, 'silent');
  const billing = new Billing(r, { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 30_000, spool: { dir: spoolDir, maxEntries: 10 } }, createMetrics(), quiet);
  t.teardown(async () => {
    r.disconnect();
    for (const socket of sockets) socket.destroy();
    await new Promise((done) => silent.close(done));
  });
  const hold = { requestId: 'req_silent', callId: 'call_silent', account: '0xabc', keyId: 'k', chain: 'chain_a' as const, model: 'm', amount: 10n, owner: billing.instance };
  const started = Date.now();
  t.equal(await billing.debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 5n }), null);
  const waited = Date.now() - started;
  t.ok(waited >= 4_900 && waited < 8_000, `given up after ${waited} ms`);
  t.equal(billing.spool?.size, 1, 'the debit waits in the spool');
  await billing.spool?.stop();
});

t.test('a full spool loses what does not fit, counted in farebox_debits_lost_total; what fits still goes in', async (t) => {
  const r = await redisDown('spool-full:');
  const metrics = createMetrics();
  const errors: string[] = [];
  const billing = new Billing(r, { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 30_000, spool: { dir: join(dir, 'full'), maxEntries: 2 } }, metrics, {
    error: (_o: object, msg: string) => errors.push(msg), warn() {},
  });
  t.teardown(async () => {
    await billing.spool?.stop();
    r.disconnect();
  });
  for (const n of [1, 2, 3]) {
    const hold = { requestId: `req_full_${n}`, callId: `call_full_${n}`, account: '0xabc', keyId: 'k', chain: 'chain_a' as const, model: 'm', amount: 10n, owner: billing.instance };
    t.equal(await billing.debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 5n }), null, `debit ${n} not answered by Redis`);
  }
  t.equal(billing.spool?.size, 2, 'two wait: the spool holds at most spool_max');
  t.equal((await metrics.debitsLost.get()).values.reduce((s, v) => s + v.value, 0), 1, 'the third is counted lost');
  t.equal((await metrics.debitsSpooled.get()).values.reduce((s, v) => s + v.value, 0), 2);
  t.ok(errors.length >= 1, 'and logged');
});

t.test('without a spool, a debit that cannot reach Redis throws DebitNotReached after its retries, never a silent null', async (t) => {
  const r = await redisDown('spool-none:');
  t.teardown(() => r.disconnect());
  const billing = new Billing(r, { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 30_000 }, createMetrics(), quiet);
  const hold = { requestId: 'req_nospool', callId: 'call_nospool', account: '0xabc', keyId: 'k', chain: 'chain_a' as const, model: 'm', amount: 10n, owner: billing.instance };
  const started = Date.now();
  const err = await billing.debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 5n }).catch((e: unknown) => e);
  t.ok(err instanceof DebitNotReached, 'DebitNotReached');
  t.equal((err as DebitNotReached).requestId, 'req_nospool');
  t.ok(Date.now() - started >= 5_000, 'after its retries');
});
