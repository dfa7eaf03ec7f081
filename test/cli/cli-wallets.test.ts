import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CHAIN_NAMES, type Address } from '../../plugins/chains/config.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { embeddedDefault } from '../../plugins/config.js';
import { DEV_CHAINS_KEY } from '../../plugins/serve.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { formatUsd, publishPrices, USAGE_FIELDS } from '../../pricing/index.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { CLI, cliHere, runCli, until } from '../helpers/wait.js';

const h = await startHarness({ chains: true });
const tmp = mkdtempSync(join(tmpdir(), 'farebox-cli-'));
t.teardown(async () => {
  await h.close();
  await closeDevChains();
  rmSync(tmp, { recursive: true, force: true });
});
// What `farebox serve` does on the embedded default: publish its dev chains for the CLI.
await h.redis.set(DEV_CHAINS_KEY, JSON.stringify(h.config.chains));
const account = h.account as Address;

/** The farebox command on the harness's Redis prefix, run in this process (main(), as the process runs it). */
function farebox(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return cliHere(args, { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '', ...env });
}

/** The same as a process of its own, for what only processes show: two at once on one key, the exit status. */
function spawned(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return runCli(args, { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '', ...env });
}

/** --json output: exactly one JSON document on one line. */
function json(r: { code: number; stdout: string; stderr: string }): unknown {
  if (r.code !== 0) throw new Error(`exit ${r.code}: ${r.stderr}`);
  if (!/^[^\n]+\n$/.test(r.stdout)) throw new Error(`not one line: ${JSON.stringify(r.stdout)}`);
  return JSON.parse(r.stdout);
}

function call(content: string, headers: Record<string, string> = {}) {
  return fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'gamma-k3', max_tokens: 50, messages: [{ role: 'user', content }] }),
  });
}

const USD = /^\d+\.\d{6}$/;

t.test(
  'chains --json: the four chains with chain id, RPC URL, stablecoin, escrow and events not applied',
  async (t) => {
    const doc = json(await farebox(['chains', '--json'])) as Record<string, Record<string, unknown>>;
    t.same(Object.keys(doc), [...CHAIN_NAMES]);
    for (const n of CHAIN_NAMES) {
      const c = h.config.chains![n];
      t.same(
        doc[n],
        { chain_id: c.chain_id, rpc_url: c.rpc_url, stablecoin: c.stablecoin, escrow: c.escrow, anomalies: [] },
        n,
      );
    }
  },
);

t.test(
  'fund --chain chain_b --amount 2.5 --json -> the balance; balance --json shows it on chain_b, equal to balanceOf',
  async (t) => {
    const funded = await farebox(['fund', '--account', account, '--chain', 'chain_b', '--amount', '2.5', '--json']);
    t.equal(funded.stderr, '');
    t.same(json(funded), { chain: 'chain_b', account, balance: '2.500000' });
    t.equal(
      funded.stdout,
      `{"chain":"chain_b","account":"${account}","balance":"2.500000"}\n`,
      'fields in the documented order',
    );

    const doc = json(await farebox(['balance', '--account', account, '--json'])) as {
      account: string;
      default_chain: string;
      chains: Record<string, Record<string, string>>;
    };
    t.equal(doc.account, account);
    t.equal(doc.default_chain, 'chain_a');
    t.same(Object.keys(doc.chains), [...CHAIN_NAMES]);
    const onchain = await createEvmChain('chain_b', h.config.chains!.chain_b).balanceOf(account);
    t.same(doc.chains.chain_b, {
      balance: formatUsd(onchain),
      held: '0.000000',
      pending: '0.000000',
      available: '2.500000',
      balance_atomic: onchain.toString(),
      held_atomic: '0',
      pending_atomic: '0',
      available_atomic: '2500000',
    });
    t.equal(onchain, 2_500_000n, 'balanceOf onchain');
    for (const n of ['chain_a', 'chain_c', 'chain_d']) {
      t.same(
        doc.chains[n],
        {
          balance: '0.000000',
          held: '0.000000',
          pending: '0.000000',
          available: '0.000000',
          balance_atomic: '0',
          held_atomic: '0',
          pending_atomic: '0',
          available_atomic: '0',
        },
        `${n} empty`,
      );
    }
  },
);

t.test('default-chain --chain chain_b: a call without x-gw-billing-chain bills chain_b', async (t) => {
  const before = await call('hi');
  t.equal(before.status, 402, 'chain_a, the default, holds nothing');
  t.equal(before.headers.get('x-gw-billing-chain'), 'chain_a');
  const r = await farebox(['default-chain', '--account', account, '--chain', 'chain_b']);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stderr, '');
  const res = await call('hi again');
  t.equal(res.status, 200);
  t.equal(res.headers.get('x-gw-billing-chain'), 'chain_b');
  const rec = await getCallRecord(h.redis, res.headers.get('x-request-id')!);
  t.equal(rec?.chain, 'chain_b', 'held and billed on chain_b');
});

t.test('prices --json: the live table in the documented shape, every model of the catalog', async (t) => {
  const doc = json(await farebox(['prices', '--json'])) as Record<
    'text' | 'image' | 'video',
    Record<string, Record<string, string>>
  >;
  t.same(Object.keys(doc), ['text', 'image', 'video']);
  for (const m of embeddedDefault('http://127.0.0.1:1').models as { id: string; family: string }[]) {
    if (m.family === 'img') t.same(Object.keys(doc.image[m.id] ?? {}), ['1K', '2K', '4K'], m.id);
    else if (m.family.startsWith('vid')) t.ok(doc.video[m.id], m.id);
    else t.same(Object.keys(doc.text[m.id] ?? {}), ['input', 'output', 'cache_read'], m.id);
  }
  t.same(doc.text['alpha-sonnet-4-6'], { input: '3.00', output: '15.00', cache_read: '0.30' });
  for (const id of ['img-pro', 'img-2']) t.same(Object.keys(doc.image[id] ?? {}), ['1K', '2K', '4K'], id);
  const durations: Record<string, string[]> = {
    vidA: ['4', '8', '12'],
    vidB: ['5', '8', '12', '16', '20', '24', '30'],
    vidC: ['5', '8'],
  };
  t.ok(Object.keys(doc.video).length >= 3);
  for (const [id, clips] of Object.entries(doc.video)) t.same(Object.keys(clips), durations[id.split('-')[0]], id);
  for (const kind of Object.values(doc)) {
    for (const row of Object.values(kind)) for (const v of Object.values(row)) t.match(v, /^\d+\.\d{2,}$/);
  }
  t.same(doc, publishPrices(h.config.prices), 'the prices the gateway charges');
});

t.test('usage --json after a few calls: documented fields, statuses settle with a tx', async (t) => {
  const ids: string[] = [];
  for (const content of ['one #sim:tokens=5', 'two #sim:tokens=9', 'fails #sim:status=500']) {
    const res = await call(content);
    await res.arrayBuffer();
    ids.push(res.headers.get('x-request-id')!);
  }
  const [ok1, ok2, failed] = ids;
  await until('settled onchain', async () => {
    const s = await Promise.all(ids.map(async (id) => (await getCallRecord(h.redis, id))?.status));
    return s[0] === 'settled' && s[1] === 'settled' && s[2] === 'free';
  });
  const [usage, balance] = await Promise.all([
    farebox(['usage', '--account', account, '--json']),
    farebox(['balance', '--account', account, '--json']),
  ]);
  const records = json(usage) as Record<string, unknown>[];
  t.ok(Array.isArray(records));
  const byId = new Map(records.map((r) => [r.call_id, r]));
  t.same(
    records.slice(0, 3).map((r) => r.call_id),
    [failed, ok2, ok1],
    'newest first',
  );
  for (const r of records) {
    t.match(r, {
      call_id: /^req_/,
      model: 'gamma-k3',
      chain: /^chain_[abcd]$/,
      price: USD,
      status: /^(held|pending|settled|failed|free)$/,
    });
    t.same(Object.keys(r.usage as object).sort(), [...USAGE_FIELDS].sort(), 'every usage count');
  }
  for (const id of [ok1, ok2]) {
    const r = byId.get(id)!;
    t.equal(r.chain, 'chain_b');
    t.equal(r.status, 'settled');
    t.match(r.tx, /^0x[0-9a-f]{64}$/);
    t.ok(Number(r.price) > 0);
  }
  t.equal((byId.get(ok2)!.usage as Record<string, number>).output_tokens, 9);
  t.match(byId.get(failed), { status: 'free', price: '0.000000', tx: null });

  const w = await readWallet(h.redis, account, 'chain_b');
  const doc = json(balance) as { default_chain: string; chains: Record<string, Record<string, string>> };
  const onchain = await createEvmChain('chain_b', h.config.chains!.chain_b).balanceOf(account);
  t.equal(doc.default_chain, 'chain_b', 'the default set by default-chain');
  t.equal(w.pending, 0n);
  t.same(
    doc.chains.chain_b,
    {
      balance: formatUsd(onchain),
      held: '0.000000',
      pending: '0.000000',
      available: formatUsd(onchain),
      balance_atomic: onchain.toString(),
      held_atomic: '0',
      pending_atomic: '0',
      available_atomic: onchain.toString(),
    },
    'synced = balanceOf after the charges',
  );
  t.ok(onchain < 2_500_000n, 'the calls were charged');
});

/**
 * A JSON-RPC proxy to `target` that holds its answers to eth_getTransactionCount until `n` have been asked (or 10 s
 * passed): that many senders on one key then all sign with the same nonce, as processes that start together may.
 */
async function nonceBarrier(target: string, n: number): Promise<{ url: string; met: boolean; close(): void }> {
  const waiting: (() => void)[] = [];
  const state = { met: false };
  const release = () => {
    state.met ||= waiting.length >= n;
    for (const go of waiting.splice(0)) go();
  };
  const timer = setTimeout(release, 10_000);
  const read = async (req: IncomingMessage) => {
    let s = '';
    for await (const chunk of req) s += chunk;
    return s;
  };
  const server = createServer(
    (req, res) =>
      void (async () => {
        const body = await read(req);
        const answer = await (
          await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
        ).text();
        if ((JSON.parse(body) as { method?: string }).method === 'eth_getTransactionCount' && !state.met) {
          await new Promise<void>((go) => {
            waiting.push(go);
            if (waiting.length >= n) release();
          });
        }
        res.setHeader('content-type', 'application/json');
        res.end(answer);
      })(),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get met() {
      return state.met;
    },
    close() {
      clearTimeout(timer);
      server.close();
      server.closeAllConnections();
    },
  };
}

t.test('two farebox fund at once on one chain both succeed, though they sign with one dev key', async (t) => {
  const chains = h.config.chains!;
  const barrier = await nonceBarrier(chains.chain_c.rpc_url, 2);
  // The CLI reaches chain_c through the barrier: both commands read the minter's nonce before either sends.
  await h.redis.set(
    DEV_CHAINS_KEY,
    JSON.stringify({ ...chains, chain_c: { ...chains.chain_c, rpc_url: barrier.url } }),
  );
  t.teardown(async () => {
    barrier.close();
    await h.redis.set(DEV_CHAINS_KEY, JSON.stringify(chains));
  });
  const [x, y] = ['0x' + '5a'.repeat(20), '0x' + '5b'.repeat(20)];
  const [a, b] = await Promise.all([
    spawned(['fund', '--account', x, '--chain', 'chain_c', '--amount', '1.25', '--json']),
    spawned(['fund', '--account', y, '--chain', 'chain_c', '--amount', '0.75', '--json']),
  ]);
  t.ok(barrier.met, 'both read the same nonce');
  t.same(json(a), { chain: 'chain_c', account: x, balance: '1.250000' }, a.stderr);
  t.same(json(b), { chain: 'chain_c', account: y, balance: '0.750000' }, b.stderr);
  t.equal(a.stderr + b.stderr, '', 'no progress lines when stderr is not a terminal');
  const evm = createEvmChain('chain_c', chains.chain_c);
  t.same(
    [await evm.balanceOf(x as Address), await evm.balanceOf(y as Address)],
    [1_250_000n, 750_000n],
    'both deposited onchain',
  );
});

t.test(
  'fund with stderr on a terminal shows its steps there; stdout keeps its one JSON document',
  { skip: !existsSync('/usr/bin/script') && 'no script(1) to give the command a terminal' },
  async (t) => {
    const out = join(tmp, 'fund.json');
    const who = '0x' + '5c'.repeat(20);
    // script(1) gives the command a terminal; stdout goes to a file, so only stderr is the terminal.
    const command = `${[process.execPath, ...CLI].join(' ')} fund --account ${who} --chain chain_d --amount 3 --json > ${out}`;
    const r = await new Promise<{ code: number | null; tty: string }>((resolve) => {
      const child = spawn('script', ['-qec', command, '/dev/null'], {
        env: { ...process.env, FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' },
      });
      let tty = '';
      child.stdout.on('data', (d) => (tty += d));
      child.on('close', (code) => resolve({ code, tty }));
    });
    t.equal(r.code, 0, r.tty);
    t.match(r.tty, /\r\x1b\[2Kfarebox: chain_d: minting 3\.000000 test USD\.\.\./, 'minting');
    t.match(r.tty, new RegExp(`farebox: chain_d: depositing it for ${who}\\.\\.\\.`), 'depositing');
    t.match(
      r.tty,
      /farebox: chain_d: deposited; waiting for the gateway's watcher to see it\.\.\./,
      'waiting for the watcher',
    );
    t.match(r.tty, /\r\x1b\[2K$/, 'the line erased at the end');
    t.equal(
      readFileSync(out, 'utf8'),
      `{"chain":"chain_d","account":"${who}","balance":"3.000000"}\n`,
      'stdout: the document alone',
    );
  },
);

/** A failed command: non-zero exit, nothing on stdout, one line on stderr. */
function refused(t: Test, r: { code: number; stdout: string; stderr: string }, pattern: RegExp, what: string) {
  t.not(r.code, 0, `${what}: non-zero exit`);
  t.equal(r.stdout, '', `${what}: nothing on stdout`);
  t.match(r.stderr, /^farebox: [^\n]+\n$/, `${what}: one line on stderr`);
  t.match(r.stderr, pattern, what);
}

t.test('fund is refused on a configured real chain', async (t) => {
  const file = join(tmp, 'farebox.json');
  writeFileSync(file, readFileSync('deploy/farebox.example.json'));
  const env = { FAREBOX_CONFIG: file, REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379' };
  const [a, b] = await Promise.all(
    ['chain_a', 'chain_b'].map((chain) =>
      farebox(['fund', '--account', account, '--chain', chain, '--amount', '1', '--json'], env),
    ),
  );
  refused(t, a, /chain_a is a configured chain \(chain id 1\).*dev chains only/, 'chain_a (Ethereum)');
  refused(t, b, /chain_b is a configured chain \(chain id 8453\)/, 'chain_b (Base)');
});

t.test(
  'fund refuses bad input (amount 0, -1, 7 decimals or missing, unknown chain, bad address) with one line, nothing deposited',
  async (t) => {
    const before = await Promise.all(CHAIN_NAMES.map((n) => readWallet(h.redis, account, n)));
    const cases: [string, string[], RegExp][] = [
      ['amount 0', ['--account', account, '--chain', 'chain_b', '--amount', '0'], /--amount must be positive/],
      ['amount -1', ['--account', account, '--chain', 'chain_b', '--amount', '-1'], /--amount must be positive/],
      [
        'amount 1.1234567',
        ['--account', account, '--chain', 'chain_b', '--amount', '1.1234567'],
        /--amount .*at most 6 decimals/,
      ],
      ['no amount', ['--account', account, '--chain', 'chain_b'], /--amount is required/],
      [
        'unknown chain',
        ['--account', account, '--chain', 'chain_z', '--amount', '1'],
        /--chain must be one of chain_a, chain_b, chain_c, chain_d/,
      ],
      ['bad address', ['--account', '0x1234', '--chain', 'chain_b', '--amount', '1'], /--account must be a 0x address/],
    ];
    const results = await Promise.all(cases.map(([, args]) => farebox(['fund', ...args, '--json'])));
    cases.forEach(([what, , pattern], i) => {
      refused(t, results[i]!, pattern, what);
      t.equal(results[i]!.code, 2, `${what}: exit 2, bad input`);
    });
    // One as a process: it exits with main()'s code and prints its line.
    const bad = ['fund', ...cases[0]![1], '--json'];
    t.same(await spawned(bad), results[0], 'amount 0 as a process: the same exit code and output');
    const after = await Promise.all(CHAIN_NAMES.map((n) => readWallet(h.redis, account, n)));
    t.same(
      after.map((w) => w.synced),
      before.map((w) => w.synced),
      'nothing deposited',
    );
  },
);
