/** Body of the Keys page: the key just created (shown this once), the base URLs to paste, the keys and their revocation. */
import type { KeyInfo } from '../../accounts/accounts.js';
import { KEY_NAME_MAX } from '../../accounts/accounts.js';
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

function keyRow(v: KeysView, k: KeyInfo): SafeHtml {
  const action =
    k.revoked_at !== null
      ? html`<span class="tag bad">revoked ${formatTime(k.revoked_at)}</span>`
      : html`<form class="inline" method="post" action="${v.base}/keys/${k.id}/revoke">
<input type="hidden" name="_csrf" value="${v.csrf}"><button class="danger" type="submit" aria-label="${`Revoke key ${k.name || k.id}`}">Revoke</button></form>`;
  return html`<tr data-key-id="${k.id}"><td data-label="Name">${k.name || html`<span class="muted">unnamed</span>`}</td><td class="mono" data-label="ID">${k.id}</td>
<td data-label="Created">${formatTime(k.created_at)}</td><td data-label="Last used">${k.last_used_at === null ? html`<span class="muted">never</span>` : formatTime(k.last_used_at)}</td><td>${action}</td></tr>`;
}

/** The Keys page's body. */
export function keysBody(v: KeysView): SafeHtml {
  const gw = v.gatewayUrl;
  return html`${v.created ? createdPanel(v, v.created) : null}
<h2>Create a key</h2>
<form method="post" action="${v.base}/keys" class="row">
<input type="hidden" name="_csrf" value="${v.csrf}">
<label for="key-name">Name <input id="key-name" name="name" required maxlength="${KEY_NAME_MAX}" autocomplete="off" placeholder="laptop, CI, …"></label>
<button type="submit">Create key</button>
</form>
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
    : html`<div class="table-wrap" role="region" aria-label="Your keys" tabindex="0"><table class="stack">
<thead><tr><th scope="col">Name</th><th scope="col">ID</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col"><span class="visually-hidden">Action</span></th></tr></thead>
<tbody>${v.keys.map((k) => keyRow(v, k))}</tbody></table></div>`
}
<p class="muted">A revoked key answers 401 at once, on every gateway instance. "Last used" is updated at most once a minute.</p>`;
}
