// Per-key limits through the gateway, billed on real dev chains, with the official SDKs and the CLI: a key's spend
// limit refuses what its rest does not cover (402 key_limit_exceeded, naming the limit, what is left and when it
// resets) and 200 calls at once on it never spend past it; GET /v1/key shows its spend equal to the calls' prices; an
// allow-list refuses other models (403 model_not_allowed) and hides them from both SDKs' models.list(); an expired
// key is a 401 key_expired; the CLI creates, updates and lists keys with their limits.
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { createAccount, createKey, type KeyInfo } from '../../plugins/accounts/accounts.js';
import { keyWindow, setKeyLimits } from '../../plugins/accounts/key-limits.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { keys } from '../../plugins/store/keys.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { cliHere, rejection, runCli, until } from '../helpers/wait.js';

const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 50_000_000n);

const openaiWith = (key: string) => new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
const anthropicWith = (key: string) => new Anthropic({ baseURL: h.url, apiKey: key, maxRetries: 0 });

async function getJson<T>(path: string, key: string): Promise<T> {
  const res = await fetch(`${h.url}/v1${path}`, { headers: { authorization: `Bearer ${key}` } });
  if (res.status !== 200) throw new Error(`GET /v1${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}
const keyView = (key: string) => getJson<KeyInfo>('/key', key);
const priceOf = async (requestId: string) =>
  BigInt((await getJson<{ price_atomic: string }>(`/calls/${requestId}`, h.key)).price_atomic);

/** A key of the harness's account with `limits`. */
async function limitedKey(limits: Parameters<typeof createKey>[2]) {
  return createKey(h.redis, h.account, limits);
}

const chat = (key: string, maxTokens: number, content = 'hello #sim:tokens=40') =>
  openaiWith(key)
    .chat.completions.create({ model: 'gamma-k3', max_tokens: maxTokens, messages: [{ role: 'user', content }] })
    .withResponse();

t.test('402 key_limit_exceeded through both SDKs; what fits runs; GET /v1/key shows the spend', async (t) => {
  const { key, id } = await limitedKey({ name: 'small', limit: 10_000n, reset: 'daily' });
  const tomorrow = new Date(keyWindow('daily', Date.now()).end!).toISOString();
  const fresh = await keyView(key);
  t.match(fresh, {
    id,
    name: 'small',
    models: null,
    expires_at: null,
    limit: { amount: '0.010000', amount_atomic: '10000', reset: 'daily', left: '0.010000', left_atomic: '10000' },
    spent: { window: '0.000000', total: '0.000000', held: '0.000000' },
  });
  t.equal(fresh.limit!.resets_at, Date.parse(tomorrow));

  const wallet = await readWallet(h.redis, h.account, 'chain_a');
  const received = h.sim.received.length;
  // Up to 8,000 output tokens at 2.50 USD per million: 0.02 USD at worst, over the limit.
  const big = await rejection(chat(key, 8_000));
  t.ok(big instanceof OpenAI.APIError);
  t.equal(big.status, 402);
  t.equal(big.error.code, 'key_limit_exceeded');
  t.match(big.message, "This API key's spend limit is 0.010000 USD per day; 0.010000 USD of it is left");
  t.match(big.message, `It resets at ${tomorrow}.`);
  t.match(big.message, 'A lower max_tokens lowers what the call holds.');
  t.match(big.headers.get('x-request-id'), /^req_/);
  t.equal(big.headers.get('x-gw-billing-chain'), 'chain_a');
  const viaAnthropic = await rejection(
    anthropicWith(key).messages.create({
      model: 'alpha-haiku-4-5',
      max_tokens: 8_000,
      messages: [{ role: 'user', content: 'hi' }],
    }),
  );
  t.ok(viaAnthropic instanceof Anthropic.APIError);
  t.equal(viaAnthropic.status, 402);
  t.equal(viaAnthropic.error.error.type, 'billing_error');
  t.match(viaAnthropic.error.error.message, /spend limit is 0\.010000 USD per day/);
  t.equal(h.sim.received.length, received, 'no refused call reached the provider');
  t.same(await readWallet(h.redis, h.account, 'chain_a'), wallet, 'and none held anything');

  // 400 tokens at worst fits: it runs, and what the key spent is its price to the atomic unit.
  const { response } = await chat(key, 400);
  const price = await priceOf(response.headers.get('x-request-id')!);
  t.ok(price > 0n);
  const after = await until('the call debited', async () => {
    const v = await keyView(key);
    return v.spent.held === '0.000000' ? v : null;
  });
  t.equal(after.spent.window_atomic, price.toString(), 'spent in the window: the price');
  t.equal(after.spent.total_atomic, price.toString(), 'spent in all');
  t.equal(after.limit!.left_atomic, (10_000n - price).toString(), 'left: the limit less the price');
  const wallet2 = await readWallet(h.redis, h.account, 'chain_a');
  t.equal(wallet.available - wallet2.available, price, 'the wallet paid the same');
  t.match(await keyView(h.key), { limit: null, spent: { total: '0.000000' } }, "another key's spend is its own");
});

t.test('200 calls at once on a key with a limit never spend past it; what is held counts', async (t) => {
  const limit = 60_000n;
  const { key } = await limitedKey({ limit, reset: 'monthly' });
  // Each holds its worst case while the provider waits, so the calls overlap; most must be refused.
  const calls = await Promise.allSettled(
    Array.from({ length: 200 }, () => chat(key, 1_000, 'burst #sim:tokens=900 #sim:delay_ms=200')),
  );
  const ok = calls.filter((c) => c.status === 'fulfilled');
  const refused = calls.filter((c) => c.status === 'rejected').map((c) => (c as PromiseRejectedResult).reason);
  t.ok(ok.length > 0, `${ok.length} ran`);
  t.ok(refused.length > 0, `${refused.length} refused`);
  t.same(new Set(refused.map((e) => `${e.status} ${e.error?.code}`)), new Set(['402 key_limit_exceeded']));
  const view = await until('every debit landed', async () => {
    const v = await keyView(key);
    return v.spent.held === '0.000000' ? v : null;
  });
  let sum = 0n;
  for (const c of ok) sum += await priceOf(c.value.response.headers.get('x-request-id')!);
  t.equal(view.spent.total_atomic, sum.toString(), 'the key spent the sum of its calls, each charged once');
  t.ok(sum <= limit, `spent ${sum} of ${limit}`);
  t.equal(BigInt(view.limit!.left_atomic), limit - sum);
});

t.test('an allow-list: other models are a 403 and are not listed, in either SDK', async (t) => {
  const all: string[] = [];
  for await (const m of openaiWith(h.key).models.list()) all.push(m.id);
  const allowed = all.filter((id) => id.startsWith('gamma-') || id === 'img-2');
  t.ok(allowed.length >= 2 && allowed.length < all.length);
  const { key } = await limitedKey({ models: ['gamma-*', 'img-2'] });
  const o = openaiWith(key);
  const listed: string[] = [];
  for await (const m of o.models.list()) listed.push(m.id);
  t.same(listed, allowed, 'openai models.list()');
  const viaAnthropic: string[] = [];
  for await (const m of anthropicWith(key).models.list({ limit: 2 })) viaAnthropic.push(m.id);
  t.same(viaAnthropic, allowed, 'anthropic models.list(), paged');
  const hidden = all.find((id) => !allowed.includes(id))!;
  t.match(await rejection(o.models.retrieve(hidden)), { status: 404, error: { code: 'model_not_found' } });
  t.equal((await o.models.retrieve('gamma-k3')).id, 'gamma-k3');

  const wallet = await readWallet(h.redis, h.account, 'chain_a');
  const received = h.sim.received.length;
  const beta = all.find((id) => id.startsWith('beta-'))!;
  const refused = await rejection(
    o.chat.completions.create({ model: beta, messages: [{ role: 'user', content: 'hi' }] }),
  );
  t.match(refused, { status: 403, error: { code: 'model_not_allowed', param: 'model' } });
  t.match(refused.message, `This API key may not call ${beta}: it may call gamma-*, img-2.`);
  const viaMessages = await rejection(
    anthropicWith(key).messages.create({
      model: 'alpha-haiku-4-5',
      max_tokens: 10,
      messages: [{ role: 'user', content: 'hi' }],
    }),
  );
  t.match(viaMessages, { status: 403, error: { error: { type: 'permission_error' } } });
  t.equal(h.sim.received.length, received, 'neither reached the provider');
  t.same(await readWallet(h.redis, h.account, 'chain_a'), wallet, 'nor held anything');
  const { response } = await o.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi #sim:tokens=3' }] })
    .withResponse();
  t.equal(response.status, 200, 'an allowed model runs');
});

t.test('an expiry: the key works until it, then answers 401 key_expired on every instance', async (t) => {
  const { key, id } = await limitedKey({ expiresAt: Date.now() + 3_600_000 });
  const o = openaiWith(key);
  t.equal((await o.models.retrieve('gamma-k3')).id, 'gamma-k3');
  await setKeyLimits(h.redis, id, { expiresAt: Date.now() - 1 });
  // The change is announced as a revocation is: the gateway's cached identity is dropped.
  const expired = await until('the key expired', async () => {
    const e = await rejection(
      o.chat.completions.create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] }),
    ).catch(() => null);
    return e && (e as { status?: number }).status === 401 ? e : null;
  });
  t.match(expired, { status: 401, error: { code: 'key_expired' } });
  t.match(expired.message, /The API key expired at \d{4}-\d\d-\d\dT/);
  const viaAnthropic = await rejection(anthropicWith(key).models.list());
  t.match(viaAnthropic, { status: 401, error: { error: { type: 'authentication_error' } } });
  const res = await fetch(`${h.url}/v1/key`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(res.status, 401, 'GET /v1/key too');
});

t.test('the CLI creates, updates and lists keys with their limits', async (t) => {
  const env = { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' };
  const owner = await createAccount(h.redis, {});
  const created = await runCli(
    [
      'key',
      'create',
      '--account',
      owner.address,
      '--name',
      'ci',
      '--limit',
      '2.5',
      '--reset',
      'weekly',
      '--models',
      'gamma-k3,alpha-*',
      '--expires',
      '2099-01-01',
      '--json',
    ],
    env,
  );
  t.equal(created.code, 0, created.stderr);
  const doc = JSON.parse(created.stdout) as KeyInfo & { key: string; account: string };
  t.match(doc, {
    account: owner.address,
    name: 'ci',
    models: ['gamma-k3', 'alpha-*'],
    expires_at: Date.parse('2099-01-01T00:00:00Z'),
    limit: { amount: '2.500000', amount_atomic: '2500000', reset: 'weekly', left: '2.500000' },
    spent: { window_atomic: '0', total_atomic: '0', held_atomic: '0' },
  });
  const { key: _key, account: _account, last_used_at: _created, ...info } = doc;
  t.match(await keyView(doc.key), { ...info, last_used_at: Number }, 'GET /v1/key shows the same');

  const human = await cliHere(['key', 'update', '--id', doc.id, '--limit', 'none', '--models', 'none'], env);
  t.equal(human.code, 0, human.stderr);
  t.equal(human.stdout, `key ${doc.id}: no spend limit; every model; expires 2099-01-01T00:00:00Z\n`);
  t.equal(await h.redis.hget(keys.keySpend(doc.id), 'l'), null);
  const limited = await cliHere(['key', 'update', '--id', doc.id, '--limit', '1', '--reset', 'daily', '--json'], env);
  t.match(JSON.parse(limited.stdout), { limit: { amount: '1.000000', reset: 'daily' }, models: null });
  const list = await cliHere(['key', 'list', '--account', owner.address], env);
  t.match(list.stdout, /^id\s+name\s+limit\s+spent\s+left\s+models\s+created\s+last used\s+status\n/);
  t.match(list.stdout, new RegExp(`${doc.id}\\s+ci\\s+1\\.000000 USD per day\\s+0\\.000000\\s+1\\.000000\\s+all\\s`));
  t.match(list.stdout, /expires 2099-01-01T00:00:00Z\n$/);

  for (const [flags, says] of [
    [['--limit', '0'], '--limit: a spend limit is above 0'],
    [['--limit', '1.0000001'], '--limit: a spend limit is a USD amount with at most 6 decimals'],
    [['--reset', 'hourly'], '--reset: a reset is one of daily, weekly, monthly, never'],
    [['--models', 'a b'], '--models: "a b" is not a model id'],
    [['--expires', '2001-01-01'], '--expires: the expiry 2001-01-01T00:00:00.000Z is already past'],
    [[], 'key update: give at least one of --limit, --reset, --models, --expires'],
  ] as const) {
    const r = await cliHere(['key', 'update', '--id', doc.id, ...flags], env);
    t.not(r.code, 0, flags.join(' '));
    t.match(r.stderr, says);
  }
  const unknown = await cliHere(['key', 'update', '--id', 'key_0000000000000000', '--limit', '1'], env);
  t.not(unknown.code, 0);
  t.match(unknown.stderr, 'no key key_0000000000000000');
});
