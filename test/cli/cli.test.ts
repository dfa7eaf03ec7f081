import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { getAccount } from '../../plugins/accounts/accounts.js';
import { createSession, readSession } from '../../plugins/dashboard/sessions.js';
import { startHarness } from '../helpers/harness.js';
import { cliHere, runCli } from '../helpers/wait.js';

const h = await startHarness();
t.teardown(() => h.close());

const env = { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' };
/** The farebox command against the harness's Redis prefix, run in this process (main(), as the process runs it). */
const farebox = (...args: string[]) => cliHere(args, env);
/** The same as a process of its own: the exit status and the output as they leave it. */
const spawned = (...args: string[]) => runCli(args, env);

t.test('account create --json prints one JSON document; --address is honoured', async (t) => {
  const r = await farebox('account', 'create', '--json');
  t.equal(r.code, 0, r.stderr);
  const doc = JSON.parse(r.stdout);
  t.match(doc.account, /^0x[0-9a-f]{40}$/);
  t.same(Object.keys(doc), ['account']);
  const addr = '0x' + 'ab'.repeat(20);
  const r2 = await farebox('account', 'create', '--address', addr, '--json');
  t.same(JSON.parse(r2.stdout), { account: addr });
  const again = await farebox('account', 'create', '--address', addr, '--json');
  t.not(again.code, 0);
  t.equal(again.stdout, '');
  t.match(again.stderr, /^farebox: account 0x[0-9a-f]{40} exists already\n$/);
});

t.test(
  'a key made with `farebox key create` works with both SDKs, plain and streaming; revoke makes it 401',
  async (t) => {
    const account = JSON.parse((await farebox('account', 'create', '--json')).stdout).account;
    const made = await farebox('key', 'create', '--account', account, '--json');
    t.equal(made.code, 0, made.stderr);
    const k = JSON.parse(made.stdout);
    t.same(Object.keys(k).sort(), [
      'account',
      'created_at',
      'expires_at',
      'id',
      'key',
      'last_used_at',
      'limit',
      'models',
      'name',
      'revoked_at',
      'spent',
    ]);
    t.match(k.key, /^sk_[A-Za-z0-9_-]{43,}$/, 'sk_ + 32 random bytes, base64url');
    t.equal(k.account, account);
    t.notOk(JSON.stringify(await h.redis.keys('*')).includes(k.key), 'the key itself is not stored');

    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: k.key, maxRetries: 0 });
    const anthropic = new Anthropic({ baseURL: h.url, apiKey: k.key, maxRetries: 0 });
    t.equal(
      (await openai.chat.completions.create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })).object,
      'chat.completion',
    );
    let n = 0;
    for await (const c of await openai.chat.completions.create({
      model: 'gamma-k3',
      stream: true,
      messages: [{ role: 'user', content: 'hi #sim:tokens=4' }],
    }))
      if (c.choices[0]?.delta?.content) n++;
    t.equal(n, 4);
    t.equal(
      (
        await anthropic.messages.create({
          model: 'alpha-sonnet-4-6',
          max_tokens: 20,
          messages: [{ role: 'user', content: 'hi' }],
        })
      ).type,
      'message',
    );
    const final = await anthropic.messages
      .stream({ model: 'alpha-sonnet-4-6', max_tokens: 20, messages: [{ role: 'user', content: 'hi #sim:tokens=3' }] })
      .finalMessage();
    t.equal(final.usage.output_tokens, 3);

    const revoked = await farebox('key', 'revoke', '--id', k.id);
    t.equal(revoked.code, 0, revoked.stderr);
    let err: unknown;
    for (let i = 0; i < 50; i++) {
      err = await openai.chat.completions
        .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
        .catch((e) => e);
      if (err instanceof OpenAI.AuthenticationError) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    t.ok(err instanceof OpenAI.AuthenticationError);
  },
);

t.test('account status --set changes the access state', async (t) => {
  const account = JSON.parse((await farebox('account', 'create', '--json')).stdout).account;
  const [set, bad] = await Promise.all([
    farebox('account', 'status', '--account', account, '--set', 'suspended'),
    farebox('account', 'status', '--account', account, '--set', 'frozen'),
  ]);
  t.equal(set.code, 0);
  t.equal((await getAccount(h.redis, account))?.status, 'suspended');
  t.equal(bad.code, 2);
  t.match(bad.stderr, /--set must be one of active, pending, suspended/);
});

t.test('account sign-out ends every dashboard session of the account, and only its', async (t) => {
  const [account, other] = (
    await Promise.all([farebox('account', 'create', '--json'), farebox('account', 'create', '--json')])
  ).map((r) => JSON.parse(r.stdout).account as string);
  const sessions = await Promise.all([account, account, other].map((a) => createSession(h.redis, a, 60_000)));
  const r = await farebox('account', 'sign-out', '--account', account, '--json');
  t.equal(r.code, 0, r.stderr);
  t.same(JSON.parse(r.stdout), { account, sessions_ended: 2 });
  t.same(
    await Promise.all(sessions.map((s) => readSession(h.redis, s.token))).then((x) => x.map((s) => s?.account ?? null)),
    [null, null, other],
  );
  t.equal((await farebox('account', 'sign-out', '--account', 'nope')).code, 2);
});

t.test(
  'bad input exits 2 with a one-line error on every command; a failure of a well-formed command exits 1',
  async (t) => {
    // Each case as main() answers it; two also as processes (a bad input, a failed command), which exit with main()'s
    // code and print its line.
    for (const args of [['frobnicate'], ['key', 'revoke', '--id', 'key_missing']]) {
      const [p, here] = await Promise.all([spawned(...args), farebox(...args)]);
      t.not(p.code, 0, `${args.join(' ')}: a process exits non-zero`);
      t.same(p, here, `${args.join(' ')}: the process exits with main()'s code and output`);
    }
    const bad = '0x123';
    const cases: [number, string[], RegExp][] = [
      [2, ['key', 'create', '--json'], /--account is required/],
      [2, ['key', 'create', '--account', 'nope', '--json'], /--account must be a 0x address \(40 hex digits\)/],
      [
        2,
        ['key', 'create', '--account', '0x' + '12'.repeat(20), '--name', 'a\u0007b', '--json'],
        /--name: a key name cannot hold control characters/,
      ],
      [2, ['account', 'create', '--address', bad, '--json'], /--address must be a 0x address/],
      [2, ['account', 'status', '--account', bad, '--set', 'active'], /--account must be a 0x address/],
      [2, ['account', 'sign-out', '--account', bad], /--account must be a 0x address/],
      [2, ['balance', '--account', bad], /--account must be a 0x address/],
      [2, ['default-chain', '--account', bad, '--chain', 'chain_b'], /--account must be a 0x address/],
      [2, ['usage', '--account', bad], /--account must be a 0x address/],
      [2, ['frobnicate'], /unknown command: frobnicate/],
      [1, ['key', 'create', '--account', '0x' + '12'.repeat(20), '--json'], /no account 0x(12){20}/],
      [1, ['account', 'status', '--account', '0x' + '12'.repeat(20), '--set', 'active'], /no account/],
      [1, ['key', 'revoke', '--id', 'key_missing'], /no key key_missing/],
    ];
    const results = await Promise.all(cases.map(([, args]) => farebox(...args)));
    for (const [i, [code, args, pattern]] of cases.entries()) {
      const r = results[i]!;
      t.equal(r.code, code, args.join(' '));
      t.equal(r.stdout, '', 'nothing on stdout');
      t.match(r.stderr, /^farebox: [^\n]+\n$/, 'one line');
      t.match(r.stderr, pattern);
    }
  },
);
