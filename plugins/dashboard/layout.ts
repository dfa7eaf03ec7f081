/**
 * The frame of every dashboard page: head (the plugin's own stylesheet and script, nothing from elsewhere),
 * navigation, the signed-in account with its sign-out form, and a JSON block the browser script reads.
 */
import type { AccountStatus } from '../accounts/accounts.js';
import { html, jsonBlock, type SafeHtml } from './html.js';
import { shortHex } from './format.js';

/** Pages in the navigation. */
export type NavPage = 'keys' | 'wallets' | 'usage' | 'prices';

/** The signed-in account as the frame shows it. */
export interface Viewer {
  account: string;
  csrf: string;
  status: AccountStatus;
}

/** What the frame of a page needs. */
export interface PageInput {
  /** The plugin's path prefix ('' at the root). */
  base: string;
  /** Asset URLs with their content version. */
  assets: { css: string; js: string };
  title: string;
  active?: NavPage;
  viewer?: Viewer | null;
  notice?: SafeHtml | null;
  body: SafeHtml;
  /** Read by the browser script (`#dashboard-data`). */
  data?: Record<string, unknown>;
}

const NAV: { page: NavPage; label: string; signedIn: boolean }[] = [
  { page: 'keys', label: 'Keys', signedIn: true },
  { page: 'wallets', label: 'Wallets', signedIn: true },
  { page: 'usage', label: 'Usage', signedIn: true },
  { page: 'prices', label: 'Prices', signedIn: false },
];

function accessNotice(v: Viewer): SafeHtml | null {
  if (v.status === 'pending') {
    return html`<p class="notice warn" role="status">Your account awaits the operator's review: you can create keys and deposit now, and calls answer 403 until it is active.</p>`;
  }
  if (v.status === 'suspended') {
    return html`<p class="notice bad" role="status">Your account is suspended: calls answer 403. Deposits stay yours; you can still withdraw them.</p>`;
  }
  return null;
}

/** A whole page as HTML text. */
export function page(p: PageInput): string {
  const v = p.viewer ?? null;
  const links = NAV.filter((n) => v || !n.signedIn).map(
    (n) =>
      html`<li><a href="${p.base}/${n.page}"${n.page === p.active ? html` aria-current="page"` : ''}>${n.label}</a></li>`,
  );
  const who = v
    ? html`<div class="who"><span title="${v.account}">Signed in as <span class="mono">${shortHex(v.account)}</span></span>
        <form method="post" action="${p.base}/sign-out"><input type="hidden" name="_csrf" value="${v.csrf}"><button class="secondary" type="submit">Sign out</button></form></div>`
    : html`<div class="who"><a href="${p.base}/sign-in">Sign in</a></div>`;
  const data = { base: p.base, csrf: v?.csrf ?? null, account: v?.account ?? null, ...p.data };
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${p.title} · farebox</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${p.assets.css}">
<script type="module" src="${p.assets.js}"></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header><nav aria-label="Dashboard"><a class="brand" href="${p.base}/">farebox</a><ul>${links}</ul>${who}</nav></header>
<main id="main" tabindex="-1">
<h1>${p.title}</h1>
${v ? accessNotice(v) : null}${p.notice ?? null}${p.body}
</main>
<script type="application/json" id="dashboard-data">${jsonBlock(data)}</script>
</body>
</html>
`.value;
}
