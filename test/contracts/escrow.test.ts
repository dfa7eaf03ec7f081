import t, { type Test } from 'tap';
import {
  BaseError,
  ContractFunctionRevertedError,
  createPublicClient,
  createTestClient,
  createWalletClient,
  decodeErrorResult,
  encodeDeployData,
  http,
  parseEventLogs,
  type Hex,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi, testStablecoinAbi, RECEIVE_WITH_AUTHORIZATION_TYPES } from '../../plugins/chains/abi.js';
import type { Address } from '../../plugins/chains/config.js';
import { DEV_MAX_CHARGE, devViemChain, startDevChains, type DevKey } from '../../plugins/chains/dev-chains.js';
import { loadArtifacts } from '../../contracts/compile.js';
import { callIdOf } from '../../plugins/request-ids.js';

const DELAY = 3600n;
const ROLE_DELAY = 2n * DELAY;
const dc = await startDevChains({ basePort: 0, withdrawalDelay: DELAY, testMethods: true });
t.teardown(() => dc.close());

const c = dc.chains.chain_a;
const { deployer: owner, settler, treasury, callers } = dc.keys;
const [alice, bob, carol, dave] = callers;
const chain = devViemChain('chain_a', c.chain_id, c.rpc_url);
const transport = http(c.rpc_url);
const pub = createPublicClient({ chain, transport, pollingInterval: 10 });
const testClient = createTestClient({ chain, transport, mode: 'hardhat' });
const wallet = (k: DevKey) => createWalletClient({ chain, transport, account: privateKeyToAccount(k.privateKey) });
// Errors of both contracts: the escrow bubbles the token's reverts.
const abi = [...escrowAbi, ...testStablecoinAbi.filter((i) => i.type === 'error')];

async function mined(hash: Promise<Hex>) {
  const receipt = await pub.waitForTransactionReceipt({ hash: await hash });
  if (receipt.status !== 'success') throw new Error(`tx ${receipt.transactionHash} reverted`);
  return { receipt, events: parseEventLogs({ abi: escrowAbi, logs: receipt.logs }) };
}

// The custom error name a write is refused with (viem simulates before sending).
async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    const r = err instanceof BaseError ? err.walk((e) => e instanceof ContractFunctionRevertedError) : null;
    if (r instanceof ContractFunctionRevertedError) return r.data?.errorName ?? 'unknown revert';
    throw err;
  }
  return 'not refused';
}

const escrow = (k: DevKey) => ({
  deposit: (amount: bigint) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'deposit', args: [amount] }),
  depositFor: (account: Address, amount: bigint) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'depositFor', args: [account, amount] }),
  charge: (callIds: Hex[], accounts: Address[], amounts: bigint[], gas?: bigint) =>
    wallet(k).writeContract({
      address: c.escrow,
      abi,
      functionName: 'chargeBatch',
      args: [callIds, accounts, amounts],
      gas,
    }),
  requestWithdrawal: (amount: bigint) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'requestWithdrawal', args: [amount] }),
  cancelWithdrawal: () => wallet(k).writeContract({ address: c.escrow, abi, functionName: 'cancelWithdrawal' }),
  withdraw: () => wallet(k).writeContract({ address: c.escrow, abi, functionName: 'withdraw' }),
  proposeSettler: (who: Address) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'proposeSettler', args: [who] }),
  cancelSettlerProposal: (who: Address) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'cancelSettlerProposal', args: [who] }),
  grantSettler: (who: Address) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'grantSettler', args: [who] }),
  revokeSettler: (who: Address) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'revokeSettler', args: [who] }),
  proposeTreasury: (who: Address) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'proposeTreasury', args: [who] }),
  cancelTreasuryProposal: () =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'cancelTreasuryProposal' }),
  applyTreasury: () => wallet(k).writeContract({ address: c.escrow, abi, functionName: 'applyTreasury' }),
  proposeMaxCharge: (v: bigint) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'proposeMaxCharge', args: [v] }),
  cancelMaxChargeProposal: () =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'cancelMaxChargeProposal' }),
  applyMaxCharge: () => wallet(k).writeContract({ address: c.escrow, abi, functionName: 'applyMaxCharge' }),
  transferOwnership: (who: Address) =>
    wallet(k).writeContract({ address: c.escrow, abi, functionName: 'transferOwnership', args: [who] }),
  acceptOwnership: () => wallet(k).writeContract({ address: c.escrow, abi, functionName: 'acceptOwnership' }),
});
const read = {
  balance: (a: Address) => pub.readContract({ address: c.escrow, abi, functionName: 'balanceOf', args: [a] }),
  tokens: (a: Address) =>
    pub.readContract({ address: c.stablecoin, abi: testStablecoinAbi, functionName: 'balanceOf', args: [a] }),
  status: (id: Hex) => pub.readContract({ address: c.escrow, abi, functionName: 'callStatus', args: [id] }),
  isCharged: (id: Hex) => pub.readContract({ address: c.escrow, abi, functionName: 'isCharged', args: [id] }),
};

// Gives `k` tokens and lets the escrow pull them.
async function fundWallet(k: DevKey, amount: bigint) {
  await mined(
    wallet(owner).writeContract({
      address: c.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'mint',
      args: [k.address, amount],
    }),
  );
  await mined(
    wallet(k).writeContract({
      address: c.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'approve',
      args: [c.escrow, amount],
    }),
  );
}
async function fundEscrow(k: DevKey, amount: bigint) {
  await fundWallet(k, amount);
  await mined(escrow(k).deposit(amount));
}
let seq = 0;
const ids = (n: number) => Array.from({ length: n }, () => callIdOf(`escrow-test-${seq++}`));

/** Chain time moves `seconds` on, and a block is mined at the new time. */
async function later(seconds: bigint) {
  await testClient.increaseTime({ seconds: Number(seconds) });
  await testClient.mine({ blocks: 1 });
}

t.test('deployed with the configured token, roles and withdrawal delay', async (t) => {
  const get = (functionName: 'token' | 'owner' | 'treasury') =>
    pub.readContract({ address: c.escrow, abi, functionName });
  t.equal((await get('token')).toLowerCase(), c.stablecoin.toLowerCase());
  t.equal(await get('owner'), owner.address);
  t.equal(await get('treasury'), treasury.address);
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'withdrawalDelay' }), DELAY);
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'isSettler', args: [settler.address] }), true);
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'isSettler', args: [alice.address] }), false);
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'roleDelay' }), ROLE_DELAY);
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'maxCharge' }), DEV_MAX_CHARGE);
});

t.test('deployment refuses a withdrawal timelock of 0, a role delay not above it, and a cap of 0', async (t) => {
  const { Escrow } = await loadArtifacts();
  // The constructor's revert, read from an eth_call of the creation code.
  const refused = async (withdrawal: bigint, role: bigint, cap: bigint) => {
    const data = encodeDeployData({
      abi: escrowAbi,
      bytecode: Escrow.bytecode,
      args: [c.stablecoin, owner.address, treasury.address, settler.address, withdrawal, role, cap],
    });
    try {
      await pub.call({ account: owner.address, data });
      return 'deployed';
    } catch (err) {
      const revert = (err as BaseError).walk((e) => typeof (e as { data?: unknown }).data === 'string') as {
        data?: Hex;
      } | null;
      return revert?.data ? decodeErrorResult({ abi: escrowAbi, data: revert.data }).errorName : String(err);
    }
  };
  t.equal(await refused(0n, 10n, 1n), 'ZeroDelay');
  t.equal(await refused(60n, 60n, 1n), 'RoleDelayTooShort');
  t.equal(await refused(60n, 59n, 1n), 'RoleDelayTooShort');
  t.equal(await refused(60n, 61n, 0n), 'ZeroAmount');
  t.equal(await refused(1n, 2n, 1n), 'deployed', 'the smallest delays it takes');
});

t.test('deposit pulls approved tokens and credits the sender (Deposited)', async (t) => {
  await fundWallet(alice, 5_000_000n);
  const before = await read.balance(alice.address);
  const { events } = await mined(escrow(alice).deposit(5_000_000n));
  t.equal((await read.balance(alice.address)) - before, 5_000_000n);
  t.equal(await read.tokens(alice.address), 0n, 'tokens left the wallet');
  matchEvents(t, events, [
    { eventName: 'Deposited', args: { account: alice.address, from: alice.address, amount: 5_000_000n } },
  ]);
});

t.test('depositFor credits another account, paid by the sender', async (t) => {
  await fundWallet(bob, 2_000_000n);
  const before = await read.balance(carol.address);
  const { events } = await mined(escrow(bob).depositFor(carol.address, 2_000_000n));
  t.equal((await read.balance(carol.address)) - before, 2_000_000n);
  matchEvents(t, events, [
    { eventName: 'Deposited', args: { account: carol.address, from: bob.address, amount: 2_000_000n } },
  ]);
});

t.test('deposit refusals: zero amount, no allowance, zero account', async (t) => {
  t.equal(await refusal(escrow(alice).deposit(0n)), 'ZeroAmount');
  t.equal(await refusal(escrow(dave).deposit(1n)), 'InsufficientAllowance', "the token's own error bubbles up");
  t.equal(await refusal(escrow(alice).depositFor('0x0000000000000000000000000000000000000000', 1n)), 'ZeroAddress');
});

t.test('depositWithAuthorization: relayed EIP-3009 deposit credits the signer, once', async (t) => {
  await mined(
    wallet(owner).writeContract({
      address: c.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'mint',
      args: [dave.address, 3_000_000n],
    }),
  );
  const nonce = callIdOf('auth-nonce-1');
  const validBefore = BigInt(Math.floor(Date.now() / 1000) + 3600);
  const message = { from: dave.address, to: c.escrow, value: 3_000_000n, validAfter: 0n, validBefore, nonce };
  const signature = await wallet(dave).signTypedData({
    domain: { name: 'Test USD Coin', version: '2', chainId: c.chain_id, verifyingContract: c.stablecoin },
    types: RECEIVE_WITH_AUTHORIZATION_TYPES,
    primaryType: 'ReceiveWithAuthorization',
    message,
  });
  const { r, s, v } = parseSig(signature);
  // A front-runner cannot use the signature on the token directly: only the payee (escrow) may.
  t.equal(
    await refusal(
      wallet(bob).writeContract({
        address: c.stablecoin,
        abi: testStablecoinAbi,
        functionName: 'receiveWithAuthorization',
        args: [dave.address, c.escrow, 3_000_000n, 0n, validBefore, nonce, v, r, s],
      }),
    ),
    'CallerNotPayee',
  );
  const args = [dave.address, 3_000_000n, 0n, validBefore, nonce, v, r, s] as const;
  const before = await read.balance(dave.address);
  // Bob relays (pays gas); Dave is credited.
  const { events } = await mined(
    wallet(bob).writeContract({ address: c.escrow, abi, functionName: 'depositWithAuthorization', args }),
  );
  t.equal((await read.balance(dave.address)) - before, 3_000_000n);
  t.equal(await read.tokens(dave.address), 0n);
  matchEvents(t, events, [
    { eventName: 'Deposited', args: { account: dave.address, from: dave.address, amount: 3_000_000n } },
  ]);
  t.equal(
    await refusal(
      wallet(bob).writeContract({ address: c.escrow, abi, functionName: 'depositWithAuthorization', args }),
    ),
    'AuthorizationAlreadyUsed',
    'replay refused',
  );
  t.equal(
    await refusal(
      wallet(bob).writeContract({
        address: c.escrow,
        abi,
        functionName: 'depositWithAuthorization',
        args: [bob.address, 3_000_000n, 0n, validBefore, callIdOf('auth-nonce-2'), v, r, s],
      }),
    ),
    'InvalidSignature',
    "Dave's signature does not move Bob's funds",
  );
});

t.test('chargeBatch by a non-settler reverts NotSettler; a mined attempt charges nothing', async (t) => {
  const [id] = ids(1);
  t.equal(await refusal(escrow(alice).charge([id!], [alice.address], [1n])), 'NotSettler');
  // Sent anyway (explicit gas skips the simulation): mined as a failed tx.
  const hash = await escrow(alice).charge([id!], [alice.address], [1n], 200_000n);
  const receipt = await pub.waitForTransactionReceipt({ hash });
  t.equal(receipt.status, 'reverted');
  t.equal(await read.status(id!), 0);
});

t.test('chargeBatch charges each call once and pays the sum to the treasury', async (t) => {
  await fundEscrow(bob, 1_000_000n);
  const [a, b] = ids(2);
  const balA = await read.balance(alice.address);
  const balB = await read.balance(bob.address);
  const tre = await read.tokens(treasury.address);
  const { events } = await mined(escrow(settler).charge([a!, b!], [alice.address, bob.address], [1_500n, 2_500n]));
  matchEvents(t, events, [
    { eventName: 'Charged', args: { callId: a, account: alice.address, amount: 1_500n } },
    { eventName: 'Charged', args: { callId: b, account: bob.address, amount: 2_500n } },
  ]);
  t.equal(events.length, 2);
  t.equal(balA - (await read.balance(alice.address)), 1_500n);
  t.equal(balB - (await read.balance(bob.address)), 2_500n);
  t.equal((await read.tokens(treasury.address)) - tre, 4_000n, 'treasury received the sum');
  t.equal(await read.isCharged(a!), true);
  t.equal(await read.status(a!), 1);

  // The same batch again: skipped, nothing moves.
  const again = await mined(escrow(settler).charge([a!, b!], [alice.address, bob.address], [1_500n, 2_500n]));
  matchEvents(t, again.events, [
    { eventName: 'ChargeSkipped', args: { callId: a, status: 1 } },
    { eventName: 'ChargeSkipped', args: { callId: b, status: 1 } },
  ]);
  t.equal(balA - (await read.balance(alice.address)), 1_500n, 'retried batch is harmless');
  t.equal((await read.tokens(treasury.address)) - tre, 4_000n);
});

t.test('a charge above the balance is refused with its own event, the rest of the batch settles', async (t) => {
  const [ok, tooMuch, dup] = ids(3);
  const bal = await read.balance(carol.address);
  const { events } = await mined(
    escrow(settler).charge(
      [ok!, tooMuch!, ok!, dup!],
      [carol.address, carol.address, carol.address, carol.address],
      [100n, bal, 100n, 200n],
    ),
  );
  matchEvents(t, events, [
    { eventName: 'Charged', args: { callId: ok, amount: 100n } },
    { eventName: 'ChargeRefused', args: { callId: tooMuch, account: carol.address, amount: bal, balance: bal - 100n } },
    { eventName: 'ChargeSkipped', args: { callId: ok, status: 1 } },
    { eventName: 'Charged', args: { callId: dup, amount: 200n } },
  ]);
  t.equal(await read.balance(carol.address), bal - 300n);
  t.equal(await read.status(tooMuch!), 2, 'refused call id is closed');
  t.equal(await read.isCharged(tooMuch!), false);

  // Even after a top-up the refused call id is not charged later: same answer on every replay.
  await fundEscrow(carol, bal);
  const replay = await mined(escrow(settler).charge([tooMuch!], [carol.address], [bal]));
  matchEvents(t, replay.events, [{ eventName: 'ChargeSkipped', args: { callId: tooMuch, status: 2 } }]);
  t.equal(await read.balance(carol.address), 2n * bal - 300n);
});

// Call ids numbered from `first` (the gateway's own are consecutive numbers: request-ids.test.ts).
const numbered = (first: bigint, n: number): Hex[] =>
  Array.from({ length: n }, (_, i) => `0x${(first + BigInt(i)).toString(16).padStart(64, '0')}` as Hex);

t.test('call ids sharing a status word settle independently, across a word boundary and between batches', async (t) => {
  // Ids 125..130 of word W: 125-127 end word W, 128-130 start word W+1.
  const base = 0x5eed_0000n << 7n;
  const id = (k: number) => numbered(base + BigInt(k), 1)[0]!;
  const bal = await read.balance(carol.address);
  const { events } = await mined(
    escrow(settler).charge(
      [id(125), id(126), id(128), id(125), id(127), id(130), id(126)],
      Array(7).fill(carol.address),
      [10n, bal + 1n, 20n, 10n, 30n, 40n, 1n],
    ),
  );
  matchEvents(t, events, [
    { eventName: 'Charged', args: { callId: id(125), amount: 10n } },
    { eventName: 'ChargeRefused', args: { callId: id(126), amount: bal + 1n } },
    { eventName: 'Charged', args: { callId: id(128), amount: 20n } },
    { eventName: 'ChargeSkipped', args: { callId: id(125), status: 1 } },
    { eventName: 'Charged', args: { callId: id(127), amount: 30n } },
    { eventName: 'Charged', args: { callId: id(130), amount: 40n } },
    { eventName: 'ChargeSkipped', args: { callId: id(126), status: 2 } },
  ]);
  t.equal(bal - (await read.balance(carol.address)), 100n);
  const statuses = async () => Promise.all([124, 125, 126, 127, 128, 129, 130, 131].map((k) => read.status(id(k))));
  t.same(await statuses(), [0, 1, 2, 1, 1, 0, 1, 0], 'each id its own status; the neighbours untouched');

  const second = await mined(
    escrow(settler).charge([id(129), id(126), id(124)], Array(3).fill(carol.address), [5n, 1n, 6n]),
  );
  matchEvents(t, second.events, [
    { eventName: 'Charged', args: { callId: id(129), amount: 5n } },
    { eventName: 'ChargeSkipped', args: { callId: id(126), status: 2 } },
    { eventName: 'Charged', args: { callId: id(124), amount: 6n } },
  ]);
  t.same(await statuses(), [1, 1, 2, 1, 1, 1, 1, 0], 'a later batch reads what the earlier one stored');
});

t.test('the lowest and the highest call id', async (t) => {
  const [zero, top] = [`0x${'0'.repeat(64)}`, `0x${'f'.repeat(64)}`] as Hex[];
  const { events } = await mined(
    escrow(settler).charge([top!, zero!, top!], Array(3).fill(carol.address), [1n, 2n, 1n]),
  );
  matchEvents(t, events, [
    { eventName: 'Charged', args: { callId: top } },
    { eventName: 'Charged', args: { callId: zero } },
    { eventName: 'ChargeSkipped', args: { callId: top, status: 1 } },
  ]);
  t.same(
    await Promise.all([zero!, top!, numbered(1n, 1)[0]!, numbered(2n ** 256n - 2n, 1)[0]!].map(read.status)),
    [1, 1, 0, 0],
  );
});

t.test('batches of call ids from a few words, in any order and repeated, settle as a model says', async (t) => {
  // A seeded generator: a failure reproduces.
  let seed = 0x1234_5678;
  const rand = (n: number) => {
    seed = (Math.imul(seed ^ (seed >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0;
    return seed % n;
  };
  const base = 0xabcd_0000n << 7n;
  const pool = numbered(base, 3 * 128); // three words
  await fundEscrow(dave, 100_000n);
  const model = new Map<Hex, number>();
  let balance = await read.balance(dave.address);
  for (let round = 0; round < 4; round++) {
    const batch = Array.from({ length: 60 }, () => pool[rand(pool.length)]!);
    const amounts = batch.map(() => (rand(8) === 0 ? balance + 1n : BigInt(1 + rand(500))));
    const expected: { eventName: string; args: { callId: Hex } }[] = [];
    for (const [i, callId] of batch.entries()) {
      const status = model.get(callId) ?? 0;
      if (status !== 0) expected.push({ eventName: 'ChargeSkipped', args: { callId, status } as { callId: Hex } });
      else if (amounts[i]! > balance) {
        model.set(callId, 2);
        expected.push({ eventName: 'ChargeRefused', args: { callId } });
      } else {
        model.set(callId, 1);
        balance -= amounts[i]!;
        expected.push({ eventName: 'Charged', args: { callId } });
      }
    }
    const { events } = await mined(escrow(settler).charge(batch, Array(batch.length).fill(dave.address), amounts));
    matchEvents(t, events, expected);
    t.equal(await read.balance(dave.address), balance, `round ${round}: balance as the model says`);
  }
  const onchain = await Promise.all(pool.map(read.status));
  t.same(
    onchain,
    pool.map((id) => model.get(id) ?? 0),
    'every status of the three words as the model says',
  );
});

t.test('gas per charge: consecutive call ids share status words, unrelated ones each take a new slot', async (t) => {
  const gasPerCharge = async (callIds: Hex[]) => {
    const { receipt } = await mined(
      escrow(settler).charge(callIds, Array(callIds.length).fill(carol.address), Array(callIds.length).fill(1n)),
    );
    return receipt.gasUsed / BigInt(callIds.length);
  };
  const dense = await gasPerCharge(numbered(0x7777_0000n << 7n, 128));
  const scattered = await gasPerCharge(ids(128));
  t.ok(dense < 6_000n, `consecutive: ${dense} gas per charge`);
  t.ok(scattered > 22_000n, `scattered: ${scattered} gas per charge (a new storage slot each)`);
});

t.test('chargeBatch with arrays of different lengths reverts LengthMismatch', async (t) => {
  t.equal(await refusal(escrow(settler).charge(ids(2), [alice.address], [1n, 2n])), 'LengthMismatch');
});

t.test('withdrawal: timelock, refusals, cancel', async (t) => {
  t.equal(await refusal(escrow(dave).withdraw()), 'NoWithdrawalRequested');
  t.equal(await refusal(escrow(dave).requestWithdrawal(0n)), 'ZeroAmount');
  const bal = await read.balance(dave.address);
  t.equal(await refusal(escrow(dave).requestWithdrawal(bal + 1n)), 'InsufficientBalance');
  const { events } = await mined(escrow(dave).requestWithdrawal(1_000n));
  matchEvents(t, events, [{ eventName: 'WithdrawalRequested', args: { account: dave.address, amount: 1_000n } }]);
  const [amount, readyAt] = await pub.readContract({
    address: c.escrow,
    abi,
    functionName: 'pendingWithdrawal',
    args: [dave.address],
  });
  t.equal(amount, 1_000n);
  t.equal(readyAt, (await pub.getBlock()).timestamp + DELAY);
  t.equal(await refusal(escrow(dave).withdraw()), 'WithdrawalNotReady', 'early withdrawal refused');
  const cancelled = await mined(escrow(dave).cancelWithdrawal());
  matchEvents(t, cancelled.events, [
    { eventName: 'WithdrawalCancelled', args: { account: dave.address, amount: 1_000n } },
  ]);
  t.equal(await refusal(escrow(dave).cancelWithdrawal()), 'NoWithdrawalRequested');
  t.equal(await read.balance(dave.address), bal, 'balance untouched');
});

t.test('withdrawal while charges still settle: charges apply, withdraw pays what is left', async (t) => {
  const bal = await read.balance(bob.address);
  await mined(escrow(bob).requestWithdrawal(bal));
  // In-flight calls settle during the timelock.
  await mined(escrow(settler).charge(ids(1), [bob.address], [300n]));
  await testClient.increaseTime({ seconds: Number(DELAY) });
  await testClient.mine({ blocks: 1 });
  const tokens = await read.tokens(bob.address);
  const { events } = await mined(escrow(bob).withdraw());
  matchEvents(t, events, [
    { eventName: 'Withdrawn', args: { account: bob.address, amount: bal - 300n, requested: bal } },
  ]);
  t.equal((await read.tokens(bob.address)) - tokens, bal - 300n);
  t.equal(await read.balance(bob.address), 0n);
  const [left] = await pub.readContract({
    address: c.escrow,
    abi,
    functionName: 'pendingWithdrawal',
    args: [bob.address],
  });
  t.equal(left, 0n, 'request consumed');
});

t.test('full withdrawal after the timelock pays the requested amount', async (t) => {
  await mined(escrow(dave).requestWithdrawal(1_000n));
  await testClient.increaseTime({ seconds: Number(DELAY) });
  await testClient.mine({ blocks: 1 });
  const bal = await read.balance(dave.address);
  const { events } = await mined(escrow(dave).withdraw());
  matchEvents(t, events, [{ eventName: 'Withdrawn', args: { amount: 1_000n, requested: 1_000n } }]);
  t.equal(bal - (await read.balance(dave.address)), 1_000n);
  t.equal(await read.tokens(dave.address), 1_000n);
});

t.test(
  'roles: only the owner proposes; a settler is granted only roleDelay after its proposal, and revoked at once',
  async (t) => {
    t.equal(await refusal(escrow(alice).proposeSettler(alice.address)), 'NotOwner');
    t.equal(await refusal(escrow(settler).grantSettler(settler.address)), 'NotOwner');
    t.equal(await refusal(escrow(alice).revokeSettler(settler.address)), 'NotOwner');
    t.equal(await refusal(escrow(owner).proposeSettler('0x0000000000000000000000000000000000000000')), 'ZeroAddress');
    t.equal(await refusal(escrow(owner).grantSettler(dave.address)), 'NoProposal', 'no grant without a proposal');

    const proposed = await mined(escrow(owner).proposeSettler(dave.address));
    const readyAt = (await pub.getBlock({ blockNumber: proposed.receipt.blockNumber })).timestamp + ROLE_DELAY;
    matchEvents(t, proposed.events, [{ eventName: 'SettlerProposed', args: { settler: dave.address, readyAt } }]);
    t.equal(
      await pub.readContract({ address: c.escrow, abi, functionName: 'settlerReadyAt', args: [dave.address] }),
      readyAt,
    );
    t.equal(await refusal(escrow(owner).grantSettler(dave.address)), 'ProposalNotReady', 'not before the delay');
    t.equal(
      await refusal(escrow(dave).charge(ids(1), [carol.address], [1n])),
      'NotSettler',
      'a proposed settler cannot charge',
    );
    await later(ROLE_DELAY - 10n);
    t.equal(await refusal(escrow(owner).grantSettler(dave.address)), 'ProposalNotReady', '10 s early');
    await later(10n);
    const granted = await mined(escrow(owner).grantSettler(dave.address));
    matchEvents(t, granted.events, [{ eventName: 'SettlerUpdated', args: { settler: dave.address, enabled: true } }]);
    matchEvents(t, (await mined(escrow(dave).charge(ids(1), [carol.address], [1n]))).events, [
      { eventName: 'Charged' },
    ]);
    t.equal(await refusal(escrow(owner).grantSettler(dave.address)), 'NoProposal', 'a proposal is used once');

    const revoked = await mined(escrow(owner).revokeSettler(dave.address));
    matchEvents(t, revoked.events, [{ eventName: 'SettlerUpdated', args: { settler: dave.address, enabled: false } }]);
    t.equal(await refusal(escrow(dave).charge(ids(1), [carol.address], [1n])), 'NotSettler', 'revoked at once');

    // Cancelled, or dropped by a revocation: nothing to grant later.
    await mined(escrow(owner).proposeSettler(dave.address));
    const cancelled = await mined(escrow(owner).cancelSettlerProposal(dave.address));
    matchEvents(t, cancelled.events, [{ eventName: 'SettlerProposalCancelled', args: { settler: dave.address } }]);
    t.equal(await refusal(escrow(owner).cancelSettlerProposal(dave.address)), 'NoProposal');
    await mined(escrow(owner).proposeSettler(dave.address));
    const dropped = await mined(escrow(owner).revokeSettler(dave.address));
    matchEvents(t, dropped.events, [
      { eventName: 'SettlerProposalCancelled', args: { settler: dave.address } },
      { eventName: 'SettlerUpdated', args: { settler: dave.address, enabled: false } },
    ]);
    await later(ROLE_DELAY);
    t.equal(await refusal(escrow(owner).grantSettler(dave.address)), 'NoProposal');
  },
);

t.test(
  'one owner key cannot drain a wallet through a fresh settler: the caller sees the proposal and leaves first',
  async (t) => {
    const victim = callers[4]!;
    await fundEscrow(victim, 5_000_000n);
    const { events } = await mined(escrow(owner).proposeSettler(bob.address)); // a key the owner controls
    t.equal(events[0]!.eventName, 'SettlerProposed', 'announced onchain');
    await mined(escrow(victim).requestWithdrawal(5_000_000n));
    await later(DELAY);
    await mined(escrow(victim).withdraw());
    t.equal(await read.balance(victim.address), 0n, 'out within the withdrawal timelock');
    await later(ROLE_DELAY - DELAY);
    await mined(escrow(owner).grantSettler(bob.address));
    const drain = await mined(escrow(bob).charge(ids(1), [victim.address], [5_000_000n]));
    matchEvents(t, drain.events, [{ eventName: 'ChargeRefused', args: { account: victim.address, balance: 0n } }]);
    t.equal(await read.tokens(victim.address), 5_000_000n, 'the caller kept its money');
    await mined(escrow(owner).revokeSettler(bob.address));
  },
);

t.test('treasury: proposed, applied only after roleDelay, cancellable; charges go to the new one', async (t) => {
  t.equal(await refusal(escrow(settler).proposeTreasury(alice.address)), 'NotOwner');
  t.equal(await refusal(escrow(owner).proposeTreasury('0x0000000000000000000000000000000000000000')), 'ZeroAddress');
  t.equal(await refusal(escrow(owner).applyTreasury()), 'NoProposal');
  await mined(escrow(owner).proposeTreasury(alice.address));
  const cancelled = await mined(escrow(owner).cancelTreasuryProposal());
  matchEvents(t, cancelled.events, [{ eventName: 'TreasuryProposalCancelled', args: { treasury: alice.address } }]);
  t.equal(await refusal(escrow(owner).cancelTreasuryProposal()), 'NoProposal');

  const { events } = await mined(escrow(owner).proposeTreasury(dave.address));
  matchEvents(t, events, [{ eventName: 'TreasuryProposed', args: { treasury: dave.address } }]);
  t.equal(await refusal(escrow(owner).applyTreasury()), 'ProposalNotReady');
  t.equal(
    await pub.readContract({ address: c.escrow, abi, functionName: 'treasury' }),
    treasury.address,
    'not moved yet',
  );
  await later(ROLE_DELAY);
  t.equal(await refusal(escrow(alice).applyTreasury()), 'NotOwner');
  const applied = await mined(escrow(owner).applyTreasury());
  matchEvents(t, applied.events, [
    { eventName: 'TreasuryUpdated', args: { previousTreasury: treasury.address, treasury: dave.address } },
  ]);
  const tokens = await read.tokens(dave.address);
  await mined(escrow(settler).charge(ids(1), [carol.address], [7n]));
  t.equal((await read.tokens(dave.address)) - tokens, 7n, 'charges go to the new treasury');
  await mined(escrow(owner).proposeTreasury(treasury.address));
  await later(ROLE_DELAY);
  await mined(escrow(owner).applyTreasury());
});

t.test(
  'a charge above maxCharge is refused with ChargeOverCap, closing its call id; the rest of the batch settles',
  async (t) => {
    await fundEscrow(carol, 2n * DEV_MAX_CHARGE);
    const [over, ok, atCap] = ids(3);
    const bal = await read.balance(carol.address);
    const { events } = await mined(
      escrow(settler).charge([over!, ok!, atCap!], Array(3).fill(carol.address), [
        DEV_MAX_CHARGE + 1n,
        100n,
        DEV_MAX_CHARGE,
      ]),
    );
    matchEvents(t, events, [
      {
        eventName: 'ChargeOverCap',
        args: { callId: over, account: carol.address, amount: DEV_MAX_CHARGE + 1n, maxCharge: DEV_MAX_CHARGE },
      },
      { eventName: 'Charged', args: { callId: ok, amount: 100n } },
      { eventName: 'Charged', args: { callId: atCap, amount: DEV_MAX_CHARGE } },
    ]);
    t.equal(bal - (await read.balance(carol.address)), DEV_MAX_CHARGE + 100n);
    t.equal(await read.status(over!), 2, 'closed as refused');
    const replay = await mined(escrow(settler).charge([over!], [carol.address], [1n]));
    matchEvents(t, replay.events, [{ eventName: 'ChargeSkipped', args: { callId: over, status: 2 } }]);
  },
);

t.test('maxCharge changes only through the role timelock', async (t) => {
  t.equal(await refusal(escrow(settler).proposeMaxCharge(1n)), 'NotOwner');
  t.equal(await refusal(escrow(owner).proposeMaxCharge(0n)), 'ZeroAmount');
  t.equal(await refusal(escrow(owner).applyMaxCharge()), 'NoProposal');
  const higher = DEV_MAX_CHARGE * 2n;
  const { events } = await mined(escrow(owner).proposeMaxCharge(higher));
  matchEvents(t, events, [{ eventName: 'MaxChargeProposed', args: { maxCharge: higher } }]);
  t.equal(await refusal(escrow(owner).applyMaxCharge()), 'ProposalNotReady');
  const [early] = ids(1);
  const refused = await mined(escrow(settler).charge([early!], [carol.address], [DEV_MAX_CHARGE + 1n]));
  matchEvents(t, refused.events, [{ eventName: 'ChargeOverCap' }]);
  await later(ROLE_DELAY);
  const applied = await mined(escrow(owner).applyMaxCharge());
  matchEvents(t, applied.events, [
    { eventName: 'MaxChargeUpdated', args: { previousMaxCharge: DEV_MAX_CHARGE, maxCharge: higher } },
  ]);
  await fundEscrow(carol, DEV_MAX_CHARGE + 1n);
  const charged = await mined(escrow(settler).charge(ids(1), [carol.address], [DEV_MAX_CHARGE + 1n]));
  matchEvents(t, charged.events, [{ eventName: 'Charged', args: { amount: DEV_MAX_CHARGE + 1n } }]);
  // Back to the dev cap, cancelling one proposal on the way.
  await mined(escrow(owner).proposeMaxCharge(1n));
  const cancelled = await mined(escrow(owner).cancelMaxChargeProposal());
  matchEvents(t, cancelled.events, [{ eventName: 'MaxChargeProposalCancelled', args: { maxCharge: 1n } }]);
  await mined(escrow(owner).proposeMaxCharge(DEV_MAX_CHARGE));
  await later(ROLE_DELAY);
  await mined(escrow(owner).applyMaxCharge());
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'maxCharge' }), DEV_MAX_CHARGE);
});

t.test('ownership transfer is two-step', async (t) => {
  t.equal(await refusal(escrow(alice).transferOwnership(alice.address)), 'NotOwner');
  await mined(escrow(owner).transferOwnership(carol.address));
  t.equal(await refusal(escrow(alice).acceptOwnership()), 'NotPendingOwner');
  t.equal(
    await pub.readContract({ address: c.escrow, abi, functionName: 'owner' }),
    owner.address,
    'not moved before accept',
  );
  const { events } = await mined(escrow(carol).acceptOwnership());
  matchEvents(t, events, [
    { eventName: 'OwnershipTransferred', args: { previousOwner: owner.address, newOwner: carol.address } },
  ]);
  t.equal(await refusal(escrow(owner).proposeSettler(alice.address)), 'NotOwner', 'old owner lost its powers');
  await mined(escrow(carol).transferOwnership(owner.address));
  await mined(escrow(owner).acceptOwnership());
  t.equal(await pub.readContract({ address: c.escrow, abi, functionName: 'owner' }), owner.address);
});

// Same events, same count (t.match alone accepts extra trailing items).
function matchEvents(t: Test, events: readonly unknown[], pattern: readonly unknown[]) {
  t.equal(events.length, pattern.length, 'event count');
  t.match(events, pattern);
}

function parseSig(sig: Hex): { r: Hex; s: Hex; v: number } {
  return { r: `0x${sig.slice(2, 66)}`, s: `0x${sig.slice(66, 130)}`, v: parseInt(sig.slice(130, 132), 16) };
}
