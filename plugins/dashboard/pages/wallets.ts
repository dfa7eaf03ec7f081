/**
 * Body of the Wallets page: balances per chain as `farebox balance` reports them, the default chain, how to deposit
 * on each chain and the deposit from the browser wallet, withdrawals and their timelock, and on the dev chains the
 * "fund with test USD" button.
 */
import type { ChainName } from '../../chains/config.js';
import { CHAIN_NAMES } from '../../chains/config.js';
import type { WithdrawalRequest } from '../chain-reads.js';
import { formatDuration, formatTime, usd } from '../format.js';
import { html, type SafeHtml } from '../html.js';

/** One chain's wallet and what the page knows of it. */
export interface WalletRow {
  name: ChainName;
  chainId: number;
  rpcUrl: string;
  stablecoin: string;
  escrow: string;
  balance: bigint;
  held: bigint;
  pending: bigint;
  /** Requested for withdrawal (no longer available). */
  locked: bigint;
  available: bigint;
  /** From the chain; undefined when it did not answer. */
  withdrawal: WithdrawalRequest | null | undefined;
  /** Stablecoin in the wallet itself; undefined when the chain did not answer. */
  walletToken: bigint | undefined;
  /** Escrow timelock in seconds; undefined when the chain did not answer. */
  delay: bigint | undefined;
  /** Whether "fund with test USD" works here (a dev chain). */
  devFund: boolean;
}

/** What the Wallets page shows. */
export interface WalletsView {
  base: string;
  csrf: string;
  defaultChain: string;
  rows: WalletRow[];
  nowS: bigint;
  /** What "fund with test USD" deposits, in USD ("10"). */
  devFundUsd: string;
}

function chainOptions(selected: string): SafeHtml[] {
  return CHAIN_NAMES.map((n) => html`<option value="${n}"${n === selected ? html` selected` : ''}>${n}</option>`);
}

function balances(v: WalletsView): SafeHtml {
  const cell = (r: WalletRow, field: string, label: string, amount: bigint) =>
    html`<td class="num" data-label="${label}" data-chain="${r.name}" data-field="${field}">${usd(amount)}</td>`;
  return html`<div class="table-wrap" role="region" aria-label="Balances per chain" tabindex="0"><table class="stack">
<thead><tr><th scope="col">Chain</th><th scope="col" class="num">Balance</th><th scope="col" class="num">Held</th><th scope="col" class="num">Pending</th><th scope="col" class="num">Withdrawal requested</th><th scope="col" class="num">Available</th></tr></thead>
<tbody>${v.rows.map(
    (
      r,
    ) => html`<tr><th scope="row">${r.name}${r.name === v.defaultChain ? html` <span class="tag ok">default</span>` : ''}</th>
${cell(r, 'balance', 'Balance', r.balance)}${cell(r, 'held', 'Held', r.held)}${cell(r, 'pending', 'Pending', r.pending)}${cell(r, 'locked', 'Withdrawal requested', r.locked)}${cell(r, 'available', 'Available', r.available < 0n ? 0n : r.available)}</tr>`,
  )}</tbody>
</table></div>
<p class="muted">USD. Balance: the escrow's balance as the gateway last synced it. Held: calls running now, at their worst-case price.
Pending: calls charged but not yet settled onchain. Available = balance − withdrawal requested − pending − held: a call runs only if it covers the call's worst-case price.</p>`;
}

function withdrawals(v: WalletsView): SafeHtml {
  const requests = v.rows.filter((r) => r.withdrawal);
  const unknown = v.rows.filter((r) => r.withdrawal === undefined).map((r) => r.name);
  const delays = [
    ...new Set(v.rows.map((r) => (r.delay === undefined ? null : formatDuration(r.delay))).filter(Boolean)),
  ];
  return html`<h2>Withdraw</h2>
<p>A withdrawal takes two steps: request it, then withdraw once the escrow's timelock has passed${delays.length ? html` (${delays.join(', ')})` : ''}.
From the request on, the amount is no longer available for calls; calls already running still settle, and the withdrawal pays what is left of the request.</p>
${
  requests.length
    ? html`<ul>${requests.map((r) => {
        const w = r.withdrawal!;
        const ready = w.readyAt <= v.nowS;
        return html`<li data-withdrawal="${r.name}"><strong>${r.name}</strong>: ${usd(w.amount)} USD requested, ${ready ? html`ready now` : html`ready at <time datetime="${new Date(Number(w.readyAt) * 1000).toISOString()}">${formatTime(Number(w.readyAt) * 1000)}</time>`}.
<button type="button" data-action="withdrawal" data-op="withdraw" data-chain="${r.name}"${ready ? '' : html` disabled`}>Withdraw</button>
<button type="button" class="secondary" data-action="withdrawal" data-op="cancel" data-chain="${r.name}">Cancel the request</button></li>`;
      })}</ul>`
    : html`<p class="muted">No withdrawal requested.</p>`
}
${unknown.length ? html`<p class="muted">Withdrawal requests on ${unknown.join(', ')}: the chain did not answer.</p>` : null}
<form data-form="withdrawal" class="row">
<label for="withdraw-chain">Chain <select id="withdraw-chain" name="chain">${chainOptions(v.defaultChain)}</select></label>
<label for="withdraw-amount">Amount (USD) <input id="withdraw-amount" name="amount" inputmode="decimal" required pattern="\\d+(\\.\\d{1,6})?" placeholder="1.00"></label>
<button type="submit">Request withdrawal</button>
</form>
<div class="status" data-status="withdrawal" role="status" aria-live="polite"></div>`;
}

/** The Wallets page's body. */
export function walletsBody(v: WalletsView): SafeHtml {
  const dev = v.rows.filter((r) => r.devFund);
  return html`${balances(v)}
<h2>Default chain</h2>
<p>Calls bill on this chain unless they name one in the <code>x-gw-billing-chain</code> header.</p>
<form method="post" action="${v.base}/wallets/default-chain" class="row">
<input type="hidden" name="_csrf" value="${v.csrf}">
<label for="default-chain">Default chain <select id="default-chain" name="chain">${chainOptions(v.defaultChain)}</select></label>
<button type="submit">Save default chain</button>
</form>
${
  dev.length
    ? html`<h2>Fund with test USD</h2>
<p>The embedded default's dev chains mint test USD: this deposits ${v.devFundUsd} test USD for your account, as <code>farebox fund</code> does.</p>
<form method="post" action="${v.base}/wallets/fund" class="row">
<input type="hidden" name="_csrf" value="${v.csrf}">
<label for="fund-chain">Chain <select id="fund-chain" name="chain">${chainOptions(v.defaultChain)}</select></label>
<button type="submit">Fund with ${v.devFundUsd} test USD</button>
</form>`
    : null
}
<h2>Deposit</h2>
<p>Deposit the chain's USD stablecoin from this wallet: it signs a transfer authorization to the escrow (EIP-3009,
no separate approval), then sends one transaction. Where the token has no such authorization, it approves the escrow and deposits: two transactions.</p>
<form data-form="deposit" class="row">
<label for="deposit-chain">Chain <select id="deposit-chain" name="chain">${chainOptions(v.defaultChain)}</select></label>
<label for="deposit-amount">Amount (USD) <input id="deposit-amount" name="amount" inputmode="decimal" required pattern="\\d+(\\.\\d{1,6})?" placeholder="5.00"></label>
<button type="submit">Deposit</button>
</form>
<div class="status" data-status="deposit" role="status" aria-live="polite"></div>
<p>From elsewhere (another wallet, a script): call <code>deposit(amount)</code> on the escrow after approving it on the stablecoin,
or <code>depositFor(account, amount)</code> to fund this account from another address. Amounts have 6 decimals.</p>
<div class="grid">${v.rows.map(
    (r) => html`<section class="card" aria-labelledby="${`deposit-${r.name}`}">
<h3 id="${`deposit-${r.name}`}">${r.name}</h3>
<dl><dt>Chain id</dt><dd class="mono">${r.chainId}</dd><dt>Escrow</dt><dd class="mono">${r.escrow}</dd><dt>Stablecoin</dt><dd class="mono">${r.stablecoin}</dd>
<dt>RPC URL</dt><dd class="mono">${r.rpcUrl}</dd><dt>In your wallet</dt><dd data-chain="${r.name}" data-field="wallet">${r.walletToken === undefined ? html`<span class="muted">unavailable</span>` : usd(r.walletToken)}</dd></dl>
</section>`,
  )}</div>
${withdrawals(v)}`;
}
