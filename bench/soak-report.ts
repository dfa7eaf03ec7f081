/** A soak run's report (soak-run.ts), and the text `npm run soak` prints and writes to bench/results/soak-latest.txt. */
import { formatUsd } from '../pricing/index.js';
import type { CheckReport } from './soak-check.js';
import type { FuzzReport } from './soak-fuzz.js';
import type { CallResult } from './soak-load.js';
import type { Percentiles } from './stats.js';

/** What was injected when, what callers saw, what the ledger shows, what was lost. */
export interface SoakReport {
  /** The run's options (durations in seconds). */
  options: Record<string, unknown> & { seed: number; gateways: number; rate: number };
  started: string;
  /** Load average at the end, and how busy the cores were while the load ran (every process of the machine). */
  machine: { cpus: number; model: string; load: number[]; busyPct: number };
  fuzz?: FuzzReport;
  timeline: { at: number; what: string }[];
  load: { seconds: number; sent: number; perSecond: number; skipped: number; ttfb: Percentiles | null };
  /** Calls by outcome, over the run and by the phase the call ended in. */
  outcomes: Record<string, number>;
  byPhase: Record<string, Record<string, number>>;
  unexpected: string[];
  peaks: { spooled: number; openHolds: number; minAvailable: { wallet: string; usd: string } | null };
  gatewayMetrics: Record<string, number>;
  settleMetrics: Record<string, number>;
  settle: { seconds: number; left: string[] };
  ledger: CheckReport | null;
  /** Everything lost or wrong: empty on a clean run. */
  lost: string[];
  seconds: number;
}

/** Calls by outcome over the run, and by the phase they ended in (refusals by status). */
export function tally(results: readonly CallResult[]): Pick<SoakReport, 'outcomes' | 'byPhase'> {
  const outcomes: Record<string, number> = {};
  const byPhase: Record<string, Record<string, number>> = {};
  for (const r of results) {
    outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1;
    const p = (byPhase[r.endPhase] ??= {});
    const k = r.outcome === 'refused' ? `refused ${r.status}` : r.outcome;
    p[k] = (p[k] ?? 0) + 1;
  }
  return { outcomes, byPhase };
}

/** One line about an unexpected answer. */
export function describe(r: CallResult): string {
  return `${r.requestId ?? '(no id)'} ${r.gateway} ${r.kind} ${r.model} ${r.twist} (${r.phase}): ${r.status ?? '-'} ${r.code ?? ''} ${r.detail ?? ''}`.trim();
}

const counts = (o: Record<string, number>) =>
  Object.entries(o)
    .sort()
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');

/** The report as text. */
export function formatReport(r: SoakReport): string {
  const lines: string[] = [];
  const o = r.options;
  lines.push(
    `farebox soak, ${r.started}, seed ${o.seed}, ${r.seconds} s, ${r.machine.cpus} cores (${r.machine.model}), load average ${r.machine.load.join(' ')}`,
  );
  if (r.fuzz) {
    const f = r.fuzz;
    lines.push('', `Fuzz: ${f.cases} malformed requests (seed ${f.seed}) in ${f.seconds.toFixed(1)} s`);
    lines.push(
      `  statuses: ${Object.entries(f.statuses)
        .map(([s, n]) => `${s} x${n}`)
        .join(', ')}`,
    );
    lines.push(
      `  unexpected answers (500/503 of the gateway's own, no x-request-id, wrong error shape): ${f.unexpected.length}`,
    );
    for (const u of f.unexpected.slice(0, 20)) lines.push(`    ${u}`);
  }
  if (r.timeline.length) {
    lines.push(
      '',
      `Faults: ${o.gateways} gateways and a settle process on one Redis, ${o.rate} calls/s asked (${r.load.perSecond.toFixed(1)} sent a second over ${r.load.seconds.toFixed(0)} s: ${r.load.sent} calls, ${r.load.skipped} not sent)`,
    );
    for (const t of r.timeline) lines.push(`  ${t.at.toFixed(1).padStart(6)} s  ${t.what}`);
    lines.push('', '  what callers saw, by the phase the call ended in:');
    for (const [phase, c] of Object.entries(r.byPhase)) lines.push(`    ${phase.padEnd(20)} ${counts(c)}`);
    lines.push(`    ${'all'.padEnd(20)} ${counts(r.outcomes)}`);
    lines.push(
      `  the machine's cores were ${r.machine.busyPct}% busy while the load ran (other work on the machine included)`,
    );
    if (r.load.ttfb)
      lines.push(
        `  time to the headers of a 200 (JSON calls wait 0-300 ms upstream): p50 ${r.load.ttfb.p50.toFixed(1)} ms, p99 ${r.load.ttfb.p99.toFixed(1)} ms`,
      );
    const low = r.peaks.minAvailable;
    lines.push(
      `  peaks: ${r.peaks.spooled} debits in spool files, ${r.peaks.openHolds} open holds; lowest available ${low ? `${low.usd} USD (${low.wallet})` : '-'}`,
    );
    lines.push(`  gateways: ${counts(r.gatewayMetrics)}`);
    lines.push(`  settle process: ${counts(r.settleMetrics)}`);
    lines.push(
      `  settlement caught up ${r.settle.seconds.toFixed(1)} s after the last answer${r.settle.left.length ? `; left: ${r.settle.left.join('; ')}` : ''}`,
    );
  }
  const l = r.ledger;
  if (l && r.timeline.length) {
    lines.push(
      '',
      `Ledger: ${l.records} call records (${counts(l.statuses)}); ${l.billed.calls} calls billed, ${l.billed.usd} USD; ${l.late} debited after their hold was released`,
    );
    lines.push(
      `  onchain: ${l.charged} Charged events, ${l.chargedTwice} call ids charged twice, ${l.refusedOnchain} charges refused by the escrow`,
    );
    lines.push(
      `  calls answered in full while Redis was away, checked charged in the order they ended (per gateway and chain): ${l.orderChecked}`,
    );
    lines.push(
      `  answers cut short by a fault: ${l.cut.calls} (${l.cut.billed} billed for what reached the caller, ${l.cut.free} free)`,
    );
    const moved = l.wallets.filter((w) => w.deposited > 0n);
    const eq = moved.filter(
      (w) => w.escrowDecrease === w.settledRecords && w.settledRecords === w.chargedEvents && w.synced === w.balance,
    ).length;
    lines.push(
      `  wallets: ${eq} of ${moved.length} with escrow decrease = settled records = Charged events and synced = escrow`,
    );
    for (const w of moved) {
      lines.push(
        `    ${w.account} ${w.chain}: deposited ${formatUsd(w.deposited)}, escrow down ${formatUsd(w.escrowDecrease)}, settled ${formatUsd(w.settledRecords)}, Charged ${formatUsd(w.chargedEvents)}`,
      );
    }
  }
  lines.push('', r.lost.length ? `LOST OR WRONG: ${r.lost.length}` : 'Lost: nothing.');
  for (const x of r.lost.slice(0, 100)) lines.push(`  ${x}`);
  return lines.join('\n');
}
