/** Bodies of the sign-in page, the sign-ups-closed page and the error page. */
import { html, type SafeHtml } from '../html.js';
import type { Signup } from '../options.js';

/** The sign-in page: the browser script asks the wallet for its address, then for a signature. */
export function signInBody(p: { base: string; signup: Signup; ready: boolean }): SafeHtml {
  const policy =
    p.signup === 'review'
      ? html`<p>A wallet new here gets an account the operator reviews: you can create keys and deposit at once, and calls work once it is active.</p>`
      : p.signup === 'closed'
        ? html`<p class="notice warn">Only wallets that already have an account here can sign in: sign-ups are closed.</p>`
        : html`<p>A wallet new here gets an account at once: signing in is signing up.</p>`;
  return html`<p>Sign in with the wallet whose address is your account on this gateway. Your wallet shows a message
naming this site to sign: signing sends no transaction and costs nothing.</p>
${policy}
${
  p.ready
    ? html`<div class="row"><button type="button" data-action="sign-in">Connect wallet and sign in</button></div>`
    : html`<p class="notice bad">The gateway has not published its chains yet, so no sign-in can name one: start the gateway (npm start) and reload.</p>`
}
<div class="status" data-status role="status" aria-live="polite"></div>
<noscript><p class="notice bad">Signing in needs JavaScript: the page asks your browser wallet for a signature.</p></noscript>
<p class="muted">The prices of every model are public: <a href="${p.base}/prices">see the prices</a>.</p>`;
}

/** The page a new wallet sees when sign-ups are closed. */
export function signupClosedBody(base: string): SafeHtml {
  return html`<p class="notice bad" role="alert">Your wallet has no account on this gateway, and the operator is not opening new ones.
Nothing was created and you are not signed in.</p>
<p>If you expected an account, ask the operator to create one for your wallet's address, then <a href="${base}/sign-in">sign in again</a>.</p>`;
}

/** An error as a page: what went wrong and where to go from here. */
export function errorBody(p: { base: string; message: string; signedIn: boolean }): SafeHtml {
  return html`<p class="notice bad" role="alert">${p.message}</p>
<p>${p.signedIn ? html`<a href="${p.base}/keys">Back to your keys</a>` : html`<a href="${p.base}/sign-in">Go to sign-in</a>`} · <a href="${p.base}/prices">Prices</a></p>`;
}
