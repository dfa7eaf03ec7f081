import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../../plugins/chains/dev-chains.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { embeddedDefault } from '../../plugins/config.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { devChainsConfig, fundOnDevChain } from '../../plugins/serve.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { countOpenHolds, countQueuedDebits, listCallRecords } from '../../plugins/billing/call-records.js';
import { closeDevChains, devChains, dropPrefix, testPrefix } from '../helpers/harness.js';
import { CLI, until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

// A gateway killed with SIGKILL under load, then restarted: every recorded debit is charged onchain exactly once,
// and no hold is left behind.

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
const dev = await devChains();
const prefix = testPrefix();
const redis = connectRedis({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix });
const dir = mkdtempSync(join(tmpdir(), 'farebox-crash-'));
let url = '';
let child: ChildProcess | undefined;

/**
 * Start `farebox serve` on a port of its own. Each start takes a new port: the killed gateway's port is free for
 * any process to take while the next one starts (other test files run alongside), and a health check answered by
 * someone else's server would send the test on against the wrong gateway.
 */
async function startGateway(): Promise<ChildProcess> {
  const port = await freePort();
  const configFile = join(dir, `farebox-${port}.json`);
  writeFileSync(
    configFile,
    JSON.stringify({
      ...embeddedDefault(sim.url),
      server: { port, host: '127.0.0.1' },
      metrics: { port: 0 },
      redis: { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix },
      chains: devChainsConfig(dev),
      billing: { instance_timeout_ms: 1_500, claim_idle_ms: 2_000, batch_wait_ms: 0 },
    }),
  );
  const env = {
    ...process.env,
    FAREBOX_CONFIG: configFile,
    FAREBOX_SIM_KEY: 'sim-key',
    [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey,
    LOG_LEVEL: 'error',
  };
  const c = spawn(process.execPath, [...CLI, 'serve'], { env, stdio: ['ignore', 'ignore', 'inherit'] });
  url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300 && c.exitCode === null; i++) {
    // Ours: farebox's health body, from a child still running; a listener that never answers cannot stall this.
    const health = (await fetch(`${url}/v1/health`, { signal: AbortSignal.timeout(2_000) }).then(
      (r) => (r.ok ? r.json() : null),
      () => null,
    )) as { status?: string; redis?: string } | null;
    if (health?.status === 'ok' && health.redis === 'ok' && c.exitCode === null) return c;
    await new Promise((r) => setTimeout(r, 100));
  }
  c.kill('SIGKILL');
  throw new Error(`gateway did not start (exit code ${c.exitCode})`);
}

/** The account's call records still held. */
async function heldRecords(account: string): Promise<number> {
  const records = await listCallRecords(redis, account, 100_000);
  return records.filter((r) => r.status === 'held').length;
}

/** What the restarted gateway still has to do, for a failure message. */
async function state(account: string): Promise<string> {
  const w = await readWallet(redis, account, 'chain_a');
  const holds = await countOpenHolds(redis);
  const queued = await countQueuedDebits(redis, 'chain_a');
  return `holds ${holds}, held ${w.held}, pending ${w.pending}, synced ${w.synced}, debits queued ${queued}`;
}

t.teardown(async () => {
  child?.kill('SIGKILL');
  await sim.close();
  await dropPrefix(redis, prefix);
  await redis.quit();
  await closeDevChains();
  rmSync(dir, { recursive: true, force: true });
});

t.test('SIGKILL under load, restart: every recorded debit charged onchain exactly once, no hold left', async (t) => {
  child = await startGateway();
  const account = (await createAccount(redis, {})).address;
  const { key } = await createKey(redis, account);
  const deposited = await fundOnDevChain(redis, devChainsConfig(dev), 'chain_a', account, 50_000_000n);

  // Load: finished calls (debits in the queue or onchain) and calls in flight when the process dies.
  const call = (i: number) =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'gamma-k3',
        stream: i % 2 === 0,
        max_tokens: 100,
        messages: [
          {
            role: 'user',
            content: `load ${i} #sim:tokens=${5 + (i % 20)} #sim:chunk_delay_ms=${i % 3 === 0 ? 100 : 0}`,
          },
        ],
      }),
    })
      .then((r) => r.text())
      .catch(() => 'died');
  const inflight: Promise<string>[] = [];
  for (let i = 0; i < 120; i++) {
    inflight.push(call(i));
    if (i % 10 === 9) await new Promise((r) => setTimeout(r, 30));
  }
  await new Promise((r) => setTimeout(r, 400));
  child.kill('SIGKILL');
  await Promise.all(inflight);
  const heldAtCrash = await countOpenHolds(redis);
  t.ok(heldAtCrash > 0, `${heldAtCrash} holds of calls that died with the process`);

  child = await startGateway();
  // The new instance releases the dead one's holds and takes over its unacknowledged debits.
  // Each phase takes seconds (the dead watcher's 10 s lease included); a stuck one fails with what is left.
  await until(
    'no hold left',
    async () => (await countOpenHolds(redis)) === 0 && (await heldRecords(account)) === 0,
    40_000,
  ).catch(async (err: Error) => Promise.reject(new Error(`${err.message}: ${await state(account)}`)));
  const w = await until(
    'every debit onchain',
    async () => {
      const x = await readWallet(redis, account, 'chain_a');
      return x.pending === 0n && x.held === 0n && (await countQueuedDebits(redis, 'chain_a')) === 0 ? x : null;
    },
    40_000,
  ).catch(async (err: Error) => Promise.reject(new Error(`${err.message}: ${await state(account)}`)));

  const records = await listCallRecords(redis, account, 100_000);
  const debited = records.filter((r) => r.priceAtomic > 0n);
  t.ok(debited.length > 10, `${debited.length} debits recorded`);
  t.ok(
    records.some((r) => r.status === 'free'),
    'calls that died unsettled went free',
  );

  const chain = createEvmChain('chain_a', devChainsConfig(dev).chain_a);
  const events = await chain.readEvents(0n, await chain.latestBlock());
  const charged = new Map<string, number>();
  let sum = 0n;
  for (const e of events) {
    if (e.kind === 'charged' && e.account.toLowerCase() === account) {
      charged.set(e.callId, (charged.get(e.callId) ?? 0) + 1);
      sum += e.amount;
    }
  }
  for (const r of debited) {
    t.equal(charged.get(callIdOf(r.call_id)), 1, `${r.call_id} charged exactly once`);
    t.equal(r.status, 'settled');
  }
  t.equal(charged.size, debited.length, 'nothing charged that was not recorded');
  t.equal(
    sum,
    debited.reduce((a, r) => a + r.priceAtomic, 0n),
    'charged amounts = recorded prices',
  );
  t.equal(await chain.balanceOf(account as `0x${string}`), deposited - sum);
  t.equal(w.synced, deposited - sum, 'synced balance = onchain');
});
