import t from 'tap';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { createPublicClient, createTestClient, createWalletClient, http, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { escrowAbi } from '../../plugins/chains/abi.js';
import type { ChainConfig } from '../../plugins/chains/config.js';
import { DEV_MAX_CHARGE, devViemChain, startDevChains, type DevKey } from '../../plugins/chains/dev-chains.js';
import { mintAndDeposit } from '../../plugins/chains/dev-fund.js';
import { gasLimitFor, MAX_CHARGES_PER_BATCH, TX_GAS_CAP } from '../../plugins/chains/evm-charges.js';
import { createEvmChain, type EvmChainOptions } from '../../plugins/chains/evm.js';
import { SettlementError, type Charge, type ScanResult } from '../../plugins/chains/port.js';
import { startRpcProxy } from './rpc-proxy.js';
import { callIdOf } from '../../plugins/request-ids.js';

const dc = await startDevChains({ basePort: 0, withdrawalDelay: 60n, testMethods: true });
t.teardown(() => dc.close());

const c = dc.chains.chain_c;
const { settler, deployer: owner, callers } = dc.keys;
const [alice, bob, carol] = callers;
const viemChain = devViemChain('chain_c', c.chain_id, c.rpc_url);
const transport = http(c.rpc_url);
const pub = createPublicClient({ chain: viemChain, transport, pollingInterval: 10 });
const testClient = createTestClient({ chain: viemChain, transport, mode: 'hardhat' });
const wallet = (k: DevKey) =>
  createWalletClient({ chain: viemChain, transport, account: privateKeyToAccount(k.privateKey) });
const evm = (patch: Partial<ChainConfig> = {}, opts: EvmChainOptions = {}) =>
  createEvmChain('chain_c', { ...c, ...patch }, { settlerKey: settler.privateKey, ...opts });
const chain = evm();

let seq = 0;
const id = () => callIdOf(`evm-test-${seq++}`);
const charges = (n: number, account = alice.address, amount = 10n): Charge[] =>
  Array.from({ length: n }, () => ({ callId: id(), account, amount }));
async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof SettlementError) return err.code;
    throw err;
  }
  return 'no error';
}
async function mined(hash: Promise<Hex>) {
  const r = await pub.waitForTransactionReceipt({ hash: await hash });
  if (r.status !== 'success') throw new Error('tx reverted');
}
const settlerNonce = () => pub.getTransactionCount({ address: settler.address, blockTag: 'pending' });
// Runs `fn` with automine off, restoring it (and mining leftovers) afterwards.
async function withoutAutomine<T>(fn: () => Promise<T>): Promise<T> {
  await testClient.setAutomine(false);
  try {
    return await fn();
  } finally {
    await testClient.mine({ blocks: 1 });
    await testClient.setAutomine(true);
  }
}
// Waits (bounded) until the pending block holds a transaction other than `hash`.
async function replacedInMempool(hash: Hex): Promise<boolean> {
  for (let i = 0; i < 200; i++) {
    const block = await pub.request({ method: 'eth_getBlockByNumber', params: ['pending', false] });
    const txs = (block?.transactions ?? []) as Hex[];
    if (txs.length > 0 && !txs.includes(hash)) return true;
    await sleep(25);
  }
  return false;
}

/** The settler role back, through the escrow's role timelock (twice the 60 s withdrawal timelock here). */
async function regrant(): Promise<void> {
  await mined(
    wallet(owner).writeContract({
      address: c.escrow,
      abi: escrowAbi,
      functionName: 'proposeSettler',
      args: [settler.address],
    }),
  );
  await testClient.increaseTime({ seconds: 121 });
  await testClient.mine({ blocks: 1 });
  await mined(
    wallet(owner).writeContract({
      address: c.escrow,
      abi: escrowAbi,
      functionName: 'grantSettler',
      args: [settler.address],
    }),
  );
}

await mintAndDeposit(c, alice.address, 1_000_000_000n);
await mintAndDeposit(c, carol.address, 1_000n);

t.test('balanceOf and pendingWithdrawal read the escrow', async (t) => {
  t.equal(await chain.balanceOf(carol.address), 1_000n);
  t.equal(await chain.balanceOf(bob.address), 0n);
  t.equal(await chain.pendingWithdrawal(carol.address), null);
  await mined(
    wallet(carol).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'requestWithdrawal', args: [400n] }),
  );
  const block = await pub.getBlock();
  t.same(await chain.pendingWithdrawal(carol.address), { amount: 400n, readyAt: block.timestamp + 60n });
  await mined(wallet(carol).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'cancelWithdrawal' }));
  t.equal(await chain.pendingWithdrawal(carol.address), null);
});

t.test('charge reports per call id: charged, refused with balance, already charged, already refused', async (t) => {
  const [a, b] = [id(), id()];
  const first = await chain.charge([
    { callId: a, account: alice.address, amount: 100n },
    { callId: b, account: bob.address, amount: 5n },
    { callId: a, account: alice.address, amount: 100n }, // duplicate inside one batch
  ]);
  t.match(first.results, [
    { callId: a, outcome: 'charged', amount: 100n },
    { callId: b, outcome: 'refused', balance: 0n },
    { callId: a, outcome: 'already_charged' },
  ]);
  t.equal(first.total, 100n);
  t.match(first.txHash, /^0x[0-9a-f]{64}$/);
  t.ok(first.gasUsed > 0n);
  const again = await chain.charge([
    { callId: a, account: alice.address, amount: 100n },
    { callId: b, account: bob.address, amount: 5n },
  ]);
  t.same(
    again.results.map((r) => r.outcome),
    ['already_charged', 'already_refused'],
    'a retried batch changes nothing',
  );
  t.equal(again.total, 0n);
  t.equal(await chain.callStatus(a), 'charged');
  t.equal(await chain.callStatus(b), 'refused');
  t.equal(await chain.callStatus(id()), 'none');
});

t.test('readEvents returns typed records of a block range, in chain order', async (t) => {
  const from = (await chain.latestBlock()) + 1n;
  await mintAndDeposit(c, bob.address, 500n); // mint + depositFor
  const refusedId = id();
  const batch = await chain.charge([
    { callId: id(), account: bob.address, amount: 200n },
    { callId: refusedId, account: bob.address, amount: 10_000n },
  ]);
  await chain.charge([{ callId: refusedId, account: bob.address, amount: 1n }]);
  await mined(
    wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'requestWithdrawal', args: [300n] }),
  );
  await mined(wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'cancelWithdrawal' }));
  await mined(
    wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'requestWithdrawal', args: [300n] }),
  );
  await mined(chain.charge([{ callId: id(), account: bob.address, amount: 50n }]).then((r) => r.txHash));
  await testClient.increaseTime({ seconds: 60 });
  await mined(wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'withdraw' }));
  const to = await chain.latestBlock();

  const events = await chain.readEvents(from, to);
  t.same(
    events.map((e) => e.kind),
    [
      'deposited',
      'charged',
      'charge_refused',
      'charge_skipped',
      'withdrawal_requested',
      'withdrawal_cancelled',
      'withdrawal_requested',
      'charged',
      'withdrawn',
    ],
  );
  t.match(events[0], { kind: 'deposited', account: bob.address, from: owner.address, amount: 500n, callId: null });
  t.match(events[2], { kind: 'charge_refused', callId: refusedId, amount: 10_000n, balance: 300n });
  t.match(events[3], { kind: 'charge_skipped', callId: refusedId, status: 'refused' });
  t.match(events[8], { kind: 'withdrawn', amount: 250n, requested: 300n }, 'withdraw paid what the charge left');
  for (let i = 1; i < events.length; i++) {
    const [p, e] = [events[i - 1]!, events[i]!];
    t.ok(
      p.blockNumber < e.blockNumber || (p.blockNumber === e.blockNumber && p.logIndex < e.logIndex),
      `event ${i} in order`,
    );
  }
  const only = await chain.readEvents(batch.blockNumber, batch.blockNumber);
  t.same(
    only.map((e) => [e.kind, e.txHash]),
    [
      ['charged', batch.txHash],
      ['charge_refused', batch.txHash],
    ],
    'a one-block range holds just that block',
  );
  t.same(await chain.readEvents(to + 1n, to + 100n), [], 'empty range past the head');
  t.same(await chain.readEvents(to, to - 1n), [], 'inverted range is empty');
});

t.test('readEvents spans ranges wider than one eth_getLogs slice', async (t) => {
  const from = (await chain.latestBlock()) + 1n;
  const first = await chain.charge(charges(1));
  await testClient.mine({ blocks: 4_500 });
  const last = await chain.charge(charges(1));
  const events = await chain.readEvents(from, last.blockNumber);
  t.same(
    events.map((e) => e.txHash),
    [first.txHash, last.txHash],
  );
  t.ok(last.blockNumber - first.blockNumber > 4_000n, 'more than two slices apart');
});

t.test('concurrent charge batches from one key never collide on a nonce', async (t) => {
  const other = evm(); // a second instance shares the process-wide queue of the key
  const start = await settlerNonce();
  const batches = Array.from({ length: 12 }, () => charges(25));
  const pending = await Promise.all(batches.map((b, i) => (i % 2 ? other : chain).submitCharges(b)));
  const receipts = await Promise.all(pending.map((p) => p.wait()));
  t.same(
    pending.map((p) => p.nonce).sort((a, b) => a - b),
    Array.from({ length: 12 }, (_, i) => start + i),
    'consecutive nonces',
  );
  t.ok(
    receipts.every((r) => r.results.every((x) => x.outcome === 'charged')),
    'every call charged',
  );
  t.equal(new Set(receipts.map((r) => r.txHash)).size, 12, 'twelve transactions');
  for (const b of batches) t.equal(await chain.callStatus(b[0]!.callId), 'charged');
});

t.test('a key without the settler role gets not_settler before anything is sent', async (t) => {
  const rogue = createEvmChain('chain_c', c, { settlerKey: bob.privateKey });
  const nonce = await pub.getTransactionCount({ address: bob.address });
  t.equal(await code(rogue.submitCharges(charges(1))), 'not_settler');
  t.equal(await pub.getTransactionCount({ address: bob.address }), nonce, 'no transaction sent');
});

t.test('without a key the chain is read-only; the key comes from settler_key_env', async (t) => {
  const readOnly = createEvmChain('chain_c', { ...c, settler_key_env: 'NO_SUCH_FAREBOX_KEY' }, { env: {} });
  t.equal(readOnly.canSettle, false);
  t.equal(await readOnly.balanceOf(carol.address), 1_000n, 'reads work');
  t.equal(await code(readOnly.submitCharges(charges(1))), 'not_configured');
  const fromEnv = createEvmChain(
    'chain_c',
    { ...c, settler_key_env: 'SETTLER' },
    { env: { SETTLER: settler.privateKey } },
  );
  t.equal(fromEnv.canSettle, true);
  t.same(
    (await fromEnv.charge(charges(1))).results.map((r) => r.outcome),
    ['charged'],
  );
  t.throws(
    () => createEvmChain('chain_c', { ...c, settler_key_env: 'SETTLER' }, { env: { SETTLER: 'nope' } }),
    SettlementError,
  );
});

t.test('malformed batches are refused before sending', async (t) => {
  t.equal(await code(chain.submitCharges([])), 'invalid_batch');
  t.equal(await code(chain.submitCharges([{ callId: '0x1234', account: alice.address, amount: 1n }])), 'invalid_batch');
  t.equal(await code(chain.submitCharges([{ callId: id(), account: '0x12', amount: 1n }])), 'invalid_batch');
  t.equal(await code(chain.submitCharges([{ callId: id(), account: alice.address, amount: -1n }])), 'invalid_batch');
  t.equal(await code(chain.submitCharges(charges(MAX_CHARGES_PER_BATCH + 1))), 'invalid_batch');
});

t.test(
  "a batch's gas limit covers what it uses in its costliest shapes, and stays near it for the gateway's call ids",
  async (t) => {
    // The gateway's call ids: consecutive 128-bit numbers (callIdOf of req_ ids), 128 to a status word.
    const base = randomBytes(12).toString('hex');
    const consecutive = (n: number, account = alice.address, amount = 1n): Charge[] =>
      Array.from({ length: n }, () => ({
        callId: callIdOf(`req_${base}${(seq++).toString(16).padStart(8, '0')}`),
        account,
        amount,
      }));
    const largest = consecutive(MAX_CHARGES_PER_BATCH);
    t.equal(
      chain.batchFits!(largest),
      MAX_CHARGES_PER_BATCH,
      'the largest batch of consecutive ids fits one transaction',
    );
    const big = await chain.charge(largest);
    t.ok(big.results.every((x) => x.outcome === 'charged'));
    t.ok(big.gasUsed <= gasLimitFor(largest), `${big.gasUsed} used <= ${gasLimitFor(largest)}`);
    t.ok(
      gasLimitFor(largest) < 2n * big.gasUsed,
      'the limit within 2x of the gas used: blocks have room for many batches',
    );
    t.comment(
      `gas per charge at ${MAX_CHARGES_PER_BATCH} consecutive ids: ${big.gasUsed / BigInt(MAX_CHARGES_PER_BATCH)}`,
    );

    // The costliest shape: each charge a status word of its own and an account of its own, cold, funded.
    const accounts = Array.from({ length: 6 }, () => privateKeyToAccount(generatePrivateKey()).address);
    for (const a of accounts) await mintAndDeposit(c, a, 1_000n);
    const scattered: Charge[] = accounts.map((account) => ({ callId: id(), account, amount: 10n }));
    const costly = await chain.charge(scattered);
    t.same(
      costly.results.map((r) => r.outcome),
      accounts.map(() => 'charged'),
    );
    t.ok(costly.gasUsed <= gasLimitFor(scattered), `${costly.gasUsed} used <= ${gasLimitFor(scattered)}`);
    // Refusals, charges over the cap and skipped ids, each of its own word, in one batch.
    const odd: Charge[] = [
      ...accounts.map((account) => ({ callId: id(), account, amount: 10n ** 12n })),
      ...accounts.map((account) => ({ callId: id(), account, amount: DEV_MAX_CHARGE + 1n })),
      ...scattered,
    ];
    const refusals = await chain.charge(odd);
    t.ok(refusals.gasUsed <= gasLimitFor(odd), `${refusals.gasUsed} used <= ${gasLimitFor(odd)}`);

    // A batch of ids that share no word stops where its gas bound would pass max_batch_gas (2^24 by default).
    const wide = charges(MAX_CHARGES_PER_BATCH, alice.address, 1n);
    const n = chain.batchFits!(wide);
    t.ok(n > 100 && n < MAX_CHARGES_PER_BATCH, `${n} of ${MAX_CHARGES_PER_BATCH} fit`);
    t.ok(gasLimitFor(wide.slice(0, n)) <= BigInt(TX_GAS_CAP) && gasLimitFor(wide.slice(0, n + 1)) > BigInt(TX_GAS_CAP));
    const cut = await chain.charge(wide.slice(0, n));
    t.ok(cut.results.every((x) => x.outcome === 'charged'));
    t.ok(cut.gasUsed <= gasLimitFor(wide.slice(0, n)));
    t.equal(await code(chain.submitCharges(wide.slice(0, n + 1))), 'invalid_batch', 'one more is refused unsent');
    const small = evm({ max_batch_gas: 1_000_000 });
    t.ok(small.batchFits!(consecutive(MAX_CHARGES_PER_BATCH)) < 200, 'a lower max_batch_gas makes smaller batches');
  },
);

t.test('latestBlock and receipts honour confirmations', async (t) => {
  const confirmed = evm({ confirmations: 2 });
  const head = await pub.getBlockNumber({ cacheTime: 0 });
  t.equal(await confirmed.latestBlock(), head - 1n);
  const p = await confirmed.submitCharges(charges(1));
  let done = false;
  const waiting = p.wait().then((r) => ((done = true), r));
  const mineBlock = await pub.waitForTransactionReceipt({ hash: p.txHash });
  await sleep(200); // several poll intervals with the tx mined but unconfirmed
  t.equal(done, false, 'not resolved with 1 of 2 confirmations');
  await testClient.mine({ blocks: 1 });
  const receipt = await waiting;
  t.equal(receipt.blockNumber, mineBlock.blockNumber);
  t.equal(receipt.results[0]!.outcome, 'charged');
});

t.test('a stuck batch is re-sent with the same nonce and a higher fee', async (t) => {
  const fast = evm({ replace_after_ms: 100 }, { pollIntervalMs: 20 });
  const batch = charges(3);
  const receipt = await withoutAutomine(async () => {
    const p = await fast.submitCharges(batch);
    t.ok(await replacedInMempool(p.txHash), 'replacement took the original out of the mempool');
    const first = await pub.getTransaction({ hash: p.txHash }).catch(() => null);
    t.equal(first, null, 'original transaction is gone');
    await testClient.mine({ blocks: 1 });
    const r = await p.wait();
    const mined = await pub.getTransaction({ hash: r.txHash });
    t.not(r.txHash, p.txHash, 'mined transaction is the replacement');
    t.equal(mined.nonce, p.nonce, 'same nonce');
    t.ok(mined.maxPriorityFeePerGas! > 1_000_000_000n, 'higher tip than the first');
    return r;
  });
  t.same(
    receipt.results.map((r) => r.outcome),
    ['charged', 'charged', 'charged'],
  );
});

t.test('a dropped batch is re-sent and mined', async (t) => {
  const fast = evm({ replace_after_ms: 100 }, { pollIntervalMs: 20 });
  await testClient.setAutomine(false);
  let p;
  try {
    p = await fast.submitCharges(charges(2));
    await testClient.dropTransaction({ hash: p.txHash });
  } finally {
    await testClient.setAutomine(true);
  }
  const r = await p.wait();
  t.not(r.txHash, p.txHash);
  t.same(
    r.results.map((x) => x.outcome),
    ['charged', 'charged'],
  );
});

t.test('a batch never mined fails with timeout after maxReplacements; later batches still go through', async (t) => {
  const hopeless = evm({ replace_after_ms: 50 }, { pollIntervalMs: 10, maxReplacements: 1 });
  await withoutAutomine(async () => {
    const p = await hopeless.submitCharges(charges(1));
    t.equal(await code(p.wait()), 'timeout');
  });
  t.same(
    (await chain.charge(charges(1))).results.map((r) => r.outcome),
    ['charged'],
  );
});

t.test('a transaction sent with the key outside the queue does not break it', async (t) => {
  await chain.charge(charges(1)); // the queue now caches the next nonce
  await mined(wallet(settler).sendTransaction({ to: settler.address, value: 0n }));
  t.same(
    (await chain.charge(charges(1))).results.map((r) => r.outcome),
    ['charged'],
    'nonce resynced',
  );
});

t.test(
  'two settler processes on one key: a send onto the nonce the other holds in the mempool re-reads the count and takes the next',
  async (t) => {
    // Another process: its own nonce queue (the queue is per process, keyed by the URL as configured).
    const other = evm({ rpc_url: `${c.rpc_url}/` });
    await chain.charge(charges(1)); // this process's queue holds the next nonce
    const receipts = await withoutAutomine(async () => {
      const n = await settlerNonce();
      const theirs = [await other.submitCharges(charges(2)), await other.submitCharges(charges(2))];
      t.same(
        theirs.map((p) => p.nonce),
        [n, n + 1],
        'the other process sends on the count it reads',
      );
      const ours = await chain.submitCharges(charges(2)); // on its cached nonce n, held by the other's batch
      t.equal(ours.nonce, n + 2, 'ours re-read the count and went on the next nonce');
      await testClient.mine({ blocks: 1 });
      return Promise.all([...theirs, ours].map((p) => p.wait()));
    });
    t.ok(
      receipts.every((r) => r.results.every((x) => x.outcome === 'charged')),
      'all three batches charged',
    );
  },
);

t.test('a batch that reverts onchain (role revoked after it was sent) -> reverted', async (t) => {
  let p;
  await withoutAutomine(async () => {
    p = await chain.submitCharges(charges(1));
    // Higher tip: mined before the pending batch.
    await wallet(owner).writeContract({
      address: c.escrow,
      abi: escrowAbi,
      functionName: 'revokeSettler',
      args: [settler.address],
      maxPriorityFeePerGas: 50_000_000_000n,
      maxFeePerGas: 100_000_000_000n,
    });
  });
  t.equal(await code(p!.wait()), 'reverted');
  await regrant();
  t.same(
    (await chain.charge(charges(1))).results.map((r) => r.outcome),
    ['charged'],
  );
});

t.test('batches are simulated before sending at first and after a failure, not while they mine', async (t) => {
  const fresh = evm();
  const revoke = (on: boolean) =>
    on
      ? regrant()
      : mined(
          wallet(owner).writeContract({
            address: c.escrow,
            abi: escrowAbi,
            functionName: 'revokeSettler',
            args: [settler.address],
          }),
        );
  await revoke(false);
  let nonce = await settlerNonce();
  t.equal(await code(fresh.submitCharges(charges(1))), 'not_settler', 'the first batch is simulated: refused unsent');
  t.equal(await settlerNonce(), nonce, 'no transaction');
  await revoke(true);
  t.same(
    (await fresh.charge(charges(1))).results.map((r) => r.outcome),
    ['charged'],
  );

  await revoke(false);
  nonce = await settlerNonce();
  const sent = await fresh.submitCharges(charges(1));
  t.equal(await code(sent.wait()), 'reverted', 'after a mined batch the next is sent unsimulated, and reverts');
  t.equal(await settlerNonce(), nonce + 1, 'one reverted transaction paid for');
  t.equal(await code(fresh.submitCharges(charges(1))), 'not_settler', 'after the revert: simulated again');
  t.equal(await settlerNonce(), nonce + 1, 'nothing more sent');
  await revoke(true);
  t.same(
    (await fresh.charge(charges(2))).results.map((r) => r.outcome),
    ['charged', 'charged'],
  );
});

t.test('a charge above the escrow cap comes back over_cap; maxCharge reads the cap', async (t) => {
  t.equal(await chain.maxCharge(), DEV_MAX_CHARGE);
  const r = await chain.charge([
    { callId: id(), account: alice.address, amount: DEV_MAX_CHARGE + 1n },
    { callId: id(), account: alice.address, amount: 5n },
  ]);
  t.match(r.results, [{ outcome: 'over_cap', maxCharge: DEV_MAX_CHARGE }, { outcome: 'charged' }]);
  t.equal(r.total, 5n);
  t.equal(await chain.callStatus(r.results[0]!.callId), 'refused');
});

/** Every block from `from` to `to` scanned in as many scanEvents calls as the node's limits take. */
async function scanAll(ch: ReturnType<typeof evm>, from: bigint, to: bigint) {
  const results: Extract<ScanResult, { ok: true }>[] = [];
  for (let next = from; next <= to; ) {
    const r = await ch.scanEvents(next, to, null);
    if (!r.ok) throw new Error(`scan stopped: ${r.reason}`);
    results.push(r);
    next = r.to.number + 1n;
  }
  return results;
}

t.test(
  "eth_getLogs ranges halve on a node's range limit and grow back after successes, never past max_log_range",
  async (t) => {
    const proxy = await startRpcProxy(c.rpc_url);
    t.teardown(() => proxy.close());
    const ch = evm({ rpc_url: proxy.url, max_log_range: 2_000 });
    const from = (await chain.latestBlock()) + 1n;
    const first = await chain.charge(charges(1));
    await testClient.mine({ blocks: 3_000 });
    const last = await chain.charge(charges(1));
    proxy.maxRange = 300; // "query exceeds max block range 300"
    const events = await ch.readEvents(from, last.blockNumber);
    t.same(
      events.map((e) => e.txHash),
      [first.txHash, last.txHash],
      'every event read across the limit',
    );

    const scans = await scanAll(ch, from, last.blockNumber);
    t.same(
      scans.flatMap((s) => s.events.map((e) => e.txHash)),
      [first.txHash, last.txHash],
    );
    t.ok(
      scans.every((s) => s.span <= 512),
      'the range stays near the limit: it grows back only after successes',
    );
    t.equal(scans.at(-1)!.to.number, last.blockNumber);
    const refused = scans.reduce((n, s) => n + s.splits, 0);
    t.ok(refused <= 2 + scans.length / 8, `${refused} refusals for ${scans.length} ranges`);

    proxy.maxRange = undefined;
    let span = 0;
    for (let i = 0; i < 60; i++) span = Math.max(span, (await scanAll(ch, from, from + 20n))[0]!.span);
    t.equal(span, 2_000, 'grown back to max_log_range, and no further');
  },
);

t.test(
  'too many results in a range: halved until the answer fits; one block still too big is an error, not a skip',
  async (t) => {
    const proxy = await startRpcProxy(c.rpc_url);
    t.teardown(() => proxy.close());
    const ch = evm({ rpc_url: proxy.url });
    const from = (await chain.latestBlock()) + 1n;
    const txs: Hex[] = [];
    for (let i = 0; i < 6; i++) txs.push((await chain.charge(charges(1))).txHash);
    const to = await chain.latestBlock();
    proxy.maxResults = 2; // "query returned more than 2 results"
    t.same(
      (await ch.readEvents(from, to)).map((e) => e.txHash),
      txs,
    );
    const big = await chain.charge(charges(3)); // three events in one block
    await t.rejects(ch.readEvents(big.blockNumber, big.blockNumber), /more than 2 results/);
  },
);

t.test(
  'scanEvents: a node that lacks the range end answers node_behind; the range is not taken as scanned',
  async (t) => {
    const proxy = await startRpcProxy(c.rpc_url);
    t.teardown(() => proxy.close());
    const ch = evm({ rpc_url: proxy.url });
    const from = (await chain.latestBlock()) + 1n;
    const charged = await chain.charge(charges(1));
    proxy.lagHead = charged.blockNumber - 1n; // this backend has not seen the charge's block yet
    const behind = await ch.scanEvents(from, charged.blockNumber, null);
    t.match(behind, { ok: false, reason: 'node_behind', block: charged.blockNumber });
    proxy.lagHead = undefined;
    const caught = await ch.scanEvents(from, charged.blockNumber, null);
    t.match(caught, { ok: true, to: { number: charged.blockNumber } });
    t.same(caught.ok && caught.events.map((e) => e.txHash), [charged.txHash]);
    // Past the head of the node itself (it answers such a range with no logs and no error).
    t.match(await chain.scanEvents(charged.blockNumber + 1n, charged.blockNumber + 5n, null), {
      ok: false,
      reason: 'node_behind',
    });
  },
);

t.test('scanEvents: a node without batches is asked one request at a time', async (t) => {
  const proxy = await startRpcProxy(c.rpc_url);
  t.teardown(() => proxy.close());
  proxy.refuseBatches = true;
  const ch = evm({ rpc_url: proxy.url });
  const from = (await chain.latestBlock()) + 1n;
  const charged = await chain.charge(charges(1));
  const r = await ch.scanEvents(from, charged.blockNumber, null);
  t.same(r.ok && r.events.map((e) => e.txHash), [charged.txHash]);
  t.same(
    proxy.seen.slice(0, 3),
    ['batch', 'eth_getLogs', 'eth_getBlockByNumber'],
    'one refused batch, then single requests',
  );
});

t.test('scanEvents: the parent block is checked by hash; a reorg below it answers reorged', async (t) => {
  // chain_d, so the other tests' history on chain_c stays as it is.
  const d = dc.chains.chain_d;
  const dTest = createTestClient({
    chain: devViemChain('chain_d', d.chain_id, d.rpc_url),
    transport: http(d.rpc_url),
    mode: 'hardhat',
  });
  const ch = createEvmChain('chain_d', d);
  const snapshot = await dTest.snapshot();
  const from = (await ch.latestBlock()) + 1n;
  await mintAndDeposit(d, carol.address, 5n);
  const head = await ch.latestBlock();
  const scanned = await ch.scanEvents(from, head, null);
  if (!scanned.ok) throw new Error('scan failed');
  t.same(
    scanned.events.map((e) => e.kind),
    ['deposited'],
  );
  await dTest.mine({ blocks: 1 });
  t.match(
    await ch.scanEvents(head + 1n, head + 1n, scanned.to),
    { ok: true },
    'the same branch: the parent still matches',
  );

  await dTest.revert({ id: snapshot });
  await mintAndDeposit(d, bob.address, 7n); // another branch from the snapshot on
  await dTest.mine({ blocks: 2 });
  const r = await ch.scanEvents(head + 1n, head + 1n, scanned.to);
  t.match(r, { ok: false, reason: 'reorged', block: head, expected: scanned.to.hash });
  t.not(!r.ok && r.reason === 'reorged' && r.found, scanned.to.hash);
});

t.test(
  'a batch waits while the base fee is above max_fee_per_gas, counted, and is sent under it once the fee falls',
  async (t) => {
    let capped = 0;
    const ch = evm(
      { max_fee_per_gas: '5', replace_after_ms: 30_000 },
      { pollIntervalMs: 20, onFeeCapped: () => capped++ },
    );
    await testClient.request({
      method: 'hardhat_setNextBlockBaseFeePerGas' as never,
      params: ['0xba43b7400'] as never,
    }); // 50 gwei
    await testClient.mine({ blocks: 1 });
    const nonce = await settlerNonce();
    const batch = charges(1);
    const sending = ch.submitCharges(batch);
    await sleep(300);
    t.equal(await settlerNonce(), nonce, 'nothing sent while the base fee is 10x the ceiling');
    t.equal(capped, 1, 'counted once for the batch');
    await testClient.request({ method: 'hardhat_setNextBlockBaseFeePerGas' as never, params: ['0x3b9aca00'] as never }); // 1 gwei
    await testClient.mine({ blocks: 1 });
    const receipt = await (await sending).wait();
    const tx = await pub.getTransaction({ hash: receipt.txHash });
    t.ok(tx.maxFeePerGas! <= 5_000_000_000n, `maxFeePerGas ${tx.maxFeePerGas} within the 5 gwei ceiling`);
    t.same(
      receipt.results.map((r) => r.outcome),
      ['charged'],
    );
  },
);

t.test('fees above the ceiling past replace_after_ms: fee_capped, nothing sent', async (t) => {
  const ch = evm({ max_fee_per_gas: '0.000000001', replace_after_ms: 200 }, { pollIntervalMs: 20 }); // 1 wei
  await testClient.request({ method: 'hardhat_setNextBlockBaseFeePerGas' as never, params: ['0x3b9aca00'] as never });
  await testClient.mine({ blocks: 1 });
  const nonce = await settlerNonce();
  t.equal(await code(ch.submitCharges(charges(1))), 'fee_capped');
  t.equal(await settlerNonce(), nonce);
});

t.test('replacements of a stuck batch rise to max_fee_per_gas and never above it', async (t) => {
  let capped = 0;
  const block = await pub.getBlock();
  // Room for one full bump above the first fees, not for two.
  const first = (block.baseFeePerGas! * 12n) / 10n + 1_000_000_000n;
  const ceiling = (first * 140n) / 100n;
  const gwei = `${ceiling / 1_000_000_000n}.${(ceiling % 1_000_000_000n).toString().padStart(9, '0')}`;
  const ch = evm(
    { max_fee_per_gas: gwei, replace_after_ms: 60 },
    { pollIntervalMs: 10, maxReplacements: 50, onFeeCapped: () => capped++ },
  );
  const receipt = await withoutAutomine(async () => {
    const p = await ch.submitCharges(charges(1));
    for (let i = 0; i < 300 && capped === 0; i++) await sleep(10);
    t.ok(capped >= 1, 'a bump past the ceiling was held back and counted');
    await testClient.mine({ blocks: 1 });
    return p.wait();
  });
  const tx = await pub.getTransaction({ hash: receipt.txHash });
  t.ok(tx.maxFeePerGas! <= ceiling, `mined at ${tx.maxFeePerGas} <= ${ceiling}`);
  t.ok(tx.maxPriorityFeePerGas! <= tx.maxFeePerGas!);
  t.ok(tx.maxFeePerGas! > first, 'replaced at least once');
});
