import t from 'tap';
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  formatLog,
  getAddress,
  http,
  parseEventLogs,
  type Hex,
  type RpcLog as ViemRpcLog,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { CALL_STATUS, escrowAbi } from '../../plugins/chains/abi.js';
import { DEV_MAX_CHARGE, devViemChain, startDevChains, type DevKey } from '../../plugins/chains/dev-chains.js';
import { mintAndDeposit } from '../../plugins/chains/dev-fund.js';
import { decodeEscrowLog, isMoneyEvent, type RpcLog } from '../../plugins/chains/escrow-logs.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import type { EscrowAdminEvent, EscrowEvent } from '../../plugins/chains/port.js';
import { callIdOf } from '../../plugins/request-ids.js';

const dc = await startDevChains({ host: '127.0.0.1', basePort: 0, withdrawalDelay: 60n, testMethods: true });
t.teardown(() => dc.close());

const c = dc.chains.chain_b;
const { settler, deployer: owner, callers } = dc.keys;
const [alice, bob] = callers;
const viemChain = devViemChain('chain_b', c.chain_id, c.rpc_url);
const transport = http(c.rpc_url);
const pub = createPublicClient({ chain: viemChain, transport, pollingInterval: 10 });
const testClient = createTestClient({ chain: viemChain, transport, mode: 'hardhat' });
const wallet = (k: DevKey) =>
  createWalletClient({ chain: viemChain, transport, account: privateKeyToAccount(k.privateKey) });
const chain = createEvmChain('chain_b', c, { settlerKey: settler.privateKey });
let seq = 0;
const id = () => callIdOf(`escrow-logs-test-${seq++}`);

async function mined(hash: Promise<Hex>): Promise<Hex> {
  const h = await hash;
  const r = await pub.waitForTransactionReceipt({ hash: h });
  if (r.status !== 'success') throw new Error('tx reverted');
  return h;
}
const rawLogs = (fromBlock = '0x0'): Promise<ViemRpcLog[]> =>
  pub.request({
    method: 'eth_getLogs',
    params: [{ address: c.escrow, fromBlock: fromBlock as Hex, toBlock: 'latest' }],
  });

// The records readEvents built before the hand-written decoder: getLogs' formatLog, then parseEventLogs; and the
// admin records from the same decoding.
function viaViem(logs: ViemRpcLog[]): (EscrowEvent | EscrowAdminEvent | null)[] {
  return logs.map((raw) => {
    const [log] = parseEventLogs({ abi: escrowAbi, logs: [formatLog(raw)] });
    if (!log) throw new Error('viem did not decode an escrow log');
    const base = { blockNumber: log.blockNumber!, logIndex: log.logIndex!, txHash: log.transactionHash! };
    switch (log.eventName) {
      case 'Deposited':
        return { ...base, kind: 'deposited', callId: null, ...log.args };
      case 'Charged':
        return { ...base, kind: 'charged', ...log.args };
      case 'ChargeRefused':
        return { ...base, kind: 'charge_refused', ...log.args };
      case 'ChargeSkipped':
        return {
          ...base,
          kind: 'charge_skipped',
          ...log.args,
          status: log.args.status === CALL_STATUS.refused ? 'refused' : 'charged',
        };
      case 'WithdrawalRequested':
        return { ...base, kind: 'withdrawal_requested', callId: null, ...log.args };
      case 'WithdrawalCancelled':
        return { ...base, kind: 'withdrawal_cancelled', callId: null, ...log.args };
      case 'Withdrawn':
        return { ...base, kind: 'withdrawn', callId: null, ...log.args };
      case 'ChargeOverCap':
        return { ...base, kind: 'charge_over_cap', ...log.args };
      case 'SettlerProposed':
        return { ...base, kind: 'settler_proposed', ...log.args };
      case 'SettlerProposalCancelled':
        return { ...base, kind: 'settler_proposal_cancelled', ...log.args };
      case 'SettlerUpdated':
        return { ...base, kind: 'settler_updated', ...log.args };
      case 'TreasuryProposed':
        return { ...base, kind: 'treasury_proposed', ...log.args };
      case 'TreasuryProposalCancelled':
        return { ...base, kind: 'treasury_proposal_cancelled', ...log.args };
      case 'TreasuryUpdated':
        return { ...base, kind: 'treasury_updated', previous: log.args.previousTreasury, treasury: log.args.treasury };
      case 'MaxChargeProposed':
        return { ...base, kind: 'max_charge_proposed', ...log.args };
      case 'MaxChargeProposalCancelled':
        return { ...base, kind: 'max_charge_proposal_cancelled', ...log.args };
      case 'MaxChargeUpdated':
        return {
          ...base,
          kind: 'max_charge_updated',
          previous: log.args.previousMaxCharge,
          maxCharge: log.args.maxCharge,
        };
      case 'OwnershipTransferStarted':
        return { ...base, kind: 'ownership_transfer_started', ...log.args };
      case 'OwnershipTransferred':
        return { ...base, kind: 'ownership_transferred', previous: log.args.previousOwner, owner: log.args.newOwner };
    }
  });
}

// Every event of the escrow on chain_b: money events, then role, cap and ownership events.
const start = await pub.getBlockNumber({ cacheTime: 0 });
await mintAndDeposit(c, bob.address, 500n);
const refusedId = id();
const batch = await chain.charge([
  { callId: id(), account: bob.address, amount: 200n },
  { callId: refusedId, account: bob.address, amount: 10_000n },
  { callId: refusedId, account: bob.address, amount: 1n }, // skipped: refused earlier in the batch
  { callId: id(), account: bob.address, amount: DEV_MAX_CHARGE + 1n }, // above the cap
]);
const skipped = await chain.charge([{ callId: batch.results[0]!.callId, account: bob.address, amount: 200n }]);
await mined(
  wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'requestWithdrawal', args: [100n] }),
);
await mined(wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'cancelWithdrawal' }));
await mined(
  wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'requestWithdrawal', args: [300n] }),
);
await testClient.increaseTime({ seconds: 61 });
await mined(wallet(bob).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'withdraw' }));
const admin = (k: DevKey, functionName: string, args: unknown[] = []) =>
  mined(wallet(k).writeContract({ address: c.escrow, abi: escrowAbi, functionName, args } as never));
const roleDelay = async () => {
  await testClient.increaseTime({ seconds: 121 }); // twice the 60 s withdrawal timelock, and a second
  await testClient.mine({ blocks: 1 });
};
await admin(owner, 'proposeSettler', [alice.address]);
await admin(owner, 'cancelSettlerProposal', [alice.address]);
await admin(owner, 'proposeSettler', [alice.address]);
await admin(owner, 'proposeTreasury', [bob.address]);
await admin(owner, 'cancelTreasuryProposal');
await admin(owner, 'proposeTreasury', [bob.address]);
await admin(owner, 'proposeMaxCharge', [7n]);
await admin(owner, 'cancelMaxChargeProposal');
await admin(owner, 'proposeMaxCharge', [DEV_MAX_CHARGE * 2n]);
await roleDelay();
await admin(owner, 'grantSettler', [alice.address]);
await admin(owner, 'revokeSettler', [alice.address]);
await admin(owner, 'applyTreasury');
await admin(owner, 'applyMaxCharge');
await admin(owner, 'transferOwnership', [alice.address]);
await admin(alice, 'acceptOwnership');
const logs = await rawLogs(`0x${(start + 1n).toString(16)}`);
const charged = logs.find((l) => decodeEscrowLog(l)?.kind === 'charged')!;

t.test('decodes every escrow log exactly as viem parseEventLogs did', async (t) => {
  const ours = logs.map(decodeEscrowLog);
  const theirs = viaViem(logs);
  t.strictSame(ours, theirs);
  t.strictSame(
    ours.map((e) => e && Object.keys(e)),
    theirs.map((e) => e && Object.keys(e)),
    'same keys in the same order',
  );
  t.same(
    ours.map((e) => e?.kind ?? null),
    [
      'deposited',
      'charged',
      'charge_refused',
      'charge_skipped',
      'charge_over_cap',
      'charge_skipped',
      'withdrawal_requested',
      'withdrawal_cancelled',
      'withdrawal_requested',
      'withdrawn',
      'settler_proposed',
      'settler_proposal_cancelled',
      'settler_proposed',
      'treasury_proposed',
      'treasury_proposal_cancelled',
      'treasury_proposed',
      'max_charge_proposed',
      'max_charge_proposal_cancelled',
      'max_charge_proposed',
      'settler_updated',
      'settler_updated',
      'treasury_updated',
      'max_charge_updated',
      'ownership_transfer_started',
      'ownership_transferred',
    ],
  );
  t.same(
    ours.map((e) => e !== null && isMoneyEvent(e)),
    ours.map((_, i) => i < 10),
    'the first ten move money',
  );
  t.match(ours[0], { kind: 'deposited', account: bob.address, from: owner.address, amount: 500n });
  t.match(ours[2], { kind: 'charge_refused', callId: refusedId, amount: 10_000n, balance: 300n });
  t.match(ours[3], { kind: 'charge_skipped', callId: refusedId, status: 'refused' });
  t.match(ours[4], { kind: 'charge_over_cap', amount: DEV_MAX_CHARGE + 1n, maxCharge: DEV_MAX_CHARGE });
  t.match(ours[5], { kind: 'charge_skipped', status: 'charged', txHash: skipped.txHash });
  t.match(ours[9], { kind: 'withdrawn', amount: 300n, requested: 300n });
  t.match(ours[10], { kind: 'settler_proposed', settler: alice.address });
  t.match(ours[19], { kind: 'settler_updated', settler: alice.address, enabled: true });
  t.match(ours[20], { kind: 'settler_updated', settler: alice.address, enabled: false });
  t.match(ours[22], { kind: 'max_charge_updated', previous: DEV_MAX_CHARGE, maxCharge: DEV_MAX_CHARGE * 2n });
  t.match(ours[24], { kind: 'ownership_transferred', previous: owner.address, owner: alice.address });
  const first = ours[0] as EscrowEvent;
  t.equal(first.account, getAddress(bob.address.toLowerCase()), 'checksummed address');
  t.not(first.account, first.account.toLowerCase(), 'mixed case');
});

t.test('receipt logs decode the same; the batch receipt matches the events', async (t) => {
  const receipt = await pub.request({ method: 'eth_getTransactionReceipt', params: [batch.txHash] });
  const escrowLogs = receipt!.logs.filter((l) => l.address.toLowerCase() === c.escrow.toLowerCase());
  t.strictSame(escrowLogs.map(decodeEscrowLog), viaViem(escrowLogs));
  t.same(
    batch.results.map((r) => r.outcome),
    ['charged', 'refused', 'already_refused', 'over_cap'],
  );
  t.equal(batch.results[3]!.maxCharge, DEV_MAX_CHARGE);
  t.equal(batch.results[1]!.balance, 300n);
  t.equal(batch.total, 200n);
  t.equal(batch.gasUsed, BigInt(receipt!.gasUsed));
  t.equal(batch.blockNumber, BigInt(receipt!.blockNumber));
  t.same(
    skipped.results.map((r) => r.outcome),
    ['already_charged'],
  );
});

t.test(
  'readEvents returns the decoded money events in chain order; scanEvents the admin ones beside them',
  async (t) => {
    const head = await chain.latestBlock();
    const decoded = logs.map(decodeEscrowLog).filter((e) => e !== null);
    const events = await chain.readEvents(start + 1n, head);
    t.strictSame(events, decoded.filter(isMoneyEvent));
    const scan = await chain.scanEvents(start + 1n, head, null);
    t.ok(scan.ok);
    if (!scan.ok) return;
    t.strictSame(scan.events, events);
    t.strictSame(
      scan.admin,
      decoded.filter((e) => !isMoneyEvent(e)),
    );
    t.equal(scan.to.number, head);
  },
);

t.test('addresses stay checksummed past the cache bound', async (t) => {
  const n = 10_050;
  let wrong = 0;
  for (let i = 0; i < n; i++) {
    const lower = (BigInt(i) * 0x9e3779b97f4a7c15n + 1n).toString(16).padStart(40, '0').slice(-40);
    const log = { ...charged, topics: [charged.topics[0]!, charged.topics[1]!, `0x${'0'.repeat(24)}${lower}`] };
    if ((decodeEscrowLog(log) as EscrowEvent).account !== getAddress(`0x${lower}`)) wrong++;
  }
  t.equal(wrong, 0);
  const upper = { ...charged, topics: charged.topics.map((x) => x.toUpperCase().replace('0X', '0x')) };
  t.strictSame(
    (decodeEscrowLog(upper) as EscrowEvent).account,
    (decodeEscrowLog(charged) as EscrowEvent).account,
    'topic case does not matter',
  );
});

t.test('malformed logs of a money event throw; other events are ignored', async (t) => {
  const base: RpcLog = charged;
  const [sel, callId, account] = charged.topics as Hex[];
  const bad: [string, Partial<RpcLog>][] = [
    ['missing topic', { topics: [sel, callId] }],
    ['extra topic', { topics: [sel, callId, account, account] }],
    ['short topic', { topics: [sel, callId, account.slice(0, 40)] }],
    ['non-hex topic', { topics: [sel, `0x${'z'.repeat(64)}`, account] }],
    ['address padding', { topics: [sel, callId, `0x${'1'.repeat(64)}`] }],
    ['non-hex address', { topics: [sel, callId, `0x${'0'.repeat(24)}${'z'.repeat(40)}`] }],
    ['short tx hash', { transactionHash: '0x1234' }],
    ['short data', { data: charged.data.slice(0, 40) }],
    ['long data', { data: `${charged.data}${'0'.repeat(64)}` }],
    ['empty data', { data: '0x' }],
    ['non-hex data', { data: `0x${'g'.repeat(64)}` }],
    ['pending block number', { blockNumber: null }],
    ['pending log index', { logIndex: null }],
    ['missing tx hash', { transactionHash: null }],
  ];
  for (const [what, patch] of bad) {
    t.throws(() => decodeEscrowLog({ ...base, ...patch }), /^malformed Charged log \(tx /, what);
  }
  const skip = logs.find((l) => decodeEscrowLog(l)?.kind === 'charge_skipped')!;
  t.throws(
    () => decodeEscrowLog({ ...skip, data: `${skip.data.slice(0, 66)}${'0'.repeat(60)}0100` }),
    /malformed ChargeSkipped log .*not a uint8/,
    'status beyond uint8',
  );
  const settlerUpdated = logs.find((l) => decodeEscrowLog(l)?.kind === 'settler_updated')!;
  t.throws(
    () => decodeEscrowLog({ ...settlerUpdated, data: `0x${'0'.repeat(63)}2` }),
    /malformed SettlerUpdated log .*not 0 or 1/,
    'bool beyond 1',
  );
  t.equal(decodeEscrowLog({ ...base, topics: [`0x${'ab'.repeat(32)}`, callId, account] }), null, 'unknown selector');
  t.equal(decodeEscrowLog({ ...base, topics: [] }), null, 'anonymous log');
});
