/**
 * `npm run soak`: the fuzz and the fault scenario (bench/soak-run.ts) on compiled servers (built first), each in a
 * process of its own on a private Redis. Prints the report, writes bench/results/soak-latest.{txt,json}, and exits 1
 * when anything was lost or answered wrongly.
 *
 * Environment (defaults in brackets): SOAK_SEED [random, printed], SOAK_RATE calls/s [60], SOAK_GATEWAYS [3],
 * SOAK_ACCOUNTS [5] with SOAK_KEYS keys each [3], SOAK_FUZZ_CASES [6000] (0: no fuzz), SOAK_FUZZ_CONCURRENCY [8],
 * SOAK_WARM_S [20] load before the first fault, SOAK_GAP_S [20] quiet load after each, SOAK_GATEWAY_DOWN_S [2]
 * between a gateway's SIGKILL and its start, SOAK_REDIS_OUTAGE_S [60] (0: none), SOAK_CHAINS_PAUSE_S [20] (0: none),
 * SOAK_SETTLE_TIMEOUT_S [180], SOAK_FAULTS [1] (0: the fuzz alone), SOAK_KEEP [0] (1: keep the run's folder, its logs
 * and Redis data, which a run that lost something always keeps).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { killAllNow, stopAll } from './children.js';
import { formatReport, runSoak } from './soak-run.js';

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

function intEnv(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${v}`);
  return n;
}

const faults = intEnv('SOAK_FAULTS', 1) === 1;
const seed = intEnv('SOAK_SEED', Math.floor(Math.random() * 2 ** 31));
const log = (s: string) => process.stderr.write(`${s}\n`);
process.once('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => void stopAll().finally(() => process.exit(130)));
}

const report = await runSoak({
  runner: 'compiled',
  seed,
  gateways: intEnv('SOAK_GATEWAYS', 3),
  accounts: intEnv('SOAK_ACCOUNTS', 5),
  keysPerAccount: intEnv('SOAK_KEYS', 3),
  rate: intEnv('SOAK_RATE', 60),
  fuzzCases: intEnv('SOAK_FUZZ_CASES', 6_000),
  fuzzConcurrency: intEnv('SOAK_FUZZ_CONCURRENCY', 8),
  faults,
  warmS: intEnv('SOAK_WARM_S', 20),
  gapS: intEnv('SOAK_GAP_S', 20),
  gatewayKill: true,
  gatewayDownS: intEnv('SOAK_GATEWAY_DOWN_S', 2),
  redisOutageS: intEnv('SOAK_REDIS_OUTAGE_S', 60),
  restartInOutage: true,
  chainsPauseS: intEnv('SOAK_CHAINS_PAUSE_S', 20),
  longStreamS: [10, 30],
  settleTimeoutS: intEnv('SOAK_SETTLE_TIMEOUT_S', 180),
  keepDir: process.env.SOAK_KEEP === '1',
  log,
});
const text = formatReport(report);
process.stdout.write(`${text}\n`);
const results = join(ROOT, 'bench', 'results');
mkdirSync(results, { recursive: true });
writeFileSync(join(results, 'soak-latest.txt'), `${text}\n`);
writeFileSync(
  join(results, 'soak-latest.json'),
  `${JSON.stringify(report, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`,
);
process.exit(report.lost.length ? 1 : 0);
