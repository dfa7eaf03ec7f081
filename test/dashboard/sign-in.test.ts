/**
 * Sign-in with Ethereum on the dashboard, through HTTP: what the nonce binds, the session cookie, and every bad
 * input (a forged nonce, a replayed or altered message, another wallet's signature, a wrong chain, another site,
 * another browser, an expired message) refused with a clear error that changes nothing. Sign-up policies, smart
 * contract wallets (ERC-1271 on a dev chain), sign-out and ending every session.
 */
import t from 'tap';
import Fastify from 'fastify';
import { createSiweMessage } from 'viem/siwe';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { createAccount, getAccount } from '../../plugins/accounts/accounts.js';
import { CHAIN_NAMES } from '../../plugins/chains/config.js';
import { buildConfig, embeddedDefault } from '../../plugins/config.js';
import { devChainsConfig } from '../../plugins/serve.js';
import dashboard, { endAllSessions } from '../../plugins/dashboard/index.js';
import { issueSignIn, verifySignIn } from '../../plugins/dashboard/sign-in.js';
import { DashboardError } from '../../plugins/dashboard/errors.js';
import { keys } from '../../plugins/store/keys.js';
import { closeDevChains, devChains, testRedis } from '../helpers/harness.js';
import { browser, csrfOf, nonce, send, signIn, type TestBrowser } from './browser-session.js';

const { redis, prefix } = await testRedis(t);
const dev = await devChains({ testMethods: true }); // an ERC-1271 wallet's code is set over JSON-RPC
t.teardown(closeDevChains);
const input = embeddedDefault('http://127.0.0.1:9');
input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
input.chains = devChainsConfig(dev);
// A configured gateway (not the embedded default): Secure cookies, sign-ups reviewed unless a registration says so.
const config = buildConfig(input, { FAREBOX_SIM_KEY: 'k' }, false);
const chainA = config.chains!.chain_a.chain_id;
const ORIGIN = 'http://dash.test';

const app = Fastify({ logger: false });
app.get('/ping', async () => 'pong');
await app.register(dashboard, {
  prefix: '/open',
  config,
  redis,
  origins: [ORIGIN, 'http://other.dash.test'],
  signup: 'open',
});
await app.register(dashboard, { prefix: '/review', config, redis, origins: [ORIGIN] });
await app.register(dashboard, { prefix: '/closed', config, redis, origins: [ORIGIN], signup: 'closed' });
await app.ready();
t.teardown(() => app.close());

const fresh = () => privateKeyToAccount(generatePrivateKey());
const open = () => browser(app, '/open', ORIGIN);

async function sessionsOf(account: string): Promise<number> {
  return redis.scard(keys.dashSessions(account.toLowerCase()));
}

t.test(
  'the nonce: a message for this origin, the chain and the wallet, five minutes, bound to the browser',
  async (t) => {
    const b = open();
    const w = fresh();
    const r = await nonce(b, w.address, chainA);
    t.equal(r.status, 200, r.text);
    const m: string = r.json.message;
    t.match(m, new RegExp(`^http://dash\\.test wants you to sign in with your Ethereum account:\\n${w.address}\\n`));
    t.match(m, /\nURI: http:\/\/dash\.test\/open\/\n/);
    t.match(m, new RegExp(`\\nChain ID: ${chainA}\\n`));
    t.match(m, /\nNonce: [0-9a-f]{32}\n/);
    const issued = Date.parse(/Issued At: (\S+)/.exec(m)![1]!);
    const expires = Date.parse(/Expiration Time: (\S+)/.exec(m)![1]!);
    t.equal(expires - issued, 5 * 60_000);
    const cookie = String([r.headers['set-cookie']].flat()[0]);
    t.match(cookie, /^farebox_signin=[A-Za-z0-9_-]{43}; Max-Age=300; Path=\/open; HttpOnly; Secure; SameSite=Strict$/);
    t.equal(r.headers['cache-control'], 'no-store');
  },
);

t.test(
  'a good sign-in: an active account (signup open) and a session cookie, HttpOnly, Lax, Secure, under the prefix',
  async (t) => {
    const b = open();
    const w = fresh();
    const r = await signIn(b, w, chainA);
    t.equal(r.status, 200, r.text);
    t.same(r.json, { account: w.address.toLowerCase(), status: 'active', redirect: '/open/keys' });
    const set = [r.headers['set-cookie']].flat().map(String);
    t.ok(
      set.some((c) =>
        /^farebox_session=[A-Za-z0-9_-]{43}; Max-Age=86400; Path=\/open; HttpOnly; Secure; SameSite=Lax$/.test(c),
      ),
      set.join('\n'),
    );
    t.ok(
      set.some(
        (c) =>
          /^farebox_signin=; Max-Age=0; Path=\/open/.test(c) || /^farebox_signin=;.*Expires=Thu, 01 Jan 1970/.test(c),
      ),
      'binding cookie cleared',
    );
    t.equal((await getAccount(redis, w.address))?.status, 'active');
    const keysPage = await send(b, 'GET', '/keys');
    t.equal(keysPage.status, 200);
    t.match(keysPage.text, new RegExp(`title="${w.address.toLowerCase()}"`));
    t.equal(await sessionsOf(w.address), 1);
    t.notOk(
      JSON.stringify(await redis.keys('*')).includes(b.cookies.get('farebox_session')!),
      'the session token itself is not stored',
    );
  },
);

t.test('a replayed signature is refused: the message was used', async (t) => {
  const b = open();
  const w = fresh();
  const n = await nonce(b, w.address, chainA);
  const signature = await w.signMessage({ message: n.json.message });
  t.equal((await send(b, 'POST', '/auth/verify', { json: { message: n.json.message, signature } })).status, 200);
  b.cookies.delete('farebox_session');
  // The same browser again, even with its binding cookie restored.
  const again = await send(b, 'POST', '/auth/verify', { json: { message: n.json.message, signature } });
  t.equal(again.status, 400);
  t.same(again.json.error.code, 'sign_in_unknown');
  t.match(again.json.error.message, /unknown, expired or already used/);
  t.notOk(b.cookies.has('farebox_session'), 'no session');
  t.equal(await sessionsOf(w.address), 1, 'still the one session');
});

t.test(
  'a forged nonce (a message the dashboard never issued) is refused and leaves the issued one usable',
  async (t) => {
    const b = open();
    const w = fresh();
    const n = await nonce(b, w.address, chainA);
    const forged = n.json.message.replace(/Nonce: [0-9a-f]{32}/, `Nonce: ${'ab'.repeat(16)}`);
    const r = await send(b, 'POST', '/auth/verify', {
      json: { message: forged, signature: await w.signMessage({ message: forged }) },
    });
    t.equal(r.status, 400);
    t.equal(r.json.error.code, 'sign_in_unknown');
    t.equal(await getAccount(redis, w.address), null, 'no account');
    const ok = await send(b, 'POST', '/auth/verify', {
      json: { message: n.json.message, signature: await w.signMessage({ message: n.json.message }) },
    });
    t.equal(ok.status, 200, 'the real one still signs in');
  },
);

t.test('an altered message (same nonce, another URI) is refused, and the nonce is spent', async (t) => {
  const b = open();
  const w = fresh();
  const n = await nonce(b, w.address, chainA);
  const altered = n.json.message.replace('URI: http://dash.test/open/', 'URI: http://evil.test/');
  const r = await send(b, 'POST', '/auth/verify', {
    json: { message: altered, signature: await w.signMessage({ message: altered }) },
  });
  t.equal(r.status, 400);
  t.equal(r.json.error.code, 'sign_in_altered');
  const then = await send(b, 'POST', '/auth/verify', {
    json: { message: n.json.message, signature: await w.signMessage({ message: n.json.message }) },
  });
  t.equal(then.json.error.code, 'sign_in_unknown', 'presenting it spent it');
  t.equal(await getAccount(redis, w.address), null);
});

t.test("another wallet's signature is refused: no account, no session", async (t) => {
  const b = open();
  const w = fresh();
  const n = await nonce(b, w.address, chainA);
  const r = await send(b, 'POST', '/auth/verify', {
    json: { message: n.json.message, signature: await fresh().signMessage({ message: n.json.message }) },
  });
  t.equal(r.status, 401);
  t.equal(r.json.error.code, 'bad_signature');
  t.equal(await getAccount(redis, w.address), null);
  t.notOk(b.cookies.has('farebox_session'));
  const junk = await send(open(), 'POST', '/auth/verify', { json: { message: n.json.message, signature: 'not hex' } });
  t.equal(junk.status, 400);
  t.equal(junk.json.error.code, 'invalid_input');
});

t.test('a wrong chain, a bad address: refused before any message is issued', async (t) => {
  const b = open();
  const w = fresh();
  const wrong = await nonce(b, w.address, 1);
  t.equal(wrong.status, 400);
  t.equal(wrong.json.error.code, 'wrong_chain');
  t.match(
    wrong.json.error.message,
    new RegExp(
      `chain id 1; sign in on one of this gateway's chains \\(chain ids ${CHAIN_NAMES.map((n) => config.chains![n].chain_id).join(', ')}\\)`,
    ),
  );
  t.notOk(b.cookies.has('farebox_signin'));
  const bad = await nonce(b, '0x1234', chainA);
  t.equal(bad.status, 400);
  t.equal(bad.json.error.code, 'invalid_input');
});

t.test('another site, or no Origin at all, cannot ask for or present a message', async (t) => {
  const w = fresh();
  const evil = browser(app, '/open', 'http://evil.test');
  const r = await nonce(evil, w.address, chainA);
  t.equal(r.status, 403);
  t.equal(r.json.error.code, 'cross_site');
  const none = await send(open(), 'POST', '/auth/nonce', {
    json: { address: w.address, chainId: chainA },
    origin: false,
  });
  t.equal(none.status, 403);
  t.match(none.json.error.message, /no Origin header/);
  const fetchSite = await send(open(), 'POST', '/auth/nonce', {
    json: { address: w.address, chainId: chainA },
    headers: { 'sec-fetch-site': 'cross-site' },
  });
  t.equal(fetchSite.status, 403);
  // Issued to one allowed origin, presented from another: refused.
  const b = open();
  const n = await nonce(b, w.address, chainA);
  const moved = { ...b, origin: 'http://other.dash.test' };
  const p = await send(moved, 'POST', '/auth/verify', {
    json: { message: n.json.message, signature: await w.signMessage({ message: n.json.message }) },
  });
  t.equal(p.json.error.code, 'sign_in_unknown');
});

t.test('a message presented by another browser (without the binding cookie) is refused', async (t) => {
  const w = fresh();
  const n = await nonce(open(), w.address, chainA);
  const thief = open();
  const r = await send(thief, 'POST', '/auth/verify', {
    json: { message: n.json.message, signature: await w.signMessage({ message: n.json.message }) },
  });
  t.equal(r.status, 400);
  t.equal(r.json.error.code, 'sign_in_unknown');
  t.equal(await getAccount(redis, w.address), null);
});

t.test('an expired message is refused even while its record lingers', async (t) => {
  const w = fresh();
  const issued = await issueSignIn(redis, {
    address: w.address,
    chainId: chainA,
    origin: ORIGIN,
    uri: `${ORIGIN}/open/`,
    chainIds: [chainA],
    now: Date.now() - 6 * 60_000,
  });
  const err = await verifySignIn(redis, {
    message: issued.message,
    signature: await w.signMessage({ message: issued.message }),
    bindingToken: issued.bindingToken,
    origin: ORIGIN,
    chainIds: [chainA],
    checkContract: async () => true,
  }).catch((e: unknown) => e);
  t.ok(err instanceof DashboardError);
  t.equal((err as DashboardError).code, 'sign_in_unknown');
});

t.test('a message the dashboard did not write, signed and presented directly, is refused', async (t) => {
  const w = fresh();
  const message = createSiweMessage({
    address: w.address,
    chainId: chainA,
    domain: 'dash.test',
    uri: 'http://dash.test/open/',
    version: '1',
    nonce: 'a'.repeat(32),
  });
  const r = await send(open(), 'POST', '/auth/verify', {
    json: { message, signature: await w.signMessage({ message }) },
  });
  t.equal(r.json.error.code, 'sign_in_unknown');
});

t.test('signup review: the account opens pending and the pages say so', async (t) => {
  const b = browser(app, '/review', ORIGIN);
  const w = fresh();
  const r = await signIn(b, w, chainA);
  t.equal(r.status, 200, r.text);
  t.equal(r.json.status, 'pending');
  t.equal((await getAccount(redis, w.address))?.status, 'pending');
  t.match((await send(b, 'GET', '/keys')).text, /awaits the operator's review/);
});

t.test(
  'signup closed: a new wallet gets a clear refusal and nothing is created; an existing account signs in',
  async (t) => {
    const b = browser(app, '/closed', ORIGIN);
    const w = fresh();
    const r = await signIn(b, w, chainA);
    t.equal(r.status, 403);
    t.equal(r.json.error.code, 'signup_closed');
    t.equal(r.json.redirect, '/closed/signup-closed');
    t.equal(await getAccount(redis, w.address), null, 'no account');
    t.notOk(b.cookies.has('farebox_session'), 'no session');
    const page = await send(b, 'GET', '/signup-closed');
    t.equal(page.status, 403);
    t.match(page.text, /Your wallet has no account on this gateway, and the operator is not opening new ones/);
    const known = fresh();
    await createAccount(redis, { address: known.address });
    t.equal((await signIn(b, known, chainA)).status, 200);
  },
);

t.test('a smart-contract wallet signs in through ERC-1271 on its chain; one that refuses does not', async (t) => {
  const rpc = (method: string, params: unknown[]) =>
    fetch(config.chains!.chain_b.rpc_url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
    }).then((r) => r.json());
  // Runtime code answering isValidSignature with the magic value 0x1626ba7e, or with 0xffffffff.
  const accepts = '0x1111111111111111111111111111111111111111';
  const refuses = '0x2222222222222222222222222222222222222222';
  await rpc('hardhat_setCode', [accepts, '0x631626ba7e60e01b60005260206000f3']);
  await rpc('hardhat_setCode', [refuses, '0x63ffffffff60e01b60005260206000f3']);
  const chainB = config.chains!.chain_b.chain_id;
  const someSignature = await fresh().signMessage({ message: 'not the message' });
  for (const [address, status] of [
    [accepts, 200],
    [refuses, 401],
  ] as const) {
    const b = open();
    const n = await nonce(b, address, chainB);
    const r = await send(b, 'POST', '/auth/verify', { json: { message: n.json.message, signature: someSignature } });
    t.equal(r.status, status, `${address}: ${r.text}`);
  }
  t.equal((await getAccount(redis, accepts))?.status, 'active');
  t.equal(await getAccount(redis, refuses), null);
});

t.test(
  'sign-out ends the session on the server; its cookie replayed opens nothing; it needs the CSRF token',
  async (t) => {
    const b = open();
    const w = fresh();
    await signIn(b, w, chainA);
    const token = b.cookies.get('farebox_session')!;
    const noToken = await send(b, 'POST', '/sign-out', { form: {} });
    t.equal(noToken.status, 403, 'no CSRF token: refused');
    t.match(noToken.text, /did not come from a page of this dashboard/);
    t.equal((await send(b, 'GET', '/keys')).status, 200, 'still signed in');
    const out = await send(b, 'POST', '/sign-out', { form: { _csrf: await csrfOf(b) } });
    t.equal(out.status, 303);
    t.equal(out.headers.location, '/open/sign-in');
    t.notOk(b.cookies.has('farebox_session'), 'cookie cleared');
    const replay: TestBrowser = { ...open(), cookies: new Map([['farebox_session', token]]) };
    const page = await send(replay, 'GET', '/keys');
    t.equal(page.status, 303, 'the old cookie is not a session');
    t.equal(page.headers.location, '/open/sign-in');
    const json = await send(replay, 'GET', '/wallets/balances.json', { headers: { accept: 'application/json' } });
    t.equal(json.status, 401);
    t.equal(json.json.error.code, 'not_signed_in');
  },
);

t.test('endAllSessions signs an account out of every browser', async (t) => {
  const w = fresh();
  const one = open();
  const two = open();
  await signIn(one, w, chainA);
  await signIn(two, w, chainA);
  t.equal(await endAllSessions(redis, w.address), 2);
  t.equal((await send(one, 'GET', '/keys')).status, 303);
  t.equal((await send(two, 'GET', '/keys')).status, 303);
});

t.test('sign-in requests are rate limited per client address', async (t) => {
  await redis.set(keys.dashRate('127.0.0.1'), '30', 'EX', 60);
  const r = await nonce(open(), fresh().address, chainA);
  t.equal(r.status, 429);
  t.equal(r.json.error.code, 'too_many_sign_ins');
  await redis.del(keys.dashRate('127.0.0.1'));
});

t.test("the host app's own routes are untouched", async (t) => {
  t.equal((await app.inject('/ping')).body, 'pong');
});
