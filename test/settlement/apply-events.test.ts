// The watcher's apply script: events applied in scripts of at most APPLY_CHUNK events (a long script would stall
// every gateway's hold and settle behind it), each exactly once, in order, across chunk bounds; and events that do
// not fit (amounts of 0, amounts of 2^53 and more, charges of calls Redis lost, malformed input) never stop a chain.
// Charges of calls Redis lost rebuild those calls' records and never touch another call's amounts.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import type { Address } from '../../plugins/chains/config.js';
import type { EscrowEvent, Hex } from '../../plugins/chains/port.js';
import { debitHold, placeHold, readWallet } from '../../plugins/billing/wallets.js';
import { getCallRecord, getCallRecordById, listUsage } from '../../plugins/billing/call-records.js';
import { keys } from '../../plugins/store/keys.js';
import { APPLY_CHUNK, applyEventBatch, readAnomalies, readCursor } from '../../plugins/settlement/apply-events.js';
import { testRedis } from '../helpers/harness.js';
import { callIdOf } from '../../plugins/request-ids.js';

const { redis } = await testRedis(t);

const account = (): Address => `0x${randomBytes(20).toString('hex')}`;
const tx = (): Hex => `0x${randomBytes(32).toString('hex')}`;

/** Deposits of 1..n atomic units over `accounts`, three per block, then one withdrawal request per account. */
function history(accounts: Address[], n: number): EscrowEvent[] {
  const out: EscrowEvent[] = [];
  for (let i = 0; i < n; i++) {
    const a = accounts[i % accounts.length]!;
    out.push({
      kind: 'deposited',
      account: a,
      from: a,
      amount: BigInt(i + 1),
      callId: null,
      blockNumber: BigInt(10 + Math.floor(i / 3)),
      logIndex: i % 3,
      txHash: tx(),
    });
  }
  const last = BigInt(10 + Math.ceil(n / 3));
  accounts.forEach((a, j) =>
    out.push({
      kind: 'withdrawal_requested',
      account: a,
      amount: 7n,
      callId: null,
      readyAt: 0n,
      blockNumber: last,
      logIndex: j,
      txHash: tx(),
    }),
  );
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
  const first = await applied(redis, 'chain_b', events.slice(0, APPLY_CHUNK + APPLY_CHUNK / 2));
  t.equal(first.length, APPLY_CHUNK + APPLY_CHUNK / 2);
  const { result, commands } = await commandsDuring(() => applied(redis, 'chain_b', events));
  t.equal(commands, Math.ceil(events.length / APPLY_CHUNK), 'one script per chunk');
  t.equal(result.length, events.length - first.length, 'only events past the cursor applied');
  t.same(result.slice(-accounts.length), ['withdrawal_requested', 'withdrawal_requested', 'withdrawal_requested']);
  for (const [j, a] of accounts.entries()) {
    let sum = 0n;
    for (let i = j; i < 3 * APPLY_CHUNK + 5; i += accounts.length) sum += BigInt(i + 1);
    const w = await readWallet(redis, a, 'chain_b');
    t.same({ synced: w.synced, locked: w.locked }, { synced: sum, locked: 7n }, `account ${j}: every deposit once`);
  }
  t.same(
    (await redis.smembers(keys.wallets('chain_b'))).sort(),
    accounts.map((a) => a.toLowerCase()).sort(),
    'each account listed for the reconciler',
  );
  const lastEvent = events[events.length - 1]!;
  const cursor = await readCursor(redis, 'chain_b');
  t.same(cursor && { block: cursor.block, logIndex: cursor.logIndex }, {
    block: lastEvent.blockNumber,
    logIndex: lastEvent.logIndex,
  });
  t.same(await applied(redis, 'chain_b', events), [], 'the whole history again: nothing applied');
});

let block = 1_000n;
/** One event at the next block (log index 0), with defaults for the fields its kind does not use. */
/** Apply events in chain order, each once: the kinds applied. */
async function applied(...a: Parameters<typeof applyEventBatch>): Promise<string[]> {
  return (await applyEventBatch(...a)).applied;
}

function ev(
  kind: EscrowEvent['kind'],
  account: Address,
  amount: bigint,
  more: Record<string, unknown> = {},
): EscrowEvent {
  block += 1n;
  const callId = kind.startsWith('charge') ? callIdOf(`apply-${block}`) : null;
  return {
    kind,
    account,
    amount,
    callId,
    from: account,
    requested: amount,
    readyAt: 0n,
    balance: 0n,
    status: 'charged',
    blockNumber: block,
    logIndex: 0,
    txHash: tx(),
    ...more,
  } as EscrowEvent;
}

/** A hold of `amount` on chain_a, placed by the wallet scripts as a billed call places it. */
async function hold(account: Address, amount: bigint): Promise<{ requestId: string; callId: Hex }> {
  const requestId = `req_${randomBytes(16).toString('hex')}`;
  const callId = callIdOf(requestId);
  const held = await placeHold(redis, {
    requestId,
    callId,
    account: account.toLowerCase(),
    chain: 'chain_a',
    amount,
    owner: 'apply-test',
    ttlMs: 60_000,
    model: 'gamma-k3',
    keyId: 'key_test',
    retentionMs: 3_600_000,
  });
  if (!held.placed) throw new Error('hold refused');
  return { requestId, callId };
}

/** A pending debit of `price` on chain_a (its hold debited at `price`; 0 releases it). */
async function debitCall(account: Address, price: bigint): Promise<{ requestId: string; callId: Hex }> {
  const call = await hold(account, price);
  await debitHold(redis, {
    ...call,
    account: account.toLowerCase(),
    chain: 'chain_a',
    owner: 'apply-test',
    price,
    usageJson: '{}',
    retentionMs: 3_600_000,
  });
  return call;
}

/** debitCall's call id. */
const debit = async (account: Address, price: bigint): Promise<Hex> => (await debitCall(account, price)).callId;

const wallet = async (a: Address) => {
  const w = await readWallet(redis, a, 'chain_a');
  return { synced: w.synced, locked: w.locked, pending: w.pending, held: w.held };
};

t.test(
  'a Withdrawn of 0 (charges took the balance during the timelock) applies; the deposit before it is credited once',
  async (t) => {
    const a = account();
    const events = [
      ev('deposited', a, 500n),
      ev('withdrawal_requested', a, 500n),
      ev('withdrawn', a, 0n, { requested: 500n }),
      ev('deposited', a, 300n),
    ];
    t.same(await applied(redis, 'chain_a', events), ['deposited', 'withdrawal_requested', 'withdrawn', 'deposited']);
    t.same(await wallet(a), { synced: 800n, locked: 0n, pending: 0n, held: 0n });
    t.same(await applied(redis, 'chain_a', events), [], 'applied again: nothing');
    t.same(await wallet(a), { synced: 800n, locked: 0n, pending: 0n, held: 0n }, 'the deposit credited once');
    const last = events[events.length - 1]!;
    t.equal((await readCursor(redis, 'chain_a'))?.raw, `${last.blockNumber}:0`, 'the cursor moved past all four');
  },
);

t.test('an amount of 0 of every kind writes nothing and stops nothing', async (t) => {
  const a = account();
  await applied(redis, 'chain_a', [ev('deposited', a, 1_000n), ev('withdrawal_requested', a, 400n)]);
  const callId = await debit(a, 250n);
  const zeros = [
    ev('deposited', a, 0n),
    ev('charged', a, 0n),
    ev('charge_refused', a, 0n),
    ev('charge_skipped', a, 0n),
    ev('withdrawal_cancelled', a, 0n),
    ev('withdrawal_requested', a, 0n),
    ev('withdrawn', a, 0n),
    ev('charged', a, 0n, { callId }),
  ];
  const r = await applyEventBatch(redis, 'chain_a', zeros);
  t.same(
    r.applied,
    zeros.map((e) => e.kind),
  );
  t.same(
    await wallet(a),
    { synced: 1_000n, locked: 0n, pending: 0n, held: 0n },
    'the debit left pending by its record, 0 charged',
  );
  t.equal((await getCallRecordById(redis, callId))?.status, 'settled');
  t.same(r.anomalies, []);
  t.same(
    r.unmatched.map((u) => [u.kind, u.reason, u.rebuilt]),
    [
      ['charged', 'unknown_call', false],
      ['charge_refused', 'unknown_call', false],
    ],
    'nothing rebuilt of an amount of 0',
  );
  t.equal(await getCallRecordById(redis, zeros[1]!.callId!), null);
});

t.test(
  'an amount of 2^53 or more is not applied: recorded as an anomaly, the cursor moves on, later events apply',
  async (t) => {
    const a = account();
    const b = account();
    const huge = [
      ev('deposited', a, 2n ** 53n),
      ev('deposited', b, 2n ** 53n - 1n),
      ev('withdrawal_requested', a, 2n ** 64n),
      ev('charged', a, 2n ** 255n),
      ev('withdrawn', b, 10n ** 30n),
      ev('deposited', a, 7n),
    ];
    const r = await applyEventBatch(redis, 'chain_a', huge);
    t.same(r.applied, ['deposited', 'deposited'], 'the largest exact amount and the deposit after the anomalies');
    t.same(
      r.anomalies.map((x) => [x.kind, x.amount, x.txHash]),
      [
        ['deposited', 2n ** 53n, huge[0]!.txHash],
        ['withdrawal_requested', 2n ** 64n, huge[2]!.txHash],
        ['charged', 2n ** 255n, huge[3]!.txHash],
        ['withdrawn', 10n ** 30n, huge[4]!.txHash],
      ],
    );
    t.same(await wallet(a), { synced: 7n, locked: 0n, pending: 0n, held: 0n });
    t.same(await wallet(b), { synced: 2n ** 53n - 1n, locked: 0n, pending: 0n, held: 0n });
    t.equal((await readCursor(redis, 'chain_a'))?.block, huge[5]!.blockNumber);
    const kept = await readAnomalies(redis, 'chain_a');
    t.match(kept.at(-1), {
      reason: 'amount_out_of_range',
      kind: 'withdrawn',
      amount: (10n ** 30n).toString(),
      tx: huge[4]!.txHash,
      block: huge[4]!.blockNumber.toString(),
      account: b.toLowerCase(),
    });
    t.same(await applied(redis, 'chain_a', huge), [], 'applied again: nothing, and no second record');
    t.equal((await readAnomalies(redis, 'chain_a')).length, kept.length);
  },
);

/** Lose a debit's last writes, as a crash or failover loses Redis's last second: its record, index entry and pending amount. */
async function lose(account: Address, call: { requestId: string; callId: Hex }, price: bigint): Promise<void> {
  const a = account.toLowerCase();
  await redis
    .multi()
    .del(keys.call(call.callId))
    .zrem(keys.usageIndex(a), call.requestId)
    .hincrby(keys.wallet(a, 'chain_a'), 'pending', String(-price))
    .exec();
}

t.test(
  'charges of calls Redis lost rebuild their records; the pending amounts of other calls stay, never below 0',
  async (t) => {
    const a = account();
    await applied(redis, 'chain_a', [ev('deposited', a, 1_000_000n)]);
    const kept = await debitCall(a, 40_000n);
    const charged = await debitCall(a, 30_000n);
    const refused = await debitCall(a, 20_000n);
    // The settler charged these two from a primary that then lost its last writes: Redis no longer knows them.
    await lose(a, charged, 30_000n);
    await lose(a, refused, 20_000n);
    t.equal((await wallet(a)).pending, 40_000n, "pending is the kept call's alone");
    const foreign = callIdOf(`apply-foreign-${block}`); // a call id not of the gateway's form
    const events = [
      ev('charged', a, 30_000n, { callId: charged.callId }),
      ev('charge_refused', a, 20_000n, { callId: refused.callId }),
      ev('charged', a, 5_000n, { callId: foreign }),
    ];
    const r = await applyEventBatch(redis, 'chain_a', events, { retentionMs: 3_600_000 });
    t.same(r.applied, ['charged', 'charge_refused', 'charged']);
    t.same(
      r.unmatched.map((u) => [u.reason, u.callId, u.rebuilt]),
      [
        ['unknown_call', charged.callId, true],
        ['unknown_call', refused.callId, true],
        ['unknown_call', foreign, true],
      ],
    );
    t.same(
      await wallet(a),
      { synced: 1_000_000n - 35_000n, locked: 0n, pending: 40_000n, held: 0n },
      'synced as the escrow; the kept call still pending',
    );
    t.match(await getCallRecord(redis, charged.requestId), {
      call_id: charged.requestId,
      chain: 'chain_a',
      status: 'settled',
      priceAtomic: 30_000n,
      price: '0.030000',
      tx: events[0]!.txHash,
      model: '',
      key_id: '',
      rebuilt: true,
      usage: { input_tokens: 0, output_tokens: 0 },
    });
    t.match(await getCallRecord(redis, refused.requestId), {
      status: 'failed',
      priceAtomic: 20_000n,
      tx: events[1]!.txHash,
      rebuilt: true,
    });
    t.match(await getCallRecord(redis, foreign), {
      call_id: foreign,
      status: 'settled',
      priceAtomic: 5_000n,
      rebuilt: true,
    });
    const ttl = await redis.pttl(keys.call(charged.callId));
    t.ok(ttl > 3_000_000 && ttl <= 3_600_000, `kept for the retention given (${ttl} ms)`);
    const usage = await listUsage(redis, a);
    t.same(
      usage.map((u) => u.call_id).sort(),
      [kept.requestId, charged.requestId, refused.requestId, foreign].sort(),
      'farebox usage lists the rebuilt records',
    );
    t.match(
      usage.find((u) => u.call_id === charged.requestId),
      { rebuilt: true, status: 'settled', price: '0.030000' },
    );
    t.notOk('rebuilt' in usage.find((u) => u.call_id === kept.requestId)!, 'a record the gateway wrote is not marked');

    // The kept call's own charge settles it, and pending goes to 0, not below.
    await applied(redis, 'chain_a', [ev('charged', a, 40_000n, { callId: kept.callId })]);
    t.same(await wallet(a), { synced: 1_000_000n - 75_000n, locked: 0n, pending: 0n, held: 0n });
    t.match(await getCallRecord(redis, kept.requestId), { status: 'settled', priceAtomic: 40_000n });
    t.notOk((await getCallRecord(redis, kept.requestId))?.rebuilt);
    t.same(await applied(redis, 'chain_a', events), [], "the lost calls' events again: nothing");
  },
);

t.test(
  'a charge of a call whose debit was lost settles its held or released record; only its own hold is released',
  async (t) => {
    const a = account();
    await applied(redis, 'chain_a', [ev('deposited', a, 1_000_000n)]);
    const other = await debitCall(a, 7_000n);
    const stillHeld = await hold(a, 10_000n);
    const released = await debitCall(a, 0n); // its debit lost, the sweeper released the hold at 0
    t.match(await wallet(a), { pending: 7_000n, held: 10_000n });
    const events = [
      ev('charged', a, 8_000n, { callId: stillHeld.callId }),
      ev('charged', a, 6_000n, { callId: released.callId }),
    ];
    const r = await applyEventBatch(redis, 'chain_a', events);
    t.same(
      r.unmatched.map((u) => [u.reason, u.rebuilt]),
      [
        ['call_not_debited', true],
        ['call_not_debited', true],
      ],
    );
    t.same(
      await wallet(a),
      { synced: 1_000_000n - 14_000n, locked: 0n, pending: 7_000n, held: 0n },
      "its hold released, the other call's pending untouched",
    );
    t.match(await getCallRecord(redis, stillHeld.requestId), {
      status: 'settled',
      priceAtomic: 8_000n,
      tx: events[0]!.txHash,
      rebuilt: true,
      model: 'gamma-k3',
    });
    t.match(await getCallRecord(redis, released.requestId), { status: 'settled', priceAtomic: 6_000n, rebuilt: true });
    t.equal(
      await redis.zscore(keys.holds, stillHeld.requestId),
      null,
      'no longer among the holds the sweeper releases',
    );
    t.equal(await redis.sismember(keys.ownerHolds('apply-test'), stillHeld.requestId), 0);
    // The gateway's own debit, should it still come, finds the call settled and changes nothing.
    const late = await debitHold(redis, {
      ...stillHeld,
      account: a.toLowerCase(),
      chain: 'chain_a',
      owner: 'apply-test',
      price: 9_000n,
      usageJson: '{}',
      retentionMs: 3_600_000,
    });
    t.same(late?.debited, 8_000n);
    t.same(await wallet(a), { synced: 1_000_000n - 14_000n, locked: 0n, pending: 7_000n, held: 0n });
    t.equal(await getCallRecord(redis, other.requestId).then((x) => x?.status), 'pending');
  },
);

t.test("a record of another wallet changes nothing; a pending short of its call's price stops at 0", async (t) => {
  const a = account();
  const other = account();
  await applied(redis, 'chain_a', [ev('deposited', a, 100_000n), ev('deposited', other, 10_000n)]);
  const foreign = await debit(other, 10_000n);
  const r = await applyEventBatch(redis, 'chain_a', [ev('charged', a, 10_000n, { callId: foreign })]);
  t.same(
    r.unmatched.map((u) => [u.reason, u.rebuilt]),
    [['call_not_pending', false]],
  );
  t.equal((await wallet(other)).pending, 10_000n, "the other wallet's pending untouched");
  t.equal((await getCallRecordById(redis, foreign))?.status, 'pending');

  // A wallet whose pending lost part of a call's amount (the rule before this one released other calls' amounts).
  const mine = await debit(a, 5_000n);
  await redis.hset(keys.wallet(a.toLowerCase(), 'chain_a'), 'pending', '1000');
  await applied(redis, 'chain_a', [ev('charged', a, 5_000n, { callId: mine })]);
  t.same(await wallet(a), { synced: 85_000n, locked: 0n, pending: 0n, held: 0n }, 'pending 0, not -4,000');
});

t.test('a malformed event is refused before the first write: nothing of its chunk applied', async (t) => {
  const a = account();
  const good = ev('deposited', a, 100n);
  for (const bad of [
    { ...ev('deposited', a, 1n), account: 'nope' },
    { ...ev('deposited', a, 1n), kind: 'minted' },
    { ...ev('charged', a, 1n), callId: '0x12' },
    { ...ev('deposited', a, 1n), amount: -1n },
    { ...ev('deposited', a, 1n), txHash: '0x' },
  ] as EscrowEvent[]) {
    const cursor = await redis.get('cursor:chain_c');
    await t.rejects(applied(redis, 'chain_c', [good, bad]), /malformed; nothing applied/);
    t.equal(await redis.get('cursor:chain_c'), cursor, 'cursor unchanged');
    t.equal((await readWallet(redis, a, 'chain_c')).synced, 0n, 'the good event before it not applied');
  }
});
