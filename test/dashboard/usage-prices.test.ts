/**
 * Usage and Prices against a real gateway: an account's calls newest first in pages, with price, state and a link
 * to the settlement on the explorer the operator configured; the CSV export; spend per day; nothing of another
 * account; a call recorded before the compact layout shown as a new one. The public price page carries the numbers
 * of `farebox prices --json`. Every page has the headers of the dashboard's security policy.
 */
import t from 'tap';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createKey } from '../../plugins/accounts/accounts.js';
import { getCallRecord, listUsage } from '../../plugins/billing/call-records.js';
import { keys } from '../../plugins/store/keys.js';
import { DEV_CHAIN_IDS } from '../../plugins/chains/dev-chains.js';
import { CONTENT_SECURITY_POLICY } from '../../plugins/dashboard/index.js';
import { formatUsd, parseUsd, USAGE_FIELDS } from '../../pricing/index.js';
import { weigh, writeFirstLayout } from '../helpers/record-layouts.js';
import { runCli, until } from '../helpers/wait.js';
import { csrfOf, send, signIn, type TestBrowser } from './browser-session.js';
import { startDashboardGateway } from './dashboard-gateway.js';
import { callIdOf, newRequestId } from '../../plugins/request-ids.js';

const { h, browser } = await startDashboardGateway(t, { explorers: { chain_a: 'https://explorer.test/' } });

async function caller(name: string): Promise<{ b: TestBrowser; account: string; key: string; keyId: string }> {
  const b = browser();
  const w = privateKeyToAccount(generatePrivateKey());
  const r = await signIn(b, w, DEV_CHAIN_IDS.chain_a);
  if (r.status !== 200) throw new Error(r.text);
  const account = w.address.toLowerCase();
  await h.fund('chain_a', 1_000_000n, account);
  const { key, id } = await createKey(h.redis, account, { name });
  return { b, account, key, keyId: id };
}

async function call(key: string, content = 'hi'): Promise<string> {
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', max_tokens: 20, messages: [{ role: 'user', content }] }),
  });
  if (res.status !== 200) throw new Error(`call: ${res.status} ${await res.text()}`);
  await res.arrayBuffer();
  return res.headers.get('x-request-id')!;
}

const alice = await caller('=HYPERLINK("http://evil.test")');
const bob = await caller('<script>alert(1)</script>');
const aliceCalls: string[] = [];
for (let i = 0; i < 30; i++) aliceCalls.push(await call(alice.key, `hi #sim:tokens=${1 + (i % 5)}`));
const bobCall = await call(bob.key);

const rowsOf = (html: string) => [...html.matchAll(/<tr data-call-id="([^"]+)">/g)].map((m) => m[1]!);

t.test('Usage: the calls newest first, 25 a page, older pages linked', async (t) => {
  const newest = [...aliceCalls].reverse();
  const one = await send(alice.b, 'GET', '/usage');
  t.equal(one.status, 200);
  t.same(rowsOf(one.text), newest.slice(0, 25));
  t.match(one.text, /<a href="\/dash\/usage\?page=2" rel="next">Older calls<\/a>/);
  const two = await send(alice.b, 'GET', '/usage?page=2');
  t.same(rowsOf(two.text), newest.slice(25));
  t.match(two.text, /<a href="\/dash\/usage" rel="prev">Newer calls<\/a>/);
  t.notMatch(two.text, /rel="next"/);
  t.same(
    rowsOf((await send(alice.b, 'GET', '/usage?page=-3')).text),
    newest.slice(0, 25),
    'a bad page number is page 1',
  );
  t.match((await send(alice.b, 'GET', '/usage?page=9')).text, /No older calls/);
});

t.test('a settled call: its price, state, tokens by kind and a link to its transaction on the explorer', async (t) => {
  const id = aliceCalls[0]!;
  const record = await until('the first call to settle', async () =>
    (await listUsage(h.redis, alice.account, 100)).find((r) => r.call_id === id && r.status === 'settled' && r.tx),
  );
  const page = (await send(alice.b, 'GET', '/usage?page=2')).text;
  const row = new RegExp(`<tr data-call-id="${id}">(.*?)</tr>`, 's').exec(page)?.[1] ?? '';
  t.match(row, /<td data-label="Model">gamma-k3<\/td>/);
  t.match(row, /<span data-usage="output_tokens">1 output token<\/span>/);
  t.match(row, /<span data-usage="input_tokens">\d+ input tokens<\/span>/);
  t.match(row, new RegExp(`data-field="price">${record.price.replace('.', '\\.')}</td>`));
  t.match(row, /data-field="status">settled</);
  t.match(
    row,
    new RegExp(
      `<a class="mono" href="https://explorer\\.test/tx/${record.tx}" rel="noopener noreferrer" title="${record.tx}"`,
    ),
  );
  t.match(
    row,
    /<td data-label="Key">=HYPERLINK\(&quot;http:\/\/evil\.test&quot;\)<\/td>/,
    'the key by its name, escaped',
  );
});

t.test('spend per day: the chart sums what the calls cost', async (t) => {
  const records = await until('every call charged', async () => {
    const rs = await listUsage(h.redis, alice.account, 100);
    return rs.length === 30 && rs.every((r) => r.status === 'pending' || r.status === 'settled') ? rs : null;
  });
  const total = records.reduce((s, r) => s + parseUsd(r.price), 0n);
  const page = (await send(alice.b, 'GET', '/usage')).text;
  t.match(
    page,
    new RegExp(
      `aria-label="Spend per day over the last 30 days: ${formatUsd(total).replace('.', '\\.')} USD in all, most on ${new Date().toISOString().slice(0, 10)}`,
    ),
  );
  t.equal((page.match(/<rect class="bar"/g) ?? []).length, 30, 'one bar a day');
});

t.test('CSV: every call, its columns, and key names a spreadsheet would run kept as text', async (t) => {
  const res = await send(alice.b, 'GET', '/usage.csv');
  t.equal(res.status, 200);
  t.match(String(res.headers['content-type']), /^text\/csv/);
  t.match(String(res.headers['content-disposition']), /^attachment; filename="farebox-usage-\d{4}-\d\d-\d\d\.csv"$/);
  const lines = res.text.trimEnd().split('\r\n');
  t.equal(
    lines[0],
    ['time', 'call_id', 'key_id', 'key_name', 'model', 'chain', ...USAGE_FIELDS, 'price_usd', 'status', 'tx'].join(','),
  );
  t.equal(lines.length, 31);
  t.same(
    lines.slice(1).map((l) => l.split(',')[1]),
    [...aliceCalls].reverse(),
  );
  t.match(lines[1], new RegExp(`,${alice.keyId},"'=HYPERLINK\\(""http://evil\\.test""\\)",gamma-k3,chain_a,`));
});

t.test("one account never sees another's calls", async (t) => {
  const a =
    (await send(alice.b, 'GET', '/usage')).text +
    (await send(alice.b, 'GET', '/usage?page=2')).text +
    (await send(alice.b, 'GET', '/usage.csv')).text;
  t.notOk(a.includes(bobCall), "bob's call is not in alice's pages or CSV");
  const b = (await send(bob.b, 'GET', '/usage')).text;
  t.same(rowsOf(b), [bobCall]);
  t.match(b, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/, 'a key name is escaped, never markup');
  t.notMatch(b, /<script>alert/);
  t.notOk(aliceCalls.some((id) => b.includes(id)));
  t.equal((await send({ ...bob.b, cookies: new Map() }, 'GET', '/usage.csv')).status, 303, 'signed out: no CSV');
  const balances = (await send(bob.b, 'GET', '/wallets/balances.json')).json;
  t.equal(balances.account, bob.account, "bob's balances are bob's");
  t.notOk(
    (await send(bob.b, 'GET', '/wallets')).text.includes(alice.account),
    "alice's address is nowhere on bob's page",
  );
});

t.test('Prices: public, and every number is the one `farebox prices --json` prints', async (t) => {
  const cli = await runCli(['prices', '--json'], { FAREBOX_REDIS_PREFIX: h.prefix, FAREBOX_CONFIG: '' });
  t.equal(cli.code, 0, cli.stderr);
  const doc = JSON.parse(cli.stdout) as {
    text: Record<string, Record<string, string>>;
    image: Record<string, Record<string, string>>;
    video: Record<string, Record<string, string>>;
  };
  const anon: TestBrowser = { ...alice.b, cookies: new Map() };
  const page = await send(anon, 'GET', '/prices');
  t.equal(page.status, 200, 'no session needed');
  t.same((await send(anon, 'GET', '/prices.json')).json, doc);
  const cell = (model: string, field: string) =>
    new RegExp(`data-model="${model.replace(/\./g, '\\.')}" data-field="${field}">([^<]+)<`).exec(page.text)?.[1];
  let n = 0;
  for (const [model, r] of Object.entries(doc.text)) {
    for (const f of ['input', 'output', 'cache_read']) {
      t.equal(cell(model, f), `$${r[f]}`, `${model} ${f}`);
      n++;
    }
    // Cache writes: 1.25x and 2x the input rate, exactly (the page may need more decimals than the table).
    const input = parseUsd(r.input!);
    t.equal(parseUsd(cell(model, 'cache_write_1h')!.slice(1)), input * 2n);
    const fiveMin = cell(model, 'cache_write_5m')!.slice(1);
    const [whole, frac = ''] = fiveMin.split('.');
    t.equal(
      BigInt(whole!) * 10n ** 8n + BigInt(frac.padEnd(8, '0')),
      input * 125n,
      `${model} 5 min write = 1.25 x input`,
    );
  }
  for (const [model, r] of Object.entries(doc.image))
    for (const [size, v] of Object.entries(r)) t.equal(cell(model, size), `$${v}`, `${model} ${size}`);
  for (const [model, r] of Object.entries(doc.video))
    for (const [s, v] of Object.entries(r)) t.equal(cell(model, s), `${s} s: $${v}`, `${model} ${s} s`);
  t.ok(n > 30);
  t.equal(cell('beta-5.6-sol', 'cache_write_5m'), '$2.1875');
});

t.test('every page: the security headers; assets: our own, cached by content version', async (t) => {
  const csrf = await csrfOf(alice.b);
  for (const path of ['/sign-in', '/keys', '/wallets', '/usage', '/prices', '/nope']) {
    const r = await send(path === '/sign-in' ? { ...alice.b, cookies: new Map() } : alice.b, 'GET', path);
    t.equal(r.headers['content-security-policy'], CONTENT_SECURITY_POLICY, path);
    t.equal(r.headers['x-content-type-options'], 'nosniff');
    t.equal(r.headers['x-frame-options'], 'DENY');
    t.equal(r.headers['referrer-policy'], 'same-origin');
    t.notMatch(r.text, /<script>|<style|style="|on(click|load|error)=/i, `${path}: no inline script, style or handler`);
    t.notMatch(
      r.text,
      /<(?:script|link|img|iframe|object|embed)\b[^>]*\b(?:src|href)="(?:[a-z]+:)?\/\//i,
      `${path}: nothing loaded from another origin`,
    );
  }
  t.equal((await send(alice.b, 'GET', '/keys')).headers['cache-control'], 'no-store');
  t.equal(
    CONTENT_SECURITY_POLICY,
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  );
  const page = (await send(alice.b, 'GET', '/keys')).text;
  const js = /<script type="module" src="([^"]+)"><\/script>/.exec(page)![1]!;
  const css = /<link rel="stylesheet" href="([^"]+)">/.exec(page)![1]!;
  const script = await h.app.inject(js);
  t.equal(script.statusCode, 200);
  t.match(script.headers['content-type'], /^text\/javascript/);
  t.equal(script.headers['cache-control'], 'public, max-age=31536000, immutable');
  t.notMatch(script.body, /sourceMappingURL|import /, 'one self-contained module');
  t.match(script.body, /eth_signTypedData_v4/);
  t.match((await h.app.inject(css)).headers['content-type'], /^text\/css/);
  t.ok(csrf);
});

t.test(
  'a call recorded before the upgrade (the first layout) shows on the Usage page and in the CSV as its compact twin',
  async (t) => {
    const id = aliceCalls[0]!;
    const rec = await until('the first call to settle', async () => {
      const r = await getCallRecord(h.redis, id);
      return r?.status === 'settled' ? r : null;
    });
    t.equal((await weigh(h.redis, keys.call(callIdOf(id)))).encoding, 'listpack', 'the gateway wrote it compact');
    const twin = newRequestId();
    await writeFirstLayout(
      h.redis,
      {
        requestId: twin,
        account: alice.account,
        keyId: rec.key_id,
        model: rec.model,
        chain: rec.chain,
        held: rec.held,
        owner: 'gw-before',
        time: Date.parse(rec.time),
        expires: Date.parse(rec.time) + 60_000,
        status: 'settled',
        price: rec.priceAtomic,
        usage: rec.usage,
        tx: rec.tx!,
      },
      3_600_000,
    );
    const same = (text: string, pattern: (id: string) => RegExp) => {
      const [a, b] = [pattern(id).exec(text)?.[1], pattern(twin).exec(text)?.[1]];
      t.ok(a, 'the call is there');
      t.equal(b?.replaceAll(twin, id), a, 'its twin, the same');
    };
    const page = (await send(alice.b, 'GET', '/usage?page=2')).text;
    same(page, (call) => new RegExp(`<tr data-call-id="${call}">(.*?)</tr>`, 's'));
    same((await send(alice.b, 'GET', '/usage.csv')).text, (call) => new RegExp(`^(.*,${call},.*)$`, 'm'));
  },
);
