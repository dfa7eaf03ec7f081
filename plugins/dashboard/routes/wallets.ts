/**
 * The Wallets page and its actions: balances (the gateway's synced state, as `farebox balance`), the default chain,
 * test USD on the dev chains (as `farebox fund`), and the transactions the browser wallet sends to deposit and
 * withdraw. The server never moves a caller's money: it writes the transaction, the caller's wallet signs and sends
 * it, and the chain watcher applies the escrow's events as for any deposit.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { getAccount, setDefaultChain } from '../../accounts/accounts.js';
import { accountBalances } from '../../billing/balances.js';
import { readWallet } from '../../billing/wallets.js';
import { CHAIN_NAMES, type Address, type ChainName, type ChainsConfig } from '../../chains/config.js';
import { DEV_CHAIN_IDS } from '../../chains/dev-chains.js';
import { mintAndDeposit } from '../../chains/dev-fund.js';
import { formatUsd, parseUsd } from '../../../pricing/index.js';
import { chainReader } from '../chain-reads.js';
import type { Dashboard } from '../context.js';
import { DashboardError } from '../errors.js';
import { requireSession, requireStateChange, viewerOf } from '../guard.js';
import { html, type SafeHtml } from '../html.js';
import { walletsBody, type WalletRow } from '../pages/wallets.js';
import {
  approveTx,
  AUTHORIZATION_TTL_S,
  authorizationTypedData,
  cancelWithdrawalTx,
  depositTx,
  depositWithAuthorizationTx,
  readAuthorization,
  requestWithdrawalTx,
  REVERT_ERRORS,
  signedBy,
  withdrawTx,
  type TokenDomain,
} from '../wallet-txs.js';

/** What "fund with test USD" deposits: the demo account's amount. */
export const DEV_FUND_ATOMIC = 10_000_000n;
/** Chain reads on a page wait this long at most. */
const READ_TIMEOUT_MS = 2_500;
/** The largest amount a form takes: 1e12 USD, far under what the contracts and Lua scripts hold exactly. */
const MAX_AMOUNT = 10n ** 18n;

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(
      (v) => v,
      () => undefined,
    ),
    new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function requireChains(d: Dashboard): Promise<ChainsConfig> {
  const chains = await d.chains();
  if (!chains)
    throw new DashboardError('chain_unavailable', { message: 'The gateway has not published its chains yet.' });
  return chains;
}

function chainOf(v: unknown): ChainName {
  if (typeof v !== 'string' || !(CHAIN_NAMES as readonly string[]).includes(v)) {
    throw new DashboardError('invalid_input', { message: `Choose a chain: one of ${CHAIN_NAMES.join(', ')}.` });
  }
  return v as ChainName;
}

function amountOf(v: unknown): bigint {
  let atomic: bigint;
  try {
    atomic = parseUsd(typeof v === 'string' ? v.trim() : '');
  } catch {
    throw new DashboardError('invalid_input', {
      message: 'Give the amount in USD, with at most 6 decimals, such as 2.50.',
    });
  }
  if (atomic <= 0n) throw new DashboardError('invalid_input', { message: 'The amount must be more than zero.' });
  if (atomic > MAX_AMOUNT) throw new DashboardError('invalid_input', { message: 'The amount is too large.' });
  return atomic;
}

function isDevChain(chains: ChainsConfig, name: ChainName): boolean {
  return chains[name].chain_id === DEV_CHAIN_IDS[name];
}

async function walletRows(d: Dashboard, chains: ChainsConfig, account: Address): Promise<WalletRow[]> {
  const reader = chainReader(chains);
  return Promise.all(
    CHAIN_NAMES.map(async (name): Promise<WalletRow> => {
      const c = chains[name];
      const [w, withdrawal, walletToken, delay] = await Promise.all([
        readWallet(d.redis, account, name),
        withTimeout(reader.withdrawalRequest(name, account), READ_TIMEOUT_MS),
        withTimeout(reader.tokenBalance(name, account), READ_TIMEOUT_MS),
        withTimeout(reader.withdrawalDelay(name), READ_TIMEOUT_MS),
      ]);
      return {
        name,
        chainId: c.chain_id,
        rpcUrl: c.rpc_url,
        stablecoin: c.stablecoin,
        escrow: c.escrow,
        balance: w.synced,
        held: w.held,
        pending: w.pending,
        locked: w.locked,
        available: w.available,
        withdrawal,
        walletToken,
        delay,
        devFund: d.settings.devFund && isDevChain(chains, name),
      };
    }),
  );
}

const DONE: Record<string, (chain: string | undefined) => SafeHtml> = {
  'default-chain': () => html`<p class="notice ok" role="status">Default chain saved.</p>`,
  funded: (chain) =>
    html`<p class="notice ok" role="status">${Number(DEV_FUND_ATOMIC) / 1e6} test USD deposited${chain ? ` on ${chain}` : ''}.</p>`,
};

/** GET /wallets */
export async function walletsPage(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireSession(d, request);
  const viewer = await viewerOf(d, session);
  const chains = await d.chains();
  const q = request.query as { done?: string; chain?: string };
  const chain = CHAIN_NAMES.find((n) => n === q.chain);
  const notice = q.done && Object.hasOwn(DONE, q.done) ? DONE[q.done]!(chain) : null;
  if (!chains) {
    return d.render(reply, {
      title: 'Wallets',
      active: 'wallets',
      viewer,
      body: html`<p class="notice bad">The gateway has not published its chains yet.</p>`,
    });
  }
  const account = await getAccount(d.redis, session.account);
  return d.render(reply, {
    title: 'Wallets',
    active: 'wallets',
    viewer,
    notice,
    body: walletsBody({
      base: d.base,
      csrf: session.csrf,
      defaultChain: account?.default_chain ?? 'chain_a',
      rows: await walletRows(d, chains, session.account as Address),
      nowS: BigInt(Math.floor(Date.now() / 1000)),
      devFundUsd: String(Number(DEV_FUND_ATOMIC) / 1e6),
    }),
    data: {
      chains: CHAIN_NAMES.map((name) => ({ name, chain_id: chains[name].chain_id, rpc_url: chains[name].rpc_url })),
      revert_errors: REVERT_ERRORS,
    },
  });
}

/** GET /wallets/balances.json: the `farebox balance --json` document of the signed-in account (billing/balances.ts). */
export async function balancesJson(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireSession(d, request);
  const doc = await accountBalances(d.redis, session.account);
  // Sign-in makes the account, so a session names one; none is an account removed under it.
  if (!doc) throw new DashboardError('not_signed_in');
  return reply.header('cache-control', 'no-store').send(doc);
}

/** POST /wallets/default-chain {chain} */
export async function defaultChainForm(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const chain = chainOf((request.body as { chain?: unknown }).chain);
  await setDefaultChain(d.redis, session.account, chain);
  return reply.redirect(`${d.base}/wallets?done=default-chain`, 303);
}

// One mint at a time per chain: the minter's nonces would clash.
const funding = new Map<string, Promise<unknown>>();

/** POST /wallets/fund {chain}: mint test USD and deposit it for the account, then wait until the gateway sees it. */
export async function fundForm(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const chain = chainOf((request.body as { chain?: unknown }).chain);
  const chains = await requireChains(d);
  if (!d.settings.devFund || !isDevChain(chains, chain)) throw new DashboardError('dev_only');
  const target = chains[chain];
  const run = (funding.get(target.rpc_url) ?? Promise.resolve())
    .catch(() => {})
    .then(() => mintAndDeposit(target, session.account as Address, DEV_FUND_ATOMIC));
  funding.set(target.rpc_url, run);
  let onchain: bigint;
  try {
    onchain = await run;
  } catch (err) {
    throw new DashboardError('chain_unavailable', { cause: err });
  }
  // The watcher applies the deposit within its poll interval; the page then shows it.
  const deadline = Date.now() + 15_000;
  while ((await readWallet(d.redis, session.account, chain)).synced < onchain && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 50));
  return reply.redirect(`${d.base}/wallets?done=funded&chain=${chain}`, 303);
}

async function tokenDomain(chains: ChainsConfig, chain: ChainName): Promise<TokenDomain> {
  try {
    const t = await chainReader(chains).tokenDomain(chain);
    return {
      name: t.name,
      version: t.version,
      chainId: chains[chain].chain_id,
      verifyingContract: chains[chain].stablecoin,
    };
  } catch (err) {
    throw new DashboardError('chain_unavailable', { cause: err });
  }
}

/**
 * POST /wallets/deposit/prepare {chain, amount}: what the wallet signs (an EIP-3009 authorization to the escrow) or,
 * for a token without EIP-3009, the approve and deposit transactions. An amount above the stablecoin the wallet
 * holds is refused here, before the wallet is asked for anything; when the chain does not answer in time, the
 * chain itself refuses it later.
 */
export async function prepareDeposit(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const body = request.body as { chain?: unknown; amount?: unknown };
  const chain = chainOf(body.chain);
  const amount = amountOf(body.amount);
  const chains = await requireChains(d);
  const c = chains[chain];
  const reader = chainReader(chains);
  const held = await withTimeout(reader.tokenBalance(chain, session.account as Address), READ_TIMEOUT_MS);
  if (held !== undefined && amount > held) {
    throw new DashboardError('invalid_input', {
      message: `Your wallet holds ${formatUsd(held)} USD on ${chain} (chain id ${c.chain_id}), less than the ${formatUsd(amount)} USD to deposit: enter at most ${formatUsd(held)}.`,
    });
  }
  let eip3009: boolean;
  try {
    eip3009 = await reader.supportsAuthorization(chain);
  } catch (err) {
    throw new DashboardError('chain_unavailable', { cause: err });
  }
  const base = { chain, chain_id: c.chain_id };
  if (!eip3009) {
    return reply.send({
      ...base,
      method: 'approve',
      transactions: [approveTx(c.stablecoin, c.escrow, amount), depositTx(c.escrow, amount)],
    });
  }
  const nowS = BigInt(Math.floor(Date.now() / 1000));
  const typed = authorizationTypedData(await tokenDomain(chains, chain), {
    from: session.account as Address,
    to: c.escrow,
    value: amount,
    validAfter: 0n,
    validBefore: nowS + AUTHORIZATION_TTL_S,
    nonce: `0x${randomBytes(32).toString('hex')}`,
  });
  return reply.send({ ...base, method: 'authorization', typed_data: typed });
}

/** POST /wallets/deposit/transaction {chain, amount, authorization, signature}: the escrow call that deposits it. */
export async function depositTransaction(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const body = request.body as { chain?: unknown; amount?: unknown; authorization?: unknown; signature?: unknown };
  const chain = chainOf(body.chain);
  const amount = amountOf(body.amount);
  const chains = await requireChains(d);
  const c = chains[chain];
  const auth = readAuthorization(
    body.authorization,
    { from: session.account as Address, to: c.escrow, value: amount },
    BigInt(Math.floor(Date.now() / 1000)),
  );
  // Checked here, so a signature for another chain or account is refused before the wallet pays gas for a revert.
  if (!(await signedBy(await tokenDomain(chains, chain), auth, body.signature))) {
    throw new DashboardError('bad_signature', {
      message: `The authorization is not signed by your account for ${chain} (chain id ${c.chain_id}); start the deposit again on that chain.`,
    });
  }
  return reply.send({
    chain,
    chain_id: c.chain_id,
    transaction: depositWithAuthorizationTx(c.escrow, auth, body.signature as `0x${string}`),
  });
}

/** POST /wallets/withdrawal {chain, op: request|withdraw|cancel, amount}: the escrow call for the wallet to send. */
export async function withdrawalTransaction(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const body = request.body as { chain?: unknown; op?: unknown; amount?: unknown };
  const chain = chainOf(body.chain);
  const chains = await requireChains(d);
  const c = chains[chain];
  let transaction;
  if (body.op === 'request') {
    const amount = amountOf(body.amount);
    const w = await readWallet(d.redis, session.account, chain);
    if (amount > w.synced)
      throw new DashboardError('invalid_input', {
        message: `${chain} holds ${formatUsd(w.synced)} USD for you: request at most that.`,
      });
    transaction = requestWithdrawalTx(c.escrow, amount);
  } else if (body.op === 'withdraw') {
    transaction = withdrawTx(c.escrow);
  } else if (body.op === 'cancel') {
    transaction = cancelWithdrawalTx(c.escrow);
  } else {
    throw new DashboardError('invalid_input', { message: 'Unknown withdrawal step.' });
  }
  return reply.send({ chain, chain_id: c.chain_id, transaction });
}
