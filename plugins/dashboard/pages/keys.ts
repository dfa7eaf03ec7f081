/**
 * Body of the Keys page: the key just created (shown this once), the base URLs to paste, the keys with their limits
 * and spend (accounts/key-limits.ts), a form per live key to change its limits, and their revocation.
 */
import type { KeyInfo } from '../../accounts/accounts.js';
import { KEY_NAME_MAX } from '../../accounts/accounts.js';
import { describeLimit, RESETS, type Reset } from '../../accounts/key-limits.js';
import { formatTime } from '../format.js';
import { html, type SafeHtml } from '../html.js';

/** A key as it was just created: the only time the dashboard holds the key itself. */
export interface CreatedKey {
  id: string;
  key: string;
  name: string;
}

/** What the Keys page shows. */
export interface KeysView {
  base: string;
  csrf: string;
  keys: KeyInfo[];
  created: CreatedKey | null;
  /** The gateway's base URL, without /v1. */
  gatewayUrl: string;
  /** Claude Code's model variables for the models this gateway serves (policies/claude-code-models.ts). */
  claudeModels: readonly (readonly [string, string])[];
  /** The ids of the served models, offered for an allow-list. */
  modelIds: readonly string[];
  /** Now, in ms: a key past its expiry shows as expired. */
  now: number;
}

function copyable(id: string, text: string, label: string): SafeHtml {
  return html`<pre id="${id}">${text}</pre><button type="button" class="secondary" data-copy="${id}" aria-label="${`Copy ${label}`}">Copy</button>`;
}

function createdPanel(v: KeysView, c: CreatedKey): SafeHtml {
  const gw = v.gatewayUrl;
  return html`<section class="notice secret" aria-labelledby="new-key-title">
<h2 id="new-key-title">Your new key${c.name ? html` “${c.name}”` : ''}</h2>
<p><strong>Copy it now: it is shown this once.</strong> The gateway keeps only its hash, so no one can show it again; if you lose it, revoke it and create another.</p>
${copyable('new-key', c.key, 'the key')}
<h3>OpenAI SDK</h3>
${copyable('snippet-openai', `import OpenAI from 'openai';\nconst client = new OpenAI({ baseURL: '${gw}/v1', apiKey: '${c.key}' });`, 'the OpenAI SDK snippet')}
<h3>Anthropic SDK</h3>
${copyable('snippet-anthropic', `import Anthropic from '@anthropic-ai/sdk';\nconst client = new Anthropic({ baseURL: '${gw}', apiKey: '${c.key}' });`, 'the Anthropic SDK snippet')}
<h3>Claude Code</h3>
${copyable('snippet-claude', [`export ANTHROPIC_BASE_URL=${gw}`, `export ANTHROPIC_AUTH_TOKEN=${c.key}`, ...v.claudeModels.map(([k, m]) => `export ${k}=${m}`)].join('\n'), 'the Claude Code variables')}
</section>`;
}

const WINDOW_NAMES: Record<Reset, string> = {
  daily: 'today',
  weekly: 'this week',
  monthly: 'this month',
  never: 'in all',
};

/** The reset a new key's limit gets unless another is picked. */
export const DEFAULT_RESET: Reset = 'monthly';

/** A time in ms as the value of a date input (its UTC day). */
export function dateValue(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

function resetOptions(selected: Reset): SafeHtml[] {
  return RESETS.map((r) => html`<option value="${r}"${r === selected ? html` selected` : ''}>${r}</option>`);
}

/** The limit fields, for the create form (`id` '') and each key's form: ids stay unique on the page. */
function limitFields(v: KeysView, id: string, k: KeyInfo | null): SafeHtml {
  const f = (name: string) => (id ? `${name}-${id}` : `key-${name}`);
  const hint = id ? `limits-hint-${id}` : 'limits-hint';
  return html`<label for="${f('limit')}">Spend limit (USD) <input id="${f('limit')}" name="limit" inputmode="decimal" pattern="\\d+(\\.\\d{1,6})?" autocomplete="off" placeholder="none" aria-describedby="${hint}" value="${k?.limit?.amount ?? ''}"></label>
<label for="${f('reset')}">Resets <select id="${f('reset')}" name="reset" aria-describedby="${hint}">${resetOptions(k?.limit?.reset ?? DEFAULT_RESET)}</select></label>
<label for="${f('models')}">Allowed models <input id="${f('models')}" name="models" autocomplete="off" placeholder="all models" aria-describedby="${hint}" value="${k?.models?.join(', ') ?? ''}" list="model-ids"></label>
<label for="${f('expires')}">Expires (00:00 UTC) <input id="${f('expires')}" name="expires" type="date" aria-describedby="${hint}" value="${k?.expires_at ? dateValue(k.expires_at) : ''}"${id ? '' : html` min="${dateValue(v.now + 86_400_000)}"`}></label>`;
}

/** A time that wraps, if it must, between its day and its hour. */
function when(ms: number): SafeHtml {
  const [day, ...hour] = formatTime(ms).split(' ');
  return html`<span class="nowrap">${day}</span> <span class="nowrap">${hour.join(' ')}</span>`;
}

function limitCell(k: KeyInfo): SafeHtml {
  if (k.limit === null) return html`<span class="muted">no limit</span>`;
  const resets = k.limit.resets_at === null ? 'never resets' : html`resets ${when(k.limit.resets_at)}`;
  return html`<div><span class="nowrap" data-field="limit">${describeLimit(BigInt(k.limit.amount_atomic), k.limit.reset)}</span><br><span data-field="left">${k.limit.left}</span> left<br><span class="muted">${resets}</span></div>`;
}

function spentCell(k: KeyInfo): SafeHtml {
  const total = html`<span data-field="spent-total">${k.spent.total}</span> in all`;
  const held =
    k.spent.held_atomic === '0' ? '' : html`<br><span class="muted">${k.spent.held} held by running calls</span>`;
  if (k.limit === null || k.limit.reset === 'never') return html`<div>${total}${held}</div>`;
  return html`<div><span data-field="spent-window">${k.spent.window}</span> ${WINDOW_NAMES[k.limit.reset]}<br>${total}${held}</div>`;
}

function modelsCell(k: KeyInfo): SafeHtml {
  return k.models === null
    ? html`<span class="muted">all models</span>`
    : html`<span data-field="models">${k.models.map((m, i) => html`${i ? ', ' : ''}<code>${m}</code>`)}</span>`;
}

function expiresCell(v: KeysView, k: KeyInfo): SafeHtml {
  if (k.expires_at === null) return html`<span class="muted">never</span>`;
  return k.expires_at <= v.now
    ? html`<span class="tag bad">expired ${formatTime(k.expires_at)}</span>`
    : html`<span data-field="expires">${when(k.expires_at)}</span>`;
}

function keyRow(v: KeysView, k: KeyInfo): SafeHtml {
  const label = k.name || k.id;
  const action =
    k.revoked_at !== null
      ? html`<span class="tag bad">revoked ${formatTime(k.revoked_at)}</span>`
      : html`<form class="inline" method="post" action="${v.base}/keys/${k.id}/revoke">
<input type="hidden" name="_csrf" value="${v.csrf}"><button class="danger" type="submit" aria-label="${`Revoke key ${label}`}">Revoke</button></form>`;
  const row = html`<tr data-key-id="${k.id}"><td data-label="Key"><div>${k.name || html`<span class="muted">unnamed</span>`}<br><span class="mono muted" data-field="id">${k.id}</span><br><span class="muted">created ${when(k.created_at)}</span></div></td>
<td class="limit" data-label="Limit">${limitCell(k)}</td><td class="spent" data-label="Spent">${spentCell(k)}</td>
<td class="list" data-label="Models">${modelsCell(k)}</td><td data-label="Expires">${expiresCell(v, k)}</td>
<td data-label="Last used">${k.last_used_at === null ? html`<span class="muted">never</span>` : when(k.last_used_at)}</td><td class="action">${action}</td></tr>`;
  if (k.revoked_at !== null) return row;
  // A revoked key's limits no longer matter: only a live key (expired ones too: a later expiry revives it) has the form.
  return html`${row}
<tr class="edit" data-key-limits="${k.id}"><td colspan="7"><details><summary>Change the limits of ${label}</summary>
<form method="post" action="${v.base}/keys/${k.id}/limits" class="row" aria-label="${`Limits of key ${label}`}">
<input type="hidden" name="_csrf" value="${v.csrf}">
${limitFields(v, k.id, k)}
<button type="submit" aria-label="${`Save the limits of key ${label}`}">Save limits</button>
</form><p class="muted" id="limits-hint-${k.id}">Empty: no limit, all models, never expires. A changed reset counts its window from 0.</p></details></td></tr>`;
}

/** The Keys page's body. */
export function keysBody(v: KeysView): SafeHtml {
  const gw = v.gatewayUrl;
  return html`${v.created ? createdPanel(v, v.created) : null}
<h2>Create a key</h2>
<form method="post" action="${v.base}/keys" class="row">
<input type="hidden" name="_csrf" value="${v.csrf}">
<label for="key-name">Name <input id="key-name" name="name" required maxlength="${KEY_NAME_MAX}" autocomplete="off" placeholder="laptop, CI, …"></label>
${limitFields(v, '', null)}
<button type="submit">Create key</button>
</form>
<p class="muted" id="limits-hint">Optional: a spend limit in USD (empty: no limit) with its reset at 00:00 UTC (weekly: on Monday; monthly: on the 1st), the models the key may call (comma-separated ids or <code>prefix-*</code> patterns; empty: all models), and an expiry (the key answers 401 from 00:00 UTC of that day; empty: never). A call runs only if its worst case fits in what is left, and calls still running count against it.</p>
<datalist id="model-ids">${v.modelIds.map((m) => html`<option value="${m}"></option>`)}</datalist>
<details><summary>The models this gateway serves</summary><p data-snippet="model-ids">${v.modelIds.map((m, i) => html`${i ? ', ' : ''}<code>${m}</code>`)}</p></details>
<h2>Connect a client</h2>
<dl>
<dt>OpenAI SDK <code>baseURL</code></dt><dd><code data-snippet="openai-base">${gw}/v1</code></dd>
<dt>Anthropic SDK <code>baseURL</code></dt><dd><code data-snippet="anthropic-base">${gw}</code></dd>
<dt>Claude Code</dt><dd><code>ANTHROPIC_BASE_URL=${gw}</code> and <code>ANTHROPIC_AUTH_TOKEN=</code>your key, with its models: <code data-snippet="claude-models">${v.claudeModels.map(([k, m]) => `${k}=${m}`).join(' ')}</code></dd>
</dl>
<h2>Your keys</h2>
${
  v.keys.length === 0
    ? html`<p class="muted">No keys yet.</p>`
    : html`<div class="table-wrap" role="region" aria-label="Your keys" tabindex="0"><table class="stack keys">
<thead><tr><th scope="col">Key</th><th scope="col">Limit</th><th scope="col">Spent (USD)</th><th scope="col">Models</th><th scope="col">Expires</th><th scope="col">Last used</th><th scope="col"><span class="visually-hidden">Action</span></th></tr></thead>
<tbody>${v.keys.map((k) => keyRow(v, k))}</tbody></table></div>`
}
<p class="muted">A revoked key answers 401 at once, on every gateway instance, and so does a key past its expiry. What is left is what calls may still hold: the limit less this window's spend and what running calls hold. "Last used" is updated at most once a minute.</p>`;
}
