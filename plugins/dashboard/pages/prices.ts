/**
 * Body of the public Prices page: the numbers of `farebox prices --json` (publishPrices), per unit: text per
 * 1,000,000 tokens with the derived cache-write rates, images per image by resolution, video per clip by duration.
 */
import { IMAGE_SIZES, publishedRates, type PriceTable, type PricesDocument } from '../../../pricing/index.js';
import { html, type SafeHtml } from '../html.js';

/** The Prices page's body. */
export function pricesBody(p: { base: string; doc: PricesDocument; table: PriceTable }): SafeHtml {
  const cell = (model: string, field: string, label: string, value: string) =>
    html`<td class="num" data-label="${label}" data-model="${model}" data-field="${field}">$${value}</td>`;
  const text = Object.entries(p.doc.text).map(([id, r]) => {
    // The cache writes as GET /v1/models publishes them, from the same rates.
    const rates = p.table[id];
    const w = rates?.kind === 'text' ? publishedRates(rates, 2) : { cache_write_5m: '', cache_write_1h: '' };
    return html`<tr><th scope="row">${id}</th>${cell(id, 'input', 'Input', r.input)}${cell(id, 'output', 'Output', r.output)}${cell(id, 'cache_read', 'Cache read', r.cache_read)}${cell(id, 'cache_write_5m', 'Cache write 5 min', w.cache_write_5m)}${cell(id, 'cache_write_1h', 'Cache write 1 h', w.cache_write_1h)}</tr>`;
  });
  const images = Object.entries(p.doc.image).map(
    ([id, r]) => html`<tr><th scope="row">${id}</th>${IMAGE_SIZES.map((s) => cell(id, s, s, r[s]))}</tr>`,
  );
  const video = Object.entries(p.doc.video).map(
    ([id, r]) =>
      html`<tr><th scope="row">${id}</th><td class="wrap">${Object.entries(r).map(([s, v], i) => html`${i ? ' · ' : ''}<span data-model="${id}" data-field="${s}">${s} s: $${v}</span>`)}</td></tr>`,
  );
  return html`<p>What each call costs, in USD, billed per call from your wallet on the chain it names. Only output actually delivered is charged: a failed call, or a failed video, costs nothing.
The same table in JSON: <a href="${p.base}/prices.json">prices.json</a>.</p>
<h2>Text, per 1,000,000 tokens</h2>
<div class="table-wrap" role="region" aria-label="Text prices" tabindex="0"><table class="stack">
<thead><tr><th scope="col">Model</th><th scope="col" class="num">Input</th><th scope="col" class="num">Output</th><th scope="col" class="num">Cache read</th><th scope="col" class="num">Cache write 5 min</th><th scope="col" class="num">Cache write 1 h</th></tr></thead>
<tbody>${text}</tbody></table></div>
<p class="muted">Prompt-cache writes cost 1.25 times the input rate for the 5-minute cache and 2 times for the 1-hour cache.</p>
<h2>Images, per image</h2>
<div class="table-wrap" role="region" aria-label="Image prices" tabindex="0"><table class="stack">
<thead><tr><th scope="col">Model</th>${IMAGE_SIZES.map((s) => html`<th scope="col" class="num">${s}</th>`)}</tr></thead>
<tbody>${images}</tbody></table></div>
<h2>Video, per clip by duration</h2>
<div class="table-wrap" role="region" aria-label="Video prices" tabindex="0"><table>
<thead><tr><th scope="col">Model</th><th scope="col">Per clip</th></tr></thead>
<tbody>${video}</tbody></table></div>
<p class="muted">A clip is charged by its duration once delivered; a failed render is free.</p>`;
}
