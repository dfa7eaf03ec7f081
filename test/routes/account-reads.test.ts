// GET /v1/calls/{request_id} and GET /v1/balance (plugins/routes/account-reads.ts): a caller reads its own call's
// record and its balances, billed on real dev chains. The price read equals the debit to the atomic unit, in the
// wallet and onchain; the record settles with its transaction; another account's id is a 404 like an unknown one;
// the balance is what `farebox balance --json` prints, and shows the hold of a call while it runs.
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { getCallRecord, listCallRecords } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import type { Address } from '../../plugins/chains/config.js';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { formatUsd, USAGE_FIELDS } from '../../pricing/index.js';
import { closeDevChains, startHarness, type Harness } from '../helpers/harness.js';
import { writeFirstLayout } from '../helpers/record-layouts.js';
import { cliHere, runCli, until } from '../helpers/wait.js';

const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 5_000_000n);
const chainA = createEvmChain('chain_a', h.config.chains!.chain_a);
const other = await createAccount(h.redis, {});
const otherKey = (await createKey(h.redis, other.address)).key;

const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });

type CallView = Record<string, unknown> & { status: string; price: string | null; price_atomic: string | null };
type BalanceDoc = { account: string; default_chain: string; chains: Record<string, Record<string, string>> };

/** GET a path under /v1 with `key` (none: no key) and extra headers. */
function get(path: string, key: string | null = h.key, headers: Record<string, string> = {}) {
  return fetch(`${h.url}/v1${path}`, { headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers } });
}

async function callView(id: string, headers: Record<string, string> = {}): Promise<CallView> {
  const res = await get(`/calls/${id}`, h.key, headers);
  if (res.status !== 200) throw new Error(`GET /v1/calls/${id}: ${res.status} ${await res.text()}`);
  return (await res.json()) as CallView;
}

async function balance(key = h.key): Promise<BalanceDoc> {
  const res = await get('/balance', key);
  if (res.status !== 200) throw new Error(`GET /v1/balance: ${res.status} ${await res.text()}`);
  return (await res.json()) as BalanceDoc;
}

/** The CLI's --json document, run in this process (main()) or as a process of its own. */
async function cliBalance(account: string, spawned = false): Promise<BalanceDoc> {
  const env = { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' };
  const args = ['balance', '--account', account, '--json'];
  const r = await (spawned ? runCli(args, env) : cliHere(args, env));
  if (r.code !== 0) throw new Error(`farebox balance: exit ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as BalanceDoc;
}

/** Poll the call's record through the endpoint until it is settled (the settler and the watcher run beside). */
function settled(id: string, headers: Record<string, string> = {}): Promise<CallView> {
  return until(`${id} settled`, async () => {
    const v = await callView(id, headers);
    return v.status === 'settled' ? v : null;
  });
}

/** Wait until nothing of the account is held or pending: the wallet is the escrow's. */
function quiet(hh: Harness = h) {
  return until('no hold, nothing pending', async () => {
    const w = await readWallet(hh.redis, hh.account, 'chain_a');
    return w.held === 0n && w.pending === 0n ? w : null;
  });
}

t.test(
  'a chat completion through the openai SDK: GET /v1/calls/{x-request-id} has its record, the price is the debit to the atomic unit, settled with its tx',
  async (t) => {
    const before = await quiet();
    const onchainBefore = await chainA.balanceOf(h.account as Address);
    t.equal(onchainBefore, before.synced);
    const { data, response } = await openai.chat.completions
      .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hello #sim:tokens=7' }] })
      .withResponse();
    t.equal(data.usage?.completion_tokens, 7);
    const id = response.headers.get('x-request-id')!;
    t.match(id, /^req_[0-9a-f]{32}$/);

    const view = await settled(id);
    const after = await quiet();
    const onchainAfter = await chainA.balanceOf(h.account as Address);
    const price = BigInt(view.price_atomic!);
    t.ok(price > 0n, 'a billed call');
    t.equal(price, before.synced - after.synced, 'the price is the wallet debit, to the atomic unit');
    t.equal(price, onchainBefore - onchainAfter, 'and the escrow debit onchain');
    t.equal(view.price, formatUsd(price), 'USD with 6 decimals, from the same bigint');
    const record = (await getCallRecord(h.redis, id))!;
    t.equal(record.priceAtomic, price, "the record's price");
    t.match(view, {
      id,
      model: 'gamma-k3',
      key_id: h.keyId,
      chain: 'chain_a',
      status: 'settled',
      tx: /^0x[0-9a-f]{64}$/,
      created_at: record.time,
      hold: formatUsd(record.held),
      hold_atomic: record.held.toString(),
    });
    t.equal(view.tx, record.tx, 'the settlement transaction');
    t.ok(record.held >= price, 'the hold covered the price');
    t.same(Object.keys(view.usage as object), [...USAGE_FIELDS], 'every usage count');
    t.match(view.usage, { output_tokens: 7 });
    t.ok(!Number.isNaN(Date.parse(view.created_at as string)), 'created_at is an ISO time');
  },
);

t.test(
  'a message through @anthropic-ai/sdk: its record, errors in Anthropic shape when anthropic-version is sent',
  async (t) => {
    const before = await quiet();
    const { data, response } = await anthropic.messages
      .create({ model: 'alpha-haiku-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hi #sim:tokens=5' }] })
      .withResponse();
    t.equal(data.usage.output_tokens, 5);
    const id = response.headers.get('x-request-id')!;
    const version = { 'anthropic-version': '2023-06-01' };
    const view = await settled(id, version);
    const after = await quiet();
    t.equal(BigInt(view.price_atomic!), before.synced - after.synced, 'the price is the wallet debit');
    t.match(view, { id, model: 'alpha-haiku-4-5', chain: 'chain_a', tx: /^0x[0-9a-f]{64}$/ });
    t.match(view.usage, { output_tokens: 5 });

    // The SDK's own request path: an unknown id is its typed NotFoundError, from Anthropic's error shape.
    const missing = await anthropic.get(`/v1/calls/req_${'0'.repeat(32)}`).catch((e: unknown) => e);
    t.ok(missing instanceof Anthropic.NotFoundError, 'NotFoundError');
    const res = await get(`/calls/${id.slice(0, -1)}x`, h.key, version);
    t.equal(res.status, 404);
    t.ok(res.headers.get('request-id'), "Anthropic's request-id header");
    t.match(await res.json(), {
      type: 'error',
      error: { type: 'not_found_error', message: /No call with request id/ },
    });
    const noKey = await get('/balance', null, version);
    t.equal(noKey.status, 401);
    t.match(await noKey.json(), { type: 'error', error: { type: 'authentication_error' } });
  },
);

t.test(
  "another account's key, an unknown id, a malformed one: the same 404; no key 401; reads hold and bill nothing",
  async (t) => {
    const { response } = await openai.chat.completions
      .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'mine' }] })
      .withResponse();
    const id = response.headers.get('x-request-id')!;
    await settled(id);
    const records = (await listCallRecords(h.redis, h.account)).length;

    const shapes: unknown[] = [];
    for (const [what, path, key] of [
      ["another account's key", `/calls/${id}`, otherKey],
      ['an unknown id', `/calls/req_${'f'.repeat(32)}`, h.key],
      ['a malformed id', '/calls/not-a-request-id', h.key],
    ] as const) {
      const res = await get(path, key);
      t.equal(res.status, 404, what);
      const body = (await res.json()) as { error: { message: string; type: string; code: string; param: string } };
      t.match(body.error.message, /^No call with request id "/, what);
      shapes.push({ ...body.error, message: undefined });
    }
    t.same(shapes[0], shapes[1], "another account's id answers as an unknown one");
    t.same(shapes[1], shapes[2]);
    t.match(shapes[0], { type: 'invalid_request_error', code: 'call_not_found', param: 'request_id' });

    const noKey = await get(`/calls/${id}`, null);
    t.equal(noKey.status, 401);
    t.match(await noKey.json(), { error: { code: 'missing_api_key' } });
    const badKey = await get('/balance', 'sk_not-a-key');
    t.equal(badKey.status, 401);
    t.match(await badKey.json(), { error: { code: 'invalid_api_key' } });

    // Reads are no calls: the wallet is as it was and no record was made for them (their own request ids included).
    const w = await readWallet(h.redis, h.account, 'chain_a');
    const read = await get('/balance');
    await read.arrayBuffer();
    const readId = read.headers.get('x-request-id')!;
    t.match(readId, /^req_/);
    t.equal(await getCallRecord(h.redis, readId), null, 'no record for a read');
    t.equal((await listCallRecords(h.redis, h.account)).length, records, 'no record added');
    t.same(await readWallet(h.redis, h.account, 'chain_a'), w, 'nothing held or debited');
    t.equal(read.headers.get('cache-control'), 'no-store');
  },
);

t.test('GET /v1/balance is `farebox balance --json`, for each account, and shows a running call held', async (t) => {
  await quiet();
  t.same(await balance(), await cliBalance(h.account, true), 'equal to the CLI as a process');
  const theirs = await balance(otherKey);
  t.same(theirs, await cliBalance(other.address), "another key: its own account's");
  t.equal(theirs.account, other.address);
  const mine = await balance();
  t.equal(mine.account, h.account);
  t.equal(mine.default_chain, 'chain_a');
  const w = await readWallet(h.redis, h.account, 'chain_a');
  t.same(mine.chains.chain_a, {
    balance: formatUsd(w.synced),
    held: '0.000000',
    pending: '0.000000',
    available: formatUsd(w.available),
    balance_atomic: w.synced.toString(),
    held_atomic: '0',
    pending_atomic: '0',
    available_atomic: w.available.toString(),
  });
  const start = BigInt(mine.chains.chain_a.available_atomic);

  // A stream that keeps its call open (a chunk a second) until the test leaves it.
  const { data: stream, response } = await openai.chat.completions
    .create({
      model: 'gamma-k3',
      stream: true,
      messages: [{ role: 'user', content: 'slowly #sim:tokens=60 #sim:chunk_delay_ms=1000' }],
    })
    .withResponse();
  const id = response.headers.get('x-request-id')!;
  // Until some content has reached the caller: a call cut before any is free, this one is to be billed.
  const chunks = stream[Symbol.asyncIterator]();
  for (;;) {
    const next = await chunks.next();
    if (next.done) throw new Error('the stream ended before the test left it');
    if (next.value.choices[0]?.delta?.content) break;
  }
  const running = await callView(id);
  t.match(running, { status: 'held', price: null, price_atomic: null });
  const hold = BigInt(running.hold_atomic as string);
  t.ok(hold > 0n);
  const during = await balance();
  t.same(during, await cliBalance(h.account), 'equal to the CLI while the call runs');
  t.equal(during.chains.chain_a.held_atomic, hold.toString(), 'the call is held');
  t.equal(during.chains.chain_a.held, formatUsd(hold));
  t.equal(BigInt(during.chains.chain_a.available_atomic), start - hold, 'available less the hold');

  stream.controller.abort();
  // Debited for what reached the caller: pending until its charge is applied, then settled; the balance shows
  // the price taken from the available amount throughout.
  const debited = await until('the call debited', async () => {
    const v = await callView(id);
    return v.status !== 'held' ? v : null;
  });
  const price = BigInt(debited.price_atomic!);
  const ended = await balance();
  const a = ended.chains.chain_a;
  t.equal(a.held_atomic, '0', 'the hold is gone');
  t.equal(BigInt(a.available_atomic), start - price, 'available less the price, pending or settled');
  // Settlement may land between the two reads: pending shows the price exactly while the record is pending.
  const after = await callView(id);
  if (a.pending_atomic === '0') t.equal(after.status, 'settled', 'nothing pending once charged onchain');
  else t.ok(debited.status === 'pending' && BigInt(a.pending_atomic) === price, 'pending until charged onchain');
  const done = await settled(id);
  t.equal(done.price_atomic, debited.price_atomic, 'the price does not change at settlement');
  await quiet();
  const last = await balance();
  t.same(last, await cliBalance(h.account), 'equal to the CLI once settled');
  t.equal(BigInt(last.chains.chain_a.balance_atomic), await chainA.balanceOf(h.account as Address), 'balanceOf');
  t.equal(BigInt(last.chains.chain_a.available_atomic), start - price);
});

t.test("reads count against the key's poll limit (limits.video_polls), shared with video polls", async (t) => {
  const g = await startHarness({
    edit: (c) => {
      c.limits = { video_polls: { key: { rpm: 3 } } };
    },
  });
  t.teardown(() => g.close());
  const read = (path: string) =>
    fetch(`${g.url}/v1${path}`, { headers: { authorization: `Bearer ${g.key}` } }).then(async (r) => ({
      status: r.status,
      remaining: r.headers.get('x-ratelimit-remaining-requests'),
      body: (await r.json()) as { error?: { code: string; message: string } },
    }));
  t.match(await read('/balance'), { status: 200, remaining: '2' });
  t.match(await read(`/calls/req_${'0'.repeat(32)}`), { status: 404, remaining: '1' });
  t.match(await read(`/videos/video_${'0'.repeat(32)}`), { status: 404, remaining: '0' });
  const refused = await read('/balance');
  t.equal(refused.status, 429);
  t.match(refused.body.error, {
    code: 'rate_limited',
    message: /video polls and account reads per minute for this API key \(limit 3\)/,
  });
});

t.test('an upstream failure: its record is free, at 0, with no transaction', async (t) => {
  const failed = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'fail #sim:status=500' }] })
    .withResponse()
    .catch((e: unknown) => e);
  t.ok(failed instanceof OpenAI.InternalServerError);
  const id = (failed as InstanceType<typeof OpenAI.APIError>).headers!.get('x-request-id')!;
  const view = await until('released', async () => {
    const v = await callView(id);
    return v.status !== 'held' ? v : null;
  });
  t.match(view, { id, status: 'free', price: '0.000000', price_atomic: '0', tx: null });
});

t.test("a record of the first layout (before the compact one) reads the same; another account's is 404", async (t) => {
  const old = {
    keyId: h.keyId,
    model: 'img-pro',
    chain: 'chain_b',
    held: 90_000n,
    owner: 'gw-old-1',
    time: Date.UTC(2026, 10, 1),
    expires: Date.UTC(2026, 10, 1) + 60_000,
    status: 'settled' as const,
    price: 80_000n,
    usage: { images: 1 },
    size: '2K',
    tx: `0x${'cd'.repeat(32)}`,
  };
  const mine = `req_${'ab'.repeat(16)}`;
  const theirs = `req_${'ef'.repeat(16)}`;
  await writeFirstLayout(h.redis, { ...old, requestId: mine, account: h.account }, 86_400_000);
  await writeFirstLayout(h.redis, { ...old, requestId: theirs, account: other.address }, 86_400_000);
  t.same(await callView(mine), {
    id: mine,
    model: 'img-pro',
    key_id: h.keyId,
    chain: 'chain_b',
    status: 'settled',
    price: '0.080000',
    price_atomic: '80000',
    hold: '0.090000',
    hold_atomic: '90000',
    usage: Object.fromEntries(USAGE_FIELDS.map((f) => [f, f === 'images' ? 1 : 0])),
    size: '2K',
    tx: old.tx,
    created_at: '2026-11-01T00:00:00.000Z',
  });
  t.equal((await get(`/calls/${theirs}`)).status, 404, "another account's");
  t.equal((await get(`/calls/${theirs}`, otherKey)).status, 200, 'its own account reads it');
});
