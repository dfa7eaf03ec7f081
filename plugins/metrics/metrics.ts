/**
 * Prometheus metrics (prom-client), one registry per gateway instance. Names follow Prometheus conventions:
 * `farebox_` prefix, `_total` counters, base units (seconds, USD).
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

const LATENCY_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
];
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];
const DECODE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Every metric the gateway exports. */
export function createMetrics(opts: { defaults?: boolean } = {}) {
  const registry = new Registry();
  if (opts.defaults !== false) collectDefaultMetrics({ register: registry, prefix: 'farebox_' });
  const r = [registry];
  return {
    registry,
    /** Where /metrics listens when it has a port of its own (set by startMetricsServer). */
    server: { port: undefined as number | undefined },
    requests: new Counter({
      name: 'farebox_requests_total',
      help: 'Calls answered, by route, model and HTTP status.',
      labelNames: ['route', 'model', 'status'] as const,
      registers: r,
    }),
    requestDuration: new Histogram({
      name: 'farebox_request_duration_seconds',
      help: 'Time from request to the end of the response.',
      labelNames: ['route'] as const,
      buckets: LATENCY_BUCKETS,
      registers: r,
    }),
    overhead: new Histogram({
      name: 'farebox_gateway_overhead_seconds',
      help: 'Time the gateway spends before the upstream is called (auth, policies, hold).',
      labelNames: ['route'] as const,
      buckets: OVERHEAD_BUCKETS,
      registers: r,
    }),
    upstreamDuration: new Histogram({
      name: 'farebox_upstream_duration_seconds',
      help: 'Time from the upstream request to its response headers.',
      labelNames: ['provider'] as const,
      buckets: LATENCY_BUCKETS,
      registers: r,
    }),
    upstreamErrors: new Counter({
      name: 'farebox_upstream_errors_total',
      help: 'Upstream failures, by provider and status (0 = no answer).',
      labelNames: ['provider', 'status'] as const,
      registers: r,
    }),
    tokens: new Counter({
      name: 'farebox_tokens_total',
      help: 'Tokens billed, by model and kind (input, output, cache_read, cache_write).',
      labelNames: ['model', 'kind'] as const,
      registers: r,
    }),
    charged: new Counter({
      name: 'farebox_charged_usd_total',
      help: 'Amounts debited to wallets, by chain and model.',
      labelNames: ['chain', 'model'] as const,
      registers: r,
    }),
    rejections: new Counter({
      name: 'farebox_rejections_total',
      help: 'Calls answered with an error before the upstream was called, by error code (insufficient_funds, unsupported_client, rate_limited, service_unavailable, ...).',
      labelNames: ['code'] as const,
      registers: r,
    }),
    holdsPlaced: new Counter({
      name: 'farebox_holds_placed_total',
      help: 'Holds placed, by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    holdsReleased: new Counter({
      name: 'farebox_holds_released_total',
      help: 'Holds released without a call settling them (crashed instance, expiry).',
      labelNames: ['reason'] as const,
      registers: r,
    }),
    debitsSpooled: new Counter({
      name: 'farebox_debits_spooled_total',
      help: "Debits that waited in the instance's spool because Redis was away.",
      registers: r,
    }),
    debitSpoolSize: new Gauge({
      name: 'farebox_debit_spool_size',
      help: "Debits waiting in this instance's spool for Redis.",
      registers: r,
    }),
    debitsRefused: new Counter({
      name: 'farebox_debits_refused_total',
      help: 'Debits Redis refused (a price or usage the scripts cannot take): calls not charged. Any is a bug.',
      registers: r,
    }),
    debitsLost: new Counter({
      name: 'farebox_debits_lost_total',
      help: 'Debits dropped because the spool was full: delivered calls not charged.',
      registers: r,
    }),
    debitSpoolFilesNotAdopted: new Gauge({
      name: 'farebox_debit_spool_files_not_adopted',
      help: "Spool files of gone processes this instance found in its folder at start and left there: their header names another Redis or prefix, or none (an earlier version's), or they could not be read. Their debits are not charged until a gateway of their Redis adopts them.",
      registers: r,
    }),
    lateDebits: new Counter({
      name: 'farebox_debits_after_release_total',
      help: 'Calls debited after their hold was released (expired or its instance taken for dead while the call still delivered), by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    priceAboveHold: new Counter({
      name: 'farebox_price_above_hold_total',
      help: 'Calls whose actual price exceeded the hold (capped; a worst-case bug).',
      labelNames: ['model'] as const,
      registers: r,
    }),
    holdsOpen: new Gauge({ name: 'farebox_holds_open', help: 'Holds open in Redis (all instances).', registers: r }),
    debitQueueDepth: new Gauge({
      name: 'farebox_debit_queue_depth',
      help: 'Debits not yet charged onchain, by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    debitQueueOldest: new Gauge({
      name: 'farebox_debit_queue_oldest_seconds',
      help: 'Age of the oldest debit not yet charged onchain, by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    escrowWithdrawalDelay: new Gauge({
      name: 'farebox_escrow_withdrawal_delay_seconds',
      help: "The escrow's withdrawal delay, by chain, as the watcher read it: a debit that waits longer for its charge may find its money withdrawn. Reported by the watcher.",
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainAdmissionStopped: new Gauge({
      name: 'farebox_chain_admission_stopped',
      help: "Whether this instance refuses new calls on the chain (1): its oldest unsettled debit passed billing.backlog_stop_ratio of the escrow's withdrawal delay (503 chain_settlement_behind), until it is under half of that.",
      labelNames: ['chain'] as const,
      registers: r,
    }),
    settlementBatches: new Counter({
      name: 'farebox_settlement_batches_total',
      help: 'Charge batches sent onchain, by chain and result.',
      labelNames: ['chain', 'result'] as const,
      registers: r,
    }),
    settlementCharges: new Counter({
      name: 'farebox_settlement_charges_total',
      help: 'Charges in mined batches, by chain and outcome.',
      labelNames: ['chain', 'outcome'] as const,
      registers: r,
    }),
    settlementFailures: new Counter({
      name: 'farebox_settlement_failures_total',
      help: 'Settlement attempts that failed (RPC, revert, timeout), by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    settlementDuration: new Histogram({
      name: 'farebox_settlement_duration_seconds',
      help: 'Time from sending a charge batch to its confirmed receipt.',
      labelNames: ['chain'] as const,
      buckets: LATENCY_BUCKETS,
      registers: r,
    }),
    settlementLag: new Histogram({
      name: 'farebox_settlement_lag_seconds',
      help: 'Time from a debit to its charge onchain.',
      labelNames: ['chain'] as const,
      buckets: LATENCY_BUCKETS,
      registers: r,
    }),
    chainEvents: new Counter({
      name: 'farebox_chain_events_total',
      help: 'Escrow events applied to synced balances, by chain and kind.',
      labelNames: ['chain', 'kind'] as const,
      registers: r,
    }),
    chainLagBlocks: new Gauge({
      name: 'farebox_chain_watcher_lag_blocks',
      help: 'Blocks between the chain head and the last block the watcher applied.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainErrors: new Counter({
      name: 'farebox_chain_errors_total',
      help: 'RPC errors of the chain watcher and reconciler, by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainHalted: new Gauge({
      name: 'farebox_chain_halted',
      help: "Whether the watcher stopped applying the chain's events (1): a reorg deeper than the confirmations. Reported by the lease holder.",
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainNodeBehind: new Counter({
      name: 'farebox_chain_node_behind_total',
      help: "Scans retried because the node that answered had not reached the range's last block (a lagging backend).",
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainLogRange: new Gauge({
      name: 'farebox_chain_log_range_blocks',
      help: "Blocks the watcher asks of one eth_getLogs now (halved on a node's range limit, grown back after successes).",
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainLogRangeSplits: new Counter({
      name: 'farebox_chain_log_range_splits_total',
      help: 'eth_getLogs ranges halved after a node refused them as too large or too many results.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    chainAnomalies: new Counter({
      name: 'farebox_chain_anomalies_total',
      help: 'Escrow events not applied (an amount of 2^53 atomic units or more), by chain and kind; kept in chain-anomalies:<chain>.',
      labelNames: ['chain', 'kind'] as const,
      registers: r,
    }),
    unmatchedCharges: new Counter({
      name: 'farebox_chain_unmatched_charges_total',
      help: "Charge outcomes applied without a pending call record: unknown_call (no record: lost with Redis's last writes, expired, or not ours; rebuilt from the event), call_not_debited (a record held or released free, its debit lost; settled from the event) or call_not_pending (settled already, or another wallet's; left as it is).",
      labelNames: ['chain', 'reason'] as const,
      registers: r,
    }),
    escrowAdminEvents: new Counter({
      name: 'farebox_escrow_admin_events_total',
      help: "Escrow role, ownership and charge-cap events seen by the watcher, by chain and kind (proposals announce changes to who can take callers' money).",
      labelNames: ['chain', 'kind'] as const,
      registers: r,
    }),
    reconcileLastRound: new Gauge({
      name: 'farebox_reconcile_last_round_timestamp_seconds',
      help: 'When the reconciler last finished a round of the chain (unix seconds). Reported by the lease holder.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    settlementFeeCapped: new Counter({
      name: 'farebox_settlement_fee_capped_total',
      help: "Times fees above the chain's max_fee_per_gas held a charge batch back (before its first send, or instead of a replacement).",
      labelNames: ['chain'] as const,
      registers: r,
    }),
    imageDecode: new Histogram({
      name: 'farebox_image_decode_seconds',
      help: 'Full decodes of reference images (and their preparation for the upstream), by endpoint: run only for calls whose hold is placed, never for a call refused before it.',
      labelNames: ['endpoint'] as const,
      buckets: DECODE_BUCKETS,
      registers: r,
    }),
    videoJobs: new Counter({
      name: 'farebox_video_jobs_total',
      help: 'Video jobs submitted, and ended (completed, failed), by model.',
      labelNames: ['model', 'status'] as const,
      registers: r,
    }),
    videoJobsOpen: new Gauge({
      name: 'farebox_video_jobs_open',
      help: "Video jobs not yet ended and settled (all instances). Reported by the poller's lease holder.",
      registers: r,
    }),
    videoJobDuration: new Histogram({
      name: 'farebox_video_job_duration_seconds',
      help: "Time from a video job's submit to its end, by model and status.",
      labelNames: ['model', 'status'] as const,
      buckets: [1, 5, 15, 30, 60, 120, 180, 300, 600, 1200, 3600],
      registers: r,
    }),
    abandonedCalls: new Counter({
      name: 'farebox_abandoned_calls_total',
      help: 'Billed calls (a hold placed) whose caller left before anything billable reached it (free, whatever the provider did: a text answer before its first generated token, an image before its delivery was billable, a video submit before its job id), by account and endpoint; counted only where the provider was asked. One series per account that abandons calls.',
      labelNames: ['account', 'endpoint'] as const,
      registers: r,
    }),
    videoCancels: new Counter({
      name: 'farebox_video_cancels_total',
      help: "Upstream video jobs nobody will pay for (their caller left before the job id reached it, the job could not be recorded, or it was failed at its deadline), by provider and what the cancel did: cancelled, gone (the provider no longer had it), refused, unsupported (the protocol cannot stop a job) or failed (no answer after its tries). Other than cancelled and gone, the provider renders at the operator's cost.",
      labelNames: ['provider', 'outcome'] as const,
      registers: r,
    }),
    videoPolls: new Counter({
      name: 'farebox_video_upstream_polls_total',
      help: 'Upstream polls of video jobs, by provider and what they found (in_progress, completed, failed, error).',
      labelNames: ['provider', 'result'] as const,
      registers: r,
    }),
    drift: new Counter({
      name: 'farebox_balance_drift_usd_total',
      help: 'Absolute difference found between synced balances and the chain, by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
    driftCorrections: new Counter({
      name: 'farebox_balance_drift_corrections_total',
      help: 'Synced balances corrected by the reconciler, by chain.',
      labelNames: ['chain'] as const,
      registers: r,
    }),
  };
}

/** The metrics of one gateway instance. */
export type Metrics = ReturnType<typeof createMetrics>;

/** Create the labelled series alerts watch at 0, so increase() sees their first event. */
export function initSeries(m: Metrics, chains: readonly string[], models: readonly string[]): void {
  for (const chain of chains) {
    for (const c of [
      m.holdsPlaced,
      m.lateDebits,
      m.settlementFailures,
      m.drift,
      m.driftCorrections,
      m.chainErrors,
      m.chainNodeBehind,
      m.settlementFeeCapped,
    ])
      c.inc({ chain }, 0);
    for (const outcome of ['charged', 'refused', 'over_cap', 'already_charged', 'already_refused'])
      m.settlementCharges.inc({ chain, outcome }, 0);
    for (const reason of ['unknown_call', 'call_not_debited', 'call_not_pending'])
      m.unmatchedCharges.inc({ chain, reason }, 0);
  }
  for (const reason of ['instance_died', 'expired']) m.holdsReleased.inc({ reason }, 0);
  for (const model of models) m.priceAboveHold.inc({ model }, 0);
}

/** An atomic amount as USD for a metric (metrics are not money of record; floats are fine here). */
export function usdOf(atomic: bigint): number {
  return Number(atomic) / 1e6;
}

/** Calls `add` once per distinct value with its count: one counter update per label set of a batch, not per item. */
export function countBy<T extends string>(values: readonly T[], add: (value: T, count: number) => void): void {
  const counts = new Map<T, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  for (const [v, n] of counts) add(v, n);
}
