// Redis goes away while calls are answering: they are answered in full, and each is charged once Redis is back, in
// order, exactly once, even past the few seconds a debit used to be retried, and even when the gateway restarts
// during the outage (a new process adopts the dead one's spool).
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { getCallRecord, type CallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import Fastify from 'fastify';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../../plugins/chains/dev-chains.js';
import farebox from '../../plugins/gateway.js';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { closeDevChains, dropPrefix, startHarness, testPrefix, type Harness } from '../helpers/harness.js';
import { outageRelay } from '../helpers/outage.js';
import { until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

const relay = await outageRelay();
const prefix = testPrefix();
const spoolDir = mkdtempSync(join(tmpdir(), 'farebox-spool-test-'));
// The test's own reads go straight to Redis, never through the relay.
const direct = connectRedis({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix });
t.teardown(async () => {
  relay.up();
  await dropPrefix(direct, prefix);
  await closeRedis(direct);
  await relay.close();
  await closeDevChains();
  rmSync(spoolDir, { recursive: true, force: true });
});

const gateway = () =>
  startHarness({
    chains: true,
    prefix,
    edit: (c) => {
      c.redis = { ...c.redis!, url: relay.url };
      c.billing = { ...c.billing, spool_dir: spoolDir, hold_grace_ms: 2_000 };
    },
  });

/**
 * Streams of `tokens` tokens 100 ms apart: each one's request id, its first event's arrival (the answer is under way),
 * and whether it ended whole.
 */
function streams(
  g: Harness,
  n: number,
  tokens: number,
): { ids: Promise<string>[]; started: Promise<void>[]; done: Promise<boolean>[] } {
  const ids: Promise<string>[] = [];
  const started: Promise<void>[] = [];
  const done: Promise<boolean>[] = [];
  for (let i = 0; i < n; i++) {
    const res = fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${g.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'gamma-k3',
        stream: true,
        messages: [{ role: 'user', content: `call ${i} #sim:tokens=${tokens} #sim:chunk_delay_ms=100` }],
      }),
    });
    ids.push(res.then((r) => r.headers.get('x-request-id')!));
    let first: () => void;
    started.push(new Promise<void>((resolve) => (first = resolve)));
    done.push(
      res.then(async (r) => {
        const decoder = new TextDecoder();
        let text = '';
        for await (const chunk of r.body!) {
          first();
          text += decoder.decode(chunk, { stream: true });
        }
        return text.includes('[DONE]');
      }),
    );
  }
  return { ids, started, done };
}

async function charged(ids: string[]): Promise<CallRecord[]> {
  return until(
    'every call debited',
    async () => {
      const records = await Promise.all(ids.map((id) => getCallRecord(direct, id)));
      return records.every((r) => r && r.status !== 'held' && r.status !== 'free' && r.priceAtomic > 0n)
        ? (records as CallRecord[])
        : null;
    },
    30_000,
  );
}

async function onchainOnce(t: Test, g: Harness, ids: string[]): Promise<void> {
  const chain = createEvmChain('chain_a', g.config.chains!.chain_a);
  await until(
    'charged onchain',
    async () => (await Promise.all(ids.map((id) => chain.callStatus(callIdOf(id))))).every((s) => s === 'charged'),
    30_000,
  );
  const events = await chain.readEvents(0n, await chain.latestBlock());
  for (const id of ids) {
    t.equal(
      events.filter((e) => e.kind === 'charged' && e.callId === callIdOf(id)).length,
      1,
      `${id} charged once onchain`,
    );
  }
}

t.test('calls answered while Redis is away for 8 s are charged once it is back, each exactly once', async (t) => {
  const g = await gateway();
  await g.fund('chain_a', 5_000_000n);
  const { ids, started, done } = streams(g, 5, 25);
  const requestIds = await Promise.all(ids);
  await Promise.all(started);
  relay.down();
  t.same(await Promise.all(done), [true, true, true, true, true], 'every answer arrived whole, Redis gone');
  await until('the debits spooled', async () => (await g.metrics.debitsSpooled.get()).values[0]?.value === 5);
  t.ok(
    readdirSync(spoolDir).some((f) => f.endsWith('.jsonl')),
    'they wait in the spool file',
  );
  // Longer than debits were ever retried before they were given up (without a spool: 5 tries over 6.2 s). The
  // outage's length is what is tested: no event can stand for it.
  await new Promise((r) => setTimeout(r, 8_000));
  relay.up();
  const records = await charged(requestIds);
  for (const r of records) t.equal(r.usage.output_tokens, 25, `${r.call_id} billed its whole answer`);
  await onchainOnce(t, g, requestIds);
  t.equal((await g.metrics.debitSpoolSize.get()).values[0]?.value, 0, 'the spool is empty');
  t.same(
    readdirSync(spoolDir).filter((f) => f.endsWith('.jsonl')),
    [],
    'and its file gone',
  );
  const w = await until(
    'nothing held or pending',
    async () => {
      const x = await readWallet(direct, g.account, 'chain_a');
      return x.held === 0n && x.pending === 0n ? x : null;
    },
    30_000,
  );
  t.equal(w.synced, 5_000_000n - records.reduce((a, r) => a + r.priceAtomic, 0n), 'the wallet paid each price once');
  await g.close();
});

t.test('a gateway restarted during the outage charges what the one before it spooled', async (t) => {
  const first = await gateway();
  await first.fund('chain_a', 5_000_000n);
  const { ids, started, done } = streams(first, 3, 15);
  const requestIds = await Promise.all(ids);
  await Promise.all(started);
  relay.down();
  t.same(await Promise.all(done), [true, true, true]);
  await until('spooled', async () => (await first.metrics.debitsSpooled.get()).values[0]?.value === 3);
  await first.app.close(); // the process stops with Redis still away: its debits stay in the file
  const left = readdirSync(spoolDir).filter((f) => f.endsWith('.jsonl'));
  t.ok(left.length > 0, 'left in the spool');
  // The next gateway starts while Redis is still away and adopts the file (as it gets ready); Redis comes back after.
  const second = Fastify({ logger: false });
  await second.register(farebox, {
    config: first.config,
    env: { FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey },
  });
  await second.ready();
  const now = readdirSync(spoolDir).filter((f) => f.endsWith('.jsonl'));
  t.ok(
    now.length > 0 && now.every((f) => !left.includes(f)),
    'adopted, Redis still away: the debits wait in its own file',
  );
  relay.up();
  const records = await charged(requestIds);
  t.equal(records.length, 3);
  await onchainOnce(t, first, requestIds);
  await second.close();
  await first.sim.close();
  await first.redis.quit();
});
