import t, { type Test } from 'tap';
import type { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  http,
  type Hex,
  type PublicClient,
  type TestClient,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi } from '../../plugins/chains/abi.js';
import type { Address, ChainConfig, ChainName } from '../../plugins/chains/config.js';
import { DEV_KEYS, devViemChain, startDevChains } from '../../plugins/chains/dev-chains.js';
import { mintAndDeposit } from '../../plugins/chains/dev-fund.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import type { PendingBatch, SettlementChain } from '../../plugins/chains/port.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { debitHold, placeHold, readWallet } from '../../plugins/billing/wallets.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { ChainWatcher } from '../../plugins/settlement/chain-watcher.js';
import { Settler, type SettlerSettings } from '../../plugins/settlement/settler.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { dropPrefix, testPrefix } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

// Chains that mine a block every 100 ms, as a real chain mines (transactions wait for the next block), and count a
// batch confirmed 8 blocks on: a confirmation window of 0.8 s.
const BLOCK_MS = 100;
const CONFIRMATIONS = 8;
const WITHDRAWAL_DELAY = 2n; // the role timelock is twice it
const dc = await startDevChains({
  host: '127.0.0.1',
  basePort: 0,
  testMethods: true,
  withdrawalDelay: WITHDRAWAL_DELAY,
  blockTimeMs: BLOCK_MS,
  confirmations: CONFIRMATIONS,
});
t.teardown(() => dc.close());

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const quiet = { error() {}, warn() {} };
const { settler: settlerKey, deployer: owner } = DEV_KEYS;

/** One chain's clients, a Redis namespace, a watcher and a settler on it; all stopped and deleted at the end. */
async function lane(
  t: Test,
  name: ChainName,
  patch: Partial<ChainConfig> = {},
  over: Partial<SettlerSettings> = {},
  settlerRedis?: (r: Redis) => Redis,
) {
  const config: ChainConfig = {
    ...dc.chains[name],
    confirmations: CONFIRMATIONS,
    replace_after_ms: 300,
    poll_interval_ms: 25,
    ...patch,
  };
  const viemChain = devViemChain(name, config.chain_id, config.rpc_url);
  const transport = http(config.rpc_url);
  const pub: PublicClient = createPublicClient({ chain: viemChain, transport, pollingInterval: 20 });
  const test: TestClient = createTestClient({ chain: viemChain, transport, mode: 'hardhat' });
  const ownerWallet = createWalletClient({
    chain: viemChain,
    transport,
    account: privateKeyToAccount(owner.privateKey),
  });
  const chain = createEvmChain(name, config, { settlerKey: settlerKey.privateKey, maxReplacements: 30 });
  // Every batch the settler sends, as sent (its nonce and first hash).
  const sent: PendingBatch[] = [];
  const submit: SettlementChain['submitCharges'] = async (charges, opts) => {
    const p = await chain.submitCharges(charges, opts);
    sent.push(p);
    return p;
  };
  const recorded = new Proxy(chain, {
    get: (target, prop) => (prop === 'submitCharges' ? submit : (Reflect.get(target, prop) as unknown)),
  });
  const prefix = testPrefix();
  const redis = connectRedis({ url: REDIS_URL, prefix });
  const metrics = createMetrics({ defaults: false });
  const watcher = new ChainWatcher(
    redis,
    { [name]: chain },
    `w-${name}`,
    {
      pollMs: 50,
      reconcileMs: 3_600_000,
      startBlocks: { [name]: BigInt(config.deploy_block) },
    },
    metrics,
    quiet,
  );
  const settler = new Settler(
    settlerRedis ? settlerRedis(redis) : redis,
    { [name]: recorded },
    `s-${name}`,
    {
      // A batch waits 50 ms to fill: the debits a test adds at once go out in batches of 20.
      batchSize: 20,
      batchWaitMs: 50,
      claimIdleMs: 60_000,
      batchesInFlight: 16,
      ...over,
    },
    metrics,
    quiet,
  );
  t.teardown(async () => {
    await settler.stop();
    await watcher.stop();
    await mineEvery(test, BLOCK_MS).catch(() => {});
    await dropPrefix(redis, prefix);
    await redis.quit();
  });
  watcher.start();
  const account = privateKeyToAccount(`0x${randomBytes(32).toString('hex')}` as Hex).address.toLowerCase() as Address;
  await mintAndDeposit(config, account, 1_000_000_000n);
  await until('the deposit synced', async () => (await readWallet(redis, account, name)).synced === 1_000_000_000n);

  const instance = randomBytes(12).toString('hex');
  let seq = 0;
  const requestIds: string[] = [];
  const nonce = (blockTag: 'latest' | 'pending') => pub.getTransactionCount({ address: settlerKey.address, blockTag });
  return {
    chain,
    recorded,
    pub,
    test,
    ownerWallet,
    settler,
    metrics,
    sent,
    redis,
    account,
    nonce,
    /** `n` billed calls of 1,000 atomic units debited at once, as the gateway debits them (consecutive request ids). */
    async debit(n: number): Promise<void> {
      const calls = Array.from({ length: n }, () => {
        const requestId = `req_${instance}${(seq++).toString(16).padStart(8, '0')}`;
        requestIds.push(requestId);
        return { requestId, callId: callIdOf(requestId), account, chain: name, owner: 'test', retentionMs: 3_600_000 };
      });
      const held = await Promise.all(
        calls.map((c) =>
          placeHold(redis, { ...c, amount: 2_000n, ttlMs: 60_000, model: 'gamma-k3', keyId: 'key_test' }),
        ),
      );
      if (held.some((h) => !h.placed)) throw new Error('hold refused');
      await Promise.all(
        calls.map((c) =>
          debitHold(redis, { ...c, price: 1_000n, usageJson: JSON.stringify({ input_tokens: 10, output_tokens: 5 }) }),
        ),
      );
    },
    /**
     * Once every debit is settled (the watcher applied its Charged event): each call charged by exactly one Charged
     * event on the chain, its record settled with that transaction, nothing pending; the settler's transactions that
     * charged, by hash.
     */
    async chargedOnce(t: Test) {
      await until(
        'every debit settled',
        async () => {
          const w = await readWallet(redis, account, name);
          return w.pending === 0n && w.held === 0n;
        },
        30_000,
      );
      const events = (
        await chain.readEvents(BigInt(config.deploy_block), await pub.getBlockNumber({ cacheTime: 0 }))
      ).filter((e) => e.kind === 'charged' && e.account.toLowerCase() === account);
      const byCall = new Map<string, Hex[]>();
      for (const e of events)
        byCall.set(e.callId!.toLowerCase(), [...(byCall.get(e.callId!.toLowerCase()) ?? []), e.txHash]);
      const twice = [...byCall.values()].filter((txs) => txs.length !== 1).length;
      const missing = requestIds.filter((r) => !byCall.has(callIdOf(r).toLowerCase())).length;
      t.same(
        { calls: requestIds.length, charged: byCall.size, twice, missing },
        { calls: requestIds.length, charged: requestIds.length, twice: 0, missing: 0 },
        'every debit charged exactly once',
      );
      let unsettled = 0;
      for (const r of requestIds) {
        const rec = await getCallRecord(redis, r);
        if (
          rec?.status !== 'settled' ||
          rec.tx?.toLowerCase() !== byCall.get(callIdOf(r).toLowerCase())?.[0]?.toLowerCase()
        )
          unsettled++;
      }
      t.equal(unsettled, 0, 'every call record settled, with the transaction that charged it');
      const w = await readWallet(redis, account, name);
      t.same(
        { pending: w.pending, synced: w.synced },
        { pending: 0n, synced: await chain.balanceOf(account) },
        'nothing pending; synced = balanceOf',
      );
      t.equal(w.synced, 1_000_000_000n - 1_000n * BigInt(requestIds.length), 'charged once each, no more');
      return events;
    },
  };
}

/** Mine a block every `ms` (0: only when asked). In ms: viem's setIntervalMining takes seconds on hardhat nodes. */
async function mineEvery(test: TestClient, ms: number): Promise<void> {
  await test.request({ method: 'evm_setIntervalMining' as never, params: [ms] as never });
}

/** Waits until the settler key's pending transactions reach `n` (sent, in the mempool or mined). */
async function sentUpTo(l: { nonce(tag: 'pending'): Promise<number> }, n: number): Promise<void> {
  await until(`settler nonce ${n} pending`, async () => (await l.nonce('pending')) >= n, 10_000, 10);
}

t.test('the dev chains mine on their own interval: a block without any transaction', async (t) => {
  const pub = createPublicClient({ transport: http(dc.chains.chain_a.rpc_url) });
  const head = await pub.getBlockNumber({ cacheTime: 0 });
  await until('a block mined', async () => (await pub.getBlockNumber({ cacheTime: 0 })) > head + 2n, 3_000, 20);
  t.pass('blocks mined with nothing sent');
});

t.test(
  'batches go out while earlier ones await their confirmations: many per confirmation window, consecutive nonces',
  async (t) => {
    const l = await lane(t, 'chain_a');
    await l.debit(240); // 12 batches of 20
    const start = await l.nonce('latest');
    await l.settler.start();
    const events = await l.chargedOnce(t);
    const txs = new Map<Hex, bigint>();
    for (const e of events) txs.set(e.txHash, e.blockNumber);
    const blocks = [...txs.values()].sort((a, b) => (a < b ? -1 : 1));
    t.equal(txs.size, 12, 'twelve batches');
    const nonces = await Promise.all([...txs.keys()].map(async (hash) => (await l.pub.getTransaction({ hash })).nonce));
    t.same(
      nonces.sort((a, b) => a - b),
      Array.from({ length: 12 }, (_, i) => start + i),
      'on consecutive nonces of the one key',
    );
    const first = blocks[0]!;
    // The first batch is confirmed once block first + CONFIRMATIONS - 1 is mined: those mined before were sent while it
    // waited. One batch per confirmation window (send, then wait) would put them CONFIRMATIONS blocks apart.
    const inFlight = blocks.filter((b) => b < first + BigInt(CONFIRMATIONS - 1)).length;
    t.ok(inFlight >= 4, `${inFlight} batches mined while the first awaited its confirmations`);
    const span = Number(blocks.at(-1)! - first) + 1;
    t.ok(
      span <= 2 * CONFIRMATIONS,
      `all 12 mined within ${span} blocks (${(span / CONFIRMATIONS).toFixed(1)} confirmation windows; one batch a window takes 12)`,
    );
  },
);

t.test('batches waiting unmined stop at batchesUnmined: the settler sends more as blocks take them', async (t) => {
  const l = await lane(t, 'chain_a', {}, { batchesUnmined: 3 });
  await mineEvery(l.test, 0);
  const n0 = await l.nonce('latest');
  await l.debit(200); // 10 batches of 20
  await l.settler.start();
  await sentUpTo(l, n0 + 3);
  // Ten poll intervals of the chain (25 ms) and as many reads of the stream: nothing more goes out meanwhile.
  await new Promise((r) => setTimeout(r, 250));
  t.equal(await l.nonce('pending'), n0 + 3, 'three batches sent, none more while they wait unmined');
  await l.test.mine({ blocks: 1 });
  await sentUpTo(l, n0 + 6);
  t.equal(await l.nonce('latest'), n0 + 3, 'once a block took them, three more sent before any was confirmed');
  await mineEvery(l.test, BLOCK_MS);
  await l.chargedOnce(t);
  t.equal(l.sent.length, 10, 'ten batches in all');
});

t.test(
  'a batch that reverts between batches in flight: its debits are charged by a later batch, the ones around it stand',
  async (t) => {
    const l = await lane(t, 'chain_b');
    const mine = async (blocks = 1) => l.test.mine({ blocks });
    const ownerTx = async (functionName: 'revokeSettler' | 'proposeSettler' | 'grantSettler', tip?: bigint) => {
      const hash = await l.ownerWallet.writeContract({
        address: dc.chains.chain_b.escrow,
        abi: escrowAbi,
        functionName,
        args: [settlerKey.address],
        ...(tip ? { maxPriorityFeePerGas: tip, maxFeePerGas: 100_000_000_000n } : {}),
      });
      await mine();
      if ((await l.pub.waitForTransactionReceipt({ hash })).status !== 'success')
        throw new Error(`${functionName} reverted`);
    };
    await mineEvery(l.test, 0); // blocks by hand from here: what goes into which block is the test's
    const n0 = await l.nonce('latest');
    await l.settler.start();

    await l.debit(20);
    await sentUpTo(l, n0 + 1);
    await mine(); // batch 1 mined
    await l.debit(20);
    await sentUpTo(l, n0 + 2);
    await ownerTx('revokeSettler', 50_000_000_000n); // a higher tip: mined ahead of batch 2, in the same block
    const b1 = await l.pub.waitForTransactionReceipt({ hash: l.sent[0]!.txHash });
    const b2 = await l.pub.waitForTransactionReceipt({ hash: l.sent[1]!.txHash });
    t.same([b1.status, b2.status], ['success', 'reverted'], 'batch 2 reverted onchain (NotSettler), batch 1 did not');
    // The role back through its timelock (proposal, twice the withdrawal delay, grant).
    await ownerTx('proposeSettler');
    await l.test.increaseTime({ seconds: Number(2n * WITHDRAWAL_DELAY) + 1 });
    await ownerTx('grantSettler');
    await l.debit(20);
    await sentUpTo(l, n0 + 3);
    const head = await l.pub.getBlockNumber({ cacheTime: 0 });
    t.ok(
      head < b1.blockNumber + BigInt(CONFIRMATIONS - 1),
      'batch 3 sent with batches 1 and 2 still awaiting their confirmations',
    );
    await mineEvery(l.test, BLOCK_MS);

    const events = await l.chargedOnce(t);
    const byTx = new Map<Hex, number>();
    for (const e of events) byTx.set(e.txHash, (byTx.get(e.txHash) ?? 0) + 1);
    t.equal(byTx.get(l.sent[0]!.txHash), 20, 'batch 1 stands');
    t.equal(byTx.get(l.sent[2]!.txHash), 20, 'batch 3 stands');
    t.notOk(byTx.has(l.sent[1]!.txHash), 'batch 2 charged nothing');
    const retry = l.sent.slice(3).filter((p) => byTx.has(p.txHash));
    t.equal(
      retry.reduce((n, p) => n + byTx.get(p.txHash)!, 0),
      20,
      "batch 2's debits charged by a later batch",
    );
    t.ok(
      retry.every((p) => p.nonce > l.sent[2]!.nonce),
      'on a nonce after the batches in flight',
    );
    t.ok(
      (await l.metrics.settlementFailures.get()).values.some((v) => v.value >= 1),
      'the failure counted',
    );
  },
);

t.test(
  'a stuck batch is bumped (same nonce, higher fee) while others wait behind it; each debit charged once',
  async (t) => {
    const l = await lane(t, 'chain_c');
    await mineEvery(l.test, 0);
    const n0 = await l.nonce('latest');
    await l.settler.start();
    await l.debit(60);
    await sentUpTo(l, n0 + 3); // three batches in the mempool
    const first = await Promise.all(l.sent.slice(0, 3).map((p) => l.pub.getTransaction({ hash: p.txHash })));
    // Fees jump above what they offered: none of the three can be mined until it is re-sent with more.
    await l.test.request({ method: 'hardhat_setNextBlockBaseFeePerGas' as never, params: ['0xba43b7400'] as never }); // 50 gwei
    await mineEvery(l.test, BLOCK_MS);

    const events = await l.chargedOnce(t);
    const minedTxs = [...new Set(events.map((e) => e.txHash))];
    const mined = await Promise.all(minedTxs.map((hash) => l.pub.getTransaction({ hash })));
    for (const [i, tx] of first.entries()) {
      const m = mined.find((x) => x.nonce === tx.nonce);
      t.ok(
        m && m.hash !== tx.hash && m.maxFeePerGas! > tx.maxFeePerGas!,
        `nonce ${tx.nonce} (batch ${i + 1}) mined as its replacement, at a higher fee`,
      );
    }
    t.equal(await l.nonce('latest'), n0 + 3, 'three transactions of the key mined, one per nonce');
  },
);

t.test(
  'batches mined on a branch a reorg drops are sent again and charged once on the branch that stays',
  async (t) => {
    const l = await lane(t, 'chain_d');
    await mineEvery(l.test, 0);
    const snapshot = await l.test.snapshot();
    const n0 = await l.nonce('latest');
    await l.settler.start();
    await l.debit(60);
    await sentUpTo(l, n0 + 3);
    await l.test.mine({ blocks: 2 });
    t.equal(await l.nonce('latest'), n0 + 3, 'three batches mined, unconfirmed');
    const orphaned = await l.pub.getTransactionReceipt({ hash: l.sent[0]!.txHash });
    await l.test.revert({ id: snapshot }); // the blocks that held them are gone
    t.equal(await l.nonce('latest'), n0, 'the branch without them');
    await mineEvery(l.test, BLOCK_MS);

    const events = await l.chargedOnce(t);
    const again = await l.pub.getTransactionReceipt({ hash: events[0]!.txHash });
    t.not(again.blockHash, orphaned.blockHash, 'charged in a block of the branch that stays');
    t.equal(await l.nonce('latest'), n0 + 3, 'the same three nonces, mined once each');
    // The node forgot them with their blocks: each batch was re-sent on its own nonce, none as a new batch.
    t.equal(l.sent.length, 3, 'no batch sent anew');
    t.notOk(
      events.some((e) => l.sent.some((p) => p.txHash === e.txHash)),
      'each mined as re-sent after the reorg',
    );
  },
);

t.test('a confirmed batch whose acknowledgement Redis refuses is acknowledged again, never sent again', async (t) => {
  // The settler's Redis refuses its first two acknowledgement transactions (as one that is away would).
  let refused = 0;
  const refusing = (r: Redis): Redis =>
    new Proxy(r, {
      get(target, prop) {
        if (prop !== 'multi') return Reflect.get(target, prop, target) as unknown;
        return (...args: unknown[]) => {
          const m = (target.multi as (...a: unknown[]) => ReturnType<Redis['multi']>)(...args);
          const exec = m.exec.bind(m);
          m.exec = (async () => {
            if (refused < 2) {
              refused++;
              m.discard();
              throw new Error('Connection is closed.');
            }
            return exec();
          }) as typeof m.exec;
          return m;
        };
      },
    });
  const l = await lane(t, 'chain_b', {}, {}, refusing);
  await l.debit(40); // 2 batches of 20
  await l.settler.start();
  await l.chargedOnce(t);
  await until('the debits acknowledged', async () => (await l.redis.xlen('debits:chain_b')) === 0);
  t.equal(refused, 2, 'two acknowledgements refused');
  t.equal(l.sent.length, 2, 'each batch sent once: a confirmed batch is not sent again for its acknowledgement');
});

t.test(
  'several settlers on one stream: a batch awaiting confirmations longer than claimIdleMs is not taken by another',
  async (t) => {
    // The confirmation window (0.8 s) is well past claimIdleMs (300 ms), as 12 blocks of 12 s are past the default 60 s.
    const l = await lane(t, 'chain_c', {}, { claimIdleMs: 300 });
    const other = new Settler(
      l.redis,
      { chain_c: l.recorded },
      's-chain_c-2',
      {
        batchSize: 20,
        batchWaitMs: 50,
        claimIdleMs: 300,
        batchesInFlight: 16,
      },
      l.metrics,
      quiet,
    );
    t.teardown(() => other.stop());
    await l.debit(200); // 10 batches of 20, split between the two
    await Promise.all([l.settler.start(), other.start()]);
    await l.chargedOnce(t);
    await until('the debits acknowledged', async () => (await l.redis.xlen('debits:chain_c')) === 0);
    t.equal(
      l.sent.length,
      10,
      'ten batches in all: no entry in flight was claimed and sent again by the other settler',
    );
    const skipped = (await l.metrics.settlementCharges.get()).values
      .filter((v) => v.labels.outcome !== 'charged')
      .reduce((n, v) => n + v.value, 0);
    t.equal(skipped, 0, 'no charge skipped by the escrow');
  },
);

t.test(
  'a settler that died with batches in flight: its entries are taken over batch after batch, not one batch per pass',
  async (t) => {
    const l = await lane(t, 'chain_d'); // claimIdleMs 60 s: a new pass over the stream every 30 s
    await l.debit(200);
    const prefix = (l.redis.options.keyPrefix as string | undefined) ?? '';
    await l.redis.call('XGROUP', 'CREATE', `${prefix}debits:chain_d`, 'settlers', '0');
    // A settler that read them all and died: its entries pending, idle for 100 s.
    const got = (await l.redis.xreadgroup(
      'GROUP',
      'settlers',
      'dead',
      'COUNT',
      200,
      'STREAMS',
      'debits:chain_d',
      '>',
    )) as [string, [string, string[]][]][];
    const ids = got[0]![1].map(([id]) => id);
    t.equal(ids.length, 200);
    await l.redis.xclaim('debits:chain_d', 'settlers', 'dead', 0, ...ids, 'IDLE', 100_000, 'JUSTID');
    await l.settler.start();
    // One batch of 20 per pass would take ten passes, 270 s; chargedOnce waits 30 s.
    await l.chargedOnce(t);
    t.equal(l.sent.length, 10, 'ten batches, each entry sent once');
  },
);
