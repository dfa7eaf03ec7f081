// One record per billed call carries the call from its hold to its charge: these pin its states (held, pending,
// settled, failed, free), its lifetime, what a debit run again answers, and the sweeper's releases of expired holds
// and of a dead instance's holds.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { Billing } from '../../plugins/billing/billing.js';
import { callIdOf, type EscrowEvent, type Hex } from '../../plugins/chains/port.js';
import { newRequestId } from '../../plugins/call.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { debitHold, placeHold, readWallet, type HoldInput } from '../../plugins/billing/wallets.js';
import { applyEventBatch } from '../../plugins/settlement/apply-events.js';
import { countOpenHolds, countQueuedDebits, getCallRecord, listUsage } from '../../plugins/billing/call-records.js';
import { keys } from '../../plugins/store/keys.js';
import { makeUsage } from '../../pricing/index.js';
import { testRedis } from '../helpers/harness.js';
import { setSyncedBalance } from '../helpers/money.js';

const { redis, prefix } = await testRedis(t);
const RETENTION = 3_600_000;

function fresh() {
  return `0x${randomBytes(20).toString('hex')}`;
}

function hold(account: string, amount: bigint, o: Partial<HoldInput> = {}): HoldInput {
  const requestId = o.requestId ?? newRequestId();
  return {
    requestId, callId: callIdOf(requestId), account, chain: 'chain_a', amount, owner: 'records-test',
    ttlMs: 120_000, model: 'gamma-k3', keyId: 'key_records', retentionMs: RETENTION, ...o,
  };
}

const debit = (h: HoldInput, price: bigint, owner = h.owner) =>
  debitHold(redis, { requestId: h.requestId, callId: h.callId, account: h.account, chain: h.chain, owner, price, usageJson: '{"output_tokens":2}', retentionMs: RETENTION });

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

/** Milliseconds the call record of `h` has left (its lifetime is part of what these tests pin). */
const ttlOf = (h: HoldInput) => redis.pttl(keys.call(h.callId));

t.test('a hold is one record, kept past its expiry by the retention; debited, it is kept for the retention', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const h = hold(account, 300_000n);
  const before = Date.now();
  t.ok((await placeHold(redis, h)).placed);
  t.same(await keysOf(h), [keys.call(h.callId)], 'the call record is the only key of its own');
  const rec = (await getCallRecord(redis, h.requestId))!;
  t.match(rec, { call_id: h.requestId, chain: 'chain_a', held: 300_000n, owner: 'records-test', priceAtomic: 0n, status: 'held' });
  t.ok(rec.expires! >= before + 120_000 - 1_000 && rec.expires! <= Date.now() + 120_000 + 1_000, "expires a TTL after Redis's now");
  t.ok((await ttlOf(h)) > RETENTION + 110_000, 'outlives the hold by the retention');
  t.equal(await countOpenHolds(redis), 1);

  t.same(await debit(h, 120_000n), { debited: 120_000n, capped: false, late: false });
  const after = (await getCallRecord(redis, h.requestId))!;
  t.match(after, { status: 'pending', priceAtomic: 120_000n, usage: { output_tokens: 2 } });
  const ttl = await ttlOf(h);
  t.ok(ttl > RETENTION - 60_000 && ttl <= RETENTION, 'kept for the retention from its debit');
  t.equal(await countOpenHolds(redis), 0, 'no longer among the holds');
  const w = await readWallet(redis, account, 'chain_a');
  t.same({ held: w.held, pending: w.pending }, { held: 0n, pending: 120_000n });
  t.match(await listUsage(redis, account), [{ call_id: h.requestId, status: 'pending', price: '0.120000', chain: 'chain_a' }], 'listed as a usage record');
});

t.test('a debit run again answers its debit and moves nothing; a release at 0 run again answers null', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const debited = hold(account, 200_000n);
  const free = hold(account, 100_000n);
  await placeHold(redis, debited);
  await placeHold(redis, free);
  await debit(debited, 50_000n);
  t.same(await debit(free, 0n), { debited: 0n, capped: false, late: false });
  const before = await readWallet(redis, account, 'chain_a');
  const queued = await countQueuedDebits(redis, 'chain_a');

  t.same(await debit(debited, 50_000n), { debited: 50_000n, capped: false, late: false }, 'the debit, as the first run answered');
  t.same(await debit(debited, 0n), { debited: 50_000n, capped: false, late: false }, 'a release after the debit answers the debit');
  t.equal(await debit(free, 0n), null, 'released before: nothing to debit');
  t.equal(await debit(free, 7n), null, 'and never debited later: its own release was no sweeper\'s');
  t.same(await readWallet(redis, account, 'chain_a'), before, 'nothing moved');
  t.equal(await countQueuedDebits(redis, 'chain_a'), queued, 'nothing queued');
  t.equal((await getCallRecord(redis, free.requestId))?.status, 'free');

  const over = hold(account, 30_000n);
  await placeHold(redis, over);
  t.same(await debit(over, 45_000n), { debited: 30_000n, capped: true, late: false }, 'a price above the hold is cut to it');
  t.same(await debit(over, 45_000n), { debited: 30_000n, capped: true, late: false }, 'and run again, answers the cut again');

  const dup = await placeHold(redis, { ...free, owner: 'another' });
  t.match(dup, { placed: false, duplicate: true }, 'a record, settled or not, refuses another hold under its id');
});

// 0.7 days is 60479999.99999999 ms, which PEXPIRE refuses unrounded; 36,500 days is the most the config allows.
for (const days of [0.7, 36_500]) {
  t.test(`a retention of ${days} days holds and settles, and the record keeps it`, async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000n);
    const retentionMs = days * 86_400_000;
    const h = hold(account, 100n, { retentionMs });
    t.ok((await placeHold(redis, h)).placed);
    t.same(await debitHold(redis, { ...h, price: 10n, usageJson: '{}', retentionMs }), { debited: 10n, capped: false, late: false });
    t.ok((await ttlOf(h)) > retentionMs - 60_000);
  });
}

t.test("the watcher's events settle or fail the record once; an event of no record moves only synced", async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const a = hold(account, 200_000n);
  const b = hold(account, 200_000n);
  await placeHold(redis, a);
  await placeHold(redis, b);
  await debit(a, 60_000n);
  await debit(b, 70_000n);
  const eA = charged(a, 60_000n, 1_000n);
  const eB = charged(b, 70_000n, 1_001n, 'charge_refused');
  const strangerHold = hold(account, 1n);
  const strangerId = strangerHold.requestId;
  const stranger = charged(strangerHold, 5_000n, 1_002n);
  t.same((await applyEventBatch(redis, 'chain_a', [eA, eB, stranger])).applied, ['charged', 'charge_refused', 'charged']);
  t.match(await getCallRecord(redis, a.requestId), { status: 'settled', tx: eA.txHash, priceAtomic: 60_000n });
  t.match(await getCallRecord(redis, b.requestId), { status: 'failed', tx: eB.txHash, priceAtomic: 70_000n });
  t.equal(await getCallRecord(redis, strangerId), null, 'no record made for an unknown call id');
  const w = await readWallet(redis, account, 'chain_a');
  t.same({ synced: w.synced, pending: w.pending }, { synced: 1_000_000n - 60_000n - 5_000n, pending: 0n });
  // The same events once more under a later position (a re-scan past a lost cursor): the records say they are done.
  const again = [eA, eB].map((e, i) => ({ ...e, blockNumber: 2_000n + BigInt(i) }));
  await applyEventBatch(redis, 'chain_a', again);
  t.equal((await readWallet(redis, account, 'chain_a')).pending, 0n, 'pending not lowered twice');
});

t.test('the sweeper releases expired holds and a dead instance\'s holds, and skips what was debited meanwhile', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const metrics = createMetrics();
  const log = { error() {}, warn() {} };
  const settings = { retentionMs: RETENTION, holdTtlMs: 1_000, instanceTimeoutMs: 10_000 };
  const billing = new Billing(redis, settings, metrics, log);
  const dead = new Billing(redis, settings, createMetrics(), log);
  const now = Date.now();
  const past = now - 5_000;
  const expired = hold(account, 10_000n, { owner: billing.instance, now: past, ttlMs: 1_000 });
  const debitedMeanwhile = hold(account, 20_000n, { owner: billing.instance, now: past, ttlMs: 1_000 });
  const live = hold(account, 30_000n, { owner: billing.instance });
  const ofDead = hold(account, 40_000n, { owner: dead.instance });
  for (const h of [expired, debitedMeanwhile, live, ofDead]) t.ok((await placeHold(redis, h)).placed);
  // The other instance's last heartbeat was a minute ago: it is dead.
  await dead.sweep(now - 60_000);
  await debit(debitedMeanwhile, 5_000n);

  t.equal(await billing.sweep(now), 2, 'the expired hold and the dead instance\'s');
  t.match(await getCallRecord(redis, expired.requestId), { status: 'free', released: 'expired' });
  t.match(await getCallRecord(redis, ofDead.requestId), { status: 'free', released: 'instance_died' });
  t.match(await getCallRecord(redis, live.requestId), { status: 'held', released: null }, 'a live hold stays');
  t.match(await getCallRecord(redis, debitedMeanwhile.requestId), { status: 'pending', priceAtomic: 5_000n }, 'the debit stands');
  const w = await readWallet(redis, account, 'chain_a');
  t.same({ held: w.held, pending: w.pending }, { held: 30_000n, pending: 5_000n });
  t.equal(await countOpenHolds(redis), 1, 'only the live hold is left');
  t.equal(await billing.sweep(now + 1), 0, 'the dead instance retired: nothing more to release');
  const released = (await metrics.holdsReleased.get()).values;
  t.same(Object.fromEntries(released.map((v) => [v.labels.reason, v.value])), { expired: 1, instance_died: 1 });
  await debit(live, 0n);
});

t.test('a hold whose release Redis refuses is logged and passed over: the sweep releases the rest', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const errors: string[] = [];
  const billing = new Billing(redis, { retentionMs: RETENTION, holdTtlMs: 1_000, instanceTimeoutMs: 10_000 }, createMetrics(), {
    error: (_o: object, msg: string) => errors.push(msg), warn() {},
  });
  const now = Date.now();
  const broken = hold(account, 10_000n, { owner: billing.instance, now: now - 5_000, ttlMs: 1_000 });
  const fine = hold(account, 20_000n, { owner: billing.instance, now: now - 5_000, ttlMs: 1_000 });
  for (const h of [broken, fine]) t.ok((await placeHold(redis, h)).placed);
  // A record no script can read (a bug, or a hand edit): its release fails inside Redis.
  await redis.hset(keys.call(broken.callId), 'held', 'not a number');
  t.equal(await billing.sweep(now), 1, 'the other expired hold is released');
  t.match(await getCallRecord(redis, fine.requestId), { status: 'free', released: 'expired' });
  t.match(errors, [/releasing a hold failed/]);
  t.equal(await billing.sweep(now + 1), 0, 'the next sweep passes it over again');
  t.equal(errors.length, 2, 'and logs it again');
  await redis.hset(keys.call(broken.callId), 'held', '10000');
  await debit(broken, 0n);
});

t.test('a hold its owner renews outlives its first expiry; a released hold whose call still delivered is debited late', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const metrics = createMetrics();
  const warned: string[] = [];
  const billing = new Billing(redis, { retentionMs: RETENTION, holdTtlMs: 2_000, instanceTimeoutMs: 10_000 }, metrics, { error() {}, warn: (_o, m) => warned.push(m) });
  const now = Date.now();
  const placed = await billing.hold({ requestId: newRequestId(), account, keyId: 'k', chain: 'chain_a', quote: { model: 'gamma-k3', amount: 50_000n } });
  t.ok(placed.result.placed);
  billing.track(placed.hold);
  // 1.5 s later the hold would expire within 0.5 s; the owner's heartbeat renews it for 2 s from then.
  t.equal(await billing.sweep(now + 1_500), 0);
  t.equal(await billing.sweep(now + 2_500), 0, 'renewed: not expired at its first expiry');
  t.equal((await getCallRecord(redis, placed.hold.requestId))?.status, 'held');
  // The owner stops renewing (Redis away past the TTL): another sweep releases it as expired.
  billing.untrack(placed.hold);
  t.equal(await billing.sweep(now + 10_000), 1, 'released once no one renews it');
  t.match(await getCallRecord(redis, placed.hold.requestId), { status: 'free', released: 'expired' });
  const before = await readWallet(redis, account, 'chain_a');
  t.equal(before.held, 0n);
  // The call delivered all the same: its debit charges what it delivered, once.
  const done = await billing.debit(placed.hold, { usage: makeUsage({ output_tokens: 3 }), price: 12_000n });
  t.same(done, { debited: 12_000n, capped: false, late: true });
  const again = { ...placed.hold, price: 12_000n, usageJson: '{}', retentionMs: RETENTION };
  t.same(await debitHold(redis, again), { debited: 12_000n, capped: false, late: true }, 'run again: the same answer');
  const after = await readWallet(redis, account, 'chain_a');
  t.same({ held: after.held, pending: after.pending }, { held: 0n, pending: before.pending + 12_000n }, 'pending once, held untouched');
  t.match(await getCallRecord(redis, placed.hold.requestId), { status: 'pending', late: true, priceAtomic: 12_000n });
  t.equal((await metrics.lateDebits.get()).values.find((v) => v.labels.chain === 'chain_a')?.value, 1);
  t.match(warned, [/released before its call ended/]);
});

t.test('a release whose reason no longer holds when it runs (the owner renewed, or beat) leaves the hold', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const owner = `race-${randomBytes(3).toString('hex')}`;
  const now = Date.now();
  const a = hold(account, 10_000n, { owner, now, ttlMs: 5_000 });
  t.ok((await placeHold(redis, a)).placed);
  const release = (reason: 'expired' | 'instance_died', at: number) => debitHold(redis, {
    requestId: a.requestId, callId: a.callId, account, chain: 'chain_a', owner, price: 0n, usageJson: '{}', retentionMs: RETENTION,
    release: { reason, instanceTimeoutMs: 10_000, now: at },
  });
  // The sweeper read the hold as expired, but its expiry (now + 5 s) is still ahead at the script's time.
  t.equal(await release('expired', now + 1_000), null, 'not expired yet: kept');
  // The owner beat 2 s ago: not dead, whatever the sweeper read before.
  await redis.zadd(keys.instances, now - 2_000, owner);
  t.equal(await release('instance_died', now), null, 'owner alive: kept');
  t.match(await getCallRecord(redis, a.requestId), { status: 'held', released: null });
  t.equal((await readWallet(redis, account, 'chain_a')).held, 10_000n);
  // Its heartbeat now 11 s old: released.
  t.same(await release('instance_died', now + 9_001), { debited: 0n, capped: false, late: false });
  t.match(await getCallRecord(redis, a.requestId), { status: 'free', released: 'instance_died' });
  t.equal((await readWallet(redis, account, 'chain_a')).held, 0n);
  await redis.zrem(keys.instances, owner);
});
