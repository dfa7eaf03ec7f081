/**
 * The Keys page against a real gateway: a named key shown once that works at once, its last use, revocation that
 * answers 401 at once on every instance, bad names and forged forms refused with nothing changed, and one account
 * never seeing or touching another's keys. Keys made by the CLI show too.
 */
import t from 'tap';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createKey, listKeys } from '../../plugins/accounts/accounts.js';
import { DEV_CHAIN_IDS } from '../../plugins/chains/dev-chains.js';
import { startHarness } from '../helpers/harness.js';
import { readmeClaudeVariables } from '../helpers/readme-claude.js';
import { until } from '../helpers/wait.js';
import { csrfOf, send, signIn, type TestBrowser } from './browser-session.js';
import { startDashboardGateway } from './dashboard-gateway.js';

const { h, browser } = await startDashboardGateway(t);
// A second gateway instance on the same Redis (the first settles for both): revocation must reach it too.
const other = await startHarness({
  chains: true,
  prefix: h.prefix,
  edit: (c) => {
    c.billing = { ...c.billing, settler: false, watcher: false };
  },
});
t.teardown(() => other.close());

function chat(url: string, key: string) {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
  });
}

async function signedIn(): Promise<{ b: TestBrowser; account: string; csrf: string }> {
  const b = browser();
  const w = privateKeyToAccount(generatePrivateKey());
  const r = await signIn(b, w, DEV_CHAIN_IDS.chain_a);
  if (r.status !== 200) throw new Error(r.text);
  return { b, account: w.address.toLowerCase(), csrf: await csrfOf(b) };
}

function newKey(page: string): { key: string; id: string } {
  const key = /<pre id="new-key">(sk_[A-Za-z0-9_-]+)<\/pre>/.exec(page)?.[1] ?? '';
  const id = /<tr data-key-id="(key_[0-9a-f]{16})">/.exec(page)?.[1] ?? '';
  return { key, id };
}

const alice = await signedIn();
const bob = await signedIn();
await h.fund('chain_a', 1_000_000n, alice.account);
await h.fund('chain_a', 1_000_000n, bob.account);

t.test('a named key: shown once with the snippets, listed with its dates, working at once', async (t) => {
  const made = await send(alice.b, 'POST', '/keys', { form: { _csrf: alice.csrf, name: 'laptop <b>' } });
  t.equal(made.status, 201);
  t.equal(made.headers['cache-control'], 'no-store');
  const { key, id } = newKey(made.text);
  t.match(key, /^sk_[A-Za-z0-9_-]{43}$/);
  t.match(made.text, /Your new key “laptop &lt;b&gt;”/, 'the name, escaped');
  t.match(made.text, new RegExp(`new OpenAI\\(\\{ baseURL: &#39;${h.url}/v1&#39;, apiKey: &#39;${key}&#39; \\}\\)`));
  t.match(made.text, new RegExp(`new Anthropic\\(\\{ baseURL: &#39;${h.url}&#39;`));
  t.match(made.text, new RegExp(`export ANTHROPIC_BASE_URL=${h.url}\\nexport ANTHROPIC_AUTH_TOKEN=${key}`));
  // Claude Code's snippet: the README's command as exports, this gateway's address and the new key in it.
  const claude = /<pre id="snippet-claude">([^<]*)<\/pre>/.exec(made.text)?.[1];
  const readme = readmeClaudeVariables().map(([k, v]) => [
    k,
    v.replace('http://127.0.0.1:8080', h.url).replace('$FAREBOX_KEY', key),
  ]);
  t.same(
    claude?.split('\n'),
    readme.map(([k, v]) => `export ${k}=${v}`),
    'the same variables as the README',
  );
  t.equal(
    /<code data-snippet="claude-models">([^<]*)<\/code>/.exec(made.text)?.[1],
    readme
      .slice(2)
      .map(([k, v]) => `${k}=${v}`)
      .join(' '),
    'its models under "Connect a client" too',
  );
  const page = await send(alice.b, 'GET', '/keys');
  t.notOk(page.text.includes(key), 'not shown again');
  t.match(page.text, new RegExp(`<tr data-key-id="${id}"><td data-label="Name">laptop &lt;b&gt;</td>`));
  t.match(page.text, /<td data-label="Last used"><span class="muted">never<\/span><\/td>/);
  t.equal((await chat(h.url, key)).status, 200);
  const used = await until('last used to show', async () => (await listKeys(h.redis, alice.account))[0]?.last_used_at);
  t.ok(used);
  t.match((await send(alice.b, 'GET', '/keys')).text, /<td data-label="Last used">\d{4}-\d\d-\d\d \d\d:\d\d UTC<\/td>/);
});

t.test('revoking on the Keys page: 401 at once on both instances, even with the key cached', async (t) => {
  const { key, id } = newKey((await send(alice.b, 'POST', '/keys', { form: { _csrf: alice.csrf, name: 'ci' } })).text);
  t.equal((await chat(h.url, key)).status, 200);
  t.equal((await chat(other.url, key)).status, 200, 'cached on the second instance');
  const r = await send(alice.b, 'POST', `/keys/${id}/revoke`, { form: { _csrf: alice.csrf } });
  t.equal(r.status, 303);
  t.equal(r.headers.location, '/dash/keys?done=revoked');
  for (const url of [h.url, other.url]) {
    await until(`401 from ${url}`, async () => (await chat(url, key)).status === 401, 2_000, 10);
  }
  const page = await send(alice.b, 'GET', '/keys?done=revoked');
  t.match(page.text, /Key revoked: it answers 401 from now on/);
  t.match(page.text, new RegExp(`<tr data-key-id="${id}">.*?<span class="tag bad">revoked \\d{4}`, 's'));
});

t.test('bad input on the Keys form is refused with a clear page and changes nothing', async (t) => {
  const before = (await listKeys(h.redis, alice.account)).length;
  const cases: [Record<string, string>, number, RegExp][] = [
    [{ name: 'x' }, 403, /did not come from a page of this dashboard/],
    [{ _csrf: 'forged', name: 'x' }, 403, /did not come from a page of this dashboard/],
    [{ _csrf: bob.csrf, name: 'x' }, 403, /did not come from a page of this dashboard/],
    [{ _csrf: alice.csrf, name: '   ' }, 400, /Give the key a name/],
    [{ _csrf: alice.csrf, name: 'x'.repeat(65) }, 400, /at most 64 characters/],
    [{ _csrf: alice.csrf, name: 'a\nb' }, 400, /control characters/],
  ];
  for (const [form, status, message] of cases) {
    const r = await send(alice.b, 'POST', '/keys', { form });
    t.equal(r.status, status, JSON.stringify(form));
    t.match(r.text, message);
    t.equal(r.headers['content-security-policy']?.toString().startsWith("default-src 'none'"), true);
  }
  const cross = await send({ ...alice.b, origin: 'http://evil.test' }, 'POST', '/keys', {
    form: { _csrf: alice.csrf, name: 'x' },
  });
  t.equal(cross.status, 403);
  t.match(cross.text, /not http:\/\/evil\.test/);
  const signedOut = await send({ ...alice.b, cookies: new Map() }, 'POST', '/keys', {
    form: { _csrf: alice.csrf, name: 'x' },
  });
  t.equal(signedOut.status, 401);
  t.match(signedOut.text, /Sign in first/);
  t.equal((await listKeys(h.redis, alice.account)).length, before, 'no key made');
});

t.test("one account never sees or revokes another's keys", async (t) => {
  const { key, id } = newKey(
    (await send(bob.b, 'POST', '/keys', { form: { _csrf: bob.csrf, name: 'bob-only' } })).text,
  );
  const alicePage = await send(alice.b, 'GET', '/keys');
  t.notOk(alicePage.text.includes(id), "bob's key id is not on alice's page");
  t.notOk(alicePage.text.includes('bob-only'));
  const r = await send(alice.b, 'POST', `/keys/${id}/revoke`, { form: { _csrf: alice.csrf } });
  t.equal(r.status, 404);
  t.match(r.text, /No such key on your account/);
  const unknown = await send(alice.b, 'POST', '/keys/key_0000000000000000/revoke', { form: { _csrf: alice.csrf } });
  t.equal(unknown.status, 404, 'an unknown id answers the same');
  t.equal((await chat(h.url, key)).status, 200, "bob's key still works");
  t.equal((await listKeys(h.redis, bob.account)).find((k) => k.id === id)?.revoked_at, null);
});

t.test('a key made with the CLI shows, unnamed, and the dashboard revokes it', async (t) => {
  const { id, key } = await createKey(h.redis, alice.account);
  const page = await send(alice.b, 'GET', '/keys');
  t.match(page.text, new RegExp(`<tr data-key-id="${id}"><td data-label="Name"><span class="muted">unnamed</span>`));
  t.equal((await send(alice.b, 'POST', `/keys/${id}/revoke`, { form: { _csrf: alice.csrf } })).status, 303);
  await until('401', async () => (await chat(h.url, key)).status === 401, 2_000, 10);
});
