/**
 * What one billed call leaves in Redis for billing.retention_days, measured on a Redis of its own (redis-server on a
 * free port, no persistence): N text calls held, debited and settled through the wallet and watcher scripts (the
 * compact layout), against the same calls written as the first layout left them (test/helpers/record-layouts.ts).
 * Reports per call: the record (MEMORY USAGE), the usage index's share, and used_memory's growth, which counts what
 * MEMORY USAGE leaves out (the TTL's entry, the keyspace's buckets); then what 64 GB holds at 30 days.
 *
 *   node --import tsx bench/record-bytes.ts [--calls 20000] [--accounts 1]
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { debitHold, placeHold } from '../plugins/billing/wallets.js';
import { applyEventBatch } from '../plugins/settlement/apply-events.js';
import type { EscrowEvent, Hex } from '../plugins/chains/port.js';
import { keys } from '../plugins/store/keys.js';
import { writeFirstLayout, weigh } from '../test/helpers/record-layouts.js';
import { callIdOf } from '../plugins/request-ids.js';

const { values } = parseArgs({
  options: { calls: { type: 'string', default: '20000' }, accounts: { type: 'string', default: '1' } },
});
const CALLS = Number(values.calls);
const ACCOUNTS = Number(values.accounts);
const RETENTION_MS = 30 * 86_400_000;
const PREFIX = 'farebox:'; // deploy/farebox.example.json's prefix: key names as long as in production
const USAGE = { input_tokens: 1_234, output_tokens: 567, cache_read_tokens: 8_901 };

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

const port = await freePort();
const server = spawn(
  'setpriv',
  [
    '--pdeathsig',
    'KILL',
    'redis-server',
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
  ],
  { stdio: 'ignore' },
);
const redis = new Redis({ port, keyPrefix: PREFIX, retryStrategy: () => 100 });
redis.on('error', () => {}); // refused until the server listens: ioredis retries, and the first command waits for it
await redis.ping();

const accounts = Array.from({ length: ACCOUNTS }, () => `0x${randomBytes(20).toString('hex')}`);
const requestId = (i: number) => `req_${randomBytes(12).toString('hex')}${i.toString(16).padStart(8, '0')}`;
const tx = () => `0x${randomBytes(32).toString('hex')}` as Hex;

async function usedMemory(): Promise<number> {
  const info = await redis.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)![1]);
}

/** The compact layout: the calls go through the hold, debit and watcher scripts. */
async function compact(ids: string[]): Promise<void> {
  for (const a of accounts) await redis.hset(keys.wallet(a, 'chain_a'), 'synced', '9000000000000');
  const at = (i: number) => accounts[i % ACCOUNTS];
  for (let from = 0; from < ids.length; from += 500) {
    const part = ids.slice(from, from + 500);
    await Promise.all(
      part.map(async (id, j) => {
        const account = at(from + j);
        const callId = callIdOf(id);
        await placeHold(redis, {
          requestId: id,
          callId,
          account,
          chain: 'chain_a',
          amount: 300_000n,
          owner: 'gw-1-abcdef',
          ttlMs: 60_000,
          model: 'alpha-sonnet-4-6',
          keyId: 'key_5ff2f2d1cef982e2',
          retentionMs: RETENTION_MS,
        });
        await debitHold(redis, {
          requestId: id,
          callId,
          account,
          chain: 'chain_a',
          owner: 'gw-1-abcdef',
          price: 12_345n,
          usageJson: JSON.stringify(USAGE),
          retentionMs: RETENTION_MS,
        });
      }),
    );
    const events: EscrowEvent[] = part.map((id, j) => ({
      kind: 'charged',
      account: at(from + j) as Hex,
      amount: 12_345n,
      callId: callIdOf(id),
      blockNumber: BigInt(from + j + 1),
      logIndex: 0,
      txHash: tx(),
    }));
    await applyEventBatch(redis, 'chain_a', events);
  }
  // What the settler removes once charged, and what does not grow with calls.
  await redis.del(keys.debits('chain_a'));
}

/** The first layout, as its scripts left a settled call. */
async function firstLayout(ids: string[]): Promise<void> {
  const now = Date.now();
  for (let from = 0; from < ids.length; from += 500) {
    await Promise.all(
      ids.slice(from, from + 500).map((id, j) =>
        writeFirstLayout(
          redis,
          {
            requestId: id,
            account: accounts[(from + j) % ACCOUNTS],
            keyId: 'key_5ff2f2d1cef982e2',
            model: 'alpha-sonnet-4-6',
            chain: 'chain_a',
            held: 300_000n,
            owner: 'gw-1-abcdef',
            time: now + from + j,
            expires: now + from + j + 60_000,
            status: 'settled',
            price: 12_345n,
            usage: USAGE,
            tx: tx(),
          },
          RETENTION_MS,
        ),
      ),
    );
  }
}

/**
 * The floor that streaming a settled call's detail out of Redis would leave: its money state alone (status, price,
 * hold, tx, chain, time) under its call id, still listed in the account's index.
 */
async function moneyOnly(ids: string[]): Promise<void> {
  const now = Date.now();
  for (let from = 0; from < ids.length; from += 500) {
    const batch = redis.pipeline();
    ids.slice(from, from + 500).forEach((id, j) => {
      const key = keys.call(callIdOf(id));
      batch.hset(key, {
        t: String(now + from + j),
        c: 'chain_a',
        h: '300000',
        p: '12345',
        s: 'settled',
        x: tx().slice(2),
      });
      batch.pexpire(key, RETENTION_MS);
      batch.zadd(keys.usageIndex(accounts[(from + j) % ACCOUNTS]), now + from + j, id);
    });
    await batch.exec();
  }
}

async function measure(name: string, write: (ids: string[]) => Promise<void>): Promise<number> {
  await redis.flushall();
  await redis.call('MEMORY', 'PURGE');
  const before = await usedMemory();
  const ids = Array.from({ length: CALLS }, (_, i) => requestId(i));
  await write(ids);
  const after = await usedMemory();
  const sample = ids.filter((_, i) => i % Math.max(1, Math.floor(CALLS / 200)) === 0);
  let record = 0;
  const encodings = new Map<string, number>();
  for (const id of sample) {
    const w = await weigh(redis, keys.call(callIdOf(id)));
    record += w.bytes;
    encodings.set(w.encoding, (encodings.get(w.encoding) ?? 0) + 1);
  }
  let index = 0;
  for (const a of accounts) index += (await weigh(redis, keys.usageIndex(a))).bytes;
  const perCall = (after - before) / CALLS;
  const calls64 = 64e9 / perCall;
  console.log(
    `${name}: record ${(record / sample.length).toFixed(0)} B (${[...encodings].map(([e, n]) => `${e} ${n}`).join(', ')}), ` +
      `usage index ${(index / CALLS).toFixed(0)} B a call, used_memory ${perCall.toFixed(0)} B a call -> 64 GB holds ` +
      `${(calls64 / 1e6).toFixed(0)} M calls: ${(calls64 / 30 / 1e6).toFixed(2)} M a day, ${(calls64 / (30 * 86_400)).toFixed(1)} a second over 30 days`,
  );
  return perCall;
}

try {
  console.log(
    `${CALLS} settled text calls over ${ACCOUNTS} account(s), key prefix "${PREFIX}", Redis ${(await redis.info('server')).match(/redis_version:(\S+)/)![1]}`,
  );
  const first = await measure('first layout  ', firstLayout);
  const now = await measure('compact layout', compact);
  await measure('money state only (the floor of streaming the detail out)', moneyOnly);
  console.log(`per call: ${first.toFixed(0)} B -> ${now.toFixed(0)} B (${(first / now).toFixed(2)}x)`);
} finally {
  redis.disconnect();
  server.kill();
}
