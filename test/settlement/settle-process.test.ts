import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import OpenAI from 'openai';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { embeddedDefault } from '../../plugins/config.js';
import { DEV_SETTLER_KEY_ENV, DEV_KEYS } from '../../plugins/chains/dev-chains.js';
import { DEV_CHAINS_KEY } from '../../plugins/serve.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { closeDevChains, startHarness, testPrefix } from '../helpers/harness.js';
import { outageRelay } from '../helpers/outage.js';
import { CLI, runCli, until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

// A gateway that neither settles nor watches: `farebox settle` does both beside it.
const h = await startHarness({
  chains: true,
  edit: (c) => {
    c.billing = { ...c.billing, settler: false, watcher: false };
  },
});
const settle = spawn(process.execPath, [...CLI, 'settle', '--metrics-port', '0', '--json'], {
  env: { ...process.env, FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' },
  stdio: ['ignore', 'pipe', 'pipe'],
});
let stderr = '';
settle.stderr.on('data', (d) => (stderr += d));
const exited = new Promise<number | null>((resolve) => settle.once('exit', (code) => resolve(code)));
t.teardown(async () => {
  if (settle.exitCode === null) settle.kill('SIGKILL');
  await h.close();
  await closeDevChains();
});

// What `farebox serve` does on the embedded default: publish its dev chains for the CLI.
await h.redis.set(DEV_CHAINS_KEY, JSON.stringify(h.config.chains));

const started = await new Promise<{ instance: string; metrics: string }>((resolve, reject) => {
  const lines = createInterface({ input: settle.stdout });
  lines.once('line', (line) => resolve(JSON.parse(line) as { instance: string; metrics: string }));
  void exited.then((code) => reject(new Error(`farebox settle exited ${code}: ${stderr}`)));
});

t.test('settle --json prints its instance and its metrics URL', async (t) => {
  t.match(started.instance, /^settle-.+-\d+-[0-9a-f]{6}$/);
  t.match(started.metrics, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
});

t.test('its watcher syncs a deposit, its settler charges the call onchain; the gateway does neither', async (t) => {
  // h.fund waits for the synced balance: only the settle process watches the chains.
  await h.fund('chain_a', 2_000_000n);
  const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
  const { response } = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  const id = response.headers.get('x-request-id')!;
  const rec = await until(`settled ${id}`, async () => {
    const x = await getCallRecord(h.redis, id);
    return x?.status === 'settled' ? x : null;
  });
  t.match(rec.tx ?? '', /^0x[0-9a-f]{64}$/);
  const chainA = createEvmChain('chain_a', h.config.chains!.chain_a);
  t.equal(await chainA.callStatus(callIdOf(id)), 'charged');
  const w = await until('no pending', async () => {
    const x = await readWallet(h.redis, h.account, 'chain_a');
    return x.pending === 0n && x.held === 0n ? x : null;
  });
  t.equal(w.synced, await chainA.balanceOf(h.account as `0x${string}`), 'synced = balanceOf after the charge');

  const own = await (await fetch(started.metrics)).text();
  t.match(own, /^farebox_settlement_batches_total\{chain="chain_a",result="mined"\} [1-9]/m);
  t.match(own, /^farebox_chain_events_total\{chain="chain_a",kind="deposited"\} [1-9]/m);
  const gateway = await (await fetch(h.metricsUrl)).text();
  t.notMatch(
    gateway,
    /^farebox_settlement_batches_total\{chain="chain_a",result="mined"\} [1-9]/m,
    'the gateway settled nothing',
  );
});

t.test('SIGTERM stops it cleanly', async (t) => {
  settle.kill('SIGTERM');
  t.equal(await exited, 0, stderr);
});

t.test('on a Redis where no gateway published dev chains it says so and exits non-zero', async (t) => {
  const r = await runCli(['settle'], { FAREBOX_REDIS_PREFIX: testPrefix(), FAREBOX_CONFIG: '' });
  t.not(r.code, 0);
  t.match(r.stderr, /no gateway on the embedded default is running on this Redis/);
});

/** `farebox settle` on a config file of the embedded default's models with `edit` applied, no provider keys set. */
function settleOnConfig(
  t: Test,
  args: string[],
  env: Record<string, string>,
  edit: (c: Record<string, unknown>) => void = () => {},
) {
  const dir = mkdtempSync(join(tmpdir(), 'farebox-settle-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const input = embeddedDefault('http://127.0.0.1:9');
  for (const p of Object.values(input.providers as Record<string, { key_env: string }>))
    p.key_env = 'FAREBOX_TEST_PROVIDER_KEY_NOT_SET';
  input.chains = h.config.chains;
  input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix: h.prefix };
  edit(input);
  const file = join(dir, 'farebox.json');
  writeFileSync(file, JSON.stringify(input));
  const { FAREBOX_REDIS_PREFIX: _p, ...withoutPrefix } = process.env;
  const child = spawn(process.execPath, [...CLI, 'settle', '--json', ...args], {
    env: { ...withoutPrefix, FAREBOX_CONFIG: file, [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => void (child.exitCode === null && child.kill('SIGKILL')));
  let err = '';
  child.stderr.on('data', (d) => (err += d));
  const done = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const started = new Promise<{ instance: string; metrics: string | null }>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', (line) => resolve(JSON.parse(line)));
    void done.then((code) => reject(new Error(`exited ${code}: ${err}`)));
  });
  return { child, done, started, stderr: () => err };
}

t.test("on FAREBOX_CONFIG it needs the settler keys, not the providers' keys", async (t) => {
  const p = settleOnConfig(t, [], {});
  t.same((await p.started).metrics, null, 'no metrics port asked for');
  p.child.kill('SIGTERM');
  t.equal(await p.done, 0, p.stderr());
});

t.test(
  'metrics.token_env puts its metrics behind the bearer token; the variable unset, it refuses to start',
  async (t) => {
    const withToken = (c: Record<string, unknown>) =>
      void (c.metrics = { token_env: 'FAREBOX_TEST_SETTLE_METRICS_TOKEN' });
    const p = settleOnConfig(t, ['--metrics-port', '0'], { FAREBOX_TEST_SETTLE_METRICS_TOKEN: 's3cret' }, withToken);
    const url = (await p.started).metrics!;
    t.equal((await fetch(url)).status, 401, 'no token');
    t.equal((await fetch(url, { headers: { authorization: 'Bearer wrong' } })).status, 401, 'a wrong token');
    const ok = await fetch(url, { headers: { authorization: 'Bearer s3cret' } });
    t.equal(ok.status, 200);
    t.match(await ok.text(), /^farebox_settlement_failures_total\{chain="chain_a"\} 0$/m);
    p.child.kill('SIGTERM');
    t.equal(await p.done, 0, p.stderr());

    const unset = settleOnConfig(t, ['--metrics-port', '0'], {}, withToken);
    await t.rejects(unset.started, /exited [1-9]/);
    t.match(unset.stderr(), /FAREBOX_TEST_SETTLE_METRICS_TOKEN is not set/);
  },
);

t.test(
  "Redis going away: the settle process logs it as JSON lines, never ioredis's own unhandled-error lines",
  async (t) => {
    const relay = await outageRelay();
    t.teardown(() => relay.close());
    const p = settleOnConfig(t, [], {}, (c) => void (c.redis = { ...(c.redis as object), url: relay.url }));
    await p.started;
    relay.down();
    // An outage long enough for several reconnects, then a second of them reconnecting: whatever any of its
    // connections writes meanwhile is looked at, so no one event marks the end.
    await new Promise((r) => setTimeout(r, 2_000));
    relay.up();
    await new Promise((r) => setTimeout(r, 1_000));
    p.child.kill('SIGTERM');
    await p.done;
    const lines = p
      .stderr()
      .split('\n')
      .filter((l) => l.trim() !== '');
    t.ok(lines.length > 0, 'the outage was logged');
    t.notMatch(p.stderr(), /\[ioredis\]|Unhandled error event/);
    for (const line of lines) {
      const entry = JSON.parse(line) as { level?: string; msg?: string };
      t.match(entry, { level: /^(error|warn)$/, msg: String }, line.slice(0, 100));
    }
  },
);
