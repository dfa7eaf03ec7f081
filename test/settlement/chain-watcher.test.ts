import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { createPublicClient, createTestClient, createWalletClient, http, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import {
  ChainWatcher,
  resumeChain,
  type ChainHalt,
  type WatcherSettings,
} from '../../plugins/settlement/chain-watcher.js';
import { readAnomalies } from '../../plugins/settlement/apply-events.js';
import { startRpcProxy } from '../chains/rpc-proxy.js';
import { escrowAbi, testStablecoinAbi, RECEIVE_WITH_AUTHORIZATION_TYPES } from '../../plugins/chains/abi.js';
import { CHAIN_NAMES, type Address, type ChainConfig, type ChainName } from '../../plugins/chains/config.js';
import {
  DEV_KEYS,
  DEV_MAX_CHARGE,
  devViemChain,
  startDevChains,
  type DevKey,
} from '../../plugins/chains/dev-chains.js';
import { mintAndDeposit } from '../../plugins/chains/dev-fund.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import type { SettlementChain } from '../../plugins/chains/port.js';
import { createMetrics, type Metrics } from '../../plugins/metrics/metrics.js';
import type { Log } from '../../plugins/log.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { pruneConsumers, Settler } from '../../plugins/settlement/settler.js';
import { debitHold, placeHold, readWallet } from '../../plugins/billing/wallets.js';
import { getCallRecord, getCallRecordById } from '../../plugins/billing/call-records.js';
import { keys } from '../../plugins/store/keys.js';
import { dropPrefix, testPrefix } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

// Dev chains of our own: a 2 s withdrawal timelock instead of an hour (time is still advanced through the RPC).
const dc = await startDevChains({ host: '127.0.0.1', basePort: 0, withdrawalDelay: 2n, testMethods: true });
t.teardown(() => dc.close());

const c = dc.chains.chain_a;
const evm = Object.fromEntries(
  CHAIN_NAMES.map((n) => [n, createEvmChain(n, dc.chains[n], { settlerKey: DEV_KEYS.settler.privateKey })]),
) as Record<ChainName, SettlementChain>;
const chainA = evm.chain_a;
const viemChain = devViemChain('chain_a', c.chain_id, c.rpc_url);
const transport = http(c.rpc_url);
const pub = createPublicClient({ chain: viemChain, transport, pollingInterval: 10 });
const testClient = createTestClient({ chain: viemChain, transport, mode: 'hardhat' });
const wallet = (k: DevKey) =>
  createWalletClient({ chain: viemChain, transport, account: privateKeyToAccount(k.privateKey) });
const [alice, bob, carol, dave] = DEV_KEYS.callers;
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const quiet = { error() {}, warn() {} };

const randomAccount = (): Address => `0x${randomBytes(20).toString('hex')}`;

async function mined(hash: Promise<Hex>): Promise<void> {
  const r = await pub.waitForTransactionReceipt({ hash: await hash });
  if (r.status !== 'success') throw new Error(`tx ${r.transactionHash} reverted`);
}

const mint = (to: Address, value: bigint) =>
  mined(
    wallet(DEV_KEYS.deployer).writeContract({
      address: c.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'mint',
      args: [to, value],
    }),
  );
const approve = (k: DevKey, value: bigint) =>
  mined(
    wallet(k).writeContract({
      address: c.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'approve',
      args: [c.escrow, value],
    }),
  );
const deposit = (k: DevKey, value: bigint) =>
  mined(wallet(k).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'deposit', args: [value] }));
const requestWithdrawal = (k: DevKey, value: bigint) =>
  mined(
    wallet(k).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'requestWithdrawal', args: [value] }),
  );
const cancelWithdrawal = (k: DevKey) =>
  mined(wallet(k).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'cancelWithdrawal' }));
const withdraw = (k: DevKey) =>
  mined(wallet(k).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'withdraw' }));

/** Past the escrow's timelock: chain time moves on, and a block is mined at the new time. */
async function passTimelock(): Promise<void> {
  await testClient.increaseTime({ seconds: 5 });
  await testClient.mine({ blocks: 1 });
}

/** A gasless deposit: `signer` signs an EIP-3009 ReceiveWithAuthorization to the escrow, `relayer` sends it. */
async function depositWithAuthorization(signer: DevKey, relayer: DevKey, value: bigint): Promise<void> {
  const nonce = `0x${randomBytes(32).toString('hex')}` as Hex;
  const validBefore = 10n ** 10n;
  const signature = await wallet(signer).signTypedData({
    domain: { name: 'Test USD Coin', version: '2', chainId: c.chain_id, verifyingContract: c.stablecoin },
    types: RECEIVE_WITH_AUTHORIZATION_TYPES,
    primaryType: 'ReceiveWithAuthorization',
    message: { from: signer.address, to: c.escrow, value, validAfter: 0n, validBefore, nonce },
  });
  const r = `0x${signature.slice(2, 66)}` as Hex;
  const s = `0x${signature.slice(66, 130)}` as Hex;
  const v = parseInt(signature.slice(130, 132), 16);
  await mined(
    wallet(relayer).writeContract({
      address: c.escrow,
      abi: escrowAbi,
      functionName: 'depositWithAuthorization',
      args: [signer.address, value, 0n, validBefore, nonce, v, r, s],
    }),
  );
}

/** Value of a counter for the given labels (0 when never incremented). */
async function counter(
  m: { get(): Promise<{ values: { labels: object; value: number }[] }> },
  labels: Record<string, string>,
): Promise<number> {
  const { values } = await m.get();
  const hit = values.find((v) =>
    Object.entries(labels).every(([k, want]) => (v.labels as Record<string, unknown>)[k] === want),
  );
  return hit?.value ?? 0;
}

/** A Redis namespace of its own for one test, and watchers on it. */
function session(t: Test) {
  const prefix = testPrefix();
  const redis = connectRedis({ url: REDIS_URL, prefix });
  const watchers: ChainWatcher[] = [];
  t.teardown(async () => {
    await Promise.all(watchers.map((w) => w.stop()));
    await dropPrefix(redis, prefix);
    await redis.quit();
  });
  const settings = (over: Partial<WatcherSettings> = {}): WatcherSettings => ({
    pollMs: 50,
    reconcileMs: 3_600_000, // reconcile only when a test calls reconcile()
    reconcileRate: 1_000,
    startBlocks: Object.fromEntries(CHAIN_NAMES.map((n) => [n, BigInt(dc.chains[n].deploy_block)])),
    ...over,
  });
  return {
    redis,
    watcher(
      chains: Partial<Record<ChainName, SettlementChain>> = { chain_a: chainA },
      instance = 'w1',
      metrics: Metrics = createMetrics({ defaults: false }),
      over: Partial<WatcherSettings> = {},
      log: Log = quiet,
    ) {
      const w = new ChainWatcher(redis, chains, instance, settings(over), metrics, log);
      watchers.push(w);
      return { w, metrics };
    },
    /** The wallet once its synced balance equals balanceOf onchain (and `extra` holds). */
    synced(
      account: string,
      chain: ChainName = 'chain_a',
      extra: (w: Awaited<ReturnType<typeof readWallet>>) => boolean = () => true,
    ) {
      return until(`${account} synced on ${chain}`, async () => {
        const onchain = await evm[chain].balanceOf(account as Address);
        const w = await readWallet(redis, account, chain);
        return w.synced === onchain && extra(w) ? w : null;
      });
    },
  };
}

t.test(
  'deposits (depositFor, deposit, gasless depositWithAuthorization) raise the synced balance to balanceOf',
  async (t) => {
    const s = session(t);
    const { w, metrics } = s.watcher(evm);
    w.start();
    const x = randomAccount();
    await mintAndDeposit(c, x, 1_250_000n);
    await mintAndDeposit(dc.chains.chain_b, x, 700_000n);
    const wx = await s.synced(x, 'chain_a', (v) => v.synced === 1_250_000n);
    t.equal(wx.available, 1_250_000n, 'all of it available');
    t.equal(
      (await s.synced(x, 'chain_b', (v) => v.synced === 700_000n)).synced,
      700_000n,
      'chain_b has its own balance',
    );
    t.equal((await readWallet(s.redis, x, 'chain_c')).synced, 0n, 'other chains untouched');

    // A caller deposits from its own key after approving the escrow.
    const before = await chainA.balanceOf(alice.address);
    await mint(alice.address, 2_000_000n);
    await approve(alice, 2_000_000n);
    await deposit(alice, 2_000_000n);
    const wa = await s.synced(alice.address, 'chain_a', (v) => v.synced === before + 2_000_000n);
    t.equal(wa.synced, before + 2_000_000n);

    // Bob signs, Carol relays and pays the gas: Bob is credited.
    const bobBefore = await chainA.balanceOf(bob.address);
    await mint(bob.address, 3_000_000n);
    await depositWithAuthorization(bob, carol, 3_000_000n);
    const wb = await s.synced(bob.address, 'chain_a', (v) => v.synced === bobBefore + 3_000_000n);
    t.equal(wb.synced, bobBefore + 3_000_000n);
    t.equal(
      await readWallet(s.redis, carol.address, 'chain_a').then((v) => v.synced),
      await chainA.balanceOf(carol.address),
      'the relayer is not credited',
    );
    t.ok(
      (await counter(metrics.chainEvents, { chain: 'chain_a', kind: 'deposited' })) >= 3,
      'deposits counted on chain_a',
    );
    t.ok((await counter(metrics.chainEvents, { chain: 'chain_b', kind: 'deposited' })) >= 1, 'and on chain_b');
  },
);

t.test(
  'a withdrawal request locks its amount at once, cancel unlocks it, withdraw after the timelock lowers synced',
  async (t) => {
    const s = session(t);
    const { w } = s.watcher();
    w.start();
    await mint(dave.address, 3_000_000n);
    await approve(dave, 3_000_000n);
    await deposit(dave, 3_000_000n);
    const start = await s.synced(dave.address);
    t.ok(start.synced >= 3_000_000n);

    await requestWithdrawal(dave, 1_000_000n);
    const locked = await s.synced(dave.address, 'chain_a', (v) => v.locked === 1_000_000n);
    t.equal(locked.synced, start.synced, 'the escrow balance is unchanged until the withdrawal');
    t.equal(locked.available, start.synced - 1_000_000n, 'available drops by the requested amount');

    await cancelWithdrawal(dave);
    const cancelled = await s.synced(dave.address, 'chain_a', (v) => v.locked === 0n);
    t.equal(cancelled.available, start.synced, 'cancel restores it');

    await requestWithdrawal(dave, 1_500_000n);
    await s.synced(dave.address, 'chain_a', (v) => v.locked === 1_500_000n);
    await passTimelock();
    await withdraw(dave);
    const done = await s.synced(
      dave.address,
      'chain_a',
      (v) => v.locked === 0n && v.synced === start.synced - 1_500_000n,
    );
    t.equal(done.synced, start.synced - 1_500_000n, 'synced lowered by the amount paid');
    t.equal(done.available, done.synced);
  },
);

t.test(
  'a restarted watcher resumes after the last applied event: each event applied once; an old range is a no-op',
  async (t) => {
    const s = session(t);
    const x = randomAccount();
    const y = randomAccount();
    const first = s.watcher({ chain_a: chainA }, 'instance-1');
    first.w.start();
    await mintAndDeposit(c, x, 1_000_000n);
    await s.synced(x, 'chain_a', (v) => v.synced === 1_000_000n);
    await first.w.stop();

    // While no watcher runs.
    await mintAndDeposit(c, x, 200_000n);
    await mintAndDeposit(c, x, 30_000n);
    await mintAndDeposit(c, y, 4_000n);

    const second = s.watcher({ chain_a: chainA }, 'instance-2');
    second.w.start();
    const wx = await s.synced(x, 'chain_a', (v) => v.synced === 1_230_000n);
    const wy = await s.synced(y, 'chain_a', (v) => v.synced === 4_000n);
    t.equal(wx.synced, 1_230_000n, 'no double count');
    t.equal(wy.synced, 4_000n);
    t.equal(
      await counter(second.metrics.chainEvents, { chain: 'chain_a', kind: 'deposited' }),
      3,
      'the new watcher applied only the 3 new events',
    );
    await second.w.stop();

    // Scan everything again from the deploy block: the cursor skips what was applied.
    await s.redis.del('scanned:chain_a');
    t.equal(await second.w.poll('chain_a', chainA), 0, 'nothing applied twice');
    t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 1_230_000n);
    t.equal((await readWallet(s.redis, y, 'chain_a')).synced, 4_000n);
  },
);

t.test(
  'a stopped watcher gives up its chain lease, so a successor takes over without waiting for it to expire',
  async (t) => {
    const s = session(t);
    const { w } = s.watcher({ chain_a: chainA }, 'leaving');
    w.start();
    await until('lease taken', async () => (await s.redis.get('watcher-lease:chain_a')) === 'leaving');
    await w.stop();
    t.not(await s.redis.get('watcher-lease:chain_a'), 'leaving', 'lease released on stop');
  },
);

t.test(
  'a watcher holding its lease polls an unmoved head with no Redis command; a new block is read at once',
  async (t) => {
    const s = session(t);
    // Polls counted by their reads of the head: a poll reads it first, and the next starts once the last has ended.
    let polls = 0;
    const counted = new Proxy(chainA, {
      get: (target, prop) => {
        if (prop === 'latestBlock') return () => (polls++, target.latestBlock());
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
    const { w } = s.watcher({ chain_a: counted }, 'quiet');
    let commands = 0;
    const send = s.redis.sendCommand.bind(s.redis);
    s.redis.sendCommand = ((...args: Parameters<typeof send>) => {
      commands++;
      return send(...args);
    }) as typeof s.redis.sendCommand;
    w.start();
    const head = await chainA.latestBlock();
    await until('scanned to the head', async () => (await s.redis.get('scanned:chain_a')) === head.toString());
    const after = polls;
    await until('the poll that wrote it has finished', async () => polls > after + 1, 20_000, 5);
    commands = 0;
    const from = polls;
    await until('10 more polls', async () => polls >= from + 10, 20_000, 5);
    t.equal(commands, 0, 'no Redis command while the head stands still (the lease is renewed every 3.3 s)');
    t.equal(await s.redis.get('watcher-lease:chain_a'), 'quiet', 'the lease still held');
    const x = randomAccount();
    await mintAndDeposit(c, x, 7_000n);
    await s.synced(x, 'chain_a', (v) => v.synced === 7_000n);
    t.ok(commands > 0);
  },
);

/**
 * chain_a whose reads of the head and of events fail while `state` says so (an RPC outage or rate limit), and whose
 * balanceOf fails or answers only once `balanceHeld` resolves (a slow archive read).
 */
function flaky(inner: SettlementChain) {
  const state = {
    events: false,
    head: false,
    balance: false,
    /** balanceOf answers only once this resolves (a slow archive read); `balanceWaiting` counts the reads held. */
    balanceHeld: undefined as Promise<void> | undefined,
    balanceWaiting: 0,
    /** Reads of the head never answer until this resolves; `hung` counts the reads held. */
    hang: undefined as Promise<void> | undefined,
    hung: 0,
  };
  const outage = () => Promise.reject(new Error('HTTP request failed. Status: 503'));
  /** Hold a read until `gate` resolves, counting it in state[count] meanwhile. */
  const held = async (gate: Promise<void> | undefined, count: 'hung' | 'balanceWaiting') => {
    if (!gate) return;
    state[count]++;
    await gate;
    state[count]--;
  };
  // A request that never answers until `hang` resolves (a node that accepts the connection and goes silent).
  const headOf = async () => {
    await held(state.hang, 'hung');
    return state.head ? outage() : inner.latestBlock();
  };
  const chain: SettlementChain = {
    name: inner.name,
    chainId: inner.chainId,
    escrow: inner.escrow,
    canSettle: inner.canSettle,
    balanceOf: async (...args) => {
      await held(state.balanceHeld, 'balanceWaiting');
      return state.balance ? outage() : inner.balanceOf(...args);
    },
    pendingWithdrawal: (...args) => inner.pendingWithdrawal(...args),
    blockHash: (n) => inner.blockHash(n),
    maxCharge: () => inner.maxCharge(),
    withdrawalDelay: () => inner.withdrawalDelay(),
    callStatus: (id) => inner.callStatus(id),
    latestBlock: headOf,
    readEvents: (from, to) => (state.events ? outage() : inner.readEvents(from, to)),
    scanEvents: (from, to, parent) => (state.events ? outage() : inner.scanEvents(from, to, parent)),
    submitCharges: (charges) => inner.submitCharges(charges),
    charge: (charges) => inner.charge(charges),
  };
  return { chain, state };
}

t.test(
  'RPC errors: the watcher keeps its cursor, counts farebox_chain_errors_total, and catches up after',
  async (t) => {
    const s = session(t);
    const f = flaky(chainA);
    const { w, metrics } = s.watcher({ chain_a: f.chain }, 'flaky');
    const x = randomAccount();
    w.start();
    await mintAndDeposit(c, x, 100_000n);
    await s.synced(x, 'chain_a', (v) => v.synced === 100_000n);
    const scanned = await s.redis.get('scanned:chain_a');
    const cursor = await s.redis.get('cursor:chain_a');

    f.state.events = true; // eth_getLogs refused, the head still answers
    await mintAndDeposit(c, x, 50_000n);
    await until('errors counted', async () => (await counter(metrics.chainErrors, { chain: 'chain_a' })) >= 2);
    f.state.head = true; // now the node is down altogether
    await until('more errors counted', async () => (await counter(metrics.chainErrors, { chain: 'chain_a' })) >= 4);
    t.equal(await s.redis.get('scanned:chain_a'), scanned, 'scanned block kept');
    t.equal(await s.redis.get('cursor:chain_a'), cursor, 'cursor kept');
    t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 100_000n, 'nothing applied during the outage');

    f.state.events = false;
    f.state.head = false;
    const after = await s.synced(x, 'chain_a', (v) => v.synced === 150_000n);
    t.equal(after.synced, 150_000n, 'the deposit made during the outage is applied, once');
    t.ok((await counter(metrics.chainErrors, { chain: 'chain_a' })) >= 4);
  },
);

t.test('reconciler: a difference seen twice alike is corrected to balanceOf and counted as drift', async (t) => {
  const s = session(t);
  const { w, metrics } = s.watcher();
  const x = randomAccount();
  await mintAndDeposit(c, x, 2_000_000n);
  await until('deposit applied', async () => {
    await w.poll('chain_a', chainA);
    return (await readWallet(s.redis, x, 'chain_a')).synced === 2_000_000n;
  });
  const wr = s.redis;
  await wr.hset(keys.wallet(x, 'chain_a'), 'synced', '5000000');
  t.equal(await w.reconcile('chain_a', chainA), 0, 'first sighting: could be the watcher lagging');
  await wr.hset(keys.wallet(x, 'chain_a'), 'synced', '6000000');
  t.equal(await w.reconcile('chain_a', chainA), 0, 'a different difference: still not corrected');
  t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 6_000_000n);
  t.equal(await counter(metrics.drift, { chain: 'chain_a' }), 0);
  t.equal(await w.reconcile('chain_a', chainA), 1, 'the same difference twice: corrected');
  t.equal((await readWallet(s.redis, x, 'chain_a')).synced, await chainA.balanceOf(x));
  t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 2_000_000n);
  t.equal(await counter(metrics.drift, { chain: 'chain_a' }), 4, 'drift grows by the 4 USD difference');
  t.equal(await counter(metrics.driftCorrections, { chain: 'chain_a' }), 1);
  t.equal(await w.reconcile('chain_a', chainA), 0, 'nothing left to correct');
  t.equal(await w.reconcile('chain_a', chainA), 0);
  t.equal(await counter(metrics.drift, { chain: 'chain_a' }), 4);

  // Too low is corrected the same way.
  await wr.hset(keys.wallet(x, 'chain_a'), 'synced', '1500000');
  await w.reconcile('chain_a', chainA);
  t.equal(await w.reconcile('chain_a', chainA), 1);
  t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 2_000_000n);
  t.equal(await counter(metrics.drift, { chain: 'chain_a' }), 4.5);
});

t.test(
  'reconciler: a deposit the watcher has not reached yet (confirmations) is not drift, and is never counted twice',
  async (t) => {
    const s = session(t);
    // chain_a read with 3 confirmations: the watcher stays 2 blocks behind the head.
    const confirmed = createEvmChain('chain_a', { ...(c as ChainConfig), confirmations: 3 });
    const { w, metrics } = s.watcher({ chain_a: confirmed });
    const x = randomAccount();
    await mintAndDeposit(c, x, 1_000_000n);
    await testClient.mine({ blocks: 2 });
    await w.poll('chain_a', confirmed);
    t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 1_000_000n);

    await mintAndDeposit(c, x, 500_000n); // at the head: not confirmed yet
    await w.poll('chain_a', confirmed);
    t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 1_000_000n, 'not applied before 3 confirmations');
    await w.reconcile('chain_a', confirmed);
    await w.reconcile('chain_a', confirmed);

    await testClient.mine({ blocks: 2 });
    await w.poll('chain_a', confirmed);
    const after = await readWallet(s.redis, x, 'chain_a');
    const onchainNow = await chainA.balanceOf(x);
    t.equal(after.synced, onchainNow, `synced (${after.synced}) = balanceOf (${onchainNow}) once confirmed`);
    t.equal(after.synced, 1_500_000n, 'the deposit counted once');
    t.equal(await counter(metrics.drift, { chain: 'chain_a' }), 0, 'no drift where there was none');
  },
);

/** A debit of `price` for `account` made by the wallet scripts, as a billed call makes it. */
async function debit(s: ReturnType<typeof session>, address: string, hold: bigint, price: bigint) {
  const account = address.toLowerCase(); // account ids are lowercase addresses (accounts.ts)
  const r = s.redis;
  const requestId = `req_${randomBytes(16).toString('hex')}`;
  const callId = callIdOf(requestId);
  const placed = await placeHold(r, {
    requestId,
    callId,
    account,
    chain: 'chain_a',
    amount: hold,
    owner: 'test',
    ttlMs: 60_000,
    model: 'gamma-k3',
    keyId: 'key_test',
    retentionMs: 3_600_000,
  });
  if (!placed.placed) throw new Error(`hold refused: ${placed.available} available`);
  const settled = await debitHold(r, {
    requestId,
    callId,
    account,
    chain: 'chain_a',
    owner: 'test',
    price,
    usageJson: JSON.stringify({ input_tokens: 10, output_tokens: 5 }),
    retentionMs: 3_600_000,
  });
  if (settled?.debited !== price) throw new Error('the debit did not debit');
  return { requestId, callId };
}

function settler(t: Test, s: ReturnType<typeof session>, metrics: Metrics): Settler {
  const st = new Settler(
    s.redis,
    { chain_a: chainA },
    'settler-test',
    { batchSize: 50, batchWaitMs: 0, claimIdleMs: 60_000 },
    metrics,
    quiet,
  );
  t.teardown(() => st.stop());
  return st;
}

t.test('a Charged event moves the debit out of pending exactly once and lowers synced to balanceOf', async (t) => {
  const s = session(t);
  const { w, metrics } = s.watcher();
  w.start();
  const x = randomAccount();
  await mintAndDeposit(c, x, 1_000_000n);
  await s.synced(x, 'chain_a', (v) => v.synced === 1_000_000n);
  const { requestId, callId } = await debit(s, x, 400_000n, 250_000n);
  const pending = await readWallet(s.redis, x, 'chain_a');
  t.same(
    { pending: pending.pending, held: pending.held, available: pending.available },
    { pending: 250_000n, held: 0n, available: 750_000n },
  );
  t.equal((await getCallRecord(s.redis, requestId))?.status, 'pending');

  await settler(t, s, metrics).start();
  const done = await s.synced(x, 'chain_a', (v) => v.pending === 0n);
  t.equal(done.synced, 750_000n, 'synced lowered by the charge');
  t.equal(done.available, 750_000n, 'available unchanged by settlement');
  t.equal(await chainA.callStatus(callId), 'charged');
  const d = (await getCallRecord(s.redis, requestId))!;
  t.same(
    { call_id: d.call_id, status: d.status, price: d.priceAtomic },
    { call_id: requestId, status: 'settled', price: 250_000n },
    'the call record settled',
  );
  t.match(d.tx, /^0x[0-9a-f]{64}$/, 'with the tx');

  // The same debit queued again (a settler that died before its ack): the escrow skips it, nothing moves.
  await s.redis.xadd(
    keys.debits('chain_a'),
    '*',
    'request_id',
    requestId,
    'call_id',
    callId,
    'account',
    x,
    'amount',
    '250000',
  );
  await until(
    'retry skipped onchain',
    async () => (await counter(metrics.settlementCharges, { chain: 'chain_a', outcome: 'already_charged' })) === 1,
  );
  await w.stop();
  await w.poll('chain_a', chainA); // whatever the retry emitted is applied
  // And the whole history applied again: the cursor skips it.
  await s.redis.del('scanned:chain_a');
  t.equal(await w.poll('chain_a', chainA), 0);
  const again = await readWallet(s.redis, x, 'chain_a');
  t.same(
    { synced: again.synced, pending: again.pending },
    { synced: 750_000n, pending: 0n },
    'pending left exactly once, synced charged once',
  );
  t.equal(again.synced, await chainA.balanceOf(x));
});

t.test("a mined batch wakes its process's watcher: the charge leaves pending long before the next poll", async (t) => {
  const s = session(t);
  const { w, metrics } = s.watcher({ chain_a: chainA }, 'w1', undefined, { pollMs: 60_000 });
  const x = randomAccount();
  await mintAndDeposit(c, x, 1_000_000n);
  w.start(); // its first poll reads the deposit; the next would come a minute later
  await s.synced(x, 'chain_a', (v) => v.synced === 1_000_000n);
  const { requestId } = await debit(s, x, 400_000n, 250_000n);
  const woken: string[] = [];
  const st = new Settler(
    s.redis,
    { chain_a: chainA },
    'settler-wake',
    {
      batchSize: 50,
      batchWaitMs: 0,
      claimIdleMs: 60_000,
      onMined: (chain) => (woken.push(chain), w.wake(chain)),
    },
    metrics,
    quiet,
  );
  t.teardown(() => st.stop());
  const started = Date.now();
  await st.start();
  const done = await s.synced(x, 'chain_a', (v) => v.pending === 0n);
  t.ok(Date.now() - started < 20_000, 'applied without waiting for the poll');
  t.same(woken, ['chain_a']);
  t.same({ synced: done.synced, pending: done.pending }, { synced: 750_000n, pending: 0n });
  t.equal((await getCallRecord(s.redis, requestId))?.status, 'settled');
  const stopping = Date.now();
  await w.stop();
  t.ok(Date.now() - stopping < 5_000, 'stop does not wait out the poll interval');
});

t.test(
  'a ChargeRefused event (balance gone before settlement) moves the debit out of pending, charges nothing',
  async (t) => {
    const s = session(t);
    const { w, metrics } = s.watcher();
    w.start();
    const y = carol; // a caller key: it withdraws everything before the settler runs
    await mint(y.address, 600_000n);
    await approve(y, 600_000n);
    await deposit(y, 600_000n);
    const start = await s.synced(y.address, 'chain_a');
    const { requestId, callId } = await debit(s, y.address, 500_000n, 500_000n);
    await requestWithdrawal(y, start.synced);
    await s.synced(y.address, 'chain_a', (v) => v.locked === start.synced);
    await passTimelock();
    await withdraw(y);
    const empty = await s.synced(y.address, 'chain_a', (v) => v.synced === 0n);
    t.equal(empty.pending, 500_000n, 'the debit still pending');

    await settler(t, s, metrics).start();
    const after = await s.synced(y.address, 'chain_a', (v) => v.pending === 0n);
    t.equal(after.synced, 0n, 'nothing charged');
    t.equal(await chainA.callStatus(callId), 'refused');
    t.equal((await getCallRecord(s.redis, requestId))?.status, 'failed', 'the call record says failed');
    t.equal(await counter(metrics.settlementCharges, { chain: 'chain_a', outcome: 'refused' }), 1);
    await w.stop();
    await s.redis.del('scanned:chain_a');
    t.equal(await w.poll('chain_a', chainA), 0, 're-scan applies nothing');
    t.equal((await readWallet(s.redis, y.address, 'chain_a')).pending, 0n, 'not released twice');
  },
);

t.test(
  'settler consumers: one that stops leaves its group; idle ones holding nothing are pruned, the rest kept',
  async (t) => {
    const s = session(t);
    const key = keys.debits('chain_a');
    const consumers = async () =>
      (
        (await s.redis.call(
          'XINFO',
          'CONSUMERS',
          (s.redis.options.keyPrefix as string) + key,
          'settlers',
        )) as string[][]
      )
        .map((c) => c[1]!)
        .sort();
    const st = settler(t, s, createMetrics({ defaults: false }));
    await st.start();
    await until('the settler joined its group', async () =>
      (await consumers().catch((): string[] => [])).includes('settler-test'),
    );
    await st.stop();
    t.same(await consumers(), [], 'a stopped settler with nothing pending leaves');

    // 'gone' took an entry and acknowledged it a while ago; 'busy' holds one it never acknowledged; 'live' just took
    // and acknowledged one.
    const take = async (consumer: string, ack: boolean) => {
      await s.redis.xadd(key, '*', 'request_id', 'r', 'call_id', '0x01', 'account', '0x02', 'amount', '1');
      const got = (await s.redis.xreadgroup('GROUP', 'settlers', consumer, 'COUNT', 1, 'STREAMS', key, '>')) as [
        string,
        [string, string[]][],
      ][];
      if (ack) await s.redis.xack(key, 'settlers', got[0]![1][0]![0]);
    };
    await take('gone', true);
    await take('busy', false);
    // Idle past the threshold by Redis's own count; 'live' is pruned only if this process stalls 200 ms after its take.
    const idle = async (consumer: string) => {
      const rows = (await s.redis.call(
        'XINFO',
        'CONSUMERS',
        (s.redis.options.keyPrefix as string) + key,
        'settlers',
      )) as (string | number)[][];
      const row = rows.find((c) => c[1] === consumer)!;
      return Number(row[row.indexOf('idle') + 1]);
    };
    await until('gone idle 250 ms', async () => (await idle('gone')) >= 250, 5_000, 20);
    await take('live', true);
    t.equal(await pruneConsumers(s.redis, 'chain_a', 200), 1);
    t.same(await consumers(), ['busy', 'live'], 'the entry busy holds stays claimable');
    t.equal(await pruneConsumers(s.redis, 'chain_a', 0, 'busy'), 0, 'never one holding an entry');
    t.equal(await pruneConsumers(s.redis, 'chain_a', 0, 'live'), 1, 'only the one named');
    t.same(await consumers(), ['busy']);
  },
);

t.test("a withdrawal emptied by charges (Withdrawn of 0) stops nothing: the chain's later events apply", async (t) => {
  const s = session(t);
  const { w, metrics } = s.watcher();
  w.start();
  const erin = DEV_KEYS.callers[4];
  await mint(erin.address, 500_000n);
  await approve(erin, 500_000n);
  await deposit(erin, 500_000n);
  const start = await s.synced(erin.address, 'chain_a', (v) => v.synced > 0n);
  await debit(s, erin.address, start.synced, start.synced); // a call that takes all of it
  await requestWithdrawal(erin, start.synced);
  await s.synced(erin.address, 'chain_a', (v) => v.locked === start.synced);
  await settler(t, s, metrics).start(); // charged during the timelock
  await s.synced(erin.address, 'chain_a', (v) => v.pending === 0n && v.synced === 0n);
  await passTimelock();
  const withdrawnBefore = await counter(metrics.chainEvents, { chain: 'chain_a', kind: 'withdrawn' });
  await withdraw(erin); // Withdrawn(erin, 0, requested)
  const x = randomAccount();
  await mintAndDeposit(c, x, 42_000n);
  await s.synced(x, 'chain_a', (v) => v.synced === 42_000n);
  const after = await s.synced(erin.address, 'chain_a', (v) => v.locked === 0n);
  t.same(
    { synced: after.synced, locked: after.locked, pending: after.pending },
    { synced: 0n, locked: 0n, pending: 0n },
  );
  t.equal(
    await counter(metrics.chainEvents, { chain: 'chain_a', kind: 'withdrawn' }),
    withdrawnBefore + 1,
    'the Withdrawn of 0 applied',
  );
  t.equal(await counter(metrics.chainErrors, { chain: 'chain_a' }), 0, 'not one failed poll on the way');
});

t.test(
  'a charge above the escrow cap: ChargeOverCap applied as a refusal, the debit leaves pending, nothing charged',
  async (t) => {
    const s = session(t);
    const { w, metrics } = s.watcher();
    w.start();
    const x = randomAccount();
    await mintAndDeposit(c, x, DEV_MAX_CHARGE + 5_000_000n);
    await s.synced(x, 'chain_a', (v) => v.synced === DEV_MAX_CHARGE + 5_000_000n);
    const { callId } = await debit(s, x, DEV_MAX_CHARGE + 1n, DEV_MAX_CHARGE + 1n);
    await settler(t, s, metrics).start();
    const done = await s.synced(x, 'chain_a', (v) => v.pending === 0n);
    t.equal(done.synced, DEV_MAX_CHARGE + 5_000_000n, 'nothing charged');
    t.equal((await getCallRecordById(s.redis, callId))?.status, 'failed');
    t.equal(await counter(metrics.settlementCharges, { chain: 'chain_a', outcome: 'over_cap' }), 1);
    t.equal(await counter(metrics.chainEvents, { chain: 'chain_a', kind: 'charge_over_cap' }), 1);
  },
);

t.test('a lagging backend: a range its node has not reached is retried, never taken as scanned', async (t) => {
  const s = session(t);
  const proxy = await startRpcProxy(c.rpc_url);
  t.teardown(() => proxy.close());
  const viaProxy = createEvmChain('chain_a', { ...c, rpc_url: proxy.url });
  const { w, metrics } = s.watcher({ chain_a: viaProxy }, 'w-lag');
  const x = randomAccount();
  await mintAndDeposit(c, x, 9_000n);
  const head = await chainA.latestBlock();
  proxy.lagHead = head - 1n; // logs and blocks from a backend a block behind; the head from an up-to-date one
  w.start();
  await until(
    'the node counted behind',
    async () => (await counter(metrics.chainNodeBehind, { chain: 'chain_a' })) >= 3,
  );
  t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 0n, 'the deposit not applied');
  t.ok(BigInt((await s.redis.get('scanned:chain_a')) ?? '0') < head, 'its block not marked scanned');
  proxy.lagHead = undefined;
  t.equal((await s.synced(x, 'chain_a', (v) => v.synced === 9_000n)).synced, 9_000n, 'applied once the backend has it');
});

// chain_d: history there is rewound (evm_snapshot / evm_revert), so the other tests' chain_a stays as it is.
const d = dc.chains.chain_d;
const dTest = createTestClient({
  chain: devViemChain('chain_d', d.chain_id, d.rpc_url),
  transport: http(d.rpc_url),
  mode: 'hardhat',
});

t.test(
  'a reorg deeper than the confirmations halts the chain: nothing applied twice or dropped; resumeChain rebuilds from the fork',
  async (t) => {
    const s = session(t);
    const chainD = evm.chain_d;
    const errors: string[] = [];
    const { w, metrics } = s.watcher(
      { chain_d: chainD },
      'w-reorg',
      undefined,
      {},
      { error: (_o: object, msg: string) => void errors.push(msg), warn() {} },
    );
    await w.poll('chain_d', chainD); // up to the head
    const x = randomAccount();
    const y = randomAccount();
    const snapshot = await dTest.snapshot();
    await mintAndDeposit(d, x, 5_000n);
    await w.poll('chain_d', chainD);
    t.equal((await readWallet(s.redis, x, 'chain_d')).synced, 5_000n, 'applied on the first branch');
    const scanned = await s.redis.get('scanned:chain_d');
    const cursor = await s.redis.get('cursor:chain_d');

    await dTest.revert({ id: snapshot }); // x's deposit is gone; another branch grows past it
    await mintAndDeposit(d, y, 7_000n);
    await dTest.mine({ blocks: 2 });
    t.equal(await w.poll('chain_d', chainD), 0, 'nothing applied');
    const halt = JSON.parse((await s.redis.get('chain-halt:chain_d'))!) as ChainHalt;
    t.match(halt, { reason: 'reorg', block: scanned, cursor });
    t.not(halt.found, halt.expected);
    t.equal(await counter(metrics.chainHalted, { chain: 'chain_d' }), 1, 'farebox_chain_halted');
    t.ok(
      errors.some((m) => /reorganised/.test(m)),
      'an error logged',
    );
    await dTest.mine({ blocks: 1 });
    t.equal(await w.poll('chain_d', chainD), 0, 'still halted at the next poll');
    t.equal(await w.reconcile('chain_d', chainD), 0, 'and not reconciled');
    t.equal(await s.redis.get('cursor:chain_d'), cursor, 'the cursor where it was');
    t.same(
      [(await readWallet(s.redis, x, 'chain_d')).synced, (await readWallet(s.redis, y, 'chain_d')).synced],
      [5_000n, 0n],
      'no guess made',
    );

    const resumed = await resumeChain(s.redis, 'chain_d', chainD);
    t.equal(resumed.fork.number, BigInt(scanned!) - 2n, 'the fork: the last block scanned before the mint and deposit');
    await w.poll('chain_d', chainD);
    for (const a of [x, y]) {
      t.equal(
        (await readWallet(s.redis, a, 'chain_d')).synced,
        await chainD.balanceOf(a),
        `${a === x ? 'x' : 'y'}: synced = balanceOf`,
      );
    }
    t.equal((await readWallet(s.redis, y, 'chain_d')).synced, 7_000n, "the new branch's deposit applied once");
    t.equal(await counter(metrics.chainHalted, { chain: 'chain_d' }), 0);
    await t.rejects(resumeChain(s.redis, 'chain_d', chainD), /not halted/);
  },
);

t.test(
  'a reorg within the confirmations is never seen: the orphaned deposit is never applied, the new one once',
  async (t) => {
    const s = session(t);
    const confirmed = createEvmChain('chain_d', { ...(d as ChainConfig), confirmations: 3 });
    const { w } = s.watcher({ chain_d: confirmed }, 'w-shallow');
    await w.poll('chain_d', confirmed);
    const x = randomAccount();
    const y = randomAccount();
    const snapshot = await dTest.snapshot();
    await mintAndDeposit(d, x, 1_000n); // two blocks: not confirmed
    await w.poll('chain_d', confirmed);
    await dTest.revert({ id: snapshot });
    await mintAndDeposit(d, y, 2_000n);
    await dTest.mine({ blocks: 2 });
    await w.poll('chain_d', confirmed);
    t.same(
      [(await readWallet(s.redis, x, 'chain_d')).synced, (await readWallet(s.redis, y, 'chain_d')).synced],
      [0n, 2_000n],
    );
    t.equal(await s.redis.get('chain-halt:chain_d'), null, 'no halt');
  },
);

t.test(
  'reconciliation runs in a loop of its own: failing polls do not stop it, a slow one does not delay events',
  async (t) => {
    const s = session(t);
    const f = flaky(chainA);
    const { w, metrics } = s.watcher({ chain_a: f.chain }, 'w-rec', undefined, { reconcileMs: 100 });
    const x = randomAccount();
    await mintAndDeposit(c, x, 3_000n);
    w.start();
    await s.synced(x, 'chain_a', (v) => v.synced === 3_000n);

    f.state.events = true; // every poll fails from now on
    await mintAndDeposit(c, randomAccount(), 1n); // the head moves
    await s.redis.hset(keys.wallet(x, 'chain_a'), 'synced', '1');
    await until(
      'corrected while the polls fail',
      async () => (await readWallet(s.redis, x, 'chain_a')).synced === 3_000n,
    );
    t.ok((await counter(metrics.chainErrors, { chain: 'chain_a' })) > 0, 'the polls did fail meanwhile');
    t.equal(await counter(metrics.driftCorrections, { chain: 'chain_a' }), 1);
    f.state.events = false;

    // A poll stuck past a renewal of the lease (due every 3.3 s of its 10 s): the reconciler renews it and goes on.
    // Seen as the lease's TTL rising while the poll loop is stuck, it cannot lapse while the reconciler runs.
    let release = () => {};
    f.state.hang = new Promise<void>((r) => (release = r));
    await until('the poll loop stuck on the head', async () => f.state.hung > 0);
    let ttl = await s.redis.pttl('watcher-lease:chain_a');
    await until(
      'the lease renewed with the poll loop stuck',
      async () => {
        const now = await s.redis.pttl('watcher-lease:chain_a');
        const renewed = now > ttl;
        ttl = now;
        return renewed;
      },
      10_000,
      20,
    );
    t.ok(f.state.hung > 0, 'the poll loop still stuck');
    await s.redis.hset(keys.wallet(x, 'chain_a'), 'synced', '2');
    await until(
      'corrected with the poll loop stuck',
      async () => (await readWallet(s.redis, x, 'chain_a')).synced === 3_000n,
      5_000,
    );
    t.equal(await s.redis.get('watcher-lease:chain_a'), 'w-rec', 'the lease still held');
    f.state.hang = undefined;
    release();

    // balanceOf held until released: a reconciliation round waits on it while the events are applied.
    let answer = () => {};
    f.state.balanceHeld = new Promise<void>((r) => (answer = r));
    t.teardown(answer);
    await until('a round waiting on balanceOf', async () => f.state.balanceWaiting > 0);
    const y = randomAccount();
    await mintAndDeposit(c, y, 4_000n);
    await s.synced(y, 'chain_a', (v) => v.synced === 4_000n);
    t.ok(f.state.balanceWaiting > 0, 'applied while the round still waits');
    f.state.balanceHeld = undefined;
    answer();
  },
);

t.test(
  'escrow role proposals and amounts of 2^53 or more are counted, logged and kept; the chain goes on',
  async (t) => {
    const s = session(t);
    const logged: [string, string][] = [];
    const infos: object[] = [];
    const log = {
      error: (_o: object, m: string) => void logged.push(['error', m]),
      warn: (_o: object, m: string) => void logged.push(['warn', m]),
      info: (o: object, m: string) => {
        logged.push(['info', m]);
        infos.push(o);
      },
    };
    const { w, metrics } = s.watcher({ chain_a: chainA }, 'w-odd', undefined, {}, log);
    const x = randomAccount();
    const y = randomAccount();
    await mintAndDeposit(c, x, 2n ** 53n);
    const owner = wallet(DEV_KEYS.deployer);
    await mined(
      owner.writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'proposeSettler', args: [bob.address] }),
    );
    await mined(
      owner.writeContract({
        address: c.escrow,
        abi: escrowAbi,
        functionName: 'cancelSettlerProposal',
        args: [bob.address],
      }),
    );
    await mintAndDeposit(c, y, 5n);
    await w.poll('chain_a', chainA);
    t.equal((await readWallet(s.redis, y, 'chain_a')).synced, 5n, 'the deposit after it applied');
    t.equal((await readWallet(s.redis, x, 'chain_a')).synced, 0n, 'nothing of the out-of-range one');
    t.equal(await counter(metrics.chainAnomalies, { chain: 'chain_a', kind: 'deposited' }), 1);
    t.match((await readAnomalies(s.redis, 'chain_a')).at(-1), {
      reason: 'amount_out_of_range',
      account: x.toLowerCase(),
      amount: (2n ** 53n).toString(),
    });
    t.ok((await counter(metrics.escrowAdminEvents, { chain: 'chain_a', kind: 'settler_proposed' })) >= 1);
    t.ok((await counter(metrics.escrowAdminEvents, { chain: 'chain_a', kind: 'settler_proposal_cancelled' })) >= 1);
    t.ok(
      logged.some(([l, m]) => l === 'error' && /role change announced/.test(m)),
      'a proposal is logged as an error',
    );
    t.ok(logged.some(([l, m]) => l === 'error' && /not applied/.test(m)));
    t.same(
      logged.filter(([, m]) => /deployed/.test(m)),
      [['info', 'escrow deployed']],
      "the constructor's owner, treasury, charge cap and settler: one info line, no action needed",
    );
    t.match(infos.at(0), {
      chain: 'chain_a',
      owner: new RegExp(`^${DEV_KEYS.deployer.address}$`, 'i'),
      treasury: new RegExp(`^${DEV_KEYS.treasury.address}$`, 'i'),
      settler: new RegExp(`^${DEV_KEYS.settler.address}$`, 'i'),
      maxCharge: /^[1-9]\d*$/,
    });
    t.ok(
      logged.some(([l, m]) => l === 'warn' && m === 'escrow role event'),
      'a later role event (the cancellation) stays a warn',
    );
    t.equal(await w.reconcile('chain_a', chainA), 0, 'a balance beyond 2^53 fails its own reconciliation only');
  },
);

t.test('reconciliation is paced: one balanceOf per account at most reconcileRate a second', async (t) => {
  const s = session(t);
  const { w } = s.watcher({ chain_a: chainA }, 'w-pace', undefined, { reconcileRate: 20 });
  await w.poll('chain_a', chainA);
  const accounts = await s.redis.scard('wallets:chain_a');
  t.ok(accounts >= 10, `${accounts} wallets on chain_a`);
  const started = Date.now();
  await w.reconcile('chain_a', chainA);
  const took = Date.now() - started;
  t.ok(took >= ((accounts - 1) * 1000) / 20 - 20, `${accounts} balanceOf in ${took} ms at 20 a second`);
});
