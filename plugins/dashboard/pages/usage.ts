/** Body of the Usage page: spend per day, the account's calls newest first in pages, and the CSV export. */
import type { UsageRecord } from '../../billing/call-records.js';
import type { ChainName } from '../../chains/config.js';
import { formatTimeSeconds, shortHex } from '../format.js';
import { html, type SafeHtml } from '../html.js';

/** What the Usage page shows. */
export interface UsageView {
  base: string;
  /** This page's records, newest first. */
  records: UsageRecord[];
  page: number;
  hasNext: boolean;
  keyNames: ReadonlyMap<string, string>;
  explorers: Readonly<Partial<Record<ChainName, string>>>;
  chart: SafeHtml;
}

const TX = /^0x[0-9a-fA-F]{64}$/;

const STATE_TAGS: Record<UsageRecord['status'], string> = {
  held: 'warn',
  pending: 'warn',
  settled: 'ok',
  failed: 'bad',
  free: '',
};

function settlement(v: UsageView, r: UsageRecord): SafeHtml {
  if (!r.tx || !TX.test(r.tx)) return html`<span class="muted">—</span>`;
  const explorer = v.explorers[r.chain as ChainName];
  return explorer
    ? html`<a class="mono" href="${`${explorer}/tx/${r.tx}`}" rel="noopener noreferrer" title="${r.tx}" data-tx="${r.tx}">${shortHex(r.tx)}</a>`
    : html`<span class="mono" title="${r.tx}" data-tx="${r.tx}">${shortHex(r.tx)}</span>`;
}

const KINDS: [keyof UsageRecord['usage'] & string, string, string][] = [
  ['input_tokens', 'input', 'input'],
  ['output_tokens', 'output', 'output'],
  ['cache_read_tokens', 'cache read', 'cache read'],
  ['cache_write_5m_tokens', 'cache write 5 min', 'cache write 5 min'],
  ['cache_write_1h_tokens', 'cache write 1 h', 'cache write 1 h'],
  ['images', 'image', 'images'],
  ['video_seconds', 'video second', 'video seconds'],
];

/** What a call used, kind by kind (tokens by kind, images, video seconds), leaving out the kinds it did not use. */
function usageCell(r: UsageRecord): SafeHtml {
  const parts = KINDS.filter(([f]) => (r.usage[f] ?? 0) > 0).map(([f, one, many]) => {
    const n = r.usage[f] ?? 0;
    return html`<span data-usage="${f}">${n.toLocaleString('en-US')} ${n === 1 ? one : many}${f.endsWith('_tokens') ? html` ${n === 1 ? 'token' : 'tokens'}` : ''}</span>`;
  });
  return parts.length
    ? html`${parts.map((p, i) => html`${i ? html`<br>` : ''}${p}`)}`
    : html`<span class="muted">nothing delivered</span>`;
}

function row(v: UsageView, r: UsageRecord): SafeHtml {
  const key = v.keyNames.get(r.key_id);
  return html`<tr data-call-id="${r.call_id}"><td data-label="Time">${formatTimeSeconds(Date.parse(r.time))}</td><td data-label="Model">${r.model}</td>
<td data-label="Key">${key ? key : html`<span class="mono">${r.key_id}</span>`}</td><td data-label="Usage">${usageCell(r)}</td>
<td class="num" data-label="Price (USD)" data-field="price">${r.price}</td><td data-label="Chain">${r.chain}</td>
<td data-label="State"><span class="tag ${STATE_TAGS[r.status]}" data-field="status">${r.status}</span></td><td data-label="Settlement">${settlement(v, r)}</td></tr>`;
}

/** The Usage page's body. */
export function usageBody(v: UsageView): SafeHtml {
  const pager = html`<nav class="pager" aria-label="Pages of calls">
${v.page > 1 ? html`<a href="${v.base}/usage${v.page === 2 ? '' : `?page=${v.page - 1}`}" rel="prev">Newer calls</a>` : null}
${v.hasNext ? html`<a href="${v.base}/usage?page=${v.page + 1}" rel="next">Older calls</a>` : null}
</nav>`;
  return html`<h2>Spend per day</h2>
${v.chart}
<h2>Calls</h2>
<p><a href="${v.base}/usage.csv" download>Export every call as CSV</a> <span class="muted">(the records the gateway keeps, newest first)</span></p>
${
  v.records.length === 0
    ? html`<p class="muted">${v.page > 1 ? 'No older calls.' : 'No calls yet: create a key on the Keys page and make a call.'}</p>`
    : html`<div class="table-wrap" role="region" aria-label="Calls, newest first" tabindex="0"><table class="stack">
<thead><tr><th scope="col">Time</th><th scope="col">Model</th><th scope="col">Key</th><th scope="col">Usage</th><th scope="col" class="num">Price (USD)</th>
<th scope="col">Chain</th><th scope="col">State</th><th scope="col">Settlement</th></tr></thead>
<tbody>${v.records.map((r) => row(v, r))}</tbody></table></div>`
}
${pager}
<p class="muted">States: held (running, its worst-case price held), pending (charged, not yet onchain), settled (charged onchain), failed (the escrow refused the charge), free (nothing delivered, nothing charged).</p>`;
}
