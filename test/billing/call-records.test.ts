// One record per billed call carries the call from its hold to its charge: these pin its states (held, pending,
// settled, failed, free), its lifetime, what a debit run again answers, and the sweeper's releases of expired holds
// and of a dead instance's holds.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { Billing } from '../../plugins/billing/billing.js';
import type { EscrowEvent, Hex } from '../../plugins/chains/port.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { debitHold, placeHold, readWallet, type HoldInput } from '../../plugins/billing/wallets.js';
import { applyEventBatch } from '../../plugins/settlement/apply-events.js';
import {
  countOpenHolds,
  countQueuedDebits,
  getCallRecord,
  getCallRecordById,
  listCallRecords,
  listUsage,
} from '../../plugins/billing/call-records.js';
import { keys } from '../../plugins/store/keys.js';
import { makeUsage } from '../../pricing/index.js';
import { testRedis } from '../helpers/harness.js';
import { holdFor, setSyncedBalance } from '../helpers/money.js';
import { weigh, writeFirstLayout } from '../helpers/record-layouts.js';
import { callIdOf, newRequestId } from '../../plugins/request-ids.js';

const { redis, prefix } = await testRedis(t);
const RETENTION = 3_600_000;

/**
 * A sweep of `billing` well before `now`, before the test places its holds: a new instance releases nothing until it
 * has reached Redis for an instance timeout (10 s here), so its sweeps at `now` then release as an old one's would.
 */
async function heardLongAgo(billing: Billing, now: number): Promise<void> {
  t.equal(await billing.sweep(now - 60_000), 0, 'a new instance releases nothing at its first sweep');
}

function fresh() {
  return `0x${randomBytes(20).toString('hex')}`;
}

const hold = (account: string, amount: bigint, o: Partial<HoldInput> = {}): HoldInput =>
  holdFor(account, amount, {
    owner: 'records-test',
    ttlMs: 120_000,
    keyId: 'key_records',
    retentionMs: RETENTION,
    ...o,
  });

const debit = (h: HoldInput, price: bigint, owner = h.owner) =>
  debitHold(redis, {
    requestId: h.requestId,
    callId: h.callId,
    account: h.account,
    chain: h.chain,
    owner,
    price,
    usageJson: '{"output_tokens":2}',
    retentionMs: RETENTION,
  });

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

function charged(
  h: HoldInput,
  amount: bigint,
  block: bigint,
  kind: 'charged' | 'charge_refused' = 'charged',
): EscrowEvent {
  const base = {
    account: h.account as Hex,
    amount,
    callId: h.callId as Hex,
    blockNumber: block,
    logIndex: 0,
    txHash: `0x${randomBytes(32).toString('hex')}` as Hex,
  };
  return kind === 'charged' ? { kind, ...base } : { kind, ...base, balance: 0n };
}

/** Milliseconds the call record of `h` has left (its lifetime is part of what these tests pin). */
const ttlOf = (h: HoldInput) => redis.pttl(keys.call(h.callId));

t.test(
  'a hold is one record, kept past its expiry by the retention; debited, it is kept for the retention',
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const h = hold(account, 300_000n);
    const before = Date.now();
    t.ok((await placeHold(redis, h)).placed);
    t.same(await keysOf(h), [keys.call(h.callId)], 'the call record is the only key of its own');
    const rec = (await getCallRecord(redis, h.requestId))!;
    t.match(rec, {
      call_id: h.requestId,
      chain: 'chain_a',
      held: 300_000n,
      owner: 'records-test',
      priceAtomic: 0n,
      status: 'held',
    });
    t.ok(
      rec.expires! >= before + 120_000 - 1_000 && rec.expires! <= Date.now() + 120_000 + 1_000,
      "expires a TTL after Redis's now",
    );
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
    t.match(
      await listUsage(redis, account),
      [{ call_id: h.requestId, status: 'pending', price: '0.120000', chain: 'chain_a' }],
      'listed as a usage record',
    );
  },
);

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

  t.same(
    await debit(debited, 50_000n),
    { debited: 50_000n, capped: false, late: false },
    'the debit, as the first run answered',
  );
  t.same(
    await debit(debited, 0n),
    { debited: 50_000n, capped: false, late: false },
    'a release after the debit answers the debit',
  );
  t.equal(await debit(free, 0n), null, 'released before: nothing to debit');
  t.equal(await debit(free, 7n), null, "and never debited later: its own release was no sweeper's");
  t.same(await readWallet(redis, account, 'chain_a'), before, 'nothing moved');
  t.equal(await countQueuedDebits(redis, 'chain_a'), queued, 'nothing queued');
  t.equal((await getCallRecord(redis, free.requestId))?.status, 'free');

  const over = hold(account, 30_000n);
  await placeHold(redis, over);
  t.same(
    await debit(over, 45_000n),
    { debited: 30_000n, capped: true, late: false },
    'a price above the hold is cut to it',
  );
  t.same(
    await debit(over, 45_000n),
    { debited: 30_000n, capped: true, late: false },
    'and run again, answers the cut again',
  );

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
    t.same(await debitHold(redis, { ...h, price: 10n, usageJson: '{}', retentionMs }), {
      debited: 10n,
      capped: false,
      late: false,
    });
    t.ok((await ttlOf(h)) > retentionMs - 60_000);
  });
}

t.test(
  "the watcher's events settle or fail the record once; an event of no record rebuilds it and moves synced, no one's pending",
  async (t) => {
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
    t.same((await applyEventBatch(redis, 'chain_a', [eA, eB, stranger])).applied, [
      'charged',
      'charge_refused',
      'charged',
    ]);
    t.match(await getCallRecord(redis, a.requestId), { status: 'settled', tx: eA.txHash, priceAtomic: 60_000n });
    t.match(await getCallRecord(redis, b.requestId), { status: 'failed', tx: eB.txHash, priceAtomic: 70_000n });
    t.match(
      await getCallRecord(redis, strangerId),
      { status: 'settled', priceAtomic: 5_000n, tx: stranger.txHash, rebuilt: true },
      'rebuilt from its event',
    );
    const w = await readWallet(redis, account, 'chain_a');
    t.same({ synced: w.synced, pending: w.pending }, { synced: 1_000_000n - 60_000n - 5_000n, pending: 0n });
    // The same events once more under a later position (a re-scan past a lost cursor): the records say they are done.
    const again = [eA, eB].map((e, i) => ({ ...e, blockNumber: 2_000n + BigInt(i) }));
    await applyEventBatch(redis, 'chain_a', again);
    t.equal((await readWallet(redis, account, 'chain_a')).pending, 0n, 'pending not lowered twice');
  },
);

t.test(
  "the sweeper releases expired holds and a dead instance's holds, and skips what was debited meanwhile",
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const metrics = createMetrics();
    const log = { error() {}, warn() {} };
    const settings = { retentionMs: RETENTION, holdTtlMs: 1_000, instanceTimeoutMs: 10_000 };
    const billing = new Billing(redis, settings, metrics, log);
    const dead = new Billing(redis, settings, createMetrics(), log);
    const now = Date.now();
    await heardLongAgo(billing, now);
    const past = now - 5_000;
    const expired = hold(account, 10_000n, { owner: billing.instance, now: past, ttlMs: 1_000 });
    const debitedMeanwhile = hold(account, 20_000n, { owner: billing.instance, now: past, ttlMs: 1_000 });
    const live = hold(account, 30_000n, { owner: billing.instance });
    const ofDead = hold(account, 40_000n, { owner: dead.instance });
    for (const h of [expired, debitedMeanwhile, live, ofDead]) t.ok((await placeHold(redis, h)).placed);
    // The other instance's last heartbeat was a minute ago: it is dead.
    await dead.sweep(now - 60_000);
    await debit(debitedMeanwhile, 5_000n);

    t.equal(await billing.sweep(now), 2, "the expired hold and the dead instance's");
    t.match(await getCallRecord(redis, expired.requestId), { status: 'free', released: 'expired' });
    t.match(await getCallRecord(redis, ofDead.requestId), { status: 'free', released: 'instance_died' });
    t.match(await getCallRecord(redis, live.requestId), { status: 'held', released: null }, 'a live hold stays');
    t.match(
      await getCallRecord(redis, debitedMeanwhile.requestId),
      { status: 'pending', priceAtomic: 5_000n },
      'the debit stands',
    );
    const w = await readWallet(redis, account, 'chain_a');
    t.same({ held: w.held, pending: w.pending }, { held: 30_000n, pending: 5_000n });
    t.equal(await countOpenHolds(redis), 1, 'only the live hold is left');
    t.equal(await billing.sweep(now + 1), 0, 'the dead instance retired: nothing more to release');
    const released = (await metrics.holdsReleased.get()).values;
    t.same(Object.fromEntries(released.map((v) => [v.labels.reason, v.value])), { expired: 1, instance_died: 1 });
    await debit(live, 0n);
  },
);

t.test('a hold whose release Redis refuses is logged and passed over: the sweep releases the rest', async (t) => {
  const account = fresh();
  await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
  const errors: string[] = [];
  const billing = new Billing(
    redis,
    { retentionMs: RETENTION, holdTtlMs: 1_000, instanceTimeoutMs: 10_000 },
    createMetrics(),
    {
      error: (_o: object, msg: string) => errors.push(msg),
      warn() {},
    },
  );
  const now = Date.now();
  await heardLongAgo(billing, now);
  const broken = hold(account, 10_000n, { owner: billing.instance, now: now - 5_000, ttlMs: 1_000 });
  const fine = hold(account, 20_000n, { owner: billing.instance, now: now - 5_000, ttlMs: 1_000 });
  for (const h of [broken, fine]) t.ok((await placeHold(redis, h)).placed);
  // A record no script can read (a bug, or a hand edit): its release fails inside Redis.
  await redis.hset(keys.call(broken.callId), 'h', 'not a number');
  t.equal(await billing.sweep(now), 1, 'the other expired hold is released');
  t.match(await getCallRecord(redis, fine.requestId), { status: 'free', released: 'expired' });
  t.match(errors, [/releasing a hold failed/]);
  t.equal(await billing.sweep(now + 1), 0, 'the next sweep passes it over again');
  t.equal(errors.length, 2, 'and logs it again');
  await redis.hset(keys.call(broken.callId), 'h', '10000');
  await debit(broken, 0n);
});

t.test(
  'a hold its owner renews outlives its first expiry; a released hold whose call still delivered is debited late',
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const metrics = createMetrics();
    const warned: string[] = [];
    const billing = new Billing(
      redis,
      { retentionMs: RETENTION, holdTtlMs: 2_000, instanceTimeoutMs: 10_000 },
      metrics,
      { error() {}, warn: (_o, m) => warned.push(m) },
    );
    const now = Date.now();
    await heardLongAgo(billing, now);
    const placed = await billing.hold({
      requestId: newRequestId(),
      account,
      keyId: 'k',
      chain: 'chain_a',
      quote: { model: 'gamma-k3', amount: 50_000n },
    });
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
    t.same(
      await debitHold(redis, again),
      { debited: 12_000n, capped: false, late: true },
      'run again: the same answer',
    );
    const after = await readWallet(redis, account, 'chain_a');
    t.same(
      { held: after.held, pending: after.pending },
      { held: 0n, pending: before.pending + 12_000n },
      'pending once, held untouched',
    );
    t.match(await getCallRecord(redis, placed.hold.requestId), { status: 'pending', late: true, priceAtomic: 12_000n });
    t.equal((await metrics.lateDebits.get()).values.find((v) => v.labels.chain === 'chain_a')?.value, 1);
    t.match(warned, [/released before its call ended/]);
  },
);

t.test(
  'a release whose reason no longer holds when it runs (the owner renewed, or beat) leaves the hold',
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const owner = `race-${randomBytes(3).toString('hex')}`;
    const now = Date.now();
    const a = hold(account, 10_000n, { owner, now, ttlMs: 5_000 });
    t.ok((await placeHold(redis, a)).placed);
    const release = (reason: 'expired' | 'instance_died', at: number) =>
      debitHold(redis, {
        requestId: a.requestId,
        callId: a.callId,
        account,
        chain: 'chain_a',
        owner,
        price: 0n,
        usageJson: '{}',
        retentionMs: RETENTION,
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
  },
);

// The compact layout (call-records.ts): a settled record is one listpack, and a record the scripts before it wrote
// (the first layout, test/helpers/record-layouts.ts) reads and moves as the same call would in the new one.
const RECORD_BOUND = 400; // bytes of MEMORY USAGE, key included (under this file's 26-character key prefix)
const USAGE_JSON = JSON.stringify(makeUsage({ input_tokens: 1_234, output_tokens: 567, cache_read_tokens: 8_901 }));

/** The record's field names, sorted. */
const fieldsOf = async (h: HoldInput) => (await redis.hkeys(keys.call(h.callId))).sort();

t.test(
  `a settled call's record is one listpack under ${RECORD_BOUND} bytes, with only what its readers show and its money`,
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const h = hold(account, 300_000n, {
      model: 'alpha-sonnet-4-6',
      keyId: 'key_5ff2f2d1cef982e2',
      owner: 'gw-host-1234-abcdef',
    });
    await placeHold(redis, h);
    t.same(
      await fieldsOf(h),
      ['a', 'c', 'e', 'h', 'k', 'ks', 'm', 'o', 'p', 's', 't'],
      "held: the hold, its owner and expiry, and that the key's spend counts it",
    );
    await debitHold(redis, { ...h, price: 12_345n, usageJson: USAGE_JSON });
    t.same(
      await fieldsOf(h),
      ['a', 'c', 'cr', 'h', 'in', 'k', 'm', 'out', 'p', 's', 't'],
      'pending: no owner or expiry; counts of 0 not kept',
    );
    const e = charged(h, 12_345n, 5_000n);
    await applyEventBatch(redis, 'chain_a', [e]);
    t.same(
      await fieldsOf(h),
      ['c', 'cr', 'h', 'in', 'k', 'm', 'out', 'p', 's', 't', 'x'],
      'settled: no account either; the tx',
    );
    const w = await weigh(redis, keys.call(h.callId));
    t.equal(w.encoding, 'listpack');
    t.ok(w.bytes <= RECORD_BOUND, `${w.bytes} bytes`);
    t.match(await getCallRecord(redis, h.requestId), {
      call_id: h.requestId,
      status: 'settled',
      tx: e.txHash,
      priceAtomic: 12_345n,
      held: 300_000n,
      owner: '',
      expires: null,
      usage: { input_tokens: 1_234, output_tokens: 567, cache_read_tokens: 8_901, cache_write_5m_tokens: 0, images: 0 },
    });
  },
);

/** Readers' answers for one call, its id left out (the two layouts' twins have two ids). */
async function readAll(h: HoldInput) {
  const byRequest = await getCallRecord(redis, h.requestId);
  const byId = await getCallRecordById(redis, h.callId);
  const listed = (await listCallRecords(redis, h.account, 1_000)).find((r) => r.call_id === h.requestId);
  const usage = (await listUsage(redis, h.account, 1_000)).find((r) => r.call_id === h.requestId);
  const drop = <T extends { call_id: string }>(r: T | null | undefined) => (r ? { ...r, call_id: 'the id' } : r);
  return {
    byRequest: drop(byRequest),
    byId: drop(byId),
    listed: drop(listed),
    usage: drop(usage),
    ids: [byRequest?.call_id, byId?.call_id, listed?.call_id, usage?.call_id],
  };
}

t.test(
  'a record of the first layout reads as the same call in the compact layout, in every state and through every reader',
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 10_000_000n);
    const now = Date.now() - 60_000;
    const tx = `0x${randomBytes(32).toString('hex')}`;
    const cases: {
      name: string;
      requestId?: string;
      owner?: string;
      price?: bigint;
      usage?: object;
      size?: string;
      release?: boolean;
      event?: 'charged' | 'charge_refused';
    }[] = [
      { name: 'held' },
      { name: 'pending', price: 12_345n, usage: { input_tokens: 1_234, output_tokens: 567, cache_read_tokens: 8_901 } },
      { name: 'settled', price: 12_345n, usage: { output_tokens: 9, cache_write_1h_tokens: 4_096 }, event: 'charged' },
      { name: 'failed', price: 20_000n, usage: { input_tokens: 3 }, event: 'charge_refused' },
      { name: 'capped', price: 400_000n, usage: { output_tokens: 100_000 } },
      { name: 'an image', price: 40_000n, usage: { images: 1 }, size: '1K' },
      {
        name: 'a video (its job owns the hold, and is kept)',
        owner: `job:video_${randomBytes(16).toString('hex')}`,
        price: 90_000n,
        usage: { video_seconds: 8 },
      },
      { name: 'free: released', release: true },
      {
        name: "a request id not the gateway's",
        requestId: `client-${randomBytes(4).toString('hex')}`,
        price: 7n,
        usage: { output_tokens: 1 },
      },
    ];
    for (const [i, c] of cases.entries()) {
      const compact = hold(account, 300_000n, {
        now: now + i,
        ttlMs: 1_000,
        owner: c.owner ?? 'gw-1',
        ...(c.requestId ? { requestId: c.requestId, callId: callIdOf(c.requestId) } : {}),
      });
      t.ok((await placeHold(redis, compact)).placed);
      const usage = makeUsage(c.usage ?? {});
      const usageJson = JSON.stringify(c.size === undefined ? usage : { ...usage, size: c.size });
      let price = 0n;
      if (c.release) {
        await debitHold(redis, {
          ...compact,
          price: 0n,
          usageJson: JSON.stringify(makeUsage({})),
          release: { reason: 'expired', instanceTimeoutMs: 10_000, now: now + 5_000 },
        });
      } else if (c.price !== undefined) {
        price = (await debitHold(redis, { ...compact, price: c.price, usageJson }))!.debited;
      }
      if (c.event)
        await applyEventBatch(redis, 'chain_a', [
          { ...charged(compact, price, 10_000n + BigInt(i), c.event), txHash: tx as Hex },
        ]);
      t.equal((await weigh(redis, keys.call(compact.callId))).encoding, 'listpack', `${c.name}: compact`);

      // Its twin as the first layout's scripts left it, from the same inputs.
      const twinId = c.requestId ? `${c.requestId}-first` : newRequestId();
      const twin = { ...compact, requestId: twinId, callId: callIdOf(twinId) };
      const status = c.release
        ? 'free'
        : c.event
          ? c.event === 'charged'
            ? 'settled'
            : 'failed'
          : c.price !== undefined
            ? 'pending'
            : 'held';
      await writeFirstLayout(
        redis,
        {
          requestId: twinId,
          account,
          keyId: compact.keyId,
          model: compact.model,
          chain: 'chain_a',
          held: 300_000n,
          owner: compact.owner,
          time: now + i,
          expires: now + i + 1_000,
          status,
          price,
          ...(c.price !== undefined || c.release ? { usage: c.usage ?? {} } : {}),
          ...(c.size ? { size: c.size } : {}),
          ...(c.event ? { tx } : {}),
          ...(price < (c.price ?? 0n) ? { capped: true } : {}),
          ...(c.release ? { released: 'expired' } : {}),
        },
        RETENTION,
      );

      const [a, b] = [await readAll(compact), await readAll(twin)];
      t.same(
        a.ids,
        [compact.requestId, compact.requestId, compact.requestId, compact.requestId],
        `${c.name}: every reader names the call`,
      );
      t.same(b.ids, [twinId, twinId, twinId, twinId]);
      t.ok(a.byRequest && a.listed && a.usage, `${c.name}: read`);
      t.same({ ...a, ids: null }, { ...b, ids: null }, `${c.name}: the same record`);
      t.equal(
        a.byRequest?.owner,
        status === 'held' || c.owner ? compact.owner : '',
        `${c.name}: the owner while held, or a job's`,
      );
      if (status === 'held') await debit(compact, 0n); // no sweep of a later test finds it expired
    }
  },
);

t.test(
  'records of the first layout move on after an upgrade: a hold is debited (then compact), settled, released; a pending debit settles',
  async (t) => {
    const account = fresh();
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const metrics = createMetrics();
    const billing = new Billing(
      redis,
      { retentionMs: RETENTION, holdTtlMs: 1_000, instanceTimeoutMs: 10_000 },
      metrics,
      { error() {}, warn() {} },
    );
    const now = Date.now();
    await heardLongAgo(billing, now);
    /** A call the first layout's scripts left in `status`, with the wallet's amounts and indexes as they moved them. */
    const before = async (status: 'held' | 'pending', amount: bigint, o: Partial<HoldInput> = {}) => {
      const h = hold(account, amount, o);
      await writeFirstLayout(
        redis,
        {
          requestId: h.requestId,
          account,
          keyId: h.keyId,
          model: h.model,
          chain: 'chain_a',
          held: amount,
          owner: h.owner,
          time: now - 10_000,
          expires: now - 10_000 + h.ttlMs,
          status,
          ...(status === 'pending' ? { price: amount / 2n, usage: { output_tokens: 5 } } : {}),
        },
        RETENTION,
      );
      if (status === 'held') {
        await redis
          .multi()
          .hincrby(keys.wallet(account, 'chain_a'), 'held', amount.toString())
          .zadd(keys.holds, now - 10_000 + h.ttlMs, h.requestId)
          .sadd(keys.ownerHolds(h.owner), h.requestId)
          .exec();
      } else {
        await redis.hincrby(keys.wallet(account, 'chain_a'), 'pending', (amount / 2n).toString());
      }
      return h;
    };
    const debited = await before('held', 100_000n, { ttlMs: 120_000 });
    const pending = await before('pending', 60_000n);
    const expired = await before('held', 40_000n, { owner: billing.instance, ttlMs: 1_000 });

    t.match(await placeHold(redis, debited), { placed: false, duplicate: true }, 'its id is taken: no second hold');
    t.same(await debitHold(redis, { ...debited, price: 30_000n, usageJson: USAGE_JSON }), {
      debited: 30_000n,
      capped: false,
      late: false,
    });
    t.equal(
      (await weigh(redis, keys.call(debited.callId))).encoding,
      'listpack',
      'debited, the record is rewritten compact',
    );
    t.ok((await redis.pttl(keys.call(debited.callId))) > RETENTION - 60_000, 'kept for the retention');
    t.match(await getCallRecord(redis, debited.requestId), {
      status: 'pending',
      priceAtomic: 30_000n,
      held: 100_000n,
      model: 'gamma-k3',
      key_id: 'key_records',
      usage: { input_tokens: 1_234 },
    });
    t.same(
      await debitHold(redis, { ...debited, price: 30_000n, usageJson: USAGE_JSON }),
      { debited: 30_000n, capped: false, late: false },
      'run again: the same answer',
    );

    t.equal(await billing.sweep(now), 1, 'the sweeper releases an expired hold of the first layout');
    t.match(await getCallRecord(redis, expired.requestId), { status: 'free', released: 'expired', priceAtomic: 0n });

    const events = [charged(debited, 30_000n, 20_000n), charged(pending, 30_000n, 20_001n)];
    t.same((await applyEventBatch(redis, 'chain_a', events)).unmatched, [], 'both calls found');
    t.match(await getCallRecord(redis, debited.requestId), { status: 'settled', tx: events[0].txHash });
    t.match(await getCallRecord(redis, pending.requestId), {
      status: 'settled',
      tx: events[1].txHash,
      priceAtomic: 30_000n,
      usage: { output_tokens: 5 },
    });
    const w = await readWallet(redis, account, 'chain_a');
    t.same(
      { held: w.held, pending: w.pending, synced: w.synced },
      { held: 0n, pending: 0n, synced: 1_000_000n - 60_000n },
    );
  },
);
