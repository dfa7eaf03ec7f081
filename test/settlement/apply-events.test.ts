// The watcher's apply script over many events: applied in scripts of at most APPLY_CHUNK events (a long script
// would stall every gateway's hold and settle behind it), each event exactly once, in order, across chunk bounds.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import type { Address } from '../../plugins/chains/config.js';
import type { EscrowEvent, Hex } from '../../plugins/chains/port.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { keys } from '../../plugins/store/keys.js';
import { APPLY_CHUNK, applyEvents, readCursor } from '../../plugins/settlement/apply-events.js';
import { testRedis } from '../helpers/harness.js';

const { redis } = await testRedis(t);

const account = (): Address => `0x${randomBytes(20).toString('hex')}`;
const tx = (): Hex => `0x${randomBytes(32).toString('hex')}`;

/** Deposits of 1..n atomic units over `accounts`, three per block, then one withdrawal request per account. */
function history(accounts: Address[], n: number): EscrowEvent[] {
  const out: EscrowEvent[] = [];
  for (let i = 0; i < n; i++) {
    const a = accounts[i % accounts.length]!;
    out.push({ kind: 'deposited', account: a, from: a, amount: BigInt(i + 1), callId: null, blockNumber: BigInt(10 + Math.floor(i / 3)), logIndex: i % 3, txHash: tx() });
  }
  const last = BigInt(10 + Math.ceil(n / 3));
  accounts.forEach((a, j) => out.push({ kind: 'withdrawal_requested', account: a, amount: 7n, callId: null, readyAt: 0n, blockNumber: last, logIndex: j, txHash: tx() }));
  return out;
}

/** Commands sent on `r` while `fn` runs. */
async function commandsDuring<T>(fn: () => Promise<T>): Promise<{ result: T; commands: number }> {
  const send = redis.sendCommand.bind(redis);
  let commands = 0;
  redis.sendCommand = ((...args: Parameters<typeof send>) => {
    commands++;
    return send(...args);
  }) as typeof redis.sendCommand;
  try {
    return { result: await fn(), commands };
  } finally {
    redis.sendCommand = send;
  }
}

t.test('events over several chunks: one script per APPLY_CHUNK events, each applied once, in order', async (t) => {
  const accounts = [account(), account(), account()];
  const events = history(accounts, 3 * APPLY_CHUNK + 5);
  // A watcher that stopped part-way (after the first chunk and a half): the rest is applied from its cursor.
  const first = await applyEvents(redis, 'chain_b', events.slice(0, APPLY_CHUNK + APPLY_CHUNK / 2));
  t.equal(first.length, APPLY_CHUNK + APPLY_CHUNK / 2);
  const { result, commands } = await commandsDuring(() => applyEvents(redis, 'chain_b', events));
  t.equal(commands, Math.ceil(events.length / APPLY_CHUNK), 'one script per chunk');
  t.equal(result.length, events.length - first.length, 'only events past the cursor applied');
  t.same(result.slice(-accounts.length), ['withdrawal_requested', 'withdrawal_requested', 'withdrawal_requested']);
  for (const [j, a] of accounts.entries()) {
    let sum = 0n;
    for (let i = j; i < 3 * APPLY_CHUNK + 5; i += accounts.length) sum += BigInt(i + 1);
    const w = await readWallet(redis, a, 'chain_b');
    t.same({ synced: w.synced, locked: w.locked }, { synced: sum, locked: 7n }, `account ${j}: every deposit once`);
  }
  t.same((await redis.smembers(keys.wallets('chain_b'))).sort(), accounts.map((a) => a.toLowerCase()).sort(), 'each account listed for the reconciler');
  const lastEvent = events[events.length - 1]!;
  const cursor = await readCursor(redis, 'chain_b');
  t.same(cursor && { block: cursor.block, logIndex: cursor.logIndex }, { block: lastEvent.blockNumber, logIndex: lastEvent.logIndex });
  t.same(await applyEvents(redis, 'chain_b', events), [], 'the whole history again: nothing applied');
});
