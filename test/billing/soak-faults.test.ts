// The short run of `npm run soak`'s fault scenario: two gateways (`farebox serve`) and `farebox settle` on a private
// Redis with AOF, each in a process of its own, load through both; Redis stopped for 10 s (SIGTERM, started again on
// its port and data), one gateway restarted during the outage. Then the ledger checks: every 200 has a record, every
// answer delivered in full is billed at its tokens and charged onchain exactly once, per wallet the escrow's decrease
// = the settled records = the Charged events, nothing left held, pending, queued or spooled, available never below 0.
import { spawnSync } from 'node:child_process';
import t from 'tap';
import { stopAll } from '../../bench/children.js';
import { formatReport, runSoak } from '../../bench/soak-run.js';
import { builtAfterSources } from '../helpers/wait.js';

// It runs a Redis of its own, which it stops and starts again: .ci/run installs redis-server.
if (spawnSync('redis-server', ['--version']).status !== 0)
  throw new Error('redis-server is missing: apt-get install -y redis-server');

// Its own bound (the runner's is 120 s): about 50 s on a quiet machine, twice that on a loaded one.
t.setTimeout(300_000);

t.test('10 s Redis outage under load, a gateway restarted during it: nothing lost', async (t) => {
  t.teardown(stopAll);
  const report = await runSoak({
    // Its five processes compiled when bench/ is built after every source (npm run soak or bench builds it): their
    // starts then take seconds, not most of the run. Else from the sources, as the sources are.
    runner: builtAfterSources('dist/bench/server.js', ['bench', 'bin', 'contracts', 'plugins', 'policies', 'pricing'])
      ? 'compiled'
      : 'source',
    seed: Number(process.env.FAREBOX_SOAK_SEED ?? 20261125),
    gateways: 2,
    accounts: 2,
    keysPerAccount: 1,
    rate: 8,
    fuzzCases: 0,
    fuzzConcurrency: 1,
    faults: true,
    warmS: 4,
    gapS: 4,
    gatewayKill: false,
    gatewayDownS: 0,
    redisOutageS: 10,
    restartInOutage: true,
    chainsPauseS: 0,
    longStreamS: [3, 6],
    settleTimeoutS: 60,
    log: () => {},
  });
  if (report.lost.length) t.comment(formatReport(report));
  t.same(report.lost, [], 'nothing lost or answered wrongly');
  t.ok((report.byPhase['Redis away']?.whole ?? 0) > 0, 'calls answered in full while Redis was away');
  t.ok(report.gatewayMetrics.debits_spooled > 0, 'their debits waited in the spools');
  t.ok(
    report.timeline.some((e) => e.what.includes('started again during the outage')),
    'a gateway restarted during the outage',
  );
  t.ok((report.ledger?.billed.calls ?? 0) > 0 && report.ledger?.chargedTwice === 0, 'calls billed, none charged twice');
});
