/**
 * The dashboard in a real browser (Debian's chromium, driven by playwright-core) on `farebox serve`'s embedded
 * default: a person signs in with a browser wallet, makes a key and uses it with the openai SDK, funds and deposits
 * on the dev chains, picks the default chain, requests a withdrawal, sees the call in Usage with its price and
 * settlement, revokes the key (the SDK then gets 401), makes a key with a spend limit and an allow-list, changes
 * its limit on its row and sees a call's price as its spend, and signs out. At phone width (390 px), a deposit above the
 * wallet's balance is refused before the wallet is asked to sign, a revert and a wallet's long error show one short
 * sentence, and no page is wider than the phone. Writes a screenshot of every page: to a temporary
 * folder, or with FAREBOX_SCREENSHOTS=1 to docs/screenshots/, the README's (a run changes times and keys in them).
 */
import t, { type Test } from 'tap';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import sharp from 'sharp';
import { createPublicClient, createWalletClient, http, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { getAccount, listKeys } from '../../plugins/accounts/accounts.js';
import { listUsage } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { escrowAbi, testStablecoinAbi } from '../../plugins/chains/abi.js';
import { formatUsd } from '../../pricing/index.js';
import { DEV_KEYS, devViemChain } from '../../plugins/chains/dev-chains.js';
import { serve } from '../../plugins/serve.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { dropPrefix, testPrefix } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { installWallet } from './browser-wallet.js';

const CHROMIUM = '/usr/bin/chromium';
if (!existsSync(CHROMIUM)) {
  t.fail(`${CHROMIUM} is missing: apt-get install -y chromium (.ci/run installs it)`);
  process.exit(1);
}

const started = Date.now();
const shots =
  process.env.FAREBOX_SCREENSHOTS === '1'
    ? fileURLToPath(new URL('../../docs/screenshots/', import.meta.url))
    : mkdtempSync(join(tmpdir(), 'farebox-screenshots-'));
mkdirSync(shots, { recursive: true });
const prefix = testPrefix();
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const redis = connectRedis({ url: REDIS_URL, prefix });
const server = await serve(
  {
    ...process.env,
    FAREBOX_CONFIG: '',
    FAREBOX_REDIS_PREFIX: prefix,
    REDIS_URL,
    PORT: '0',
    HOST: '127.0.0.1',
    FAREBOX_DEV_CHAIN_PORT: '0',
    LOG_LEVEL: 'warn',
  },
  { logger: false },
);
const chains = server.config.chains!;
const board = `${server.url}/dashboard`;
const profile = mkdtempSync(join(tmpdir(), 'farebox-chromium-'));
const context: BrowserContext = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
  viewport: { width: 1000, height: 760 },
  deviceScaleFactor: 1,
});
t.teardown(async () => {
  await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  if (process.env.FAREBOX_SCREENSHOTS !== '1') rmSync(shots, { recursive: true, force: true });
  await server.close();
  await dropPrefix(redis, prefix);
  await redis.quit();
});

// The browser's wallet: a dev caller key (the dev chains fund it with ETH for gas), holding 5 test USD on chain_b.
const caller = DEV_KEYS.callers[3];
const wallet = await installWallet(context, caller.privateKey, chains);
const account = caller.address.toLowerCase();
const chainB = devViemChain('chain_b', chains.chain_b.chain_id, chains.chain_b.rpc_url);
const chainBPublic = createPublicClient({ chain: chainB, transport: http(chains.chain_b.rpc_url) });
/** A wallet on chain_b outside the page (as another tab or app would be). */
const chainBWallet = (key: Hex) =>
  createWalletClient({ account: privateKeyToAccount(key), chain: chainB, transport: http(chains.chain_b.rpc_url) });
async function mined(hash: Hex): Promise<void> {
  const { status } = await chainBPublic.waitForTransactionReceipt({ hash });
  if (status !== 'success') throw new Error(`transaction ${hash} reverted`);
}
await mined(
  await chainBWallet(DEV_KEYS.deployer.privateKey).writeContract({
    address: chains.chain_b.stablecoin,
    abi: testStablecoinAbi,
    functionName: 'mint',
    args: [caller.address, 5_000_000n],
  }),
);

const page: Page = context.pages()[0] ?? (await context.newPage());
page.setDefaultTimeout(15_000);
const errors: string[] = [];
page.on('pageerror', (e) => errors.push(e.message));
// Script errors and CSP refusals; the refusals this test asks for on purpose are not errors of the page: the refusal
// pages (403) and the deposit above the wallet's balance (400 from deposit/prepare).
page.on('console', (m) => {
  if (m.type() !== 'error') return;
  const refused = /^Failed to load resource: the server responded with a status of (\d+)/.exec(m.text())?.[1];
  if (refused === '403' || (refused === '400' && m.location().url.endsWith('/wallets/deposit/prepare'))) return;
  errors.push(m.text());
});

/** A screenshot for the README, as a palette PNG: a quarter of the size, and text stays sharp. */
async function shot(name: string, fullPage = true): Promise<void> {
  await sharp(await page.screenshot({ fullPage }))
    .png({ palette: true, compressionLevel: 9 })
    .toFile(join(shots, name));
}

/** Fails unless the page is at most 390 px wide: no error text widens it at phone width. */
async function fitsPhone(t: Test, what: string): Promise<void> {
  const width = Number(await page.evaluate('document.documentElement.scrollWidth'));
  t.ok(width <= 390, `${what}: ${width} px wide at a 390 px viewport`);
}

/** How far the Keys page's table scrolls sideways (0: it fits its page). */
async function keysTableOverflow(): Promise<number> {
  return Number(
    await page.evaluate(
      '(() => { const e = document.querySelector(\'[aria-label="Your keys"]\'); return e.scrollWidth - e.clientWidth; })()',
    ),
  );
}

/**
 * The sentence of a status line once it shows an error (another than `previous`), and its folded details' text ('' when
 * it has none).
 */
async function errorSentence(
  selector: string,
  previous?: string,
): Promise<{ sentence: string; details: string; open: boolean }> {
  const status = page.locator(`${selector}.bad`, previous ? { hasNotText: previous } : {});
  await status.waitFor();
  const all = (await status.textContent()) ?? '';
  const details = status.locator('details');
  if ((await details.count()) === 0) return { sentence: all, details: '', open: false };
  const folded = (await details.textContent()) ?? '';
  return {
    sentence: all.slice(0, all.length - folded.length),
    details: folded,
    open: (await details.getAttribute('open')) !== null,
  };
}

/** Text of a status line once it shows an error. */
async function errorText(selector: string): Promise<string> {
  const status = page.locator(`${selector}.bad`);
  await status.waitFor();
  return (await status.textContent()) ?? '';
}

let key = '';
let openaiBase = '';
let sessionCookie = '';

t.test('sign-in: a wallet on another chain that will not switch gets a clear error and no session', async (t) => {
  await page.goto(`${board}/`);
  t.equal(new URL(page.url()).pathname, '/dashboard/sign-in', 'signed out: / goes to sign-in');
  await shot('sign-in.png');
  wallet.refuseSwitch = true;
  await page.click('button[data-action="sign-in"]');
  const status = await errorText('[data-status]');
  t.match(status, /Switch your wallet to chain_a \(chain id 31337001\)/);
  t.match(status, /declined/);
  t.notOk(
    (await context.cookies()).some((c) => c.name === 'farebox_session'),
    'no session cookie',
  );
  t.equal(await getAccount(redis, account), null, 'no account made');
});

t.test(
  'sign-in with the wallet: it switches to chain_a, signs the EIP-4361 message, and the account opens',
  async (t) => {
    wallet.refuseSwitch = false;
    await page.click('button[data-action="sign-in"]');
    await page.waitForURL(`${board}/keys`);
    t.same(wallet.calls.filter((m) => m !== 'eth_chainId').slice(-3), [
      'eth_requestAccounts',
      'wallet_switchEthereumChain',
      'personal_sign',
    ]);
    const acct = await getAccount(redis, account);
    t.equal(acct?.status, 'active', 'signup open on the embedded default: an active account');
    const cookie = (await context.cookies()).find((c) => c.name === 'farebox_session');
    t.ok(cookie?.httpOnly, 'HttpOnly session cookie');
    t.equal(cookie?.sameSite, 'Lax');
    t.equal(cookie?.path, '/dashboard');
    sessionCookie = cookie!.value;
  },
);

t.test('Keys: a named key is shown once with the base URLs, and works with the openai SDK', async (t) => {
  await page.fill('#key-name', 'laptop');
  await page.click('button:has-text("Create key")');
  await page.waitForSelector('#new-key');
  key = ((await page.textContent('#new-key')) ?? '').trim();
  openaiBase = ((await page.textContent('[data-snippet="openai-base"]')) ?? '').trim();
  t.match(key, /^sk_[A-Za-z0-9_-]{43}$/);
  t.equal(openaiBase, `${server.url}/v1`);
  t.match(
    await page.textContent('#snippet-claude'),
    new RegExp(`ANTHROPIC_BASE_URL=${server.url}\\nexport ANTHROPIC_AUTH_TOKEN=${key}`),
  );
  await page.click('button[data-copy="new-key"]');
  await shot('keys-new-key.png');
  // Shown once: the Keys page itself no longer has it.
  await page.goto(`${board}/keys`);
  t.notOk((await page.content()).includes(key), 'the key is not on the page again');
  t.match(await page.textContent('tr[data-key-id]'), /laptop/);
  const keys = await listKeys(redis, account);
  t.equal(keys.length, 1);
  t.equal(keys[0]!.name, 'laptop');
});

t.test('a form without its CSRF token is refused with a clear page and changes nothing', async (t) => {
  const res = await page.request.post(`${board}/keys`, { form: { name: 'forged' }, failOnStatusCode: false });
  t.equal(res.status(), 403);
  t.match(await res.text(), /did not come from a page of this dashboard/);
  // The same from the page: a form whose token is not the session's.
  await page
    .locator('form[action="/dashboard/keys"] input[name="_csrf"]')
    .evaluate((el) => el.setAttribute('value', 'stale'));
  await page.fill('#key-name', 'stale form');
  await page.click('button:has-text("Create key")');
  t.match(
    await page.textContent('[role="alert"]'),
    /did not come from a page of this dashboard, or the page is older than your session/,
  );
  await shot('refused.png');
  t.equal((await listKeys(redis, account)).length, 1, 'no key made');
});

t.test('keyboard: the first Tab reaches "Skip to content", which moves focus to the page', async (t) => {
  await page.goto(`${board}/keys`);
  await page.keyboard.press('Tab');
  t.equal(await page.locator(':focus').textContent(), 'Skip to content');
  await page.keyboard.press('Enter');
  t.equal(await page.locator(':focus').getAttribute('id'), 'main');
  await page.keyboard.press('Tab');
  t.equal(await page.locator(':focus').getAttribute('id'), 'key-name', 'then the first field, labelled');
  t.equal(await page.locator('label[for="key-name"]').count(), 1);
});

t.test(
  'Wallets: fund with test USD, deposit from the wallet by EIP-3009, default chain, withdrawal request',
  async (t) => {
    await page.goto(`${board}/wallets`);
    await page.selectOption('#fund-chain', 'chain_a');
    await page.click('button:has-text("Fund with 10 test USD")');
    await page.waitForURL(/done=funded/);
    t.equal(await page.textContent('[data-chain="chain_a"][data-field="balance"]'), '10.000000');

    await page.selectOption('#deposit-chain', 'chain_b');
    await page.fill('#deposit-amount', '3');
    const sentBefore = wallet.sent.length;
    await page.click('form[data-form="deposit"] button[type="submit"]');
    // The page waits for the gateway to see the deposit, then reloads.
    await page
      .locator('[data-chain="chain_b"][data-field="balance"]', { hasText: /^3\.000000$/ })
      .waitFor({ timeout: 30_000 });
    t.equal(wallet.sent.length, sentBefore + 1, 'one transaction: no separate approve');
    t.ok(wallet.calls.includes('eth_signTypedData_v4'), 'the wallet signed the EIP-3009 authorization');
    t.equal((await readWallet(redis, account, 'chain_b')).synced, 3_000_000n);
    t.equal(
      await page.textContent('[data-chain="chain_b"][data-field="wallet"]'),
      '2.000000',
      'the wallet keeps 2 of its 5 test USD',
    );

    await page.selectOption('#default-chain', 'chain_b');
    await page.click('button:has-text("Save default chain")');
    await page.waitForURL(/done=default-chain/);
    t.equal((await getAccount(redis, account))?.default_chain, 'chain_b');
    t.match(await page.textContent('th:has-text("chain_b")'), /default/);

    await page.selectOption('#withdraw-chain', 'chain_b');
    await page.fill('#withdraw-amount', '1');
    await page.click('form[data-form="withdrawal"] button[type="submit"]');
    await page.waitForSelector('[data-withdrawal="chain_b"]', { timeout: 30_000 });
    const request = (await page.textContent('[data-withdrawal="chain_b"]')) ?? '';
    t.match(request, /1\.000000 USD requested, ready at \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    t.match(await page.textContent('main'), /timelock has passed \(1 hour\)/);
    t.equal(
      await page.textContent('[data-chain="chain_b"][data-field="available"]'),
      '2.000000',
      'the request is no longer available',
    );
    t.ok(
      await page.isDisabled('[data-withdrawal="chain_b"] button[data-op="withdraw"]'),
      'withdraw waits for the timelock',
    );
    await shot('wallets.png');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${board}/wallets`);
    await shot('wallets-phone.png', false);
    await page.setViewportSize({ width: 1000, height: 760 });
  },
);

t.test(
  'at 390 px: a deposit above the wallet balance asks for no signature, a revert is one sentence, no page widens',
  async (t) => {
    await page.setViewportSize({ width: 390, height: 844 });
    t.teardown(() => page.setViewportSize({ width: 1000, height: 760 }));
    await page.goto(`${board}/wallets`);
    await fitsPhone(t, 'Wallets');

    // The wallet holds 2 test USD on chain_b: 50 is refused before the wallet is asked for anything.
    const callsBefore = wallet.calls.length;
    await page.selectOption('#deposit-chain', 'chain_b');
    await page.fill('#deposit-amount', '50');
    await page.click('form[data-form="deposit"] button[type="submit"]');
    const over = await errorSentence('[data-status="deposit"]');
    t.equal(
      over.sentence,
      `Your wallet holds 2.000000 USD on chain_b (chain id ${chains.chain_b.chain_id}), less than the 50.000000 USD to deposit: enter at most 2.000000.`,
    );
    t.same(wallet.calls.slice(callsBefore), [], 'no request to the wallet: no signature, no chain switch');
    await fitsPhone(t, 'Wallets after a deposit above the balance');

    // Another app spends 1.5 of the 2 while the wallet signs: the escrow's call reverts in the token
    // (InsufficientBalance); the wallet's long text with the revert data stays folded.
    const sentBefore = wallet.sent.length;
    wallet.before = async (method) => {
      if (method !== 'eth_sendTransaction') return;
      wallet.before = undefined;
      await mined(
        await chainBWallet(caller.privateKey).writeContract({
          address: chains.chain_b.stablecoin,
          abi: testStablecoinAbi,
          functionName: 'transfer',
          args: [DEV_KEYS.deployer.address, 1_500_000n],
        }),
      );
    };
    await page.fill('#deposit-amount', '1');
    await page.click('form[data-form="deposit"] button[type="submit"]');
    const reverted = await errorSentence('[data-status="deposit"]', over.sentence);
    t.equal(reverted.sentence, 'The transaction reverted (InsufficientBalance): the balance is below the amount.');
    t.notOk(reverted.open, 'the details are folded');
    t.match(reverted.details, /0x[0-9a-f]{8}/, "the details keep the wallet's text and revert data");
    t.equal(wallet.sent.length, sentBefore, 'nothing was sent');
    t.equal((await readWallet(redis, account, 'chain_b')).synced, 3_000_000n, 'the deposit is unchanged');
    await fitsPhone(t, 'Wallets after a revert');

    // A stale page: the withdrawal request was cancelled elsewhere, so its "Cancel" reverts (NoWithdrawalRequested).
    await mined(
      await chainBWallet(caller.privateKey).writeContract({
        address: chains.chain_b.escrow,
        abi: escrowAbi,
        functionName: 'cancelWithdrawal',
      }),
    );
    await page.click('[data-withdrawal="chain_b"] button[data-op="cancel"]');
    const stale = await errorSentence('[data-status="withdrawal"]');
    t.equal(
      stale.sentence,
      'The transaction reverted (NoWithdrawalRequested): no withdrawal is requested on this chain; reload the page.',
    );
    await fitsPhone(t, 'Wallets after a reverted withdrawal step');

    for (const path of ['keys', 'usage', 'prices', 'wallets']) {
      await page.goto(`${board}/${path}`);
      await fitsPhone(t, path);
    }
    // A refused form's page.
    await page.goto(`${board}/keys`);
    await page
      .locator('form[action="/dashboard/keys"] input[name="_csrf"]')
      .evaluate((el) => el.setAttribute('value', 'stale'));
    await page.fill('#key-name', 'stale form');
    await page.click('button:has-text("Create key")');
    await page.waitForSelector('[role="alert"]');
    await fitsPhone(t, 'a refused form');
  },
);

t.test('a call with the key bills on the default chain and shows in Usage with its price and settlement', async (t) => {
  const openai = new OpenAI({ baseURL: openaiBase, apiKey: key, maxRetries: 0 });
  const { data, response } = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'Hello #sim:tokens=12' }] })
    .withResponse();
  t.equal(data.object, 'chat.completion');
  t.equal(response.headers.get('x-gw-billing-chain'), 'chain_b');
  const callId = response.headers.get('x-request-id')!;
  const record = await until('the call to settle', async () =>
    (await listUsage(redis, account)).find((r) => r.call_id === callId && r.status === 'settled' && r.tx),
  );
  await page.goto(`${board}/usage`);
  const row = page.locator(`tr[data-call-id="${callId}"]`);
  t.match(await row.textContent(), /gamma-k3/);
  t.match(await row.textContent(), /laptop/, 'the key by its name');
  t.equal(await row.locator('[data-field="price"]').textContent(), record.price);
  t.equal(await row.locator('[data-field="status"]').textContent(), 'settled');
  t.equal(await row.locator('[data-tx]').getAttribute('data-tx'), record.tx);
  t.match(
    await page.getAttribute('svg.chart', 'aria-label'),
    new RegExp(`${record.price.replace('.', '\\.')} USD in all`),
  );
  const csv = await page.request.get(`${board}/usage.csv`);
  t.equal(csv.status(), 200);
  t.match(
    await csv.text(),
    new RegExp(
      `${callId},key_[0-9a-f]{16},laptop,gamma-k3,chain_b,\\d+,12,0,0,0,0,0,${record.price.replace('.', '\\.')},settled,${record.tx}`,
    ),
  );
  await shot('usage.png');
});

t.test('revoking the key on the Keys page makes the SDK get 401 at once', async (t) => {
  await page.goto(`${board}/keys`);
  await page.click('tr[data-key-id] button:has-text("Revoke")');
  await page.waitForURL(/done=revoked/);
  t.match(await page.textContent('tr[data-key-id]'), /revoked/);
  const openai = new OpenAI({ baseURL: openaiBase, apiKey: key, maxRetries: 0 });
  const err = await until(
    'the key to answer 401',
    async () => {
      const e = await openai.chat.completions
        .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
        .then(
          () => null,
          (x: unknown) => x,
        );
      return e instanceof OpenAI.AuthenticationError ? e : null;
    },
    2_000,
    20,
  );
  t.equal(err.status, 401);
});

t.test(
  'Keys: a key made with a limit and an allow-list, its limit changed on its row, then its spend is the price of a call',
  async (t) => {
    await page.goto(`${board}/keys`);
    await page.fill('#key-name', 'bounded');
    await page.fill('#key-limit', '0.5');
    await page.selectOption('#key-reset', 'daily');
    await page.fill('#key-models', 'gamma-*, alpha-haiku-4-5');
    await page.click('button:has-text("Create key")');
    await page.waitForSelector('#new-key');
    const bounded = ((await page.textContent('#new-key')) ?? '').trim();
    const id = (await listKeys(redis, account)).find((k) => k.name === 'bounded')!.id;
    await page.goto(`${board}/keys`);
    const row = page.locator(`tr[data-key-id="${id}"]`);
    t.equal(await row.locator('[data-field="limit"]').textContent(), '0.500000 USD per day');
    t.equal(await row.locator('[data-field="models"]').textContent(), 'gamma-*, alpha-haiku-4-5');
    t.equal(await row.locator('[data-field="left"]').textContent(), '0.500000');

    await page.click(`tr[data-key-limits="${id}"] summary`);
    t.equal(await page.inputValue(`#limit-${id}`), '0.500000', "the form holds the key's limit");
    await page.fill(`#limit-${id}`, '0.25');
    await page.click(`tr[data-key-limits="${id}"] button:has-text("Save limits")`);
    await page.waitForURL(/done=limits/);
    t.match(await page.textContent('[role="status"]'), /Limits saved/);
    t.equal(await row.locator('[data-field="limit"]').textContent(), '0.250000 USD per day');
    t.equal((await listKeys(redis, account)).find((k) => k.id === id)?.limit?.amount_atomic, '250000');

    const openai = new OpenAI({ baseURL: openaiBase, apiKey: bounded, maxRetries: 0 });
    const off = await openai.chat.completions
      .create({ model: 'alpha-sonnet-4-6', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    t.ok(off instanceof OpenAI.PermissionDeniedError, 'a model off the list: 403');
    const { response } = await openai.chat.completions
      .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'Hello #sim:tokens=12' }] })
      .withResponse();
    const callId = response.headers.get('x-request-id')!;
    const call = await until('the call to be priced', async () => {
      const r = await fetch(`${openaiBase}/calls/${callId}`, { headers: { authorization: `Bearer ${bounded}` } });
      const v = (await r.json()) as { price: string | null; price_atomic: string | null };
      return v.price_atomic ? v : null;
    });
    const price = BigInt(call.price_atomic!);
    t.ok(price > 0n, 'a billed call');
    await until('the page to show the spend', async () => {
      await page.goto(`${board}/keys`);
      return (await row.locator('[data-field="spent-total"]').textContent()) === call.price;
    });
    t.equal(await row.locator('[data-field="spent-window"]').textContent(), call.price, "today's spend: the price");
    t.equal(await row.locator('[data-field="left"]').textContent(), formatUsd(250_000n - price), 'left: 0.25 less it');
    t.equal((await listKeys(redis, account)).find((k) => k.id === id)?.spent.total_atomic, price.toString());
    t.equal(await keysTableOverflow(), 0, 'the keys table needs no sideways scroll at 1000 px');
    await shot('keys-limits.png');

    await page.setViewportSize({ width: 390, height: 844 });
    t.teardown(() => page.setViewportSize({ width: 1000, height: 760 }));
    await page.click(`tr[data-key-limits="${id}"] summary`);
    await fitsPhone(t, 'Keys with a limits form open');
    t.equal(await keysTableOverflow(), 0, 'nor at 390 px, its limits form open');
  },
);

t.test('sign out ends the session on the server: the old cookie opens nothing', async (t) => {
  await page.click('button:has-text("Sign out")');
  await page.waitForURL(`${board}/sign-in`);
  t.notOk(
    (await context.cookies()).some((c) => c.name === 'farebox_session' && c.value),
    'cookie cleared',
  );
  const replay = await fetch(`${board}/keys`, {
    headers: { cookie: `farebox_session=${sessionCookie}` },
    redirect: 'manual',
  });
  t.equal(replay.status, 303);
  t.equal(replay.headers.get('location'), '/dashboard/sign-in');
});

t.test("at 390 px: a wallet's error of 5,000 hex digits at sign-in is one short line", async (t) => {
  await page.setViewportSize({ width: 390, height: 844 });
  t.teardown(() => page.setViewportSize({ width: 1000, height: 760 }));
  await page.goto(`${board}/sign-in`);
  const hex = `0x${'ab'.repeat(2_500)}`;
  wallet.before = async (method) => {
    if (method !== 'personal_sign') return;
    wallet.before = undefined;
    throw Object.assign(new Error(`Internal JSON-RPC error: ${hex}`), { code: -32603 });
  };
  await page.click('button[data-action="sign-in"]');
  const failed = await errorSentence('[data-status]');
  t.match(failed.sentence, /^Your wallet refused: Internal JSON-RPC error: 0xabab[ab]*…$/);
  t.ok(failed.sentence.length < 160, 'the sentence is short');
  t.ok(failed.details.includes(hex), 'the whole text is under Details');
  await fitsPhone(t, 'sign-in after a long wallet error');
  await page.goto(`${board}/signup-closed`);
  await fitsPhone(t, 'sign-ups closed');
  t.equal(await getAccount(redis, account).then((a) => a?.status), 'active', 'the account is as it was');
});

t.test('the sign-ups-closed page explains the refusal', async (t) => {
  await page.goto(`${board}/signup-closed`);
  t.match(
    await page.textContent('[role="alert"]'),
    /no account on this gateway, and the operator is not opening new ones/,
  );
  await shot('signup-closed.png');
});

t.test('Prices: public (signed out), the numbers of `farebox prices --json`', async (t) => {
  await page.goto(`${board}/prices`);
  t.equal(new URL(page.url()).pathname, '/dashboard/prices', 'no sign-in needed');
  t.equal(await page.textContent('[data-model="alpha-sonnet-4-6"][data-field="input"]'), '$3.00');
  t.equal(await page.textContent('[data-model="alpha-sonnet-4-6"][data-field="cache_write_5m"]'), '$3.75');
  t.equal(await page.textContent('[data-model="img-2"][data-field="4K"]'), '$0.12');
  t.equal(await page.textContent('[data-model="vidA-v6"][data-field="8"]'), '8 s: $0.80');
  await shot('prices.png');
  t.same(errors, [], 'no script errors in the pages');
  t.comment(`browser test: ${((Date.now() - started) / 1000).toFixed(1)} s from start`);
});
