/**
 * The farebox command as a Unix citizen: a large document through a pipe whose reader is slow arrives whole before
 * the process exits (both entry points: bin/cli.ts and the bin/farebox.js that npx runs); a reader that leaves early
 * (`| head`) gets no stack trace; `usage --json` reads the records of a Redis upgraded in place as new ones.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { createAccount } from '../../plugins/accounts/accounts.js';
import { keys } from '../../plugins/store/keys.js';
import { testRedis } from '../helpers/harness.js';
import { debitHold, placeHold } from '../../plugins/billing/wallets.js';
import { applyEventBatch } from '../../plugins/settlement/apply-events.js';
import type { Hex } from '../../plugins/chains/port.js';
import { makeUsage } from '../../pricing/index.js';
import { setSyncedBalance } from '../helpers/money.js';
import { weigh, writeFirstLayout } from '../helpers/record-layouts.js';
import { CLI, cliHere } from '../helpers/wait.js';
import { callIdOf, newRequestId } from '../../plugins/request-ids.js';

const { redis, prefix } = await testRedis(t);
const RECORDS = 3_000;
const account = (await createAccount(redis, {})).address;
const batch = redis.pipeline();
const now = Date.now();
for (let i = 0; i < RECORDS; i++) {
  const id = `req_${i.toString(16).padStart(32, '0')}`;
  batch.hset(keys.call(callIdOf(id)), {
    call_id: id,
    time: String(now + i),
    key_id: 'key_test',
    model: 'gamma-k3',
    chain: 'chain_a',
    price: '1234',
    status: 'settled',
    usage: JSON.stringify({ input_tokens: 12, output_tokens: 34 }),
    tx: `0x${'ab'.repeat(32)}`,
  });
  batch.zadd(keys.usageIndex(account), now + i, id);
}
await batch.exec();

/** Run a command with its stdout read through a pipe by a reader that waits `startMs`, then takes a chunk every `everyMs`. */
function slowlyRead(
  command: string[],
  startMs: number,
  everyMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, command, {
      env: { ...process.env, FAREBOX_REDIS_PREFIX: prefix, FAREBOX_CONFIG: '' },
    });
    const chunks: Buffer[] = [];
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.stdout.pause();
    // A 'readable' listener marks the stream as read: when the child exits, Node resumes (and so drops) the unread
    // output of a stdio stream no one listens to, and a reader still behind would see the document cut.
    child.stdout.on('readable', () => {});
    const readOne = () => {
      const chunk = child.stdout.read() as Buffer | null;
      if (chunk) chunks.push(chunk);
      if (!child.stdout.readableEnded) setTimeout(readOne, everyMs);
    };
    setTimeout(readOne, startMs);
    // Done when the child has exited and the reader has taken the pipe's last byte ('end' comes only after
    // read() has emptied the stream's buffer, which may still hold output after the child closed its end).
    const exited = new Promise<number | null>((done) => child.on('close', done));
    const ended = new Promise<void>((done) => child.stdout.once('end', done));
    void Promise.all([exited, ended]).then(([code]) =>
      resolve({ code, stdout: Buffer.concat(chunks).toString('utf8'), stderr }),
    );
  });
}

const usage = ['usage', '--account', account, '--limit', String(RECORDS), '--json'];

t.test('usage --json through a slow pipe: the whole document, one line, then exit 0', async (t) => {
  const r = await slowlyRead(['--import', 'tsx', 'bin/cli.ts', ...usage], 1_000, 5);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stderr, '');
  t.ok(r.stdout.length > 4 * 65_536, `${r.stdout.length} bytes, several pipe buffers`);
  t.match(r.stdout, /^[^\n]+\n$/, 'one line');
  const doc = JSON.parse(r.stdout) as { call_id: string }[];
  t.equal(doc.length, RECORDS, 'every record');
  t.equal(doc[0].call_id, `req_${(RECORDS - 1).toString(16).padStart(32, '0')}`, 'newest first');
});

const built = new URL('../../dist/bin/cli.js', import.meta.url);
const stale =
  !existsSync(built) || statSync(built).mtimeMs < statSync(new URL('../../bin/cli.ts', import.meta.url)).mtimeMs;

t.test(
  'bin/farebox.js (what npx farebox runs) lets the output drain too',
  {
    skip: stale && 'dist/ is older than bin/cli.ts: npm run build (npm ci does) to test the built command',
  },
  async (t) => {
    const r = await slowlyRead(['bin/farebox.js', ...usage], 1_000, 5);
    t.equal(r.code, 0, r.stderr);
    t.equal((JSON.parse(r.stdout) as unknown[]).length, RECORDS, 'every record');
  },
);

t.test('a reader that leaves early (| head -c 100) ends the command quietly', async (t) => {
  const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [...CLI, ...usage], {
      env: { ...process.env, FAREBOX_REDIS_PREFIX: prefix, FAREBOX_CONFIG: '' },
    });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    child.stdout.once('data', () => child.stdout.destroy());
    child.on('close', (code) => resolve({ code, stderr }));
  });
  t.equal(r.stderr, '', 'no stack trace');
  t.equal(r.code, 0);
});

t.test(
  'usage --json prints a compact record and its first-layout twin (a Redis upgraded in place) as one document shape',
  async (t) => {
    const who = (await createAccount(redis, {})).address;
    await setSyncedBalance(redis, who, 'chain_a', 1_000_000n);
    const at = Date.UTC(2026, 0, 2, 3, 4, 5, 678);
    const compact = newRequestId();
    const h = {
      requestId: compact,
      callId: callIdOf(compact),
      account: who,
      chain: 'chain_a' as const,
      owner: 'gw-1',
      retentionMs: 3_600_000,
    };
    await placeHold(redis, { ...h, amount: 50_000n, ttlMs: 60_000, model: 'gamma-k3', keyId: 'key_cli', now: at });
    await debitHold(redis, {
      ...h,
      price: 1_234n,
      usageJson: JSON.stringify(makeUsage({ input_tokens: 12, output_tokens: 34 })),
    });
    const tx = `0x${'cd'.repeat(32)}` as Hex;
    await applyEventBatch(redis, 'chain_a', [
      {
        kind: 'charged',
        account: who as Hex,
        amount: 1_234n,
        callId: h.callId,
        blockNumber: 7n,
        logIndex: 0,
        txHash: tx,
      },
    ]);
    t.equal((await weigh(redis, keys.call(h.callId))).encoding, 'listpack', 'written compact');
    const first = `req_${'e'.repeat(32)}`;
    await writeFirstLayout(
      redis,
      {
        requestId: first,
        account: who,
        keyId: 'key_cli',
        model: 'gamma-k3',
        chain: 'chain_a',
        held: 50_000n,
        owner: 'gw-1',
        time: at - 1,
        expires: at + 59_999,
        status: 'settled',
        price: 1_234n,
        usage: { input_tokens: 12, output_tokens: 34 },
        tx,
      },
      3_600_000,
    );

    const r = await cliHere(['usage', '--account', who, '--json'], {
      FAREBOX_REDIS_PREFIX: prefix,
      FAREBOX_CONFIG: '',
    });
    t.equal(r.code, 0, r.stderr);
    const row = (call_id: string, time: string) => ({
      call_id,
      time,
      key_id: 'key_cli',
      model: 'gamma-k3',
      chain: 'chain_a',
      usage: {
        input_tokens: 12,
        output_tokens: 34,
        cache_read_tokens: 0,
        cache_write_5m_tokens: 0,
        cache_write_1h_tokens: 0,
        images: 0,
        video_seconds: 0,
      },
      price: '0.001234',
      status: 'settled',
      tx,
    });
    // Compared as text: the same keys in the same order, for either layout.
    t.equal(
      r.stdout,
      `${JSON.stringify([row(compact, '2026-01-02T03:04:05.678Z'), row(first, '2026-01-02T03:04:05.677Z')])}\n`,
    );
  },
);
