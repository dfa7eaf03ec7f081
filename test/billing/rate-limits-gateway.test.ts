// Rate limits end to end (SPEC Errors 429; policies/limits.ts for scope, headers and Retry-After): limits from
// the config, counted in Redis and so shared by every gateway instance on it.
import t, { type Test } from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import type { ConfigInput } from '../../plugins/config.js';
import { getCallRecord, listUsage } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { closeDevChains, startHarness, type Harness } from '../helpers/harness.js';
import { validator } from '../helpers/conformance.js';
import { until } from '../helpers/wait.js';

// Key 5 rpm and account 8 rpm by default; beta keys 2 rpm; gamma unlimited.
const limits = (cfg: ConfigInput) => {
  cfg.limits = {
    default: { key: { rpm: 5, tpm: null }, account: { rpm: 8, tpm: null } },
    families: { beta: { key: { rpm: 2 } }, gamma: { key: { rpm: null }, account: { rpm: null } } },
  };
};
const h1 = await startHarness({ edit: limits });
const h2 = await startHarness({ edit: limits, prefix: h1.prefix });
t.teardown(async () => {
  await h2.close();
  await h1.close();
  await closeDevChains();
});
const errorSchema = validator('ErrorResponse');

type Endpoint = 'messages' | 'chat';

function post(g: Harness, endpoint: Endpoint, key: string, model: string, content = 'hi'): Promise<Response> {
  const path = endpoint === 'messages' ? '/v1/messages' : '/v1/chat/completions';
  return fetch(`${g.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content }] }),
  });
}

/** A fresh account with `n` keys, on the shared Redis (counters are per key and account). */
async function account(n = 1): Promise<{ address: string; keys: string[] }> {
  const a = await createAccount(h1.redis, {});
  const keys: string[] = [];
  for (let i = 0; i < n; i++) keys.push((await createKey(h1.redis, a.address)).key);
  return { address: a.address, keys };
}

interface ErrorBody {
  type?: string;
  error: { type: string; code: string; message: string };
}

/** A gateway 429: shape per protocol, Retry-After in whole seconds, the rate-limit headers of policies/limits.ts. */
async function assertLimited(t: Test, res: Response, endpoint: Endpoint, limit: number, what: RegExp): Promise<void> {
  t.equal(res.status, 429);
  t.match(res.headers.get('x-request-id'), /^req_[0-9a-f]{32}$/);
  t.not(res.headers.get('x-should-retry'), 'false', 'a 429 may be retried');
  const body = (await res.json()) as ErrorBody;
  if (endpoint === 'chat') t.same(errorSchema(body), [], 'OpenAI error shape');
  else t.equal(body.type, 'error', 'Anthropic error shape');
  t.equal(body.error.type, 'rate_limit_error');
  t.equal(body.error.code, 'rate_limited');
  t.match(body.error.message, what, 'the message names the limit');
  const retryAfter = res.headers.get('retry-after') ?? '';
  t.match(retryAfter, /^[1-9]\d*$/, 'Retry-After: whole seconds, at least 1');
  t.ok(Number(retryAfter) <= 60, 'within the minute window');
  t.equal(
    Math.max(1, Math.ceil(Number(res.headers.get('retry-after-ms')) / 1000)),
    Number(retryAfter),
    'retry-after-ms agrees',
  );
  t.equal(res.headers.get('x-ratelimit-limit-requests'), String(limit));
  t.equal(res.headers.get('x-ratelimit-remaining-requests'), '0');
  t.match(res.headers.get('x-ratelimit-reset-requests'), /^(\d+h)?(\d+m)?\d+(\.\d+)?(ms|s)$/, 'OpenAI duration');
  if (endpoint === 'messages') {
    t.equal(res.headers.get('anthropic-ratelimit-requests-limit'), String(limit));
    t.equal(res.headers.get('anthropic-ratelimit-requests-remaining'), '0');
    const reset = res.headers.get('anthropic-ratelimit-requests-reset') ?? '';
    t.match(reset, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/, 'RFC 3339');
    t.ok(Date.parse(reset) > Date.now() - 1_000, 'reset is ahead');
  } else {
    t.equal(
      res.headers.get('anthropic-ratelimit-requests-limit'),
      null,
      'Anthropic names only on the messages endpoints',
    );
  }
}

for (const endpoint of ['chat', 'messages'] as const) {
  t.test(
    `${endpoint}: two instances share the counts: rpm 5 per key, 3 calls on each -> the 6th overall is 429`,
    async (t) => {
      const {
        keys: [key],
      } = await account();
      const model = 'alpha-sonnet-4-6';
      const upstream = () => h1.sim.received.length + h2.sim.received.length;
      for (let i = 0; i < 5; i++) {
        const g = i % 2 === 0 ? h1 : h2;
        const res = await post(g, endpoint, key, model);
        t.equal(res.status, 200, `call ${i + 1} on instance ${g === h1 ? 1 : 2}`);
        await res.arrayBuffer();
        t.equal(res.headers.get('x-ratelimit-limit-requests'), '5');
        t.equal(
          res.headers.get('x-ratelimit-remaining-requests'),
          String(4 - i),
          'the tighter of key (5) and account (8)',
        );
        if (endpoint === 'messages') t.equal(res.headers.get('anthropic-ratelimit-requests-remaining'), String(4 - i));
        else t.equal(res.headers.get('anthropic-ratelimit-requests-remaining'), null);
      }
      const before = upstream();
      await assertLimited(
        t,
        await post(h2, endpoint, key, model),
        endpoint,
        5,
        /requests per minute for this API key \(limit 5\)/,
      );
      await assertLimited(t, await post(h1, endpoint, key, model), endpoint, 5, /for this API key/);
      t.equal(upstream(), before, 'refused calls never reach the upstream');
    },
  );
}

t.test('the official SDKs see the 429 as their typed RateLimitError', async (t) => {
  const {
    keys: [key],
  } = await account();
  const openai = new OpenAI({ baseURL: `${h1.url}/v1`, apiKey: key, maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: h2.url, apiKey: key, maxRetries: 0 });
  for (let i = 0; i < 5; i++)
    await openai.chat.completions.create({
      model: 'alpha-haiku-4-5',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'hi' }],
    });
  const oe = await openai.chat.completions
    .create({ model: 'alpha-haiku-4-5', messages: [{ role: 'user', content: 'hi' }] })
    .catch((x: unknown) => x);
  t.ok(oe instanceof OpenAI.RateLimitError, 'OpenAI.RateLimitError');
  t.match((oe as InstanceType<typeof OpenAI.RateLimitError>).error, { code: 'rate_limited', type: 'rate_limit_error' });
  const ae = await anthropic.messages
    .create({ model: 'alpha-haiku-4-5', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
    .catch((x: unknown) => x);
  t.ok(ae instanceof Anthropic.RateLimitError, 'Anthropic.RateLimitError, on the other instance');
  const are = ae as InstanceType<typeof Anthropic.RateLimitError>;
  t.match(are.error, { type: 'error', error: { type: 'rate_limit_error', code: 'rate_limited' } });
  t.match(are.headers?.get('retry-after'), /^[1-9]\d*$/);
});

t.test(
  'per key vs per account: a key hits its own 5; two keys of one account share its 8; other accounts are untouched',
  async (t) => {
    const {
      keys: [a, b],
    } = await account(2);
    const model = 'gamma-k3';
    for (let i = 0; i < 5; i++) t.equal((await post(h1, 'chat', a, 'alpha-sonnet-4-6')).status, 200);
    await assertLimited(t, await post(h2, 'chat', a, 'alpha-sonnet-4-6'), 'chat', 5, /for this API key \(limit 5\)/);
    // Key b: its own key limit is fresh, but the account has 8 - 5 = 3 left (the refusal consumed nothing).
    for (let i = 0; i < 3; i++) {
      const res = await post(i % 2 ? h1 : h2, 'chat', b, 'alpha-sonnet-4-6');
      t.equal(res.status, 200, `key b call ${i + 1}`);
      t.equal(res.headers.get('x-ratelimit-remaining-requests'), String(2 - i), 'the account is the tighter limit');
    }
    await assertLimited(
      t,
      await post(h1, 'chat', b, 'alpha-sonnet-4-6'),
      'chat',
      8,
      /requests per minute for this account \(limit 8\)/,
    );
    const {
      keys: [c],
    } = await account();
    t.equal((await post(h1, 'chat', c, 'alpha-sonnet-4-6')).status, 200, 'another account is not limited');
    t.equal((await post(h1, 'chat', a, model)).status, 200, 'gamma is unlimited: the same key passes there');
  },
);

t.test('per family override: beta keys get 2 rpm, gamma none, and each family counts on its own', async (t) => {
  const {
    keys: [key],
  } = await account();
  for (let i = 0; i < 2; i++) {
    const res = await post(h1, 'chat', key, 'beta-5.6-sol');
    t.equal(res.status, 200);
    t.equal(res.headers.get('x-ratelimit-limit-requests'), '2');
  }
  await assertLimited(t, await post(h2, 'chat', key, 'beta-5.6-sol'), 'chat', 2, /for this API key \(limit 2\)/);
  for (let i = 0; i < 10; i++) {
    const res = await post(i % 2 ? h1 : h2, 'chat', key, 'gamma-k3');
    t.equal(res.status, 200);
    t.equal(res.headers.get('x-ratelimit-limit-requests'), null, 'no limit, no headers');
  }
  const alpha = await post(h1, 'messages', key, 'alpha-sonnet-4-6');
  t.equal(alpha.status, 200, 'alpha has its own counters');
  t.equal(alpha.headers.get('x-ratelimit-limit-requests'), '5');
  t.equal(alpha.headers.get('x-ratelimit-remaining-requests'), '4');
});

t.test('an upstream 429 reaches the caller as 429 with the upstream Retry-After, in each protocol', async (t) => {
  const {
    keys: [key],
  } = await account();
  for (const [endpoint, model] of [
    ['chat', 'gamma-k3'],
    ['messages', 'alpha-sonnet-4-6'],
  ] as const) {
    const n = h1.sim.received.length;
    const res = await post(h1, endpoint, key, model, '#sim:status=429');
    t.equal(res.status, 429, endpoint);
    t.equal(h1.sim.received.length, n + 1, 'the upstream was asked');
    t.equal(res.headers.get('retry-after'), '1', "the simulator's Retry-After");
    const body = (await res.json()) as ErrorBody;
    if (endpoint === 'chat') t.same(errorSchema(body), []);
    else t.equal(body.type, 'error');
    t.equal(body.error.type, 'rate_limit_error');
    t.equal(body.error.code, 'upstream_rate_limited');
  }
});

t.test('billed: a call refused by a rate limit holds and charges nothing', async (t) => {
  const g = await startHarness({
    chains: true,
    edit: (cfg) => {
      cfg.limits = { default: { key: { rpm: 1 }, account: { rpm: null } } };
    },
  });
  t.teardown(() => g.close());
  await g.fund('chain_a', 5_000_000n);
  const ok = await post(g, 'chat', g.key, 'alpha-sonnet-4-6', 'hi #sim:tokens=3');
  t.equal(ok.status, 200);
  t.equal(ok.headers.get('x-gw-billing-chain'), 'chain_a');
  await ok.arrayBuffer();
  const first = ok.headers.get('x-request-id')!;
  // The admitted call's hold must be settled first: a hold in flight moves `available` when it settles.
  const deadline = Date.now() + 20_000;
  while ((await getCallRecord(g.redis, first))?.status === 'held' && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  const rec = (await getCallRecord(g.redis, first))!;
  t.not(rec.status, 'held');
  t.ok(rec.priceAtomic > 0n, 'the admitted call was charged');
  const before = await readWallet(g.redis, g.account, 'chain_a');
  const usageBefore = await listUsage(g.redis, g.account);

  const n = g.sim.received.length;
  for (const endpoint of ['chat', 'messages'] as const) {
    // One family (alpha), so one counter on both endpoints.
    const res = await post(g, endpoint, g.key, 'alpha-sonnet-4-6');
    const id = res.headers.get('x-request-id');
    await assertLimited(t, res, endpoint, 1, /for this API key \(limit 1\)/);
    t.equal(res.headers.get('x-gw-billing-chain'), null, 'refused before the funds gate');
    t.equal(await getCallRecord(g.redis, id!), null, 'no call record');
  }
  t.equal(g.sim.received.length, n, 'never upstream');
  const after = await readWallet(g.redis, g.account, 'chain_a');
  t.equal(after.held, 0n);
  t.equal(after.available, before.available, 'available unchanged');
  t.same(
    (await listUsage(g.redis, g.account)).map((r) => r.call_id),
    usageBefore.map((r) => r.call_id),
    'no new usage record',
  );
});

t.test('billed: once settled, the token limits hold the tokens billed, not the estimate', async (t) => {
  // 6,000 tpm drains 0.1 token per ms: small beside the 500 tokens billed.
  const tpm = 6_000;
  const g = await startHarness({
    chains: true,
    edit: (cfg) => {
      cfg.limits = { default: { key: { rpm: null, tpm }, account: { rpm: null, tpm } } };
    },
  });
  t.teardown(() => g.close());
  await g.fund('chain_a', 5_000_000n);
  const openai = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
  const t0 = Date.now();
  const { data, response } = await openai.chat.completions
    .create({
      model: 'alpha-sonnet-4-6',
      max_tokens: 4000,
      messages: [{ role: 'user', content: 'hi #sim:tokens=500' }],
    })
    .withResponse();
  const estimated = tpm - Number(response.headers.get('x-ratelimit-remaining-tokens'));
  t.ok(estimated >= 4000, `the gate charged the estimate, max_tokens and more (${estimated})`);
  const requestId = response.headers.get('x-request-id')!;
  await until('the call is debited', async () => (await getCallRecord(g.redis, requestId))?.status !== 'held');
  const billed = data.usage!.prompt_tokens + data.usage!.completion_tokens;
  t.ok(billed >= 500, `billed ${billed} tokens`);
  for (const key of [`rl:{${g.account}}:alpha:k:${g.keyId}:t`, `rl:{${g.account}}:alpha:a:t`]) {
    // Each level is "<used> <at ms>": the estimate drained since the gate, then corrected to the tokens billed.
    const [used, at] = ((await g.redis.get(key)) ?? 'NaN NaN').split(' ').map(Number);
    const drained = ((at! - t0) * tpm) / 60_000;
    t.ok(
      used! <= billed && used! >= billed - drained,
      `${key}: ${used} = ${billed} billed, less at most ${drained} drained`,
    );
  }
});

t.test('billed: a call the funds gate refuses (402) uses none of its token limit', async (t) => {
  const g = await startHarness({
    chains: true,
    edit: (cfg) => {
      cfg.limits = { default: { key: { rpm: null, tpm: 40_000 }, account: { rpm: null } } };
    },
  });
  t.teardown(() => g.close());
  // Unfunded: every call is refused at the gate; were its estimate charged, the third would hit the token limit.
  for (let i = 0; i < 5; i++) {
    const res = await post(g, 'chat', g.key, 'alpha-sonnet-4-6');
    await res.arrayBuffer();
    t.equal(res.status, 402, `call ${i + 1}: 402, not 429`);
  }
});
