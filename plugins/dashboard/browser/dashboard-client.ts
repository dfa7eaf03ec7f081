/**
 * The dashboard's browser script (served as /assets/dashboard.js, a module): the calls to the browser wallet
 * (EIP-1193 `window.ethereum`) and the copy buttons. Sign-in: the wallet's address and chain, then a personal_sign
 * of the message the server wrote. Deposit: an eth_signTypedData_v4 of the EIP-3009 authorization the server wrote,
 * then the escrow transaction it returns (or approve then deposit). Withdrawal: the escrow transaction. Everything
 * else on the pages is plain HTML forms that work without it. An error shows as one short sentence (a revert by the
 * contract's error name); the wallet's own text, often long and full of hex, only under a closed "Details".
 */

// The page's globals this script uses. The project's type check runs without the DOM library, whose globals would
// then be visible to the server's code too; these few declarations stay in this module.
interface Elem {
  readonly dataset: Record<string, string | undefined>;
  readonly elements: { namedItem(name: string): { value: string } | null };
  textContent: string | null;
  className: string;
  disabled: boolean;
  append(...nodes: Elem[]): void;
  addEventListener(type: string, listener: (event: { preventDefault(): void }) => void): void;
  querySelectorAll(selector: string): ArrayLike<Elem>;
}
interface Eip1193 {
  request(args: { method: string; params?: unknown[] }): Promise<unknown>;
}
declare const document: {
  getElementById(id: string): Elem | null;
  querySelector(selector: string): Elem | null;
  querySelectorAll(selector: string): ArrayLike<Elem>;
  createElement(tag: string): Elem;
};
declare const window: { ethereum?: Eip1193; location: { assign(url: string): void; reload(): void } };
declare const navigator: { clipboard?: { writeText(text: string): Promise<void> } };

interface ChainInfo {
  name: string;
  chain_id: number;
  rpc_url: string;
}
interface PageData {
  base: string;
  csrf: string | null;
  account: string | null;
  chains?: ChainInfo[];
  /** The escrow's and stablecoin's custom errors by 4-byte selector (the Wallets page). */
  revert_errors?: Record<string, string>;
}
interface Tx {
  to: string;
  data: string;
}

const page = JSON.parse(document.getElementById('dashboard-data')?.textContent ?? '{}') as PageData;

/** An error whose message is for the person at the page. */
class Shown extends Error {
  constructor(
    message: string,
    readonly redirect?: string,
  ) {
    super(message);
  }
}

/** Show `text` in a status line; `detail` goes under a closed "Details" beneath it. */
function say(status: Elem | null, text: string, kind: '' | 'ok' | 'bad' = '', detail?: string): void {
  if (!status) return;
  status.textContent = text;
  status.className = `status ${kind}`.trim();
  if (!detail) return;
  const details = document.createElement('details');
  const summary = document.createElement('summary');
  summary.textContent = 'Details';
  const pre = document.createElement('pre');
  pre.textContent = detail;
  details.append(summary, pre);
  status.append(details);
}

function errorCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'number' ? code : undefined;
}

/** An error and the errors it wraps, as wallets nest them (data, error, cause, data.originalError). */
function nested(err: unknown): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  const queue: unknown[] = [err];
  while (queue.length && out.length < 12) {
    const e = queue.shift();
    if (typeof e !== 'object' || e === null || out.includes(e as Record<string, unknown>)) continue;
    const o = e as Record<string, unknown>;
    out.push(o);
    queue.push(o.data, o.error, o.cause, o.originalError);
  }
  return out;
}

const HEX_DATA = /^0x(?:[0-9a-fA-F]{2}){4,}$/;

/** The revert data (selector and arguments) in a wallet's error, if it carries any. */
function revertData(errs: Record<string, unknown>[]): string | undefined {
  for (const e of errs) if (typeof e.data === 'string' && HEX_DATA.test(e.data)) return e.data.toLowerCase();
  return undefined;
}

/** Why a contract reverts, for the person who sent the transaction. */
const REVERT_HINTS: Record<string, string> = {
  InsufficientBalance: 'the balance is below the amount',
  InsufficientAllowance: 'the escrow is not approved for the amount on the token',
  AuthorizationExpired: 'the authorization expired; start the deposit again',
  AuthorizationAlreadyUsed: 'the authorization was already used; start the deposit again',
  AuthorizationNotYetValid: 'the authorization is not valid yet',
  InvalidSignature: 'the signature does not match the authorization',
  TokenCallFailed: 'the token refused the transfer',
  ZeroAmount: 'the amount is zero',
  NoWithdrawalRequested: 'no withdrawal is requested on this chain; reload the page',
  WithdrawalNotReady: 'the timelock has not passed yet',
};

function clip(text: string, max: number): string {
  const one = text.replace(/\s+/g, ' ').trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** The reason string of a Solidity Error(string) revert, ABI-encoded after its selector. */
function errorString(data: string): string | undefined {
  try {
    const body = data.slice(10);
    const length = Number.parseInt(body.slice(64, 128), 16);
    const hex = body.slice(128, 128 + length * 2);
    if (!length || hex.length !== length * 2) return undefined;
    return new TextDecoder().decode(new Uint8Array(hex.match(/../g)!.map((b) => Number.parseInt(b, 16))));
  } catch {
    return undefined;
  }
}

/** One sentence for a revert: the contract's error by name where the page knows it. */
function revertSentence(data: string | undefined): string {
  const selector = data?.slice(0, 10);
  if (selector === '0x08c379a0') {
    const reason = errorString(data!);
    if (reason) return `The transaction reverted: "${clip(reason, 100)}".`;
  }
  const name = selector ? page.revert_errors?.[selector] : undefined;
  if (name) return `The transaction reverted (${name})${REVERT_HINTS[name] ? `: ${REVERT_HINTS[name]}` : ''}.`;
  return 'The transaction reverted.';
}

/**
 * The words for an error: the dashboard's own, the person's refusal (EIP-1193 4001), a revert (JSON-RPC 3, revert
 * data, or a message that says so), or the wallet's first words. The wallet's whole text becomes the detail.
 */
function describe(err: unknown): { text: string; detail?: string } {
  if (err instanceof Shown) return { text: err.message };
  if (errorCode(err) === 4001) return { text: 'You declined in your wallet; nothing was changed.' };
  const errs = nested(err);
  const messages = errs.map((e) => e.message).filter((m): m is string => typeof m === 'string' && m !== '');
  let detail = messages.join('\n\n');
  const data = revertData(errs);
  if (data && !detail.includes(data)) detail += `${detail ? '\n\n' : ''}Revert data: ${data}`;
  const reverted = data !== undefined || errs.some((e) => e.code === 3) || messages.some((m) => /revert/i.test(m));
  if (reverted) return { text: revertSentence(data), detail: detail || undefined };
  const first = messages[0] ? clip(messages[0].split('\n')[0]!, 120) : 'no reason given';
  const text = `Your wallet refused: ${first}${/[.…]$/.test(first) ? '' : '.'}`;
  return { text, detail: detail && detail !== first ? detail : undefined };
}

/** POST JSON to a dashboard route, with the session's CSRF token; a refusal becomes a Shown error. */
async function call<T>(path: string, body: unknown): Promise<T> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (page.csrf) headers['x-csrf-token'] = page.csrf;
  const res = await fetch(`${page.base}/${path}`, {
    method: 'POST',
    credentials: 'same-origin',
    headers,
    body: JSON.stringify(body),
  });
  const json = (await res.json().catch(() => null)) as { error?: { message?: string }; redirect?: string } | null;
  if (!res.ok) throw new Shown(json?.error?.message ?? `The dashboard answered ${res.status}.`, json?.redirect);
  return json as T;
}

function wallet(): Eip1193 {
  const eth = window.ethereum;
  if (!eth) throw new Shown('No browser wallet found: install one (such as MetaMask) and reload this page.');
  return eth;
}

const hexOf = (n: number) => `0x${n.toString(16)}`;

async function chainIdOf(eth: Eip1193): Promise<number> {
  return Number.parseInt(String(await eth.request({ method: 'eth_chainId' })), 16);
}

/** Bring the wallet to `chainId`, adding the chain first when the wallet does not know it (EIP-3085, error 4902). */
async function ensureChain(eth: Eip1193, chainId: number): Promise<void> {
  if ((await chainIdOf(eth)) === chainId) return;
  const chain = page.chains?.find((c) => c.chain_id === chainId);
  const label = chain ? `${chain.name} (chain id ${chainId})` : `chain id ${chainId}`;
  try {
    await eth.request({ method: 'wallet_switchEthereumChain', params: [{ chainId: hexOf(chainId) }] });
  } catch (err) {
    if (errorCode(err) !== 4902 || !chain)
      throw new Shown(`Switch your wallet to ${label}, then try again. (${describe(err).text})`);
    await eth.request({
      method: 'wallet_addEthereumChain',
      params: [
        {
          chainId: hexOf(chainId),
          chainName: `farebox ${chain.name}`,
          rpcUrls: [chain.rpc_url],
          nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
        },
      ],
    });
  }
  if ((await chainIdOf(eth)) !== chainId) throw new Shown(`Switch your wallet to ${label}, then try again.`);
}

function utf8Hex(text: string): string {
  return `0x${Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

async function signIn(status: Elem | null): Promise<void> {
  const eth = wallet();
  const chains = page.chains ?? [];
  say(status, 'Asking your wallet for its address…');
  const [address] = (await eth.request({ method: 'eth_requestAccounts' })) as string[];
  if (!address) throw new Shown('Your wallet shared no address.');
  let chainId = await chainIdOf(eth);
  if (!chains.some((c) => c.chain_id === chainId) && chains[0]) {
    say(status, `Asking your wallet to switch to ${chains[0].name}…`);
    await ensureChain(eth, chains[0].chain_id);
    chainId = chains[0].chain_id;
  }
  const { message } = await call<{ message: string }>('auth/nonce', { address, chainId });
  say(status, 'Sign the message in your wallet…');
  const signature = await eth.request({ method: 'personal_sign', params: [utf8Hex(message), address] });
  const done = await call<{ redirect: string }>('auth/verify', { message, signature });
  say(status, 'Signed in.', 'ok');
  window.location.assign(done.redirect);
}

async function send(eth: Eip1193, tx: Tx): Promise<string> {
  return String(
    await eth.request({ method: 'eth_sendTransaction', params: [{ from: page.account, to: tx.to, data: tx.data }] }),
  );
}

type Balances = Record<string, Record<string, string>>;

async function balances(): Promise<Balances> {
  const res = await fetch(`${page.base}/wallets/balances.json`, {
    credentials: 'same-origin',
    headers: { accept: 'application/json' },
  });
  if (!res.ok) throw new Shown('Your session ended: sign in again.');
  return ((await res.json()) as { chains: Balances }).chains;
}

/** Wait until the gateway's numbers for `chain` move (the watcher applied the escrow's event), then reload. */
async function reloadWhenSeen(chain: string, before: string, status: Elem | null, hash: string): Promise<void> {
  say(status, `Transaction ${hash.slice(0, 10)}… sent. Waiting for the gateway to see it…`);
  for (let i = 0; i < 120; i++) {
    await new Promise((r) => setTimeout(r, 500));
    if (JSON.stringify((await balances())[chain]) !== before) {
      window.location.reload();
      return;
    }
  }
  say(status, `Transaction ${hash} sent; the gateway has not seen it yet. Reload this page in a moment.`);
}

function field(form: Elem, name: string): string {
  return form.elements.namedItem(name)?.value.trim() ?? '';
}

interface Prepared {
  chain: string;
  chain_id: number;
  method: 'authorization' | 'approve';
  typed_data?: { message: Record<string, string> };
  transactions?: Tx[];
}

async function deposit(form: Elem, status: Elem | null): Promise<void> {
  const eth = wallet();
  const chain = field(form, 'chain');
  const amount = field(form, 'amount');
  const before = JSON.stringify((await balances())[chain]);
  const prep = await call<Prepared>('wallets/deposit/prepare', { chain, amount });
  say(status, `Checking that your wallet is on ${chain}…`);
  await ensureChain(eth, prep.chain_id);
  let hash: string;
  if (prep.method === 'authorization' && prep.typed_data) {
    say(status, 'Sign the deposit authorization in your wallet…');
    const signature = await eth.request({
      method: 'eth_signTypedData_v4',
      params: [page.account, JSON.stringify(prep.typed_data)],
    });
    const { transaction } = await call<{ transaction: Tx }>('wallets/deposit/transaction', {
      chain,
      amount,
      authorization: prep.typed_data.message,
      signature,
    });
    say(status, 'Confirm the deposit transaction in your wallet…');
    hash = await send(eth, transaction);
  } else {
    const [approve, depositTx] = prep.transactions ?? [];
    if (!approve || !depositTx) throw new Shown('The dashboard sent no transaction.');
    say(status, 'Confirm the approval, then the deposit, in your wallet…');
    await send(eth, approve);
    hash = await send(eth, depositTx);
  }
  await reloadWhenSeen(chain, before, status, hash);
}

async function withdrawal(chain: string, op: string, amount: string, status: Elem | null): Promise<void> {
  const eth = wallet();
  const before = JSON.stringify((await balances())[chain]);
  const { chain_id, transaction } = await call<{ chain_id: number; transaction: Tx }>('wallets/withdrawal', {
    chain,
    op,
    amount,
  });
  await ensureChain(eth, chain_id);
  say(status, 'Confirm the transaction in your wallet…');
  const hash = await send(eth, transaction);
  await reloadWhenSeen(chain, before, status, hash);
}

/** Run an action with its control disabled; its error is shown, and a refused sign-up goes to its page. */
async function run(control: Elem, status: Elem | null, action: () => Promise<void>): Promise<void> {
  control.disabled = true;
  say(status, '');
  try {
    await action();
  } catch (err) {
    if (err instanceof Shown && err.redirect) {
      window.location.assign(err.redirect);
      return;
    }
    const { text, detail } = describe(err);
    say(status, text, 'bad', detail);
    if (detail) console.warn(detail);
  } finally {
    control.disabled = false;
  }
}

for (const b of Array.from(document.querySelectorAll('[data-action="sign-in"]'))) {
  b.addEventListener(
    'click',
    () => void run(b, document.querySelector('[data-status]'), () => signIn(document.querySelector('[data-status]'))),
  );
}

const depositForm = document.querySelector('form[data-form="deposit"]');
if (depositForm) {
  const status = document.querySelector('[data-status="deposit"]');
  depositForm.addEventListener('submit', (e) => {
    e.preventDefault();
    void run(depositForm, status, () => deposit(depositForm, status));
  });
}

const withdrawalForm = document.querySelector('form[data-form="withdrawal"]');
const withdrawalStatus = document.querySelector('[data-status="withdrawal"]');
if (withdrawalForm) {
  withdrawalForm.addEventListener('submit', (e) => {
    e.preventDefault();
    void run(withdrawalForm, withdrawalStatus, () =>
      withdrawal(field(withdrawalForm, 'chain'), 'request', field(withdrawalForm, 'amount'), withdrawalStatus),
    );
  });
}
for (const b of Array.from(document.querySelectorAll('[data-action="withdrawal"]'))) {
  b.addEventListener(
    'click',
    () =>
      void run(b, withdrawalStatus, () => withdrawal(b.dataset.chain ?? '', b.dataset.op ?? '', '', withdrawalStatus)),
  );
}

for (const b of Array.from(document.querySelectorAll('[data-copy]'))) {
  b.addEventListener('click', () => {
    const text = document.getElementById(b.dataset.copy ?? '')?.textContent ?? '';
    const copied = navigator.clipboard
      ? navigator.clipboard.writeText(text)
      : Promise.reject(new Error('no clipboard'));
    copied.then(
      () => {
        b.textContent = 'Copied';
      },
      () => {
        b.textContent = 'Select the text to copy it';
      },
    );
  });
}

// A module, so the declarations above stay in this file (the page loads it with type="module").
export {};
