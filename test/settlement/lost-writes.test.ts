// Redis loses its last writes (it writes its log to disk every second and replicates asynchronously) after a settler
// read those calls' debits and charged them: the watcher rebuilds each lost call's record from its Charged event,
// leaves every other call's pending amount alone (never below 0), and the wallet ends as the escrow has it.
import t, { type Test } from 'tap';
import OpenAI from 'openai';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../../plugins/chains/dev-chains.js';
import type { Hex } from '../../plugins/chains/port.js';
import { getCallRecord, type CallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { ChainWatcher } from '../../plugins/settlement/chain-watcher.js';
import { startSettleProcess } from '../../plugins/settlement/settlement.js';
import { keys } from '../../plugins/store/keys.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { runCli, until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

// The gateway watches the chains but settles nothing: the charges below come from "the old primary's" settler.
const h = await startHarness({ chains: true, edit: (c) => void (c.billing = { ...c.billing, settler: false }) });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 5_000_000n);
const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const account = h.account.toLowerCase();
const chainA = createEvmChain('chain_a', h.config.chains!.chain_a, { settlerKey: DEV_KEYS.settler.privateKey });

/** A billed call through the SDK, once its debit is pending: its request id and record. */
async function call(t: Test, tokens: number): Promise<{ id: string; rec: CallRecord }> {
  const { response } = await openai.chat.completions
    .create(
      { model: 'gamma-k3', messages: [{ role: 'user', content: `hi #sim:tokens=${tokens}` }] },
      { headers: { 'x-gw-billing-chain': 'chain_a' } },
    )
    .withResponse();
  t.equal(response.headers.get('x-gw-billing-chain'), 'chain_a');
  const id = response.headers.get('x-request-id')!;
  const rec = await until(`${id} pending`, async () => {
    const r = await getCallRecord(h.redis, id);
    return r?.status === 'pending' ? r : null;
  });
  return { id, rec };
}

/** Lose a call's last writes as a failover does: its record, its place in the usage index, its debit and pending amount. */
async function lose(c: { id: string; rec: CallRecord }): Promise<void> {
  const entries = (await h.redis.xrange(keys.debits('chain_a'), '-', '+')) as [string, string[]][];
  const entry = entries.find(([, f]) => f[f.indexOf('call_id') + 1] === callIdOf(c.id));
  const m = h.redis
    .multi()
    .del(keys.call(callIdOf(c.id)))
    .zrem(keys.usageIndex(account), c.id);
  m.hincrby(keys.wallet(account, 'chain_a'), 'pending', String(-c.rec.priceAtomic));
  if (entry) m.xdel(keys.debits('chain_a'), entry[0]);
  await m.exec();
}

t.test(
  "charges of calls Redis lost: records rebuilt from the events, other calls' pending untouched, balances right",
  async (t) => {
    type Made = Awaited<ReturnType<typeof call>>;
    const calls: Made[] = [];
    for (const tokens of [40, 55, 70, 85, 100]) calls.push(await call(t, tokens));
    const lost = calls.slice(0, 3);
    const [chargedKept, uncharged] = calls.slice(3) as [Made, Made];
    const sum = (cs: Made[]) => cs.reduce((s, c) => s + c.rec.priceAtomic, 0n);
    t.equal((await readWallet(h.redis, account, 'chain_a')).pending, sum(calls));

    // A settler read all five debits from the old primary and charged four; the new primary lost three of them.
    for (const c of lost) await lose(c);
    t.equal((await readWallet(h.redis, account, 'chain_a')).pending, sum([chargedKept, uncharged]));
    const receipt = await chainA.charge(
      [...lost, chargedKept].map((c) => ({
        callId: callIdOf(c.id),
        account: account as Hex,
        amount: c.rec.priceAtomic,
      })),
    );
    t.same(
      receipt.results.map((r) => r.outcome),
      ['charged', 'charged', 'charged', 'charged'],
    );

    // The gateway's watcher applies the four Charged events (one block, one script): once the kept call is settled, all
    // are applied. Pending is read all along and never goes below 0.
    let lowest = Infinity;
    await until('the batch applied', async () => {
      lowest = Math.min(lowest, Number((await readWallet(h.redis, account, 'chain_a')).pending));
      return (await getCallRecord(h.redis, chargedKept.id))?.status === 'settled';
    });
    const settled = await Promise.all([...lost, chargedKept].map((c) => getCallRecord(h.redis, c.id)));
    for (const [i, c] of lost.entries()) {
      t.match(
        settled[i],
        {
          call_id: c.id,
          chain: 'chain_a',
          status: 'settled',
          priceAtomic: c.rec.priceAtomic,
          price: c.rec.price,
          tx: receipt.txHash,
          rebuilt: true,
          model: '',
        },
        `lost call ${i}: rebuilt from its event`,
      );
    }
    t.match(settled[3], { status: 'settled', model: 'gamma-k3', tx: receipt.txHash });
    t.notOk(settled[3]!.rebuilt, 'the call Redis kept is settled as usual');
    const w = await readWallet(h.redis, account, 'chain_a');
    t.ok(lowest >= 0, `pending never below 0 (lowest ${lowest})`);
    t.equal(w.pending, uncharged.rec.priceAtomic, "the uncharged call's pending amount untouched");
    t.match(await getCallRecord(h.redis, uncharged.id), { status: 'pending' });
    t.equal(w.synced, await chainA.balanceOf(account as Hex), 'synced = balanceOf');

    // farebox usage lists the rebuilt records.
    const usage = await runCli(['usage', '--account', account, '--json'], {
      FAREBOX_REDIS_PREFIX: h.prefix,
      FAREBOX_CONFIG: '',
    });
    t.equal(usage.code, 0, usage.stderr);
    const listed = JSON.parse(usage.stdout) as {
      call_id: string;
      status: string;
      price: string;
      rebuilt?: boolean;
      tx: string;
    }[];
    for (const c of lost)
      t.match(
        listed.find((u) => u.call_id === c.id),
        { status: 'settled', price: c.rec.price, rebuilt: true, tx: receipt.txHash },
        `${c.id} listed`,
      );

    // Settlement goes on from the new primary: the uncharged call is charged, the kept one's debit (its acknowledgement
    // lost too) is skipped by the escrow; nothing is pending, and the reconciler finds no drift.
    const settle = await startSettleProcess(
      h.config,
      { [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey },
      { log: { error() {}, warn() {} } },
    );
    t.teardown(() => settle.close());
    await until(
      'the uncharged call settled',
      async () => (await getCallRecord(h.redis, uncharged.id))?.status === 'settled',
    );
    const end = await until('nothing pending', async () => {
      const x = await readWallet(h.redis, account, 'chain_a');
      return x.pending === 0n && x.held === 0n ? x : null;
    });
    t.equal(end.synced, await chainA.balanceOf(account as Hex));
    t.equal(end.available, end.synced, 'available is the escrow balance');
    const metrics = createMetrics({ defaults: false });
    const reconciler = new ChainWatcher(
      h.redis,
      { chain_a: chainA },
      'lost-writes-test',
      { pollMs: 50, reconcileMs: 3_600_000, startBlocks: {} },
      metrics,
      { error() {}, warn() {} },
    );
    t.equal(await reconciler.reconcile('chain_a', chainA), 0);
    t.equal(await reconciler.reconcile('chain_a', chainA), 0, 'no correction: the synced balance was right');
    t.equal(
      (await metrics.drift.get()).values.reduce((s, v) => s + v.value, 0),
      0,
    );
  },
);
