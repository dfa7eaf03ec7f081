// After Redis was away longer than the instance timeout, every instance's heartbeat is as stale as a dead one's. An
// instance that sweeps first must not take the others for dead and free the holds of their running calls: those calls
// would be debited late, after new holds had taken the room, and the wallet would be committed beyond its balance
// (the soak's 60 s outage saw available fall below 0). It releases nothing until it has reached Redis again for an
// instance timeout; a really dead instance's holds are released after that.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { Billing } from '../../plugins/billing/billing.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { makeUsage } from '../../pricing/index.js';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { testRedis } from '../helpers/harness.js';
import { setSyncedBalance } from '../helpers/money.js';
import { outageRelay } from '../helpers/outage.js';
import { until } from '../helpers/wait.js';
import { newRequestId } from '../../plugins/request-ids.js';

const { redis, prefix } = await testRedis(t);
const relay = await outageRelay();
// The first instance reaches Redis through the relay, which the test takes down; the other directly.
const viaRelay = connectRedis({ url: relay.url, prefix, failFast: true });
viaRelay.on('error', () => {});
t.teardown(async () => {
  relay.up();
  await closeRedis(viaRelay);
  await relay.close();
});

const TIMEOUT = 10_000;
const settings = { retentionMs: 3_600_000, holdTtlMs: 5_000, instanceTimeoutMs: TIMEOUT };
const log = { error() {}, warn() {} };

t.test(
  "after an outage no instance frees the holds of another's running calls; a dead one's go after the timeout",
  async (t) => {
    const account = `0x${randomBytes(20).toString('hex')}`;
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const first = new Billing(viaRelay, settings, createMetrics(), log);
    const other = new Billing(redis, settings, createMetrics(), log);
    const place = async (b: Billing) => {
      const { result, hold } = await b.hold({
        requestId: newRequestId(),
        account,
        keyId: 'k',
        chain: 'chain_a',
        quote: { model: 'gamma-k3', amount: 100_000n },
      });
      t.ok(result.placed);
      b.track(hold);
      return hold;
    };
    const mine = await place(first);
    const theirs = await place(other);
    const t0 = Date.now();
    await first.sweep(t0);
    await other.sweep(t0);

    // Redis away for the first instance: its sweep fails.
    relay.down();
    await until('the first instance sees Redis gone', async () => viaRelay.status !== 'ready', 10_000);
    await t.rejects(first.sweep(t0 + 1_000));
    relay.up();
    await until(
      'the first instance reaches Redis again',
      async () => (await viaRelay.ping().catch(() => null)) === 'PONG',
      10_000,
    );

    // A minute later by Redis's clock: both heartbeats and both holds are past their time, both calls still run.
    const back = t0 + 60_000;
    t.equal(await first.sweep(back), 0, 'the first sweep after the outage frees nothing');
    t.match(
      await getCallRecord(redis, theirs.requestId),
      { status: 'held', released: null },
      "the other instance's running call keeps its hold",
    );
    // The other instance beats and renews as usual; the first keeps sweeping.
    for (const at of [1_000, 4_000, 7_000, 9_500]) {
      t.equal(await first.sweep(back + at), 0);
      await other.sweep(back + at);
    }
    t.equal(await first.sweep(back + TIMEOUT), 0, 'an instance timeout later the other is alive: nothing to free');
    t.match(await getCallRecord(redis, theirs.requestId), { status: 'held' });
    t.match(await getCallRecord(redis, mine.requestId), { status: 'held' });
    t.equal((await readWallet(redis, account, 'chain_a')).held, 200_000n);

    // Now the other instance dies: its hold is freed once its heartbeat is an instance timeout old.
    other.untrack(theirs);
    t.equal(await first.sweep(back + 9_500 + TIMEOUT + 1), 1, "a dead instance's hold is freed after the timeout");
    t.match(await getCallRecord(redis, theirs.requestId), { status: 'free', released: 'instance_died' });
    t.match(await getCallRecord(redis, mine.requestId), { status: 'held' }, 'its own running call keeps its hold');
    await first.debit(mine, { usage: makeUsage({ output_tokens: 1 }), price: 1_000n });
  },
);

t.test(
  'an instance that starts after the outage frees no running call of another either: it too waits a timeout',
  async (t) => {
    const account = `0x${randomBytes(20).toString('hex')}`;
    await setSyncedBalance(redis, account, 'chain_a', 1_000_000n);
    const running = new Billing(redis, settings, createMetrics(), log);
    const { result, hold } = await running.hold({
      requestId: newRequestId(),
      account,
      keyId: 'k',
      chain: 'chain_a',
      quote: { model: 'gamma-k3', amount: 600_000n },
    });
    t.ok(result.placed);
    running.track(hold);
    const t0 = Date.now();
    await running.sweep(t0);

    // Redis was away a minute (the running instance's heartbeat and renewals lapsed); a new instance starts.
    const back = t0 + 60_000;
    const started = new Billing(redis, settings, createMetrics(), log);
    t.equal(await started.sweep(back), 0, "the new instance's first sweep frees nothing");
    t.match(await getCallRecord(redis, hold.requestId), { status: 'held', released: null }, 'the call keeps its hold');
    t.equal((await readWallet(redis, account, 'chain_a')).held, 600_000n, 'no room was freed for new holds');
    // The running instance beats and renews again as usual; an instance timeout on, the new one finds it alive.
    for (const at of [1_000, 4_000, 7_000, 9_500]) {
      t.equal(await started.sweep(back + at), 0);
      await running.sweep(back + at);
    }
    t.equal(await started.sweep(back + TIMEOUT), 0, 'nothing to free: the instance is alive');
    t.match(await getCallRecord(redis, hold.requestId), { status: 'held' });
    await running.debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 600_000n });
    t.equal((await readWallet(redis, account, 'chain_a')).available, 400_000n, 'charged once, within the balance');
  },
);
