/**
 * The Wallets page against a real gateway and dev chains: the numbers of `farebox balance`, the default chain,
 * "fund with test USD", a deposit by EIP-3009 authorization and a withdrawal request made with the transactions the
 * dashboard writes (sent here by a viem wallet, as the page's script has the browser wallet send them), and every
 * bad input refused with nothing changed.
 */
import t from 'tap';
import Fastify from 'fastify';
import { createPublicClient, createWalletClient, http, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { getAccount } from '../../plugins/accounts/accounts.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { testStablecoinAbi } from '../../plugins/chains/abi.js';
import { DEV_CHAIN_IDS, DEV_KEYS, devViemChain } from '../../plugins/chains/dev-chains.js';
import dashboard from '../../plugins/dashboard/index.js';
import { until, runCli } from '../helpers/wait.js';
import { browser, csrfOf, send, signIn } from './browser-session.js';
import { startDashboardGateway } from './dashboard-gateway.js';

const { h, config, browser: open } = await startDashboardGateway(t);
const chains = config.chains!;
const caller = privateKeyToAccount(DEV_KEYS.callers[1].privateKey);
const account = caller.address.toLowerCase();
const b = open();
const signedIn = await signIn(b, caller, DEV_CHAIN_IDS.chain_a);
if (signedIn.status !== 200) throw new Error(`sign-in: ${signedIn.text}`);
const csrf = await csrfOf(b);

function viem(chain: 'chain_a' | 'chain_b') {
  const c = chains[chain];
  const def = devViemChain(chain, c.chain_id, c.rpc_url);
  return {
    pub: createPublicClient({ chain: def, transport: http(c.rpc_url) }),
    wallet: createWalletClient({ account: caller, chain: def, transport: http(c.rpc_url) }),
  };
}

async function sendTx(chain: 'chain_a' | 'chain_b', tx: { to: Hex; data: Hex }): Promise<'success' | 'reverted'> {
  const { pub, wallet } = viem(chain);
  const hash = await wallet.sendTransaction({ to: tx.to, data: tx.data });
  return (await pub.waitForTransactionReceipt({ hash })).status;
}

// The wallet holds 5 test USD on chain_b, not yet deposited.
{
  const c = chains.chain_b;
  const minter = createWalletClient({
    account: privateKeyToAccount(DEV_KEYS.deployer.privateKey),
    chain: devViemChain('chain_b', c.chain_id, c.rpc_url),
    transport: http(c.rpc_url),
  });
  const hash = await minter.writeContract({
    address: c.stablecoin,
    abi: testStablecoinAbi,
    functionName: 'mint',
    args: [caller.address, 5_000_000n],
  });
  await viem('chain_b').pub.waitForTransactionReceipt({ hash });
}

const json = (path: string, body: unknown, headers: Record<string, string> = { 'x-csrf-token': csrf }) =>
  send(b, 'POST', path, { json: body, headers });

t.test('fund with test USD: 10 USD on the chain, seen by the gateway before the page returns', async (t) => {
  const r = await send(b, 'POST', '/wallets/fund', { form: { _csrf: csrf, chain: 'chain_a' } });
  t.equal(r.status, 303);
  t.equal(r.headers.location, '/dash/wallets?done=funded&chain=chain_a');
  t.equal((await readWallet(h.redis, account, 'chain_a')).synced, 10_000_000n);
  const page = await send(b, 'GET', '/wallets?done=funded&chain=chain_a');
  t.match(page.text, /10 test USD deposited on chain_a/);
  t.match(page.text, /data-chain="chain_a" data-field="balance">10\.000000</);
  const bad = await send(b, 'POST', '/wallets/fund', { form: { _csrf: csrf, chain: 'chain_z' } });
  t.equal(bad.status, 400);
  t.match(bad.text, /Choose a chain: one of chain_a, chain_b, chain_c, chain_d/);
});

t.test('balances: the page and balances.json say what `farebox balance --json` says', async (t) => {
  const cli = await runCli(['balance', '--account', account, '--json'], {
    FAREBOX_REDIS_PREFIX: h.prefix,
    FAREBOX_CONFIG: '',
  });
  t.equal(cli.code, 0, cli.stderr);
  const doc = JSON.parse(cli.stdout);
  const mine = await send(b, 'GET', '/wallets/balances.json');
  t.same(mine.json, doc);
  const page = (await send(b, 'GET', '/wallets')).text;
  for (const [chain, w] of Object.entries(doc.chains as Record<string, Record<string, string>>)) {
    for (const field of ['balance', 'held', 'pending', 'available']) {
      t.match(
        page,
        new RegExp(`data-chain="${chain}" data-field="${field}">${w[field]!.replace('.', '\\.')}<`),
        `${chain} ${field}`,
      );
    }
  }
  t.match(page, /Escrow<\/dt><dd class="mono">0x[0-9a-fA-F]{40}<\/dd>/);
  t.match(page, new RegExp(`<dt>Chain id</dt><dd class="mono">${chains.chain_b.chain_id}</dd>`));
  t.match(page, /data-chain="chain_b" data-field="wallet">5\.000000</, "the wallet's own token balance");
});

t.test('the default chain: saved for the gateway; a bad chain or a CSRF-less form changes nothing', async (t) => {
  t.equal((await send(b, 'POST', '/wallets/default-chain', { form: { chain: 'chain_c' } })).status, 403);
  t.equal((await send(b, 'POST', '/wallets/default-chain', { form: { _csrf: csrf, chain: 'chain_x' } })).status, 400);
  t.equal((await getAccount(h.redis, account))?.default_chain, 'chain_a');
  const r = await send(b, 'POST', '/wallets/default-chain', { form: { _csrf: csrf, chain: 'chain_c' } });
  t.equal(r.status, 303);
  t.equal((await getAccount(h.redis, account))?.default_chain, 'chain_c');
  t.match((await send(b, 'GET', '/wallets?done=default-chain')).text, /Default chain saved/);
  await send(b, 'POST', '/wallets/default-chain', { form: { _csrf: csrf, chain: 'chain_a' } });
});

t.test(
  'deposit by EIP-3009: the wallet signs the authorization the dashboard wrote and sends one transaction',
  async (t) => {
    const prep = await json('/wallets/deposit/prepare', { chain: 'chain_b', amount: '2.5' });
    t.equal(prep.status, 200, prep.text);
    t.equal(prep.json.method, 'authorization');
    t.equal(prep.json.chain_id, chains.chain_b.chain_id);
    const td = prep.json.typed_data;
    t.same(td.domain, {
      name: 'Test USD Coin',
      version: '2',
      chainId: chains.chain_b.chain_id,
      verifyingContract: chains.chain_b.stablecoin,
    });
    t.equal(td.primaryType, 'ReceiveWithAuthorization');
    t.equal(td.message.to, chains.chain_b.escrow);
    t.equal(td.message.value, '2500000');
    const { EIP712Domain: _d, ...types } = td.types;
    const signature = await caller.signTypedData({
      domain: td.domain,
      types,
      primaryType: td.primaryType,
      message: td.message,
    });

    // Refused, each changing nothing: another signer, another amount, another escrow, the wrong chain, no CSRF token.
    const other = privateKeyToAccount(DEV_KEYS.callers[2].privateKey);
    const foreign = await other.signTypedData({
      domain: td.domain,
      types,
      primaryType: td.primaryType,
      message: td.message,
    });
    const refusals: [unknown, number, RegExp][] = [
      [
        { chain: 'chain_b', amount: '2.5', authorization: td.message, signature: foreign },
        401,
        /not signed by your account for chain_b/,
      ],
      [{ chain: 'chain_b', amount: '3', authorization: td.message, signature }, 400, /is for another amount/],
      [
        { chain: 'chain_b', amount: '2.5', authorization: { ...td.message, to: chains.chain_a.stablecoin }, signature },
        400,
        /is not to this chain's escrow/,
      ],
      [
        { chain: 'chain_b', amount: '2.5', authorization: { ...td.message, validBefore: '1' }, signature },
        400,
        /outside its validity window/,
      ],
      [
        { chain: 'chain_b', amount: '2.5', authorization: td.message, signature: '0x1234' },
        401,
        /not signed by your account/,
      ],
    ];
    for (const [body, status, message] of refusals) {
      const r = await json('/wallets/deposit/transaction', body);
      t.equal(r.status, status, r.text);
      t.match(r.json?.error?.message, message);
    }
    // Signed for chain_b, presented for chain_a (the same contract addresses on every dev chain): the domain differs.
    const wrongChain = await json('/wallets/deposit/transaction', {
      chain: 'chain_a',
      amount: '2.5',
      authorization: td.message,
      signature,
    });
    t.equal(wrongChain.status, 401);
    t.match(wrongChain.json.error.message, /for chain_a \(chain id 31337001\)/);
    const noCsrf = await json(
      '/wallets/deposit/transaction',
      { chain: 'chain_b', amount: '2.5', authorization: td.message, signature },
      {},
    );
    t.equal(noCsrf.status, 403);
    t.equal(noCsrf.json.error.code, 'csrf_failed');

    const r = await json('/wallets/deposit/transaction', {
      chain: 'chain_b',
      amount: '2.5',
      authorization: td.message,
      signature,
    });
    t.equal(r.status, 200, r.text);
    t.equal(r.json.transaction.to, chains.chain_b.escrow);
    t.equal(await sendTx('chain_b', r.json.transaction), 'success', 'no approve needed');
    await until(
      'the deposit to be synced',
      async () => (await readWallet(h.redis, account, 'chain_b')).synced === 2_500_000n,
    );
    t.equal(
      await viem('chain_b').pub.readContract({
        address: chains.chain_b.stablecoin,
        abi: testStablecoinAbi,
        functionName: 'allowance',
        args: [caller.address, chains.chain_b.escrow],
      }),
      0n,
      'no allowance was ever given',
    );
  },
);

t.test('bad amounts and chains, or more than the wallet holds, on the deposit form are refused', async (t) => {
  for (const [body, message] of [
    [{ chain: 'chain_b', amount: 'ten' }, /Give the amount in USD/],
    [{ chain: 'chain_b', amount: '0' }, /more than zero/],
    [{ chain: 'chain_b', amount: '1.0000001' }, /at most 6 decimals/],
    [{ chain: 'chain_b', amount: '1e3' }, /Give the amount in USD/],
    [{ chain: 'mainnet', amount: '1' }, /Choose a chain/],
    // The wallet keeps 2.5 of its 5 test USD after the deposit above: more is refused before anything is signed.
    [
      { chain: 'chain_b', amount: '2.500001' },
      /^Your wallet holds 2\.500000 USD on chain_b \(chain id 31337002\), less than the 2\.500001 USD to deposit: enter at most 2\.500000\.$/,
    ],
  ] as const) {
    const r = await json('/wallets/deposit/prepare', body);
    t.equal(r.status, 400, JSON.stringify(body));
    t.match(r.json.error.message, message);
  }
  const all = await json('/wallets/deposit/prepare', { chain: 'chain_b', amount: '2.5' });
  t.equal(all.status, 200, 'all the wallet holds is a deposit it can make');
});

t.test('withdrawal: the request locks the amount and shows its timelock; cancel gives it back', async (t) => {
  const tooMuch = await json('/wallets/withdrawal', { chain: 'chain_b', op: 'request', amount: '3' });
  t.equal(tooMuch.status, 400);
  t.match(tooMuch.json.error.message, /chain_b holds 2\.500000 USD for you: request at most that/);
  t.equal((await json('/wallets/withdrawal', { chain: 'chain_b', op: 'steal' })).status, 400);
  const req = await json('/wallets/withdrawal', { chain: 'chain_b', op: 'request', amount: '1' });
  t.equal(req.status, 200, req.text);
  t.equal(await sendTx('chain_b', req.json.transaction), 'success');
  await until(
    'the request to be synced',
    async () => (await readWallet(h.redis, account, 'chain_b')).locked === 1_000_000n,
  );
  const page = (await send(b, 'GET', '/wallets')).text;
  t.match(
    page,
    /<li data-withdrawal="chain_b"><strong>chain_b<\/strong>: 1\.000000 USD requested, ready at <time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d UTC<\/time>/,
  );
  t.match(page, /once the escrow's timelock has passed \(1 hour\)/);
  t.match(page, /data-chain="chain_b" data-field="available">1\.500000</);
  t.match(page, /data-op="withdraw" data-chain="chain_b" disabled>Withdraw/, 'withdraw waits for the timelock');
  const early = await json('/wallets/withdrawal', { chain: 'chain_b', op: 'withdraw' });
  t.equal(
    await sendTx('chain_b', early.json.transaction).catch(() => 'reverted'),
    'reverted',
    'the escrow refuses it before the timelock',
  );
  const cancel = await json('/wallets/withdrawal', { chain: 'chain_b', op: 'cancel' });
  t.equal(await sendTx('chain_b', cancel.json.transaction), 'success');
  await until(
    'the cancellation to be synced',
    async () => (await readWallet(h.redis, account, 'chain_b')).locked === 0n,
  );
});

t.test('"fund with test USD" only where the registration allows it', async (t) => {
  const app = Fastify({ logger: false });
  await app.register(dashboard, { prefix: '/d', config, redis: h.redis, origins: ['http://x.test'], devFund: false });
  t.teardown(() => app.close());
  const other = browser(app, '/d', 'http://x.test');
  await signIn(other, privateKeyToAccount(DEV_KEYS.callers[4].privateKey), DEV_CHAIN_IDS.chain_a);
  const token = await csrfOf(other);
  t.notOk((await send(other, 'GET', '/wallets')).text.includes('Fund with'), 'no button');
  const r = await send(other, 'POST', '/wallets/fund', { form: { _csrf: token, chain: 'chain_a' } });
  t.equal(r.status, 404);
  t.match(r.text, /Test USD exists only on the dev chains/);
});
