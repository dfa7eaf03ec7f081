import t from 'tap';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { Agent, request } from 'undici';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { Address, ChainsConfig } from '../plugins/chains/config.js';
import { createEvmChain } from '../plugins/chains/evm.js';
import { connectRedis } from '../plugins/store/redis.js';
import { DEV_CHAINS_KEY, V8_FLAGS, tuneHeap } from '../plugins/serve.js';
import { listUsage } from '../plugins/billing/call-records.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { formatUsd } from '../pricing/index.js';
import { dropPrefix, testPrefix } from './helpers/harness.js';
import { CLI, until } from './helpers/wait.js';
import { freePort } from './helpers/ports.js';

const prefix = testPrefix();
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const redis = connectRedis({ url: REDIS_URL, prefix });
const children: ChildProcess[] = [];
// Whatever happens to this file (a failed top-level await included), no server outlives it.
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});
t.teardown(async () => {
  // Each server gone before its keys are dropped: one still stopping could write after the drop.
  await Promise.all(
    children
      .filter((c) => c.exitCode === null && c.signalCode === null)
      .map(
        (c) =>
          new Promise((exited) => {
            c.once('exit', exited);
            c.kill('SIGKILL');
          }),
      ),
  );
  await dropPrefix(redis, prefix);
  await redis.quit();
});

// METRICS_PORT=0: other test files run gateways beside this one, and 9464 is one port.
const env = {
  ...process.env,
  FAREBOX_CONFIG: '',
  FAREBOX_REDIS_PREFIX: prefix,
  REDIS_URL,
  HOST: '127.0.0.1',
  FAREBOX_DEV_CHAIN_PORT: '0',
  METRICS_PORT: '0',
};
// npm start's own log level: the quiet start below is the default's.
delete (env as Record<string, string | undefined>).LOG_LEVEL;

/** `farebox serve` in a child process; resolves once it has printed its greeting. */
function serve(port: number): Promise<{ child: ChildProcess; stdout: string; stderr: () => string }> {
  const child = spawn(process.execPath, [...CLI, 'serve'], { env: { ...env, PORT: String(port) } });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`serve printed no greeting in 90 s:\n${stdout}\n${stderr}`)),
      90_000,
    );
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited (${code}) before its greeting:\n${stdout}\n${stderr}`));
    });
    child.stdout!.on('data', (d) => {
      stdout += d;
      // The greeting ends with the dashboard's URL (first start: the key and the curl line before it; later
      // starts: how to make a new key).
      if (/^ {2}Dashboard: [^\n]*\n/m.test(stdout)) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve({ child, stdout, stderr: () => stderr });
      }
    });
  });
}

function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** The farebox command on the server's Redis prefix. */
function farebox(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [...CLI, ...args], { env }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

async function published(): Promise<ChainsConfig> {
  return JSON.parse((await redis.get(DEV_CHAINS_KEY))!) as ChainsConfig;
}

function chat(url: string, key: string, content: string) {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', messages: [{ role: 'user', content }] }),
  });
}

const port = await freePort();
const first = await serve(port);
const url = `http://127.0.0.1:${port}`;
const head =
  /^farebox: embedded default at (\S+) \(simulated upstreams, dev chains\)\. Demo account (0x[0-9a-f]{40}), 10 USD on chain_a\./m.exec(
    first.stdout,
  );
const demo = head?.[2] as Address;
const demoKey = /^ {2}export FAREBOX_KEY=(sk_[A-Za-z0-9_-]+)$/m.exec(first.stdout)?.[1] ?? '';
const walletKey =
  /^ {2}Demo wallet key \(a well-known dev key: dev chains only, never real money\), to import in a browser wallet: (0x[0-9a-f]{64})$/m.exec(
    first.stdout,
  )?.[1] as `0x${string}` | undefined;

t.test("serve's heap tuning: flags this node's V8 knows, each set unless the operator set it", async (t) => {
  // setFlagsFromString ignores unknown flags silently: make sure this Node's V8 still has them.
  const options = await new Promise<string>((resolve, reject) =>
    execFile(process.execPath, ['--v8-options'], { maxBuffer: 16 * 2 ** 20 }, (err, out) =>
      err ? reject(err) : resolve(out),
    ),
  );
  t.match(options, /--heap-growing-percent \(/);
  t.match(options, /--allocation-site-pretenuring \(/);
  t.same(
    tuneHeap(['--heap-growing-percent=80'], ''),
    ['--no-allocation-site-pretenuring'],
    "the operator's own value wins",
  );
  t.same(
    tuneHeap(['--allocation_site_pretenuring', '--enable-source-maps'], ''),
    ['--heap-growing-percent=50'],
    'in either spelling',
  );
  t.same(
    tuneHeap([], '--max-old-space-size=512 --allocation-site-pretenuring'),
    ['--heap-growing-percent=50'],
    'or in NODE_OPTIONS',
  );
  t.same(tuneHeap(['--enable-source-maps'], ''), [...V8_FLAGS]);
});

t.test('serve prints the demo account, its key and a curl line that works as pasted', async (t) => {
  t.ok(head, first.stdout);
  t.equal(head?.[1], url, 'the URL it listens on');
  t.match(demoKey, /^sk_/);
  t.equal(await redis.get('demo:account'), demo);
  t.ok(walletKey, 'the demo wallet key printed');
  t.equal(privateKeyToAccount(walletKey!).address.toLowerCase(), demo, "the demo account is that key's address");
  // The lines from `export` to the end of the curl command, run by a shell as a user would paste them.
  const script = /^ {2}export FAREBOX_KEY=[^\n]*\n {2}curl [^\n]*\\\n[^\n]*\n/m.exec(first.stdout)?.[0];
  t.ok(script, 'export and curl lines');
  const body = await new Promise<string>((resolve, reject) =>
    execFile('bash', ['-c', script!], (err, stdout) => (err ? reject(err) : resolve(stdout))),
  );
  const completion = JSON.parse(body) as { object: string; model: string; choices: { message: { content: string } }[] };
  t.equal(completion.object, 'chat.completion');
  t.equal(completion.model, 'gamma-k3');
  t.ok(completion.choices[0].message.content.length > 0);
});

t.test('a quiet start at the default log level: the greeting is the first line, nothing on stderr', async (t) => {
  t.equal(first.stdout.indexOf('farebox: embedded default at'), 0, 'the greeting first');
  t.notMatch(first.stdout, /^\{/m, 'no log line at start (the dev escrows deploying, the listening: info)');
  t.equal(first.stderr(), '');
});

t.test('farebox fund then farebox balance on the same Redis show the deposit, equal to balanceOf', async (t) => {
  const funded = await farebox(['fund', '--account', demo, '--chain', 'chain_c', '--amount', '1.5', '--json']);
  t.equal(funded.code, 0, funded.stderr);
  t.same(JSON.parse(funded.stdout), { chain: 'chain_c', account: demo, balance: '1.500000' });
  // The curl call's debit is charged in the background: wait until chain_a has nothing pending.
  await until('curl call settled', async () => (await readWallet(redis, demo, 'chain_a')).pending === 0n);
  const r = await farebox(['balance', '--account', demo, '--json']);
  t.equal(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as { chains: Record<string, Record<string, string>> };
  const chains = await published();
  const onchainC = await createEvmChain('chain_c', chains.chain_c).balanceOf(demo);
  const onchainA = await createEvmChain('chain_a', chains.chain_a).balanceOf(demo);
  t.equal(onchainC, 1_500_000n);
  t.same(doc.chains.chain_c, {
    balance: formatUsd(onchainC),
    held: '0.000000',
    pending: '0.000000',
    available: '1.500000',
    balance_atomic: onchainC.toString(),
    held_atomic: '0',
    pending_atomic: '0',
    available_atomic: '1500000',
  });
  t.equal(doc.chains.chain_a.balance, formatUsd(onchainA), 'chain_a: 10 USD less the curl call');
  t.ok(onchainA < 10_000_000n && onchainA > 9_000_000n);
});

t.test(
  'serve prints where metrics are; they answer there, on a port of their own, and not on the API port',
  async (t) => {
    const printed = /^ {2}Metrics: (http:\/\/127\.0\.0\.1:(\d+)\/metrics) \(Prometheus\)$/m.exec(first.stdout);
    t.ok(printed, first.stdout);
    t.not(Number(printed?.[2]), port, 'a port other than the API port');
    t.match(first.stdout, /Metrics: [^\n]*\n {2}Dashboard: /, "the dashboard's URL stays last");
    const api = await fetch(`${url}/metrics`);
    await api.text();
    t.equal(api.status, 404, 'the API port does not serve /metrics');
    const res = await fetch(printed![1]);
    t.equal(res.status, 200);
    t.match(res.headers.get('content-type'), /^text\/plain/);
    const text = await res.text();
    for (const name of [
      'farebox_requests_total',
      'farebox_holds_placed_total',
      'farebox_chain_events_total',
      'farebox_settlement_batches_total',
    ]) {
      t.match(text, new RegExp(`^${name}`, 'm'), name);
    }
    t.match(text, /^farebox_requests_total\{route="chat_completions",model="gamma-k3",status="200"\} [1-9]/m);
  },
);

t.test("the dev chains answer web pages of the dashboard's origins alone", async (t) => {
  const rpc = (await published()).chain_a.rpc_url;
  const preflight = (origin: string) =>
    fetch(rpc, {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
  for (const origin of [url, `http://localhost:${port}`]) {
    const r = await preflight(origin);
    t.equal(r.status, 204, `${origin}: preflight answered`);
    t.equal(r.headers.get('access-control-allow-origin'), origin);
    await r.arrayBuffer();
  }
  const page = await preflight('http://attacker.example');
  t.equal(page.status, 403, 'another page: refused');
  t.equal(page.headers.get('access-control-allow-origin'), null);
  await page.arrayBuffer();
});

t.test(
  "serve's dev chains refuse hardhat_setCode, from the dashboard's origin too: only the printed demo wallet key signs in as the demo account",
  async (t) => {
    const chainA = (await published()).chain_a;
    const rpc = (method: string, params: unknown[]) =>
      fetch(chainA.rpc_url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', origin: url },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
      }).then((r) => r.json() as Promise<{ result?: unknown; error?: { code: number } }>);
    // Code answering every ERC-1271 isValidSignature with the magic value: the demo account would accept any signature.
    const setCode = await rpc('hardhat_setCode', [demo, '0x631626ba7e60e01b60005260206000f3']);
    t.equal(setCode.error?.code, -32601, 'refused: method not found');
    t.equal((await rpc('eth_getCode', [demo, 'latest'])).result, '0x', 'the demo account has no code');
    // The dashboard's sign-in for the demo account, its message signed by `signer` (each try a message of its own:
    // one is used up when presented).
    const board = `${url}/dashboard`;
    const signIn = async (signer: ReturnType<typeof privateKeyToAccount>) => {
      const nonce = await fetch(`${board}/auth/nonce`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json', origin: url },
        body: JSON.stringify({ address: demo, chainId: chainA.chain_id }),
      });
      t.equal(nonce.status, 200);
      const { message } = (await nonce.json()) as { message: string };
      const cookie = nonce.headers
        .getSetCookie()
        .map((c) => c.split(';')[0])
        .join('; ');
      const verify = await fetch(`${board}/auth/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json', origin: url, cookie },
        body: JSON.stringify({ message, signature: await signer.signMessage({ message }) }),
      });
      await verify.arrayBuffer();
      return {
        status: verify.status,
        sessions: verify.headers.getSetCookie().filter((c) => c.startsWith('farebox_session=')).length,
      };
    };
    // As a stranger's browser would try it.
    const stranger = await signIn(privateKeyToAccount(generatePrivateKey()));
    t.equal(stranger.status, 401, 'a signature not of the demo key signs nobody in');
    t.equal(stranger.sessions, 0, 'no session');
    // The printed key, imported in a wallet: the demo account's dashboard.
    const own = await signIn(privateKeyToAccount(walletKey!));
    t.equal(own.status, 200, 'the demo wallet key signs in');
    t.equal(own.sessions, 1, 'a session');
  },
);

t.test(
  'restart on the same Redis: account and key survive, funds re-deposited on the new chains, nothing stale',
  async (t) => {
    const oldChains = await published();
    // A default chain chosen for a balance the restart wipes: it goes back to chain_a, where the demo is refunded.
    const chosen = await farebox(['default-chain', '--account', demo, '--chain', 'chain_c']);
    t.equal(chosen.code, 0, chosen.stderr);
    // A call in flight on a keep-alive connection (as the SDKs make them) while the server stops.
    const agent = new Agent();
    const inFlight = request(`${url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      headers: { authorization: `Bearer ${demoKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gamma-k3', messages: [{ role: 'user', content: 'slow #sim:delay_ms=1500' }] }),
    });
    await until('hold placed', async () => (await redis.zcard('holds')) > 0);
    first.child.kill('SIGTERM');
    const res1 = await inFlight;
    await res1.body.text();
    t.equal(res1.statusCode, 200, 'the call in flight completes');
    // RFC 9112 9.6: a server closing the connection after a response says so; else the socket lingers until the
    // keep-alive timeout and holds the shutdown (the client hangs up here so the test does not wait for it).
    t.equal(res1.headers.connection, 'close', 'a stopping server closes keep-alive connections after their call');
    await agent.destroy();
    t.equal(await exited(first.child), 0, 'clean exit on SIGTERM');

    const port2 = await freePort();
    const second = await serve(port2);
    const url2 = `http://127.0.0.1:${port2}`;
    t.match(second.stdout, new RegExp(`Demo account ${demo}, 10 USD on chain_a\\.`), 'the same demo account');
    t.match(second.stdout, new RegExp(`A new key for it: node_modules/.bin/farebox key create --account ${demo}\\n`));
    t.match(second.stdout, `to import in a browser wallet: ${walletKey}\n`, 'the demo wallet key, again');
    t.equal(
      await redis.hget(`account:${demo}`, 'default_chain'),
      'chain_a',
      'the default chain reset with the balances',
    );
    t.notMatch(second.stdout, /FAREBOX_KEY=/, 'the old key is not shown again');

    const chains = await published();
    t.not(chains.chain_a.rpc_url, oldChains.chain_a.rpc_url, 'new dev chains published');
    for (const [n, want] of [
      ['chain_a', 10_000_000n],
      ['chain_b', 0n],
      ['chain_c', 0n],
      ['chain_d', 0n],
    ] as const) {
      const w = await readWallet(redis, demo, n);
      const onchain = await createEvmChain(n, chains[n]).balanceOf(demo);
      t.equal(onchain, want, `${n}: new chain holds ${want}`);
      t.same(
        { synced: w.synced, held: w.held, pending: w.pending, locked: w.locked },
        { synced: onchain, held: 0n, pending: 0n, locked: 0n },
        `${n}: synced rebuilt, nothing stale`,
      );
    }
    t.equal(await redis.zcard('holds'), 0, 'no holds of the old server');
    for (const r of await listUsage(redis, demo))
      t.notMatch(r.status, /^(held|pending)$/, `${r.call_id} (${r.status}) waits on no old chain`);
    t.equal(await redis.xlen('debits:chain_a'), 0, 'no debits of the old chains queued');

    const res = await chat(url2, demoKey, 'after restart');
    t.equal(res.status, 200, 'the old key still works');
    t.equal(res.headers.get('x-gw-billing-chain'), 'chain_a');
    await res.arrayBuffer();
    const settled = await until('settled on the new chain_a', async () => {
      const w = await readWallet(redis, demo, 'chain_a');
      return w.pending === 0n && w.held === 0n && w.synced < 10_000_000n ? w : null;
    });
    t.equal(
      settled.synced,
      await createEvmChain('chain_a', chains.chain_a).balanceOf(demo),
      'charged on the new chain: synced = balanceOf',
    );

    second.child.kill('SIGTERM');
    t.equal(await exited(second.child), 0);
  },
);
