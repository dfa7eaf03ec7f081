/**
 * What the soak watches while it runs: each wallet's available balance (its lowest must never be below 0), open
 * holds and spooled debits at their peaks, and the gateways' and the settle process's metrics (the last scrape of
 * each process, so a gateway killed later still counts what it did before).
 */
import type { Redis } from 'ioredis';
import { countOpenHolds } from '../plugins/billing/call-records.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { spooledDebits } from './soak-check.js';
import type { Cluster } from './soak-cluster.js';
import type { Caller } from './soak-load.js';

/** Sum of a metric's samples in a Prometheus text exposition (all label sets), or of those with `label`. */
export function metricSum(text: string, name: string, label?: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    if (label && !line.includes(label)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
  }
  return sum;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Samples the deployment every `everyMs` until stopped. */
export class Watch {
  /** Lowest available balance seen per wallet (`<account> <chain>`). */
  readonly minAvailable = new Map<string, bigint>();
  readonly peaks = { spooled: 0, openHolds: 0 };
  /** Last metrics text of each process (gateways by process name, and `settle`). */
  private readonly scrapes = new Map<string, string>();
  private running = true;
  private readonly loop: Promise<void>;

  constructor(
    private readonly redis: Redis,
    private readonly cluster: Cluster,
    private readonly callers: readonly Caller[],
    everyMs = 1_500,
  ) {
    this.loop = (async () => {
      for (let tick = 0; this.running; tick++) {
        await this.sample();
        if (tick % 3 === 0) await this.scrape();
        await sleep(everyMs);
      }
    })();
  }

  private async sample(): Promise<void> {
    this.peaks.spooled = Math.max(this.peaks.spooled, spooledDebits(this.cluster.gateways.map((g) => g.spoolDir)));
    try {
      this.peaks.openHolds = Math.max(this.peaks.openHolds, await countOpenHolds(this.redis));
      for (const caller of this.callers) {
        for (const chain of caller.chains) {
          const w = await readWallet(this.redis, caller.account, chain);
          const k = `${caller.account} ${chain}`;
          const min = this.minAvailable.get(k);
          if (min === undefined || w.available < min) this.minAvailable.set(k, w.available);
        }
      }
    } catch {
      // Redis away: nothing to read
    }
  }

  /** Read every running process's metrics now (before a gateway is stopped, and at the end). */
  async scrape(): Promise<void> {
    const read = (url: string) =>
      fetch(url, { signal: AbortSignal.timeout(2_000) })
        .then((r) => (r.ok ? r.text() : null))
        .catch(() => null);
    await Promise.all(
      this.cluster.gateways
        .filter((g) => g.up && g.child)
        .map(async (g) => {
          const name = g.child!.name;
          const text = await read(g.metricsUrl);
          if (text) this.scrapes.set(name, text);
        }),
    );
    const text = await read(this.cluster.settleMetrics);
    if (text) this.scrapes.set('settle', text);
  }

  /** Stop sampling after a last scrape. */
  async stop(): Promise<void> {
    await this.scrape();
    this.running = false;
    await this.loop;
  }

  /** The lowest available balance of any wallet, with the wallet. */
  lowest(): { wallet: string; available: bigint } | null {
    let lowest: { wallet: string; available: bigint } | null = null;
    for (const [wallet, available] of this.minAvailable)
      if (!lowest || available < lowest.available) lowest = { wallet, available };
    return lowest;
  }

  /** Counters summed over every gateway process of the run. */
  gatewayMetrics(): Record<string, number> {
    const texts = [...this.scrapes].filter(([name]) => name !== 'settle').map(([, t]) => t);
    const sum = (name: string, label?: string) => texts.reduce((a, t) => a + metricSum(t, name, label), 0);
    return {
      debits_spooled: sum('farebox_debits_spooled_total'),
      debits_lost: sum('farebox_debits_lost_total'),
      debits_after_release: sum('farebox_debits_after_release_total'),
      holds_released_instance_died: sum('farebox_holds_released_total', 'reason="instance_died"'),
      holds_released_expired: sum('farebox_holds_released_total', 'reason="expired"'),
      price_above_hold: sum('farebox_price_above_hold_total'),
      refused_service_unavailable: sum('farebox_rejections_total', 'code="service_unavailable"'),
    };
  }

  /** The settle process's counters. */
  settleMetrics(): Record<string, number> {
    const t = this.scrapes.get('settle') ?? '';
    return {
      batches_mined: metricSum(t, 'farebox_settlement_batches_total', 'result="mined"'),
      charges_charged: metricSum(t, 'farebox_settlement_charges_total', 'outcome="charged"'),
      charges_already_charged: metricSum(t, 'farebox_settlement_charges_total', 'outcome="already_charged"'),
      settlement_failures: metricSum(t, 'farebox_settlement_failures_total'),
      chain_errors: metricSum(t, 'farebox_chain_errors_total'),
      drift_corrections: metricSum(t, 'farebox_balance_drift_corrections_total'),
      unmatched_charges: metricSum(t, 'farebox_chain_unmatched_charges_total'),
    };
  }
}
