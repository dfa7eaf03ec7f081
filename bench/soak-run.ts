/**
 * The soak scenario: a deployment of gateways and a settle process on a private Redis (soak-cluster.ts), the fuzz
 * against one of its gateways, then load through all of them while faults are injected in turn with quiet gaps
 * between (a gateway killed with SIGKILL and started again; Redis stopped for a while, a gateway restarted during
 * the outage, Redis started again on its port and data; the chains paused with SIGSTOP), then the ledger checks
 * (soak-check.ts). `npm run soak` runs it in full (bench/soak.ts); test/billing/soak-faults.test.ts runs a short one.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { createAccount, createKey } from '../plugins/accounts/accounts.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { CHAIN_NAMES, type ChainName } from '../plugins/chains/config.js';
import { mintAndDeposit } from '../plugins/chains/dev-fund.js';
import { closeRedis, connectRedis, logRedisErrors } from '../plugins/store/redis.js';
import { formatUsd } from '../pricing/index.js';
import { checkLedger, waitSettled } from './soak-check.js';
import { coreBusyMsOf } from './children.js';
import { startCluster, type Cluster, type Runner } from './soak-cluster.js';
import { runFuzz, type FuzzReport } from './soak-fuzz.js';
import { Load, type Caller } from './soak-load.js';
import { startPrivateRedis, type PrivateRedis } from './soak-redis.js';
import { describe, tally, type SoakReport } from './soak-report.js';
import { Watch } from './soak-watch.js';

export { formatReport, type SoakReport } from './soak-report.js';

/** What a soak run does; durations in seconds (0 leaves that fault out). */
export interface SoakOptions {
  runner: Runner;
  seed: number;
  gateways: number;
  /** Funded accounts under load (plus one funded to run out), and keys each. */
  accounts: number;
  keysPerAccount: number;
  /** Calls a second, across the gateways. */
  rate: number;
  fuzzCases: number;
  fuzzConcurrency: number;
  /** Run the load and the faults (false: the fuzz alone). */
  faults: boolean;
  /** Load before the first fault, and after each. */
  warmS: number;
  gapS: number;
  /** SIGKILL a gateway, start it again after `gatewayDownS`. */
  gatewayKill: boolean;
  gatewayDownS: number;
  /** Redis away this long; a gateway restarted (SIGTERM, start) during it when `restartInOutage`. */
  redisOutageS: number;
  restartInOutage: boolean;
  /** The chains' process stopped (SIGSTOP) this long. */
  chainsPauseS: number;
  /** How long the long streams run, at least and at most (they outlive a fault's start). */
  longStreamS: [number, number];
  /** Most time settlement may take to catch up once the load stops. */
  settleTimeoutS: number;
  /** Over every gateway's billing config (the test's short timeouts). */
  billing?: Record<string, unknown>;
  /** Keep the run's folder (logs, Redis data) even when nothing was lost. */
  keepDir?: boolean;
  log(line: string): void;
}

/** Busy time of all cores since boot, ms (/proc/stat: every process of the machine, not only the soak's). */
const busyMs = () => cpus().reduce((a, _c, i) => a + coreBusyMsOf(i), 0);

const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));

/** Fund `account` on `chain` and wait until the settle process's watcher has applied it. */
async function fund(cluster: Cluster, redis: Redis, account: string, chain: ChainName, amount: bigint): Promise<void> {
  const onchain = await mintAndDeposit(cluster.chains[chain], account as `0x${string}`, amount);
  const deadline = Date.now() + 60_000;
  while ((await readWallet(redis, account, chain)).synced < onchain) {
    if (Date.now() > deadline) throw new Error(`${account} ${chain}: deposit not applied within 60 s`);
    await sleep(0.1);
  }
}

/** What each caller account holds on each of its chains at the start. */
const PER_CHAIN = 20_000_000n;

/** The callers (funded on every chain; the last one with 0.10 USD on chain_b, to run out under load) and the fuzz's account. */
async function fundAccounts(
  cluster: Cluster,
  redis: Redis,
  opts: SoakOptions,
): Promise<{
  callers: Caller[];
  deposits: Map<string, Partial<Record<ChainName, bigint>>>;
  fuzz: { account: string; key: string };
}> {
  const deposits = new Map<string, Partial<Record<ChainName, bigint>>>();
  const callers: Caller[] = [];
  for (let i = 0; i <= opts.accounts; i++) {
    const tight = i === opts.accounts;
    const account = (await createAccount(redis, {})).address;
    const keys: string[] = [];
    for (let k = 0; k < (tight ? 1 : opts.keysPerAccount); k++) keys.push((await createKey(redis, account)).key);
    const chains: ChainName[] = tight ? ['chain_b'] : [...CHAIN_NAMES];
    deposits.set(account, Object.fromEntries(chains.map((chain) => [chain, tight ? 100_000n : PER_CHAIN])));
    callers.push({ account, keys, chains, tight });
  }
  const fuzz = { account: (await createAccount(redis, {})).address, key: '' };
  fuzz.key = (await createKey(redis, fuzz.account)).key;
  const all: [string, Partial<Record<ChainName, bigint>>][] = [...deposits, [fuzz.account, { chain_a: 50_000_000n }]];
  // One chain's deposits one after another (one minter's nonces), the chains side by side.
  await Promise.all(
    CHAIN_NAMES.map(async (chain) => {
      for (const [account, amounts] of all)
        if (amounts[chain]) await fund(cluster, redis, account, chain, amounts[chain]);
    }),
  );
  return { callers, deposits, fuzz };
}

/** Inject the faults in turn, each followed by a quiet gap of load; `mark` notes each step in the timeline. */
async function injectFaults(
  opts: SoakOptions,
  c: Cluster,
  redisServer: PrivateRedis,
  load: Load,
  watch: Watch,
  mark: (what: string) => void,
): Promise<void> {
  if (opts.gatewayKill) {
    const g = c.gateways[0]!;
    load.phase = 'gateway killed';
    await watch.scrape();
    await c.stopGateway(g, 'SIGKILL');
    mark(`SIGKILL ${g.name}`);
    await sleep(opts.gatewayDownS);
    await c.startGateway(g);
    mark(`${g.name} started again (same spool folder)`);
    load.phase = 'after gateway kill';
    await sleep(opts.gapS);
  }

  if (opts.redisOutageS > 0) {
    load.phase = 'Redis away';
    await redisServer.stop();
    const down = Date.now();
    mark('Redis stopped (SIGTERM)');
    if (opts.restartInOutage && c.gateways.length > 1) {
      // A third of the way in, with a third of the outage to finish its calls (as a deployment's grace period).
      const third = Math.min(20, opts.redisOutageS / 3);
      await sleep(third);
      const g = c.gateways[1]!;
      await watch.scrape();
      const stopped = await c.stopGateway(g, 'SIGTERM', third * 1000);
      mark(
        `${g.name} stopped (SIGTERM) during the outage: exited after ${(stopped.exitedMs / 1000).toFixed(1)} s${stopped.forced ? ` (SIGKILL: still finishing calls after ${third.toFixed(0)} s)` : ''}`,
      );
      await c.startGateway(g);
      mark(`${g.name} started again during the outage (same spool folder)`);
    }
    await sleep(opts.redisOutageS - (Date.now() - down) / 1000);
    await redisServer.start();
    mark(`Redis started again on its port and data after ${((Date.now() - down) / 1000).toFixed(1)} s`);
    load.phase = 'after Redis outage';
    await sleep(opts.gapS);
  }

  if (opts.chainsPauseS > 0) {
    load.phase = 'chains paused';
    c.chainsChild.proc.kill('SIGSTOP');
    mark('dev chains paused (SIGSTOP)');
    await sleep(opts.chainsPauseS);
    c.chainsChild.proc.kill('SIGCONT');
    mark(`dev chains resumed (SIGCONT) after ${opts.chainsPauseS} s`);
    load.phase = 'after chains pause';
    await sleep(opts.gapS);
  }
}

/** Run the scenario. Throws only when the deployment cannot start; what it finds goes to the report's `lost`. */
export async function runSoak(opts: SoakOptions): Promise<SoakReport> {
  const t0 = Date.now();
  const log = opts.log;
  const dir = mkdtempSync(join(tmpdir(), 'farebox-soak-'));
  mkdirSync(join(dir, 'redis'));
  const redisServer = await startPrivateRedis(join(dir, 'redis'));
  const redis = logRedisErrors(connectRedis({ url: redisServer.url, prefix: 'soak:', failFast: true }), () => {});
  let cluster: Cluster | undefined;
  let keep = true;
  try {
    log(`private Redis ${redisServer.url} (AOF, appendfsync always) in ${dir}/redis`);
    cluster = await startCluster(
      {
        runner: opts.runner,
        dir,
        redisUrl: redisServer.url,
        prefix: 'soak:',
        gateways: opts.gateways,
        billing: opts.billing,
        // The fuzz sends one key's calls faster than the default limit of 3,000 a minute.
        limits: { default: { key: { rpm: 1e9 }, account: { rpm: 1e9 } } },
      },
      redis,
    );
    const c = cluster;
    log(`started: simulator, dev chains, farebox settle, ${opts.gateways} gateways (farebox serve, ${opts.runner})`);
    const { callers, deposits, fuzz: fuzzCaller } = await fundAccounts(c, redis, opts);
    log(
      `funded: ${opts.accounts} accounts x ${opts.keysPerAccount} keys with ${formatUsd(PER_CHAIN)} USD on each chain, one with 0.10 USD on chain_b`,
    );

    let fuzz: FuzzReport | undefined;
    if (opts.fuzzCases > 0) {
      log(
        `fuzz: ${opts.fuzzCases} cases, seed ${opts.seed}, ${opts.fuzzConcurrency} at a time, against ${c.gateways[0]!.name}`,
      );
      fuzz = await runFuzz(c.gateways[0]!.url, fuzzCaller.key, opts.seed, opts.fuzzCases, opts.fuzzConcurrency);
      log(
        `fuzz: ${fuzz.seconds.toFixed(1)} s, statuses ${JSON.stringify(fuzz.statuses)}, ${fuzz.unexpected.length} unexpected`,
      );
    }

    const timeline: { at: number; what: string }[] = [];
    const load = new Load(c.gateways, callers, opts.rate, opts.seed, opts.longStreamS);
    const watch = new Watch(redis, c, callers);
    const loadStart = Date.now();
    const busyAtStart = busyMs();
    const mark = (what: string) => {
      const at = Math.round((Date.now() - loadStart) / 100) / 10;
      timeline.push({ at, what });
      log(`[${at.toFixed(1)} s] ${what}`);
    };
    if (opts.faults) {
      load.start();
      mark(`load: ${opts.rate} calls/s through ${opts.gateways} gateways`);
      await sleep(opts.warmS);
      await injectFaults(opts, c, redisServer, load, watch, mark);
      mark('load stopped; waiting for the calls in flight');
    }
    const busyPct = opts.faults
      ? Math.round((100 * (busyMs() - busyAtStart)) / ((Date.now() - loadStart) * cpus().length))
      : 0;
    await load.stop();
    if (opts.faults) mark('every call answered; waiting for settlement');
    const fuzzWallet: Caller = { account: fuzzCaller.account, keys: [], chains: ['chain_a'], tight: false };
    const spoolDirs = c.gateways.map((g) => g.spoolDir);
    const settle = await waitSettled(redis, [...callers, fuzzWallet], spoolDirs, opts.settleTimeoutS * 1000);
    if (opts.faults)
      mark(
        settle.left.length
          ? `settlement did not catch up in ${opts.settleTimeoutS} s`
          : 'settled: nothing held, pending, queued or spooled',
      );
    await watch.stop();

    const results = load.results;
    const unexpected = results.filter((r) => r.outcome === 'unexpected').map(describe);
    const ledger = await checkLedger({
      redis,
      chains: c.chains,
      callers,
      otherAccounts: [fuzzCaller.account],
      deposits,
      results,
      minAvailable: watch.minAvailable,
      ordered: (r) => r.endPhase === 'Redis away',
    });
    const gatewayMetrics = watch.gatewayMetrics();
    const lost = [
      ...(fuzz?.unexpected.map((u) => `fuzz: ${u}`) ?? []),
      ...unexpected.map((u) => `unexpected answer: ${u}`),
      ...settle.left.map((l) => `left after ${opts.settleTimeoutS} s: ${l}`),
      ...ledger.findings,
    ];
    if (gatewayMetrics.debits_lost > 0) lost.push(`${gatewayMetrics.debits_lost} debits dropped by a full spool`);
    // A price capped at its hold is a worst case below the actual price (pricing/worst-case.ts): a money bug.
    if (gatewayMetrics.price_above_hold > 0)
      lost.push(`${gatewayMetrics.price_above_hold} calls priced above their hold (farebox_price_above_hold_total)`);
    keep = lost.length > 0;
    const low = watch.lowest();
    const { log: _log, ...options } = opts;
    return {
      options,
      started: new Date(t0).toISOString(),
      machine: {
        cpus: cpus().length,
        model: cpus()[0]?.model ?? '',
        load: loadavg().map((l) => Math.round(l * 100) / 100),
        busyPct,
      },
      fuzz,
      timeline,
      load: load.stats(),
      ...tally(results),
      unexpected,
      peaks: { ...watch.peaks, minAvailable: low && { wallet: low.wallet, usd: formatUsd(low.available) } },
      gatewayMetrics,
      settleMetrics: watch.settleMetrics(),
      settle,
      ledger,
      lost,
      seconds: Math.round((Date.now() - t0) / 1000),
    };
  } finally {
    await cluster?.close().catch(() => {});
    await closeRedis(redis);
    await redisServer.close();
    if (keep || opts.keepDir) log(`kept for inspection: ${dir} (logs/, redis/)`);
    else rmSync(dir, { recursive: true, force: true });
  }
}
