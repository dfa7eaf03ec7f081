/**
 * Spend per day as an inline SVG bar chart, drawn on the server (no script, nothing the CSP must allow). Spend is
 * what calls cost once charged (pending or settled); held, free and refused calls cost nothing.
 */
import type { UsageRecord } from '../billing/call-records.js';
import { parseUsd } from '../../pricing/index.js';
import { usd } from './format.js';
import { html, type SafeHtml } from './html.js';

/** Spend of one UTC day. */
export interface DaySpend {
  /** YYYY-MM-DD (UTC). */
  day: string;
  atomic: bigint;
}

const DAY_MS = 86_400_000;

/** The last `days` UTC days up to `nowMs`, oldest first, with what the records spent on each. */
export function dailySpend(records: readonly UsageRecord[], days: number, nowMs: number): DaySpend[] {
  const today = Math.floor(nowMs / DAY_MS);
  const out: DaySpend[] = [];
  for (let d = today - days + 1; d <= today; d++)
    out.push({ day: new Date(d * DAY_MS).toISOString().slice(0, 10), atomic: 0n });
  const first = today - days + 1;
  for (const r of records) {
    if (r.status !== 'pending' && r.status !== 'settled') continue;
    const d = Math.floor(Date.parse(r.time) / DAY_MS);
    if (d < first || d > today) continue;
    out[d - first]!.atomic += parseUsd(r.price);
  }
  return out;
}

const W = 600;
const H = 160;
const TOP = 18;
const BOTTOM = 20;

/** The chart of a series from dailySpend. */
export function spendChart(series: readonly DaySpend[]): SafeHtml {
  const max = series.reduce((m, s) => (s.atomic > m ? s.atomic : m), 0n);
  const total = series.reduce((t, s) => t + s.atomic, 0n);
  const peak = series.find((s) => s.atomic === max && max > 0n);
  const slot = W / series.length;
  const plot = H - TOP - BOTTOM;
  const bars = series.map((s, i) => {
    const h = max === 0n ? 0 : Math.max(s.atomic > 0n ? 1 : 0, Number((s.atomic * BigInt(plot * 100)) / max) / 100);
    return html`<rect class="bar" x="${(i * slot + 1).toFixed(1)}" y="${(TOP + plot - h).toFixed(1)}" width="${Math.max(1, slot - 2).toFixed(1)}" height="${h.toFixed(1)}"><title>${s.day}: ${usd(s.atomic)} USD</title></rect>`;
  });
  const label = `Spend per day over the last ${series.length} days: ${usd(total)} USD in all${peak ? `, most on ${peak.day} (${usd(max)} USD)` : ''}.`;
  return html`<svg class="chart" viewBox="0 0 ${W} ${H}" role="img" aria-label="${label}">
<line class="axis" x1="0" y1="${H - BOTTOM}" x2="${W}" y2="${H - BOTTOM}"></line>
${bars}
<text x="4" y="12">max ${usd(max)} USD/day</text>
<text x="4" y="${H - 5}">${series[0]?.day ?? ''}</text>
<text x="${W - 4}" y="${H - 5}" text-anchor="end">${series.at(-1)?.day ?? ''}</text>
</svg>
<p class="muted">${label}</p>`;
}
