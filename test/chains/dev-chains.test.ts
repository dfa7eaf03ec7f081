import t from 'tap';
import { execFile } from 'node:child_process';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { createPublicClient, createWalletClient, encodeFunctionData, http } from 'viem';
import { mnemonicToAccount, privateKeyToAccount } from 'viem/accounts';
import { deployEscrow } from '../../deploy/deploy-escrow.js';
import { escrowAbi } from '../../plugins/chains/abi.js';
import { CHAIN_NAMES, type Address } from '../../plugins/chains/config.js';
import { DEV_CHAIN_IDS, DEV_KEYS, startDevChains } from '../../plugins/chains/dev-chains.js';
import { mintAndDeposit } from '../../plugins/chains/dev-fund.js';
import { until } from '../helpers/wait.js';

const t0 = performance.now();
const dc = await startDevChains({ basePort: 0 });
t.comment(`four dev chains started and deployed in ${Math.round(performance.now() - t0)} ms`);
t.teardown(() => dc.close());

async function rpc(url: string, body: unknown): Promise<{ status: number; json: unknown }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

t.test('four chains with distinct ids, the same contract addresses, answering JSON-RPC', async (t) => {
  t.same(Object.keys(dc.chains), [...CHAIN_NAMES]);
  for (const name of CHAIN_NAMES) {
    const c = dc.chains[name];
    t.equal(c.chain_id, DEV_CHAIN_IDS[name]);
    const pub = createPublicClient({ transport: http(c.rpc_url) });
    t.equal(await pub.getChainId(), DEV_CHAIN_IDS[name], `${name} serves its chain id`);
    t.ok((await pub.getCode({ address: c.escrow }))?.length, `${name} escrow deployed`);
    t.equal(c.stablecoin, dc.chains.chain_a.stablecoin, 'same deployer and nonce -> same token address');
    t.equal(c.escrow, dc.chains.chain_a.escrow);
    t.equal(c.settler_key_env, 'FAREBOX_DEV_SETTLER_KEY');
  }
  t.same(new Set(Object.values(DEV_CHAIN_IDS)).size, 4);
});

t.test('dev keys are the well-known test mnemonic accounts #0..#7', async (t) => {
  const all = [DEV_KEYS.deployer, DEV_KEYS.settler, DEV_KEYS.treasury, ...DEV_KEYS.callers];
  all.forEach((k, i) => {
    const a = mnemonicToAccount('test test test test test test test test test test test junk', { addressIndex: i });
    t.equal(k.address, a.address, `#${i} address`);
    t.equal(`0x${Buffer.from(a.getHdKey().privateKey!).toString('hex')}`, k.privateKey, `#${i} key`);
  });
});

t.test('chains listen on basePort + 0..3', async (t) => {
  // Find four free consecutive ports near a random base, below Linux's ephemeral range (32768 up): the ports other
  // tests and a gateway beside the suite are given never land there between the check and the start. 8545-8548 (a
  // gateway's own dev chains) are not in 20000..31999 either.
  const base = 20_000 + Math.floor(Math.random() * 12_000);
  const free = await Promise.all([0, 1, 2, 3].map((i) => portFree(base + i)));
  if (free.includes(false)) {
    t.comment(`ports ${base}..${base + 3} taken; not tested this run`);
    return;
  }
  const dc2 = await startDevChains({ basePort: base });
  try {
    t.same(
      CHAIN_NAMES.map((n) => dc2.chains[n].rpc_url),
      [0, 1, 2, 3].map((i) => `http://127.0.0.1:${base + i}`),
    );
  } finally {
    await dc2.close();
  }
  t.ok(await portFree(base), 'port released on close');

  // A taken port fails the start, and the chains that did start are closed again.
  const blocker = createServer();
  await new Promise<void>((r) => blocker.listen(base + 2, '127.0.0.1', () => r()));
  try {
    await t.rejects(startDevChains({ basePort: base }), { code: 'EADDRINUSE' });
  } finally {
    await new Promise((r) => blocker.close(r));
  }
  t.same(await Promise.all([0, 1, 3].map((i) => portFree(base + i))), [true, true, true], 'no server left behind');
});

t.test('JSON-RPC over HTTP: batches, geth-style reverts, bad requests', async (t) => {
  const url = dc.chains.chain_a.rpc_url;
  const batch = await rpc(url, [
    { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] },
    { jsonrpc: '2.0', id: 'b', method: 'eth_blockNumber', params: [] },
  ]);
  t.match(batch.json, [
    { jsonrpc: '2.0', id: 1, result: '0x1de2a29' },
    { jsonrpc: '2.0', id: 'b', result: /^0x/ },
  ]);
  // The caller's id comes back as sent (any JSON value; none is null), and the answer has no other members.
  t.same((await rpc(url, { jsonrpc: '2.0', id: { n: [1] }, method: 'eth_chainId' })).json, {
    jsonrpc: '2.0',
    id: { n: [1] },
    result: '0x1de2a29',
  });
  t.same((await rpc(url, { jsonrpc: '2.0', method: 'eth_chainId' })).json, {
    jsonrpc: '2.0',
    id: null,
    result: '0x1de2a29',
  });
  const block = await rpc(url, { jsonrpc: '2.0', id: 3, method: 'eth_getBlockByNumber', params: ['0x1', true] });
  t.match(block.json, { jsonrpc: '2.0', id: 3, result: { number: '0x1', transactions: [{ blockNumber: '0x1' }] } });
  // chargeBatch from a non-settler: code 3 + the custom error's data, so clients can decode it.
  const data = encodeFunctionData({ abi: escrowAbi, functionName: 'chargeBatch', args: [[], [], []] });
  const call = await rpc(url, {
    jsonrpc: '2.0',
    id: 9,
    method: 'eth_call',
    params: [{ from: DEV_KEYS.callers[0].address, to: dc.chains.chain_a.escrow, data }, 'latest'],
  });
  t.match(
    call.json,
    { id: 9, error: { code: 3, message: 'execution reverted', data: /^0xf604cfe7/ } },
    'NotSettler selector',
  );
  t.match((await rpc(url, { jsonrpc: '2.0', id: 2, method: 'no_such_method' })).json, {
    id: 2,
    error: { code: Number },
  });
  const bad = await fetch(url, { method: 'POST', body: '{not json' });
  t.equal(bad.status, 400);
  t.match(await bad.json(), { error: { code: -32700 } });
  t.equal((await fetch(url)).status, 405, 'GET is not JSON-RPC');
});

t.test(
  'CORS only for the allowed origins (the local dashboard); any other web page is refused, preflight or not',
  async (t) => {
    const url = dc.chains.chain_b.rpc_url;
    const chainId = { jsonrpc: '2.0', id: 1, method: 'eth_chainId' };
    const post = (headers: Record<string, string>, body: unknown = chainId) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const preflight = (origin: string) =>
      fetch(url, {
        method: 'OPTIONS',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
      });
    const cors = (r: Response) => [...r.headers.keys()].filter((k) => k.startsWith('access-control-'));

    const plain = await post({});
    t.equal(plain.status, 200, 'no Origin (node, the CLI, curl): answered');
    t.same(cors(plain), [], 'and no CORS headers');
    await plain.arrayBuffer();

    const page = 'https://evil.example';
    const refusedPreflight = await preflight(page);
    t.equal(refusedPreflight.status, 403, 'a preflight from another origin is refused');
    t.same(cors(refusedPreflight), [], 'without CORS headers');
    await refusedPreflight.arrayBuffer();
    // A simple request (text/plain, no preflight) from a page: refused before it reaches the chain.
    const result = async (method: string, params: unknown[] = []) =>
      ((await (await post({}, { jsonrpc: '2.0', id: 3, method, params })).json()) as { result: string }).result;
    const head = () => result('eth_blockNumber');
    const before = await head();
    // A transaction signed with a public dev key, as any page could sign one.
    const signer = privateKeyToAccount(DEV_KEYS.callers[0].privateKey);
    const raw = await signer.signTransaction({
      chainId: dc.chains.chain_b.chain_id,
      nonce: Number(await result('eth_getTransactionCount', [signer.address, 'latest'])),
      to: DEV_KEYS.callers[1].address,
      value: 1n,
      gas: 21_000n,
      maxFeePerGas: 10_000_000_000n,
      maxPriorityFeePerGas: 1_000_000_000n,
    });
    const tx = { jsonrpc: '2.0', id: 2, method: 'eth_sendRawTransaction', params: [raw] };
    const simple = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', origin: page },
      body: JSON.stringify(tx),
    });
    t.equal(simple.status, 403, 'a request from another origin is refused');
    t.same(cors(simple), [], 'without CORS headers');
    await simple.arrayBuffer();
    t.equal(await head(), before, 'the chain did not move');
    const mined = await post({}, tx);
    await mined.arrayBuffer();
    t.not(await head(), before, 'as it does for a request with no Origin');
    for (const origin of ['null', 'http://127.0.0.1:1', 'http://localhost:8545']) {
      const r = await post({ origin });
      t.equal(r.status, 403, `${origin}: refused while no origin is allowed`);
      await r.arrayBuffer();
    }

    const board = 'http://127.0.0.1:8080';
    dc.allowOrigins([board, 'http://localhost:8080']);
    t.teardown(() => dc.allowOrigins([]));
    const ok = await preflight(board);
    t.equal(ok.status, 204, 'the dashboard origin: preflight answered');
    t.equal(ok.headers.get('access-control-allow-origin'), board, 'its origin, not *');
    t.match(ok.headers.get('access-control-allow-methods'), /POST/);
    t.match(ok.headers.get('access-control-allow-headers'), /content-type/);
    t.match(ok.headers.get('vary'), /origin/i);
    const call = await post({ origin: 'http://localhost:8080' });
    t.equal(call.status, 200);
    t.equal(call.headers.get('access-control-allow-origin'), 'http://localhost:8080');
    t.match(await call.json(), { result: '0x1de2a2a' });
    const other = await preflight('http://127.0.0.1:8081');
    t.equal(other.status, 403, 'another port of 127.0.0.1 is another origin');
    await other.arrayBuffer();
    // Browser wallets call the chain from their extension: not a web page, and no CORS needed.
    const wallet = await post({ origin: 'chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn' });
    t.equal(wallet.status, 200, 'a browser extension (a wallet) is answered');
    t.same(cors(wallet), [], 'without CORS headers');
    await wallet.arrayBuffer();
  },
);

t.test('mintAndDeposit funds an account on a dev chain and refuses other chains', async (t) => {
  const c = dc.chains.chain_d;
  const who = DEV_KEYS.callers[4].address;
  t.equal(await mintAndDeposit(c, who, 2_500_000n), 2_500_000n);
  t.equal(await mintAndDeposit(c, who, 1n), 2_500_001n);
  await t.rejects(mintAndDeposit({ ...c, chain_id: 8453 }, who, 1n), /not a dev chain/);
  await t.rejects(mintAndDeposit(c, who, 0n), /positive/);
});

t.test('fundings of one chain at once all succeed, though they sign with one minter key', async (t) => {
  const c = dc.chains.chain_c;
  const who = DEV_KEYS.callers.map((k) => k.address);
  const balances = await Promise.all(who.map((a, i) => mintAndDeposit(c, a, BigInt(i + 1) * 1_000_000n)));
  t.same(
    balances,
    who.map((_, i) => BigInt(i + 1) * 1_000_000n),
    'each deposit in full',
  );
  const steps: string[] = [];
  await mintAndDeposit(c, who[0], 1n, { onStep: (s) => steps.push(s) });
  t.same(steps, ['minting', 'depositing'], 'steps reported in order');
});

t.test('deployEscrow deploys for an existing 6-decimal stablecoin; refuses anything else', async (t) => {
  const c = dc.chains.chain_b;
  const args = {
    rpcUrl: c.rpc_url,
    stablecoin: c.stablecoin,
    treasury: DEV_KEYS.treasury.address,
    settler: DEV_KEYS.callers[2].address,
    timelock: 86_400n,
    roleDelay: 259_200n,
    maxCharge: 100_000_000n,
    deployerKey: DEV_KEYS.callers[3].privateKey,
  };
  const r = await deployEscrow(args);
  t.match(r, { chain_id: DEV_CHAIN_IDS.chain_b, stablecoin: c.stablecoin, escrow: /^0x[0-9a-fA-F]{40}$/ });
  const pub = createPublicClient({ transport: http(c.rpc_url) });
  const read = <F extends 'owner' | 'treasury' | 'token'>(functionName: F) =>
    pub.readContract({ address: r.escrow, abi: escrowAbi, functionName });
  t.equal(await read('owner'), DEV_KEYS.callers[3].address, 'owner defaults to the deployer');
  t.equal(await read('treasury'), DEV_KEYS.treasury.address);
  t.equal(await pub.readContract({ address: r.escrow, abi: escrowAbi, functionName: 'withdrawalDelay' }), 86_400n);
  t.equal(await pub.readContract({ address: r.escrow, abi: escrowAbi, functionName: 'roleDelay' }), 259_200n);
  t.equal(await pub.readContract({ address: r.escrow, abi: escrowAbi, functionName: 'maxCharge' }), 100_000_000n);
  t.equal(
    await pub.readContract({
      address: r.escrow,
      abi: escrowAbi,
      functionName: 'isSettler',
      args: [DEV_KEYS.callers[2].address],
    }),
    true,
  );
  t.equal((await pub.getTransactionReceipt({ hash: r.tx })).blockNumber, BigInt(r.deploy_block));
  await t.rejects(deployEscrow({ ...args, stablecoin: c.escrow }), /decimals/, 'the escrow is not a stablecoin');
  await t.rejects(deployEscrow({ ...args, treasury: '0x1234' }), /treasury/);
  await t.rejects(deployEscrow({ ...args, timelock: 0n }), /timelock must be > 0/, 'a withdrawal timelock of 0');
  await t.rejects(deployEscrow({ ...args, roleDelay: 86_400n }), /role delay .* longer than the timelock/);
  await t.rejects(deployEscrow({ ...args, maxCharge: 0n }), /max charge/);
});

t.test('deploy-escrow CLI prints the config fields as JSON; bad input exits non-zero', async (t) => {
  const c = dc.chains.chain_c;
  const run = promisify(execFile);
  const script = new URL('../../deploy/deploy-escrow.ts', import.meta.url).pathname;
  const argv = ['--import', 'tsx', script, '--rpc-url', c.rpc_url, '--stablecoin', c.stablecoin];
  const more = [
    '--treasury',
    DEV_KEYS.treasury.address,
    '--settler',
    DEV_KEYS.settler.address,
    '--timelock',
    '3600',
    '--role-delay',
    '7200',
    '--max-charge',
    '250.5',
  ];
  const env = { ...process.env, FAREBOX_DEPLOYER_KEY: DEV_KEYS.callers[3].privateKey };
  const { stdout } = await run(process.execPath, [...argv, ...more], { env });
  const deployed = JSON.parse(stdout) as { escrow: Address };
  t.match(deployed, { chain_id: DEV_CHAIN_IDS.chain_c, escrow: /^0x[0-9a-fA-F]{40}$/ });
  const pub = createPublicClient({ transport: http(c.rpc_url) });
  t.equal(
    await pub.readContract({ address: deployed.escrow, abi: escrowAbi, functionName: 'maxCharge' }),
    250_500_000n,
    '--max-charge in USD',
  );
  const zero = await run(process.execPath, [...argv, ...more.map((a) => (a === '3600' ? '0' : a))], { env }).catch(
    (e: { code: number; stderr: string }) => e,
  );
  t.match(zero, { code: 1, stderr: /timelock must be > 0/ });
  const err = await run(process.execPath, argv, { env }).catch((e: { code: number; stderr: string }) => e);
  t.match(err, { code: 1, stderr: /missing --treasury/ });
});

t.test(
  "blockTimeMs mines a block every interval, a sender's transactions waiting together for it; by default each is mined at once",
  async (t) => {
    const key = DEV_KEYS.callers[2];
    const send = (url: string, nonce: number) =>
      createWalletClient({ transport: http(url), account: privateKeyToAccount(key.privateKey) }).sendTransaction({
        chain: null,
        to: key.address,
        value: 0n,
        nonce,
        gas: 21_000n,
        maxFeePerGas: 100_000_000_000n,
        maxPriorityFeePerGas: 1_000_000_000n,
      });
    const instant = createPublicClient({ transport: http(dc.chains.chain_a.rpc_url) });
    const n = await instant.getTransactionCount({ address: key.address });
    const head = await instant.getBlockNumber({ cacheTime: 0 });
    await send(dc.chains.chain_a.rpc_url, n);
    t.equal(
      await instant.getBlockNumber({ cacheTime: 0 }),
      head + 1n,
      'the default: a block per transaction, mined before the send returns',
    );
    await t.rejects(send(dc.chains.chain_a.rpc_url, n + 2), 'and a nonce gap refused');

    const timed = await startDevChains({ basePort: 0, blockTimeMs: 150, confirmations: 3 });
    t.teardown(() => timed.close());
    const c = timed.chains.chain_a;
    t.match(
      { confirmations: c.confirmations, poll_interval_ms: c.poll_interval_ms },
      { confirmations: 3, poll_interval_ms: 38 },
    );
    const pub = createPublicClient({ transport: http(c.rpc_url), pollingInterval: 20 });
    const from = await pub.getBlockNumber({ cacheTime: 0 });
    const started = performance.now();
    await until('three blocks', async () => (await pub.getBlockNumber({ cacheTime: 0 })) >= from + 3n);
    t.ok(performance.now() - started >= 300, 'blocks come on the interval, none sent');
    const m = await pub.getTransactionCount({ address: key.address });
    // The later nonces first: they wait in the mempool for the one before them.
    const hashes = [await send(c.rpc_url, m + 2), await send(c.rpc_url, m + 1), await send(c.rpc_url, m)];
    const receipts = await Promise.all(hashes.map((hash) => pub.waitForTransactionReceipt({ hash })));
    t.equal(new Set(receipts.map((r) => r.blockNumber)).size, 1, 'the three mined together, in the next block');
  },
);

t.test('close() stops every chain', async (t) => {
  const dc2 = await startDevChains({ basePort: 0 });
  const urls = CHAIN_NAMES.map((n) => dc2.chains[n].rpc_url);
  await dc2.close();
  for (const url of urls) {
    await t.rejects(fetch(url, { method: 'POST', body: '{}' }), `${url} closed`);
  }
});

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}
