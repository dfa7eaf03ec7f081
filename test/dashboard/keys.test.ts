/**
 * The Keys page against a real gateway: a named key shown once that works at once, its last use, revocation that
 * answers 401 at once on every instance, bad names and forged forms refused with nothing changed, and one account
 * never seeing or touching another's keys. Keys made by the CLI show too. Limits: a key made with a spend limit, an
 * allow-list and an expiry is held to them, shows what it spent (the price the caller reads back) and what is left;
 * each live key's form changes them, refused input and forged forms change nothing.
 */
import OpenAI from 'openai';
import t from 'tap';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createKey, getKey, listKeys, revokeKey, type KeyInfo } from '../../plugins/accounts/accounts.js';
import { keyWindow, setKeyLimits } from '../../plugins/accounts/key-limits.js';
import { DEV_CHAIN_IDS } from '../../plugins/chains/dev-chains.js';
import { formatTime } from '../../plugins/dashboard/format.js';
import { keys } from '../../plugins/store/keys.js';
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
  t.match(
    page.text,
    new RegExp(
      `<tr data-key-id="${id}"><td data-label="Key"><div>laptop &lt;b&gt;<br><span class="mono muted" data-field="id">${id}</span><br><span class="muted">created <span class="nowrap">\\d{4}-\\d\\d-\\d\\d</span> <span class="nowrap">\\d\\d:\\d\\d UTC</span></span></div></td>`,
    ),
  );
  t.match(page.text, /<td data-label="Last used"><span class="muted">never<\/span><\/td>/);
  t.equal((await chat(h.url, key)).status, 200);
  const used = await until('last used to show', async () => (await listKeys(h.redis, alice.account))[0]?.last_used_at);
  t.ok(used);
  t.match(
    (await send(alice.b, 'GET', '/keys')).text,
    /<td data-label="Last used"><span class="nowrap">\d{4}-\d\d-\d\d<\/span> <span class="nowrap">\d\d:\d\d UTC<\/span><\/td>/,
  );
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
  t.match(
    page.text,
    new RegExp(`<tr data-key-id="${id}"><td data-label="Key"><div><span class="muted">unnamed</span>`),
  );
  t.equal((await send(alice.b, 'POST', `/keys/${id}/revoke`, { form: { _csrf: alice.csrf } })).status, 303);
  await until('401', async () => (await chat(h.url, key)).status === 401, 2_000, 10);
});

/** A day as a date input sends it, `days` from today (UTC). */
function day(days: number): string {
  return new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
}

/** A time as the keys' table writes it: its day and its hour, each kept whole. */
function when(ms: number): string {
  const [d, ...hour] = formatTime(ms).split(' ');
  return `<span class="nowrap">${d}</span> <span class="nowrap">${hour.join(' ')}</span>`;
}

/** The row of a key on the page, and its limits form's row. */
function rowOf(page: string, id: string): string {
  return new RegExp(`<tr data-key-id="${id}">.*?</tr>(\\s*<tr class="edit".*?</tr>)?`, 's').exec(page)?.[0] ?? '';
}

/** What a key's limits are, to compare before and after a refused form. */
async function limitsOf(id: string) {
  const k = (await getKey(h.redis, id)) as KeyInfo;
  return {
    limit: k.limit,
    models: k.models,
    expires_at: k.expires_at,
    spend: await h.redis.hgetall(keys.keySpend(id)),
  };
}

t.test(
  'a key made with a limit, a reset, an allow-list and an expiry: stored, listed, held to them; its spend is the price the caller read',
  async (t) => {
    const expires = day(400);
    const made = await send(alice.b, 'POST', '/keys', {
      form: {
        _csrf: alice.csrf,
        name: 'bounded',
        limit: '0.5',
        reset: 'daily',
        models: ' gamma-*, alpha-haiku-4-5 ',
        expires,
      },
    });
    t.equal(made.status, 201, made.text.slice(0, 300));
    const { key, id } = newKey(made.text);
    const info = (await getKey(h.redis, id))!;
    t.match(info, {
      name: 'bounded',
      models: ['gamma-*', 'alpha-haiku-4-5'],
      expires_at: Date.parse(`${expires}T00:00:00Z`),
      limit: { amount: '0.500000', amount_atomic: '500000', reset: 'daily', left_atomic: '500000' },
    });
    t.match(await h.redis.hgetall(keys.keySpend(id)), { l: '500000', r: 'daily' }, 'the limit in the key-spend hash');
    t.equal(
      await h.redis.hget(keys.apiKey((await h.redis.get(keys.apiKeyId(id)))!), 'models'),
      'gamma-*,alpha-haiku-4-5',
    );

    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
    const { response } = await openai.chat.completions
      .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hello #sim:tokens=9' }] })
      .withResponse();
    const call = await until('the call to be priced', async () => {
      const r = await fetch(`${h.url}/v1/calls/${response.headers.get('x-request-id')}`, {
        headers: { authorization: `Bearer ${key}` },
      });
      const v = (await r.json()) as { price: string | null; price_atomic: string | null };
      return v.price_atomic ? v : null;
    });
    const price = BigInt(call.price_atomic!);
    t.ok(price > 0n, 'a billed call');
    const refused = await openai.chat.completions
      .create({ model: 'alpha-sonnet-4-6', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    t.ok(refused instanceof OpenAI.PermissionDeniedError, 'a model off the list is refused (403)');

    const spent = await until('the debit to reach the key', async () => {
      const k = (await getKey(h.redis, id))!;
      return k.spent.total_atomic === price.toString() ? k : null;
    });
    t.equal(spent.spent.window_atomic, price.toString(), "today's window holds the call");
    t.equal(spent.limit?.left_atomic, (500_000n - price).toString(), 'what is left: the limit less the price');
    t.equal((await h.redis.hgetall(keys.keySpend(id))).t, price.toString(), 'the key-spend hash holds the price');

    const row = rowOf((await send(alice.b, 'GET', '/keys')).text, id);
    t.match(
      row,
      '<td class="limit" data-label="Limit"><div><span class="nowrap" data-field="limit">0.500000 USD per day</span><br>',
    );
    t.match(row, `<span data-field="spent-window">${call.price}</span> today`, "the window's spend: the call's price");
    t.match(row, `<span data-field="spent-total">${call.price}</span> in all`);
    const resets = keyWindow('daily', Date.now()).end!;
    t.match(
      row,
      `<span data-field="left">${spent.limit!.left}</span> left<br><span class="muted">resets ${when(resets)}</span></div>`,
    );
    t.match(row, '<span data-field="models"><code>gamma-*</code>, <code>alpha-haiku-4-5</code></span>');
    t.match(
      row,
      `<span data-field="expires"><span class="nowrap">${expires}</span> <span class="nowrap">00:00 UTC</span></span>`,
    );
    t.match(row, `action="/dash/keys/${id}/limits"`, 'a form to change them');
    t.match(row, 'name="limit" inputmode="decimal" pattern="\\d+(\\.\\d{1,6})?"', 'its fields filled with the limits');
    t.match(row, 'value="0.500000"');
    t.match(row, '<option value="daily" selected>daily</option>');
    t.match(row, 'value="gamma-*, alpha-haiku-4-5"');
    t.match(row, `type="date" aria-describedby="limits-hint-${id}" value="${expires}"`);
  },
);

t.test('a key made with only a name has no limit, every model, no expiry', async (t) => {
  const { id } = newKey(
    (
      await send(alice.b, 'POST', '/keys', {
        form: { _csrf: alice.csrf, name: 'open', limit: '', models: '', expires: '', reset: 'weekly' },
      })
    ).text,
  );
  t.match(await getKey(h.redis, id), { limit: null, models: null, expires_at: null });
  t.same(await h.redis.hgetall(keys.keySpend(id)), {}, 'no limit, no reset stored');
  const row = rowOf((await send(alice.b, 'GET', '/keys')).text, id);
  t.match(row, '<td class="limit" data-label="Limit"><span class="muted">no limit</span></td>');
  t.match(row, '<td class="list" data-label="Models"><span class="muted">all models</span></td>');
  t.match(row, '<td data-label="Expires"><span class="muted">never</span></td>');
  t.match(
    row,
    '<td class="spent" data-label="Spent"><div><span data-field="spent-total">0.000000</span> in all</div></td>',
  );
});

t.test(
  "changing a key's limits on its form: stored, announced, listed; the same day sent back keeps the expiry",
  async (t) => {
    const at = Date.parse(`${day(30)}T12:00:00Z`);
    const { id, key } = await createKey(h.redis, alice.account, {
      name: 'ci',
      limit: 2_000_000n,
      reset: 'monthly',
      expiresAt: at,
    });
    const form = { _csrf: alice.csrf, limit: '0.25', reset: 'weekly', models: 'gamma-k3', expires: day(30) };
    const r = await send(alice.b, 'POST', `/keys/${id}/limits`, { form });
    t.equal(r.status, 303, r.text.slice(0, 300));
    t.equal(r.headers.location, '/dash/keys?done=limits');
    t.match(
      await getKey(h.redis, id),
      {
        limit: { amount_atomic: '250000', reset: 'weekly' },
        models: ['gamma-k3'],
        expires_at: at,
      },
      'the expiry at 12:00 kept: its day was sent back',
    );
    t.match(await h.redis.hgetall(keys.keySpend(id)), { l: '250000', r: 'weekly' });
    const page = await send(alice.b, 'GET', '/keys?done=limits');
    t.match(page.text, /<p class="notice ok" role="status">Limits saved/);
    t.match(rowOf(page.text, id), '0.250000 USD per week');
    // The gateway sees the new allow-list at once.
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
    const off = await openai.chat.completions
      .create({ model: 'gamma-q3', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    t.ok(off instanceof OpenAI.PermissionDeniedError, 'gamma-q3 is now off the list');

    const cleared = await send(alice.b, 'POST', `/keys/${id}/limits`, {
      form: { _csrf: alice.csrf, limit: '', reset: 'never', models: '', expires: '' },
    });
    t.equal(cleared.status, 303);
    t.match(await getKey(h.redis, id), { limit: null, models: null, expires_at: null }, 'empty fields: none');
    t.notOk('l' in (await h.redis.hgetall(keys.keySpend(id))), 'the limit is gone from the key-spend hash');
  },
);

t.test(
  'an expired key shows as expired; its form changes its limit and keeps it expired, or revives it with a later day',
  async (t) => {
    const { id, key } = await createKey(h.redis, alice.account, { name: 'old' });
    const past = Date.now() - 60_000;
    await setKeyLimits(h.redis, id, { expiresAt: past });
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
    const expired = await until('401 key_expired', async () => {
      const e = await openai.chat.completions
        .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
        .catch((x: unknown) => x);
      return e instanceof OpenAI.AuthenticationError ? e : null;
    });
    t.equal(expired.status, 401);
    const page = await send(alice.b, 'GET', '/keys');
    t.match(rowOf(page.text, id), `<span class="tag bad">expired ${formatTime(past)}</span>`);
    const kept = await send(alice.b, 'POST', `/keys/${id}/limits`, {
      form: {
        _csrf: alice.csrf,
        limit: '1',
        reset: 'daily',
        models: '',
        expires: new Date(past).toISOString().slice(0, 10),
      },
    });
    t.equal(kept.status, 303, 'its own day is not refused as past');
    t.match(await getKey(h.redis, id), { expires_at: past, limit: { amount_atomic: '1000000' } });
    const revived = await send(alice.b, 'POST', `/keys/${id}/limits`, {
      form: { _csrf: alice.csrf, limit: '1', reset: 'daily', models: '', expires: day(2) },
    });
    t.equal(revived.status, 303);
    t.equal((await getKey(h.redis, id))?.expires_at, Date.parse(`${day(2)}T00:00:00Z`));
    const ok = await openai.chat.completions.create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] });
    t.equal(ok.object, 'chat.completion', 'the key works again');
  },
);

t.test('refused limits: a clear page, and nothing made or changed', async (t) => {
  const { id } = await createKey(h.redis, alice.account, { name: 'steady', limit: 1_000_000n, reset: 'daily' });
  const before = await limitsOf(id);
  const count = (await listKeys(h.redis, alice.account)).length;
  const cases: [Record<string, string>, RegExp][] = [
    [{ limit: 'ten' }, /The spend limit is refused: a spend limit is a USD amount with at most 6 decimals/],
    [{ limit: '1.1234567' }, /The spend limit is refused: a spend limit is a USD amount with at most 6 decimals/],
    [{ limit: '0' }, /The spend limit is refused: a spend limit is above 0/],
    [{ limit: '1', reset: 'hourly' }, /The reset is refused: a reset is one of daily, weekly, monthly, never/],
    [{ models: 'gamma k3' }, /The list of allowed models is refused: &quot;gamma k3&quot; is not a model id/],
    [{ models: ', ,' }, /The list of allowed models is refused: an allow-list names at least one model/],
    [{ expires: '2020-01-01' }, /The expiry is refused: the expiry 2020-01-01T00:00:00.000Z is already past/],
    [{ expires: 'next week' }, /The expiry is refused: an expiry is an ISO 8601 date/],
  ];
  for (const [fields, message] of cases) {
    const made = await send(alice.b, 'POST', '/keys', { form: { _csrf: alice.csrf, name: 'x', ...fields } });
    t.equal(made.status, 400, `create ${JSON.stringify(fields)}`);
    t.match(made.text, message);
    t.match(made.text, /role="alert"/);
    const changed = await send(alice.b, 'POST', `/keys/${id}/limits`, { form: { _csrf: alice.csrf, ...fields } });
    t.equal(changed.status, 400, `change ${JSON.stringify(fields)}`);
    t.match(changed.text, message);
  }
  t.equal((await listKeys(h.redis, alice.account)).length, count, 'no key made');
  t.same(await limitsOf(id), before, 'the limits unchanged');
});

t.test(
  "a key's limits form: forged, cross-site, signed out, another account's key, an unknown or revoked one",
  async (t) => {
    const { id } = await createKey(h.redis, alice.account, { name: 'guarded', limit: 1_000_000n, reset: 'daily' });
    const before = await limitsOf(id);
    const change = { limit: '9', reset: 'never', models: 'gamma-k3', expires: '' };
    for (const form of [change, { ...change, _csrf: 'forged' }, { ...change, _csrf: bob.csrf }]) {
      const r = await send(alice.b, 'POST', `/keys/${id}/limits`, { form });
      t.equal(r.status, 403);
      t.match(r.text, /did not come from a page of this dashboard/);
    }
    const cross = await send({ ...alice.b, origin: 'http://evil.test' }, 'POST', `/keys/${id}/limits`, {
      form: { ...change, _csrf: alice.csrf },
    });
    t.equal(cross.status, 403);
    const signedOut = await send({ ...alice.b, cookies: new Map() }, 'POST', `/keys/${id}/limits`, {
      form: { ...change, _csrf: alice.csrf },
    });
    t.equal(signedOut.status, 401);
    const byBob = await send(bob.b, 'POST', `/keys/${id}/limits`, { form: { ...change, _csrf: bob.csrf } });
    t.equal(byBob.status, 404, "another account's key answers as unknown");
    t.match(byBob.text, /No such key on your account/);
    t.same(await limitsOf(id), before, 'nothing changed');
    const unknown = await send(alice.b, 'POST', '/keys/key_0000000000000000/limits', {
      form: { ...change, _csrf: alice.csrf },
    });
    t.equal(unknown.status, 404);
    await revokeKey(h.redis, id);
    const revoked = await send(alice.b, 'POST', `/keys/${id}/limits`, { form: { ...change, _csrf: alice.csrf } });
    t.equal(revoked.status, 400);
    t.match(revoked.text, /This key is revoked/);
    t.same(await limitsOf(id), before, 'nothing changed');
    t.notMatch(
      rowOf((await send(alice.b, 'GET', '/keys')).text, id),
      /class="edit"/,
      'a revoked key has no limits form',
    );
  },
);
