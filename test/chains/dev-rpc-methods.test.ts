/**
 * The dev chains' JSON-RPC serves wallets, not attackers: over HTTP, with or without an Origin it answers, the methods
 * that rewrite a chain without a signature (hardhat_*, evm_*) and the ones that sign on the node are refused, per
 * entry of a batch, and the chain stays as it was; a wallet's flow through viem still works; the project's tests get
 * the test methods by asking for them (testMethods).
 */
import t from 'tap';
import { createPublicClient, createWalletClient, http, parseAbiItem, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi, testStablecoinAbi } from '../../plugins/chains/abi.js';
import { DEV_KEYS, devViemChain, startDevChains } from '../../plugins/chains/dev-chains.js';

const dc = await startDevChains({ basePort: 0 });
t.teardown(() => dc.close());
const BOARD = 'http://127.0.0.1:8080';
dc.allowOrigins([BOARD]);
// MetaMask's extension id: a browser wallet calls the chain from its extension's origin.
const WALLET_ORIGIN = 'chrome-extension://nkbihfbeogaeaoehlefnkodbefgpgknn';
/** The callers the server answers: no Origin (node, the CLI, curl), the dashboard's page, a browser wallet. */
const ANSWERED: [string, Record<string, string>][] = [
  ['no Origin', {}],
  ['the dashboard origin', { origin: BOARD }],
  ['a wallet extension', { origin: WALLET_ORIGIN }],
];
// Runtime code answering every isValidSignature (ERC-1271) with the magic value 0x1626ba7e: set on an account, it
// accepts any signature as that account's.
const ACCEPTS_ANY_SIGNATURE = '0x631626ba7e60e01b60005260206000f3';

interface RpcAnswer {
  id?: unknown;
  result?: unknown;
  error?: { code: number; message: string };
}

async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: any }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function call(
  url: string,
  method: string,
  params: unknown[] = [],
  headers: Record<string, string> = {},
): Promise<RpcAnswer> {
  const r = await post(url, { jsonrpc: '2.0', id: 1, method, params }, headers);
  if (r.status !== 200) throw new Error(`${method}: HTTP ${r.status}`);
  return r.json as RpcAnswer;
}

async function read(url: string, method: string, params: unknown[] = []): Promise<unknown> {
  const r = await call(url, method, params);
  if (r.error) throw new Error(`${method}: ${r.error.message}`);
  return r.result;
}

t.test(
  'hardhat_setCode over HTTP is refused, with or without an Origin the server answers; the account keeps no code',
  async (t) => {
    const url = dc.chains.chain_a.rpc_url;
    const victim = DEV_KEYS.callers[0].address;
    for (const [who, headers] of ANSWERED) {
      const r = await call(url, 'hardhat_setCode', [victim, ACCEPTS_ANY_SIGNATURE], headers);
      t.equal(r.error?.code, -32601, `${who}: method not found`);
      t.match(r.error?.message, /not allowed: hardhat_setCode/);
      t.equal(r.result, undefined, `${who}: no result`);
      t.equal(await read(url, 'eth_getCode', [victim, 'latest']), '0x', `${who}: the account has no code`);
    }
  },
);

t.test(
  'evm_mine, evm_snapshot, hardhat_setBalance, hardhat_impersonateAccount and the node-signing methods are refused; the chain does not move',
  async (t) => {
    const url = dc.chains.chain_b.rpc_url;
    const victim = DEV_KEYS.callers[1].address;
    const thief = DEV_KEYS.callers[2].address;
    const head = await read(url, 'eth_blockNumber');
    const balance = await read(url, 'eth_getBalance', [victim, 'latest']);
    const thiefBalance = await read(url, 'eth_getBalance', [thief, 'latest']);
    const nonce = await read(url, 'eth_getTransactionCount', [victim, 'latest']);
    const refused: [string, unknown[]][] = [
      ['evm_mine', []],
      ['evm_snapshot', []],
      ['evm_revert', ['0x1']],
      ['evm_increaseTime', [86_400]],
      ['evm_setNextBlockTimestamp', [4_102_444_800]],
      ['evm_setAutomine', [false]],
      ['hardhat_mine', ['0x10']],
      ['hardhat_setBalance', [thief, '0xffffffffffffffffffffffffffffffff']],
      ['hardhat_setNonce', [victim, '0x100']],
      ['hardhat_setStorageAt', [dc.chains.chain_b.escrow, '0x0', `0x${'00'.repeat(32)}`]],
      // A node signs only with keys it holds (none here), or as an account a test method impersonated.
      ['hardhat_impersonateAccount', [victim]],
      ['eth_sendTransaction', [{ from: victim, to: thief, value: '0xde0b6b3a7640000' }]],
      ['eth_sign', [victim, '0x1234']],
      ['personal_sign', ['0x1234', victim]],
      ['eth_signTypedData_v4', [victim, '{}']],
      ['debug_traceCall', [{ from: victim, to: thief }, 'latest']],
      ['hardhat_reset', []],
    ];
    for (const [who, headers] of ANSWERED) {
      for (const [method, params] of refused) {
        const r = await call(url, method, params, headers);
        t.equal(r.error?.code, -32601, `${who}: ${method} refused`);
        t.equal(r.result, undefined, `${who}: ${method} answered nothing`);
      }
    }
    t.equal(await read(url, 'eth_blockNumber'), head, 'no block mined');
    t.equal(await read(url, 'eth_getBalance', [victim, 'latest']), balance, "the victim's balance is as it was");
    t.equal(await read(url, 'eth_getBalance', [thief, 'latest']), thiefBalance, "so is the thief's");
    t.equal(await read(url, 'eth_getTransactionCount', [victim, 'latest']), nonce, 'so is the nonce');
  },
);

t.test('a batch with a refused method answers the others, each entry by its id', async (t) => {
  const url = dc.chains.chain_c.rpc_url;
  const victim = DEV_KEYS.callers[3].address;
  const head = await read(url, 'eth_blockNumber');
  const r = await post(
    url,
    [
      { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] },
      { jsonrpc: '2.0', id: 'set', method: 'hardhat_setCode', params: [victim, ACCEPTS_ANY_SIGNATURE] },
      { jsonrpc: '2.0', id: 3, method: 'eth_getCode', params: [victim, 'latest'] },
      { jsonrpc: '2.0', id: 'mine', method: 'evm_mine', params: [] },
      { jsonrpc: '2.0', id: 5, method: 'eth_blockNumber', params: [] },
    ],
    { origin: BOARD },
  );
  t.equal(r.status, 200);
  t.same(r.json, [
    { jsonrpc: '2.0', id: 1, result: `0x${dc.chains.chain_c.chain_id.toString(16)}` },
    {
      jsonrpc: '2.0',
      id: 'set',
      error: {
        code: -32601,
        message: 'method not allowed: hardhat_setCode (the dev chains serve wallet methods only)',
      },
    },
    { jsonrpc: '2.0', id: 3, result: '0x' },
    {
      jsonrpc: '2.0',
      id: 'mine',
      error: { code: -32601, message: 'method not allowed: evm_mine (the dev chains serve wallet methods only)' },
    },
    { jsonrpc: '2.0', id: 5, result: head },
  ]);
  t.equal(await read(url, 'eth_getCode', [victim, 'latest']), '0x', 'no code after the batch');
});

t.test(
  "a wallet's flow through viem from its extension origin: balances, a raw transaction, a contract write, logs, fees, filters",
  async (t) => {
    const c = dc.chains.chain_d;
    const chain = devViemChain('chain_d', c.chain_id, c.rpc_url);
    const transport = http(c.rpc_url, { fetchOptions: { headers: { origin: WALLET_ORIGIN } } });
    const pub = createPublicClient({ chain, transport, pollingInterval: 10 });
    const account = privateKeyToAccount(DEV_KEYS.callers[4].privateKey);
    const wallet = createWalletClient({ chain, transport, account });
    const to = DEV_KEYS.callers[0].address;

    t.equal(await pub.getChainId(), c.chain_id);
    const before = await pub.getBalance({ address: to });
    t.equal(before, 10_000n * 10n ** 18n, 'a dev account holds 10,000 ETH');
    const fees = await pub.estimateFeesPerGas();
    t.ok(fees.maxFeePerGas > 0n, 'fees from the chain');
    t.equal(
      (await pub.getFeeHistory({ blockCount: 2, rewardPercentiles: [50] })).baseFeePerGas.length,
      3,
      'eth_feeHistory',
    );
    const filter = await pub.createBlockFilter();

    const hash = await wallet.sendTransaction({ to, value: 12_345n });
    const receipt = await pub.waitForTransactionReceipt({ hash });
    t.equal(receipt.status, 'success', 'a transaction signed by the wallet, sent raw');
    t.equal(await pub.getBalance({ address: to }), before + 12_345n, 'the value arrived');
    t.equal((await pub.getTransaction({ hash })).from.toLowerCase(), account.address.toLowerCase());
    t.ok((await pub.getFilterChanges({ filter })).length >= 1, 'the block filter saw the new block');

    const approve = await wallet.writeContract({
      address: c.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'approve',
      args: [c.escrow, 7n],
    });
    t.equal(
      (await pub.waitForTransactionReceipt({ hash: approve })).status,
      'success',
      'a contract write (eth_estimateGas, eth_sendRawTransaction)',
    );
    t.equal(
      await pub.readContract({
        address: c.stablecoin,
        abi: testStablecoinAbi,
        functionName: 'allowance',
        args: [account.address, c.escrow],
      }),
      7n,
    );
    const logs = await pub.getLogs({
      address: c.stablecoin,
      event: parseAbiItem('event Approval(address indexed owner, address indexed spender, uint256 value)'),
      args: { owner: account.address },
      fromBlock: 0n,
    });
    t.same(
      logs.map((l) => l.args.value),
      [7n],
      'eth_getLogs finds the Approval',
    );
    t.equal(
      await pub.readContract({ address: c.escrow, abi: escrowAbi, functionName: 'balanceOf', args: [account.address] }),
      0n,
      'eth_call',
    );
    await pub.uninstallFilter({ filter });
  },
);

t.test("with testMethods (the project's tests alone) the test methods are served", async (t) => {
  const dev = await startDevChains({ basePort: 0, testMethods: true });
  t.teardown(() => dev.close());
  const url = dev.chains.chain_a.rpc_url;
  const someone: Hex = '0x1111111111111111111111111111111111111111';
  t.same(await call(url, 'hardhat_setCode', [someone, ACCEPTS_ANY_SIGNATURE]), { id: 1, jsonrpc: '2.0', result: true });
  t.equal(await read(url, 'eth_getCode', [someone, 'latest']), ACCEPTS_ANY_SIGNATURE, 'the code is set');
  const head = BigInt((await read(url, 'eth_blockNumber')) as string);
  const snapshot = await read(url, 'evm_snapshot');
  t.match(snapshot, /^0x/, 'evm_snapshot answers an id');
  await read(url, 'evm_mine');
  t.equal(BigInt((await read(url, 'eth_blockNumber')) as string), head + 1n, 'evm_mine mined a block');
  t.equal(await read(url, 'evm_revert', [snapshot]), true);
  t.equal(BigInt((await read(url, 'eth_blockNumber')) as string), head, 'evm_revert went back');
  t.equal(await read(url, 'hardhat_setBalance', [someone, '0x2a']), true);
  t.equal(await read(url, 'eth_getBalance', [someone, 'latest']), '0x2a');
});
