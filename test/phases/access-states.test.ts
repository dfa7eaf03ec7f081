// Account access states end to end (SPEC Authentication 3-4, Errors 401/403): pending and suspended accounts
// get 403 access_not_active on every keyed endpoint, in each protocol; status changes reach running gateways.
import t, { type Test } from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import {
  createAccount,
  createKey,
  revokeKey,
  setAccountStatus,
  type AccountStatus,
} from '../../plugins/accounts/accounts.js';
import { startHarness, type Harness } from '../helpers/harness.js';
import { validator } from '../helpers/conformance.js';
import { runCli } from '../helpers/wait.js';

const h = await startHarness();
// A second gateway on the same Redis: status changes must reach every instance, not only the one asked.
const h2 = await startHarness({ prefix: h.prefix });
t.teardown(async () => {
  await h2.close();
  await h.close();
});
const errorSchema = validator('ErrorResponse');

type Endpoint = 'messages' | 'count_tokens' | 'chat';
const PATHS: Record<Endpoint, string> = {
  messages: '/v1/messages',
  count_tokens: '/v1/messages/count_tokens',
  chat: '/v1/chat/completions',
};
const BODIES: Record<Endpoint, unknown> = {
  messages: { model: 'alpha-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] },
  count_tokens: { model: 'alpha-sonnet-4-6', messages: [{ role: 'user', content: 'hi' }] },
  chat: { model: 'gamma-k3', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] },
};

function post(g: Harness, endpoint: Endpoint, key: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${g.url}${PATHS[endpoint]}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, ...headers },
    body: JSON.stringify(BODIES[endpoint]),
  });
}

/**
 * The status of a call once it settles to `want` (and its body contains `text`), polled briefly: announcements
 * are asynchronous. The identity cache lives 30 s, so a missed announcement fails this.
 */
async function statusBecomes(
  g: Harness,
  endpoint: Endpoint,
  key: string,
  want: number,
  text = '',
  ms = 5_000,
): Promise<number> {
  const deadline = Date.now() + ms;
  for (;;) {
    const res = await post(g, endpoint, key);
    const body = await res.text();
    if ((res.status === want && body.includes(text)) || Date.now() > deadline) return res.status;
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function accountWith(status: AccountStatus) {
  const account = await createAccount(h.redis, { status });
  const { key, id } = await createKey(h.redis, account.address);
  return { address: account.address, key, id };
}

interface ErrorBody {
  type?: string;
  error: { type: string; code: string; message: string };
}

async function assertNotActive(
  t: Test,
  g: Harness,
  res: Response,
  endpoint: Endpoint,
  status: AccountStatus,
  upstreamBefore: number,
) {
  t.equal(res.status, 403, `${endpoint}: 403`);
  t.match(res.headers.get('x-request-id'), /^req_[0-9a-f]{32}$/);
  t.equal(res.headers.get('x-should-retry'), 'false');
  const body = (await res.json()) as ErrorBody;
  if (endpoint === 'chat') t.same(errorSchema(body), [], 'OpenAI error shape');
  else t.equal(body.type, 'error', 'Anthropic error shape');
  t.equal(body.error.type, 'permission_error');
  t.equal(body.error.code, 'access_not_active');
  t.match(body.error.message, `Access is ${status}`);
  t.equal(g.sim.received.length, upstreamBefore, 'the upstream never saw it');
}

for (const status of ['pending', 'suspended'] as const) {
  t.test(
    `${status} account: 403 access_not_active on messages, count_tokens and chat completions, in each protocol`,
    async (t) => {
      const a = await accountWith(status);
      for (const endpoint of ['messages', 'count_tokens', 'chat'] as const) {
        const n = h.sim.received.length;
        await assertNotActive(t, h, await post(h, endpoint, a.key), endpoint, status, n);
      }
      // Access is checked before the client rules: an unsupported client on alpha still learns its access state.
      const n = h.sim.received.length;
      await assertNotActive(
        t,
        h,
        await post(h, 'messages', a.key, { 'user-agent': 'opencode/0.15.8' }),
        'messages',
        status,
        n,
      );
    },
  );

  t.test(`${status} account through the official SDKs: typed PermissionDeniedError`, async (t) => {
    const a = await accountWith(status);
    const anthropic = new Anthropic({ baseURL: h.url, apiKey: a.key, maxRetries: 2 });
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: a.key, maxRetries: 2 });
    const n = h.sim.received.length;
    const calls: [string, () => Promise<unknown>][] = [
      [
        'messages',
        () =>
          anthropic.messages.create({
            model: 'alpha-sonnet-4-6',
            max_tokens: 16,
            messages: [{ role: 'user', content: 'hi' }],
          }),
      ],
      [
        'messages stream',
        () =>
          anthropic.messages
            .stream({ model: 'alpha-haiku-4-5', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
            .finalMessage(),
      ],
      [
        'count_tokens',
        () =>
          anthropic.messages.countTokens({ model: 'alpha-sonnet-4-6', messages: [{ role: 'user', content: 'hi' }] }),
      ],
    ];
    for (const [what, run] of calls) {
      const e = await run().catch((x: unknown) => x);
      t.ok(e instanceof Anthropic.PermissionDeniedError, `${what}: Anthropic.PermissionDeniedError`);
      t.match((e as InstanceType<typeof Anthropic.PermissionDeniedError>).error, {
        type: 'error',
        error: { type: 'permission_error', code: 'access_not_active' },
      });
    }
    for (const model of ['alpha-sonnet-4-6', 'beta-5.6-sol', 'gamma-k3']) {
      const e = await openai.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'hi' }] })
        .catch((x: unknown) => x);
      t.ok(e instanceof OpenAI.PermissionDeniedError, `chat ${model}: OpenAI.PermissionDeniedError`);
      const pe = e as InstanceType<typeof OpenAI.PermissionDeniedError>;
      t.equal(pe.status, 403);
      t.match(pe.error, { code: 'access_not_active', type: 'permission_error' });
    }
    t.equal(h.sim.received.length, n, 'nothing reached the upstream, and nothing was retried into it');
  });
}

t.test(
  'status changes reach every instance despite the identity cache: active -> suspended -> pending -> active',
  async (t) => {
    const a = await accountWith('active');
    // Cache the identity on both instances first: the change must evict it, not wait for its expiry.
    t.equal((await post(h, 'chat', a.key)).status, 200);
    t.equal((await post(h2, 'chat', a.key)).status, 200);
    for (const [status, code] of [
      ['suspended', 403],
      ['pending', 403],
      ['active', 200],
    ] as const) {
      await setAccountStatus(h.redis, a.address, status);
      for (const g of [h, h2]) {
        for (const endpoint of ['messages', 'count_tokens', 'chat'] as const) {
          t.equal(
            await statusBecomes(g, endpoint, a.key, code, code === 403 ? `Access is ${status}` : ''),
            code,
            `${status}: ${endpoint} on instance ${g === h ? 1 : 2} -> ${code}`,
          );
        }
      }
    }
  },
);

t.test('a revoked key stays 401 invalid_api_key, even on an active account', async (t) => {
  const a = await accountWith('active');
  const other = await createKey(h.redis, a.address);
  t.equal((await post(h, 'chat', a.key)).status, 200, 'cached as valid');
  await revokeKey(h.redis, a.id);
  t.equal(await statusBecomes(h, 'chat', a.key, 401, 'invalid_api_key'), 401);
  await setAccountStatus(h.redis, a.address, 'suspended');
  t.equal(await statusBecomes(h, 'chat', other.key, 403, 'access_not_active'), 403, 'the account is suspended');
  t.equal((await post(h, 'chat', a.key)).status, 401, 'revoked wins over suspended: 401, not 403');
  await setAccountStatus(h.redis, a.address, 'active');
  t.equal(await statusBecomes(h, 'chat', other.key, 200), 200, 'the account is active again: its other key works');
  for (const endpoint of ['messages', 'count_tokens', 'chat'] as const) {
    const res = await post(h, endpoint, a.key);
    t.equal(res.status, 401, `${endpoint}: still 401`);
    const body = (await res.json()) as ErrorBody;
    t.equal(body.error.code, 'invalid_api_key');
    t.equal(body.error.type, 'authentication_error');
  }
});

/** Run the farebox CLI (from source) against the harness's Redis prefix. */
const farebox = (...args: string[]) => runCli(args, { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' });

t.test('`farebox account status --set` suspends and reactivates a live account', async (t) => {
  const a = await accountWith('active');
  t.equal((await post(h, 'messages', a.key)).status, 200);
  const off = await farebox('account', 'status', '--account', a.address, '--set', 'suspended');
  t.equal(off.code, 0, off.stderr);
  t.equal(off.stdout.trim(), `account ${a.address} is suspended`);
  t.equal(await statusBecomes(h, 'messages', a.key, 403, 'access_not_active'), 403);
  const on = await farebox('account', 'status', '--account', a.address, '--set', 'active');
  t.equal(on.code, 0, on.stderr);
  t.equal(await statusBecomes(h, 'messages', a.key, 200), 200);
  t.equal(await statusBecomes(h2, 'chat', a.key, 200), 200);
});
