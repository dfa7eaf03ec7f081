// One record per billed call, `call:<callId>`, carries the call from its hold to its charge: these pin its states
// (held, pending, settled, failed, free), its lifetime, what a settlement run again answers, and the sweeper's
// releases of expired holds and of a dead instance's holds.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { Billing } from '../../plugins/billing/billing.js';
import { callIdOf, type EscrowEvent, type Hex } from '../../plugins/chains/port.js';
import { newRequestId } from '../../plugins/call.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { placeHold, readWallet, settleHold, walletKeys, type HoldInput } from '../../plugins/billing/wallets.js';
import { applyEvents } from '../../plugins/settlement/apply-events.js';
import { listUsage } from '../../plugins/billing/call-records.js';
import type { PriceTable } from '../../pricing/index.js';
import { testRedis } from '../helpers/harness.js';

const { redis, prefix } = await testRedis(t);
const RETENTION = 3_600_000;

function fresh() {
  return `0x${randomBytes(20).toString('hex')}`;
}

function hold(account: string, amount: bigint, o: Partial<HoldInput> = {}): HoldInput {
  const requestId = o.requestId ?? newRequestId();
  const now = Date.now();
  return {
    requestId, callId: callIdOf(requestId), account, chain: 'chain_a', amount, instance: 'records-test',
    expiresAt: now + 120_000, model: 'gamma-k3', keyId: 'key_records', now, retentionMs: RETENTION, ...o,
  };
}

const settle = (h: HoldInput, price: bigint, instance = h.instance) =>
  settleHold(redis, { requestId: h.requestId, callId: h.callId, account: h.account, chain: h.chain, instance, price, usageJson: '{"output_tokens":2}', retentionMs: RETENTION });

/** Keys under the test prefix that name the request or its call id. */
async function keysOf(h: HoldInput): Promise<string[]> {
  const raw = redis.duplicate({ keyPrefix: '' });
  try {
    const all = await raw.keys(`${prefix}*`);
    return all.filter((k) => k.includes(h.requestId) || k.includes(h.callId)).map((k) => k.slice(prefix.length));
  } finally {
    raw.disconnect();
  }
}

function charged(h: HoldInput, amount: bigint, block: bigint, kind: 'charged' | 'charge_refused' = 'charged'): EscrowEvent {
  const base = { account: h.account as Hex, amount, callId: h.callId as Hex, blockNumber: block, logIndex: 0, txHash: `0x${randomBytes(32).toString('hex')}` as Hex };
  return kind === 'charged' ? { kind, ...base } : { kind, ...base, balance: 0n };
}

t.test('a hold is one record, kept past its expiry by the retention; settled, it is kept for the retention', async (t) => {
  const account = fresh();
  await redis.hset(walletKeys.wallet(account, 'chain_a'), 'synced', '1000000');
  const h = hold(account, 300_000n);
  t.ok((await placeHold(redis, h)).placed);
  t.same(await keysOf(h), [walletKeys.call(h.callId)], 'the call record is the only key of its own');
  const rec = await redis.hgetall(walletKeys.call(h.callId));
  t.match(rec, { call_id: h.requestId, account, chain: 'chain_a', held: '300000', instance: 'records-test', expires: String(h.expiresAt), price: '0', status: 'held' });
  t.ok((await redis.pttl(walletKeys.call(h.callId))) > RETENTION + 110_000, 'outlives the hold by the retention');
  t.equal(await redis.zscore(walletKeys.holds, h.requestId), String(h.expiresAt));
  t.ok(await redis.sismember(walletKeys.instanceHolds('records-test'), h.requestId));

  t.same(await settle(h, 120_000n), { debited: 120_000n, capped: false });
  const after = await redis.hgetall(walletKeys.call(h.callId));
  t.match(after, { status: 'pending', price: '120000', usage: '{"output_tokens":2}' });
  const ttl = await redis.pttl(walletKeys.call(h.callId));
  t.ok(ttl > RETENTION - 60_000 && ttl <= RETENTION, 'kept for the retention from its settlement');
  t.equal(await redis.zscore(walletKeys.holds, h.requestId), null, 'no longer among the holds');
  t.notOk(await redis.sismember(walletKeys.instanceHolds('records-test'), h.requestId));
  const w = await readWallet(redis, account, 'chain_a');
  t.same({ held: w.held, pending: w.pending }, { held: 0n, pending: 120_000n });
  t.match(await listUsage(redis, account), [{ call_id: h.requestId, status: 'pending', price: '0.120000', chain: 'chain_a' }], 'listed as a usage record');
});

t.test('a settlement run again answers its debit and moves nothing; a release at 0 run again answers null', async (t) => {
  const account = fresh();
  await redis.hset(walletKeys.wallet(account, 'chain_a'), 'synced', '1000000');
  const debited = hold(account, 200_000n);
  const free = hold(account, 100_000n);
  await placeHold(redis, debited);
  await placeHold(redis, free);
  await settle(debited, 50_000n);
  t.same(await settle(free, 0n), { debited: 0n, capped: false });
  const before = await readWallet(redis, account, 'chain_a');
  const queued = await redis.xlen(walletKeys.debits('chain_a'));

  t.same(await settle(debited, 50_000n), { debited: 50_000n, capped: false }, 'the debit, as the first run answered');
  t.same(await settle(debited, 0n), { debited: 50_000n, capped: false }, 'a release after the debit answers the debit');
  t.equal(await settle(free, 0n), null, 'released before: nothing to settle');
  t.equal(await settle(free, 7n), null, 'and never debited later');
  t.same(await readWallet(redis, account, 'chain_a'), before, 'nothing moved');
  t.equal(await redis.xlen(walletKeys.debits('chain_a')), queued, 'nothing queued');
  t.equal(await redis.hget(walletKeys.call(free.callId), 'status'), 'free');

  const over = hold(account, 30_000n);
  await placeHold(redis, over);
  t.same(await settle(over, 45_000n), { debited: 30_000n, capped: true }, 'a price above the hold is cut to it');
  t.same(await settle(over, 45_000n), { debited: 30_000n, capped: true }, 'and run again, answers the cut again');

  const dup = await placeHold(redis, { ...free, instance: 'another' });
  t.match(dup, { placed: false, duplicate: true }, 'a record, settled or not, refuses another hold under its id');
});

// 0.7 days is 60479999.99999999 ms, which PEXPIRE refuses unrounded; 36,500 days is the most the config allows.
for (const days of [0.7, 36_500]) {
  t.test(`a retention of ${days} days holds and settles, and the record keeps it`, async (t) => {
    const account = fresh();
    await redis.hset(walletKeys.wallet(account, 'chain_a'), 'synced', '1000');
    const retentionMs = days * 86_400_000;
    const h = hold(account, 100n, { retentionMs });
    t.ok((await placeHold(redis, h)).placed);
    t.same(await settleHold(redis, { ...h, price: 10n, usageJson: '{}', retentionMs }), { debited: 10n, capped: false });
    t.ok((await redis.pttl(walletKeys.call(h.callId))) > retentionMs - 60_000);
  });
}

t.test("the watcher's events settle or fail the record once; an event of no record moves only synced", async (t) => {
  const account = fresh();
  await redis.hset(walletKeys.wallet(account, 'chain_a'), 'synced', '1000000');
  const a = hold(account, 200_000n);
  const b = hold(account, 200_000n);
  await placeHold(redis, a);
  await placeHold(redis, b);
  await settle(a, 60_000n);
  await settle(b, 70_000n);
  const eA = charged(a, 60_000n, 1_000n);
  const eB = charged(b, 70_000n, 1_001n, 'charge_refused');
  const stranger = charged(hold(account, 1n), 5_000n, 1_002n);
  t.same(await applyEvents(redis, 'chain_a', [eA, eB, stranger]), ['charged', 'charge_refused', 'charged']);
  t.match(await redis.hgetall(walletKeys.call(a.callId)), { status: 'settled', tx: eA.txHash, price: '60000' });
  t.match(await redis.hgetall(walletKeys.call(b.callId)), { status: 'failed', tx: eB.txHash, price: '70000' });
  t.equal(await redis.exists(walletKeys.call(stranger.callId!)), 0, 'no record made for an unknown call id');
  const w = await readWallet(redis, account, 'chain_a');
  t.same({ synced: w.synced, pending: w.pending }, { synced: 1_000_000n - 60_000n - 5_000n, pending: 0n });
  // The same events once more under a later position (a re-scan past a lost cursor): the records say they are done.
  const again = [eA, eB].map((e, i) => ({ ...e, blockNumber: 2_000n + BigInt(i) }));
  await applyEvents(redis, 'chain_a', again);
  t.equal((await readWallet(redis, account, 'chain_a')).pending, 0n, 'pending not lowered twice');
});

t.test('the sweeper releases expired holds and a dead instance\'s holds, and skips what settled meanwhile', async (t) => {
  const account = fresh();
  await redis.hset(walletKeys.wallet(account, 'chain_a'), 'synced', '1000000');
  const metrics = createMetrics();
  const log = { error() {}, warn() {} };
  const billing = new Billing(redis, {} as PriceTable, { retentionMs: RETENTION, holdGraceMs: 1_000, instanceTimeoutMs: 10_000 }, metrics, log);
  const now = Date.now();
  const expired = hold(account, 10_000n, { instance: billing.instance, expiresAt: now - 1 });
  const settledMeanwhile = hold(account, 20_000n, { instance: billing.instance, expiresAt: now - 1 });
  const live = hold(account, 30_000n, { instance: billing.instance });
  const dead = hold(account, 40_000n, { instance: 'dead-instance' });
  for (const h of [expired, settledMeanwhile, live, dead]) t.ok((await placeHold(redis, h)).placed);
  await settle(settledMeanwhile, 5_000n);
  // Its settlement removed it from the holds; a sweeper that read the holds before it would still try it.
  await redis.zadd(walletKeys.holds, now - 1, settledMeanwhile.requestId);
  await redis.zadd(walletKeys.instances, now - 60_000, 'dead-instance');

  t.equal(await billing.sweep(now), 2, 'the expired hold and the dead instance\'s');
  t.equal(await redis.hget(walletKeys.call(expired.callId), 'status'), 'free');
  t.equal(await redis.hget(walletKeys.call(dead.callId), 'status'), 'free');
  t.equal(await redis.hget(walletKeys.call(live.callId), 'status'), 'held', 'a live hold stays');
  t.match(await redis.hgetall(walletKeys.call(settledMeanwhile.callId)), { status: 'pending', price: '5000' }, 'the debit stands');
  const w = await readWallet(redis, account, 'chain_a');
  t.same({ held: w.held, pending: w.pending }, { held: 30_000n, pending: 5_000n });
  t.same(await redis.zrange(walletKeys.holds, 0, -1), [live.requestId]);
  t.equal(await redis.zscore(walletKeys.instances, 'dead-instance'), null, 'the dead instance retired');
  const released = (await metrics.holdsReleased.get()).values;
  t.same(Object.fromEntries(released.map((v) => [v.labels.reason, v.value])), { expired: 1, instance_died: 1 });
  await settle(live, 0n);
});
