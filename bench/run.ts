/**
 * `npm run bench`: the simulator (no delay), farebox and a peer gateway (@portkey-ai/gateway) in their own
 * processes, measured side by side on the same calls. Servers are pinned to core 1 (farebox's settle process with
 * it: settlement is farebox's work); this process (the load generator), the simulator, the dev chains and a local
 * Redis to core 0 (Redis's CPU mask is put back at the end), so the measured server has a core to itself.
 *
 * Environment: BENCH_DURATION (s per cell, 15), BENCH_WARMUP (s, 3), BENCH_SEQUENTIAL (requests, 500, one at a time
 * after BENCH_SEQUENTIAL_WARMUP_MS (2000) of unmeasured ones),
 * BENCH_CONCURRENCY (50,200), REDIS_URL (redis://127.0.0.1:6379), BENCH_PROFILE=<scenario> (instead: a CPU
 * profile of farebox's main thread under that load at 50 connections, a real-traffic scenario at its own;
 * BENCH_PROFILE_PROCESS=settle, chains or sim: of the settle process's, the dev chains' or the simulator's instead;
 * BENCH_PROFILE_CONNECTIONS=1: one call at a time).
 * Writes bench/results/latest.{json,md}; with BENCH_PROFILE, bench/results/profile.{md,cpuprofile} (the
 * .cpuprofile opens in Chrome DevTools).
 * Scenarios: chat-json, chat-stream, messages-stream, and video-poll (GET /v1/videos/{id} of one submitted job, on
 * farebox and direct only: a caller's poll against the provider's own answer to it).
 * Real traffic (bench/scenarios.ts REAL_TRAFFIC, bodies from bench/agent-bodies.ts): agent turns as the Claude Code
 * CLI sends them (messages-200k-json, messages-200k-stream, messages-1m-json, messages-1m-stream: system blocks and
 * tools, a tool_use/tool_result history, cache_control) and their chat completions equivalents (chat-200k-json,
 * chat-200k-stream, chat-1m-json, chat-1m-stream), each body exactly 200 KiB or 1 MiB asking for a 20-token answer;
 * and streams of 4,000 output tokens from a small request (chat-stream-4k, messages-stream-4k). They run at their own
 * concurrency (16 for the 200 KiB turns; 4 for the 1 MiB turns, which cost each of the two cores tens of ms a call;
 * 8 for the 4,000-token streams, whose 4,000 events cost the load generator itself about 10 ms a call), for
 * BENCH_REAL_DURATION s (min(BENCH_DURATION, 6)) per cell after min(BENCH_WARMUP, 2) s of warm-up, and
 * BENCH_REAL_SEQUENTIAL (min(BENCH_SEQUENTIAL, 60)) calls one at a time: 30 cells that add about 5 minutes to a
 * full run. Each reports the server's peak RSS during its cell (VmHWM reset before it) beside CPU per call (under
 * load and one at a time) and latency.
 * BENCH_QUICK=<scenario>[,<scenario>...], any scenario above (e.g. BENCH_QUICK=messages-1m-json,chat-stream-4k):
 * farebox alone, BENCH_REPEAT (3) cells of each scenario at each of its concurrencies, printing req/s, CPU per call
 * and peak RSS, then BENCH_REPEAT one-at-a-time runs of BENCH_SEQUENTIAL (real traffic: BENCH_REAL_SEQUENTIAL) calls
 * direct and through farebox (0: none), printing the added p50 and p99 and farebox's CPU per call (an A/B of a
 * change in a few minutes; writes nothing).
 * BENCH_RATE: requests per second across a cell's connections (bench/load.ts; default: as fast as answers come), to
 * compare two versions at equal load.
 * BENCH_FAREBOX_NODE_ARGS: extra node flags for farebox's gateway process (space-separated), to try V8 settings.
 * Images (bench/images.ts): after the text cells, each image scenario on direct, farebox and the peer, at
 * BENCH_IMAGE_CONCURRENCY (20) for BENCH_IMAGE_DURATION s (10) each, then BENCH_IMAGE_SEQUENTIAL (30) calls one at a
 * time; BENCH_QUICK=images runs them alone (with any text scenarios named beside it) and prints their table.
 * Settlement (bench/settlement.ts): last, farebox's settlement on dev chains of its own mining a block every
 * BENCH_SETTLE_BLOCK_MS (2000) and settling at BENCH_SETTLE_CONFIRMATIONS (12): calls at the gateway's full rate on
 * BENCH_SETTLE_CONNECTIONS (64) for BENCH_SETTLE_DURATION s (60; 0 leaves the cell out) over the four chains, then a
 * backlog of BENCH_SETTLE_BACKLOG s (30) of calls drained by one settler key; BENCH_QUICK=settlement runs it alone.
 */
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { Agent } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import { createAccount, createKey } from '../plugins/accounts/accounts.js';
import { connectRedis, deleteKeys, redisIdentity } from '../plugins/store/redis.js';
import { defaultSpoolDir } from '../plugins/billing/spool.js';
import { readWallet } from '../plugins/billing/wallets.js';
import {
  ask,
  coreBusyMsOf,
  cpuMsOf,
  freePort,
  localRedisPid,
  killAllNow,
  memAfterGc,
  memOf,
  pinLocalRedis,
  pinSelf,
  readyUrl,
  resetPeakRss,
  runWaitMsOf,
  spawnNode,
  stopAll,
  stopChild,
  waitForPort,
  type Child,
} from './children.js';
import { runLoad } from './load.js';
import { summarizeProfile } from './profile.js';
import {
  compare,
  machine,
  mib,
  toMarkdown,
  type BenchResults,
  type LoadCell,
  type MemoryPoint,
  type SequentialCell,
} from './report.js';
import { IMAGE_SCENARIOS, imagesMarkdown, runImages } from './images.js';
import { runSettlement, settlementMarkdown, type SettlementSettings } from './settlement.js';
import {
  REAL_TRAFFIC,
  SCENARIOS,
  TARGETS,
  completeAnswer,
  requestFor,
  runsOn,
  setVideoJob,
  videoSubmitFor,
  type Scenario,
  type Target,
  type TargetName,
} from './scenarios.js';
import { runSequential, sendOnce } from './sequential.js';
import { round } from './stats.js';

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));
const RESULTS = join(ROOT, 'bench', 'results');
// The servers run compiled (dist/, built by `npm run bench` first), as a deployment runs them: not under tsx,
// whose loader thread would add its own memory and work to theirs.
const SERVER = join(ROOT, 'dist', 'bench', 'server.js');
const LOAD_CORE = 0;
const SERVER_CORE = 1;

function intEnv(name: string, fallback: number): number {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer, got ${v}`);
  return n;
}

const DURATION = intEnv('BENCH_DURATION', 15);
const WARMUP = intEnv('BENCH_WARMUP', 3);
const SEQUENTIAL = intEnv('BENCH_SEQUENTIAL', 500);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? '50,200').split(',').map((s) => Number(s.trim()));
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const PROFILE = process.env.BENCH_PROFILE as Scenario | undefined;
const PROFILE_PROCESS = (process.env.BENCH_PROFILE_PROCESS ?? 'farebox') as 'farebox' | 'settle' | 'chains' | 'sim';
const PROCESS_NAME = {
  farebox: 'farebox',
  settle: "farebox's settle process",
  chains: "farebox's chains process",
  sim: 'the simulator',
}[PROFILE_PROCESS];
const QUICK_NAMES = process.env.BENCH_QUICK ? process.env.BENCH_QUICK.split(',').map((x) => x.trim()) : undefined;
const QUICK_IMAGES = QUICK_NAMES?.includes('images') ?? false;
const QUICK_SETTLEMENT = QUICK_NAMES?.includes('settlement') ?? false;
const QUICK = QUICK_NAMES?.filter((x) => x !== 'images' && x !== 'settlement') as Scenario[] | undefined;
const IMAGE_CONCURRENCY = intEnv('BENCH_IMAGE_CONCURRENCY', 20);
const IMAGE_DURATION = intEnv('BENCH_IMAGE_DURATION', 10);
const IMAGE_SEQUENTIAL = intEnv('BENCH_IMAGE_SEQUENTIAL', 30);
const REPEAT = intEnv('BENCH_REPEAT', 3);
const REAL_DURATION = intEnv('BENCH_REAL_DURATION', Math.min(DURATION, 6));
const REAL_SEQUENTIAL = intEnv('BENCH_REAL_SEQUENTIAL', Math.min(SEQUENTIAL, 60));
/** Warm-up of a real-traffic cell: each call is big, so 2 s warm the gateway as 3 s of small ones do. */
const REAL_WARMUP = Math.min(WARMUP, 2);
/** The concurrencies a scenario runs at: the real-traffic scenarios' own, else BENCH_CONCURRENCY. */
const connectionsOf = (s: Scenario): number[] => {
  const real = REAL_TRAFFIC[s];
  return real ? [real.connections] : CONCURRENCY;
};
/** Seconds of warm-up before a load cell of a scenario. */
const warmupOf = (s: Scenario): number => (REAL_TRAFFIC[s] ? REAL_WARMUP : WARMUP);
/** Seconds per load cell of a scenario. */
const durationOf = (s: Scenario): number => (REAL_TRAFFIC[s] ? REAL_DURATION : DURATION);
/** One-at-a-time runs warm up for this long at least (bench/sequential.ts runSequential says why). */
const SEQUENTIAL_WARMUP_MS = intEnv('BENCH_SEQUENTIAL_WARMUP_MS', 2000);
/** Calls of a scenario's one-at-a-time run, and the unmeasured ones before them. */
const sequentialOf = (s: Scenario): { count: number; warmup: number } => {
  const count = REAL_TRAFFIC[s] ? REAL_SEQUENTIAL : SEQUENTIAL;
  return { count, warmup: Math.min(REAL_TRAFFIC[s] ? 10 : 50, count) };
};
const SETTLE: SettlementSettings = {
  blockMs: intEnv('BENCH_SETTLE_BLOCK_MS', 2000),
  confirmations: intEnv('BENCH_SETTLE_CONFIRMATIONS', 12),
  durationS: intEnv('BENCH_SETTLE_DURATION', 60),
  backlogS: intEnv('BENCH_SETTLE_BACKLOG', 30),
  connections: intEnv('BENCH_SETTLE_CONNECTIONS', 64),
};
const FAREBOX_NODE_ARGS = (process.env.BENCH_FAREBOX_NODE_ARGS ?? '').split(' ').filter(Boolean);
if (CONCURRENCY.some((c) => !Number.isInteger(c) || c < 1))
  throw new Error('BENCH_CONCURRENCY: comma-separated positive integers');
if (PROFILE !== undefined && !SCENARIOS.includes(PROFILE))
  throw new Error(`BENCH_PROFILE must be one of ${SCENARIOS.join(', ')}`);
if (!['farebox', 'settle', 'chains', 'sim'].includes(PROFILE_PROCESS))
  throw new Error('BENCH_PROFILE_PROCESS must be farebox, settle, chains or sim');
if (QUICK?.some((q) => !SCENARIOS.includes(q)))
  throw new Error(`BENCH_QUICK: comma-separated scenarios of ${SCENARIOS.join(', ')}, images or settlement`);
if (SETTLE.blockMs < 1 || SETTLE.confirmations < 1 || SETTLE.connections < 4)
  throw new Error('BENCH_SETTLE_BLOCK_MS and _CONFIRMATIONS at least 1, _CONNECTIONS at least 4');
if (!DURATION) throw new Error('BENCH_DURATION must be at least 1');
if (!REAL_DURATION) throw new Error('BENCH_REAL_DURATION must be at least 1');

const require = createRequire(import.meta.url);

/** The peer's start script and the versions that matter for it (@hono/node-server 1.14.2+ breaks its streams). */
function peerPackage(): { script: string; versions: Record<string, string> } {
  const pkgFile = require.resolve('@portkey-ai/gateway/package.json');
  const pkg = JSON.parse(readFileSync(pkgFile, 'utf8')) as { version: string; bin: string | Record<string, string> };
  const bin = typeof pkg.bin === 'string' ? pkg.bin : Object.values(pkg.bin)[0]!;
  const versions: Record<string, string> = { '@portkey-ai/gateway': pkg.version };
  // The copy Portkey imports: the nearest node_modules/@hono/node-server above its own directory.
  for (let dir = dirname(pkgFile); dir !== dirname(dir); dir = dirname(dir)) {
    const f = join(dir, 'node_modules', '@hono', 'node-server', 'package.json');
    if (existsSync(f)) {
      versions['@hono/node-server'] = (JSON.parse(readFileSync(f, 'utf8')) as { version: string }).version;
      break;
    }
  }
  return { script: join(dirname(pkgFile), bin), versions };
}

function packageVersion(name: string): string {
  const main = require.resolve(name);
  for (let dir = dirname(main); dir !== dirname(dir); dir = dirname(dir)) {
    const f = join(dir, 'package.json');
    if (existsSync(f)) {
      const pkg = JSON.parse(readFileSync(f, 'utf8')) as { name?: string; version: string };
      if (pkg.name === name) return pkg.version;
    }
  }
  return 'unknown';
}

const log = (s: string) => process.stderr.write(s + '\n');

interface Servers {
  sim: Child;
  simUrl: string;
  fb: Child;
  fbUrl: string;
  /** farebox's `farebox settle` process: its settler and watcher. */
  settle: Child;
  /** The dev chains farebox settles on. */
  chains: Child;
  peer?: Child;
  peerUrl?: string;
}

/** Start the simulator, farebox with its settle process and (unless told not to) the peer. */
async function startServers(prefix: string, withPeer = true): Promise<Servers> {
  const sim = spawnNode('simulator', LOAD_CORE, [], SERVER, ['sim']);
  const simUrl = await readyUrl(sim);
  // The dev chains farebox settles on run beside the simulator, off the measured core (bench/farebox-target.ts).
  // Source maps only for a profile: its frames are then named by their .ts positions.
  const mapArgs = PROFILE ? ['--enable-source-maps'] : [];
  const chains = spawnNode('dev chains', LOAD_CORE, mapArgs, SERVER, ['chains', REDIS_URL, prefix]);
  await readyUrl(chains);
  // Settlement on farebox's core, started first: farebox funds the bench account, which needs the watcher.
  const settle = spawnNode('farebox settle', SERVER_CORE, mapArgs, SERVER, ['settle', REDIS_URL, prefix]);
  await readyUrl(settle);
  const fbArgs = [...FAREBOX_NODE_ARGS, ...mapArgs];
  const fb = spawnNode('farebox', SERVER_CORE, fbArgs, SERVER, ['farebox', simUrl, REDIS_URL, prefix]);
  const fbUrl = await readyUrl(fb);
  if (!withPeer) return { sim, simUrl, fb, fbUrl, settle, chains };
  const { script } = peerPackage();
  const port = await freePort();
  const peer = spawnNode('peer', SERVER_CORE, [], script, [`--port=${port}`, '--headless']);
  await waitForPort(peer, port);
  return { sim, simUrl, fb, fbUrl, settle, chains, peer, peerUrl: `http://127.0.0.1:${port}` };
}

/** RSS of an idle node process with `nodeArgs`, MiB: what a server's RSS holds before any code of its own. */
async function idleRss(nodeArgs: string[]): Promise<number> {
  const c = spawnNode('idle node', SERVER_CORE, nodeArgs, '-e', ['setInterval(() => {}, 1e9)']);
  try {
    await new Promise((r) => setTimeout(r, 2000));
    return mib(memOf(c.pid).rssKiB, 'KiB');
  } finally {
    await stopChild(c);
  }
}

/**
 * Submit the video job each target's `video-poll` polls: through farebox (held and recorded as any caller's), and
 * straight to the simulator for `direct`.
 */
async function submitVideoJobs(targets: Target[], key: string, problems: string[]): Promise<void> {
  const agent = new Agent({ keepAlive: false });
  for (const t of targets.filter((x) => runsOn('video-poll', x.name))) {
    try {
      const r = await sendOnce(videoSubmitFor(t, key), agent, 10_000, true);
      const id = (JSON.parse(r.body) as { id?: unknown }).id;
      if (r.status === 200 && typeof id === 'string') setVideoJob(t.name, id);
      else problems.push(`${t.name} video submit: HTTP ${r.status}, body ${JSON.stringify(r.body.slice(0, 300))}`);
    } catch (err) {
      problems.push(`${t.name} video submit: ${(err as Error).message}`);
    }
  }
  agent.destroy();
}

/** One request of every scenario to every target; a target that answers wrongly is left out of that scenario. */
async function sanity(
  targets: Target[],
  simUrl: string,
  key: string,
  problems: string[],
  scenarios: readonly Scenario[] = SCENARIOS,
): Promise<Set<string>> {
  const ok = new Set<string>();
  await submitVideoJobs(targets, key, problems);
  const agent = new Agent({ keepAlive: false });
  for (const scenario of scenarios) {
    for (const t of targets) {
      if (!runsOn(scenario, t.name)) continue;
      try {
        const r = await sendOnce(requestFor(scenario, t, simUrl, key), agent, 10_000, true);
        if (r.status === 200 && completeAnswer(scenario, r.body)) ok.add(`${scenario}/${t.name}`);
        else
          problems.push(
            `${t.name} ${scenario}: HTTP ${r.status}, body ${JSON.stringify(r.body.slice(0, 300))}; left out`,
          );
      } catch (err) {
        problems.push(`${t.name} ${scenario}: ${(err as Error).message}; left out`);
      }
    }
  }
  agent.destroy();
  return ok;
}

/**
 * Wait (at most 60 s) until farebox has settled every call of the bench account onchain, so that memory is read
 * at rest: a settlement backlog (debits queued, events not yet applied) is work in flight, not a leak.
 * Returns the seconds waited, or null if it did not settle in time.
 */
async function settledAtRest(redis: Redis): Promise<number | null> {
  const account = process.env.FAREBOX_BENCH_ACCOUNT!;
  const start = Date.now();
  for (;;) {
    const w = await readWallet(redis, account, 'chain_a');
    if (w.pending === 0n && w.held === 0n) return round((Date.now() - start) / 1000, 1);
    if (Date.now() - start > 60_000) return null;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function memoryPoint(s: Servers, when: string, redis: Redis): Promise<MemoryPoint> {
  const settleWaitS = await settledAtRest(redis);
  const rss = memOf(s.fb.pid).rssKiB;
  const settleRss = memOf(s.settle.pid).rssKiB;
  const gc = await memAfterGc(s.fb);
  return {
    when,
    rssMiB: mib(rss, 'KiB'),
    rssAfterGcMiB: mib(gc.rss, 'B'),
    heapUsedAfterGcMiB: mib(gc.heapUsed, 'B'),
    heapTotalAfterGcMiB: mib(gc.heapTotal, 'B'),
    externalAfterGcMiB: mib(gc.external, 'B'),
    gcs: gc.gcs,
    settleRssMiB: mib(settleRss, 'KiB'),
    settleWaitS,
  };
}

async function profileOnly(scenario: Scenario, prefix: string, key: string): Promise<void> {
  const s = await startServers(prefix, false);
  const fb: Target = { name: 'farebox', url: s.fbUrl, pid: s.fb.pid };
  const problems: string[] = [];
  if (!(await sanity([fb], s.simUrl, key, problems, [scenario])).has(`${scenario}/farebox`))
    throw new Error(problems.join('\n'));
  const spec = requestFor(scenario, fb, s.simUrl, key);
  const connections = intEnv('BENCH_PROFILE_CONNECTIONS', REAL_TRAFFIC[scenario]?.connections ?? 50);
  if (WARMUP) await runLoad(spec, connections, WARMUP);
  log(`profiling ${PROCESS_NAME} under ${scenario} at ${connections} connections for ${DURATION} s`);
  const file = join(RESULTS, 'profile.cpuprofile');
  const child = { farebox: s.fb, settle: s.settle, chains: s.chains, sim: s.sim }[PROFILE_PROCESS];
  await ask(child, { type: 'profile-start' }, 'profile-started');
  const r = await runLoad(spec, connections, DURATION);
  await ask(child, { type: 'profile-stop', file }, 'profile-stopped', 60_000);
  const sum = summarizeProfile(file, ROOT);
  const md = [
    `# ${PROCESS_NAME} CPU profile: ${scenario}, ${connections} connections, ${DURATION} s (${new Date().toISOString()})`,
    '',
    `${r.rps} req/s, p50 ${r.latency?.p50} ms, p99 ${r.latency?.p99} ms. Main thread busy ${sum.busyMs} ms, idle ${sum.idleMs} ms;`,
    'shares below are of the busy time.',
    '',
    '| self ms | self % | function |',
    '| --- | --- | --- |',
    ...sum.functions.map((x) => `| ${x.selfMs} | ${x.percent} | \`${x.name}\` |`),
    '',
    '| self ms | self % | where |',
    '| --- | --- | --- |',
    ...sum.areas.map((x) => `| ${x.selfMs} | ${x.percent} | ${x.name} |`),
    '',
  ].join('\n');
  writeFileSync(join(RESULTS, 'profile.md'), md);
  process.stdout.write(md);
}

/**
 * CPU on the load core from now until the returned function is called with the cell's 2xx count: the core's busy
 * % and, per response, the load generator's (this process), Redis's and the dev chains' CPU in ms.
 */
function loadCoreMeter(
  s: Servers,
  redisPid: number | null,
): (ok: number) => { busyPct: number; perReq: LoadCell['loadCoreMsPerReq'] } {
  const pids = [process.pid, redisPid, s.chains.pid];
  const cpu0 = pids.map((pid) => (pid === null ? 0 : cpuMsOf(pid)));
  const busy0 = coreBusyMsOf(LOAD_CORE);
  const wall0 = performance.now();
  return (ok) => {
    const wall = performance.now() - wall0;
    const [loadgen, redis, chains] = pids.map((pid, i) =>
      pid === null || !ok ? null : round((cpuMsOf(pid) - cpu0[i]!) / ok, 4),
    );
    return { busyPct: round((100 * (coreBusyMsOf(LOAD_CORE) - busy0)) / wall, 1), perReq: { loadgen, redis, chains } };
  };
}

/** farebox alone: REPEAT cells per scenario and concurrency; req/s, latency and CPU per call, printed. */
async function quickRun(scenarios: Scenario[], prefix: string, key: string): Promise<void> {
  const s = await startServers(prefix, QUICK_IMAGES);
  const fb: Target = { name: 'farebox', url: s.fbUrl, pid: s.fb.pid };
  const problems: string[] = [];
  const ok = await sanity([fb], s.simUrl, key, problems, scenarios);
  if (problems.length) throw new Error(problems.join('\n'));
  const redisPid = await localRedisPid(REDIS_URL).catch(() => null);
  const lines = [
    `| scenario | conc | req/s | p50 ms | p99 ms | CPU ms per call (settle) | peak RSS MiB | core ${SERVER_CORE} busy % | core ${LOAD_CORE} busy % | core ${LOAD_CORE} CPU ms per call: loadgen / sim / redis / chains | non-2xx / errors |`,
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const scenario of scenarios) {
    if (!ok.has(`${scenario}/farebox`)) continue;
    const spec = requestFor(scenario, fb, s.simUrl, key);
    for (const connections of connectionsOf(scenario)) {
      if (warmupOf(scenario)) await runLoad(spec, connections, warmupOf(scenario));
      for (let i = 0; i < REPEAT; i++) {
        resetPeakRss(s.fb.pid);
        const cpu0 = [s.fb.pid, s.settle.pid, s.sim.pid].map(cpuMsOf);
        const core0 = coreBusyMsOf(SERVER_CORE);
        const loadCore = loadCoreMeter(s, redisPid);
        const wall0 = performance.now();
        const r = await runLoad(spec, connections, durationOf(scenario));
        const wall = performance.now() - wall0;
        const peak = mib(memOf(s.fb.pid).hwmKiB, 'KiB');
        const [gw, st, sim] = [s.fb.pid, s.settle.pid, s.sim.pid].map((pid, j) => cpuMsOf(pid) - cpu0[j]!);
        const busy = round((100 * (coreBusyMsOf(SERVER_CORE) - core0)) / wall, 1);
        const lc = loadCore(r.ok);
        const perCall = (ms: number) => (r.ok ? round(ms / r.ok, 3) : '-');
        const loadMs = [lc.perReq.loadgen, r.ok ? round(sim! / r.ok, 4) : null, lc.perReq.redis, lc.perReq.chains].map(
          (v) => (v === null ? '-' : round(v, 3)),
        );
        const line = `| ${scenario} | ${connections} | ${r.rps} | ${r.latency?.p50} | ${r.latency?.p99} | ${perCall(gw! + st!)} (${perCall(st!)}) | ${peak} | ${busy} | ${lc.busyPct} | ${loadMs.join(' / ')} | ${r.non2xx} / ${r.errors} |`;
        log(line);
        lines.push(line);
      }
    }
  }
  if (SEQUENTIAL) {
    // One call at a time, direct and farebox alternating per repeat: the added p50 and p99 of a change.
    const direct: Target = { name: 'direct', url: s.simUrl, pid: s.sim.pid };
    if (scenarios.includes('video-poll')) await submitVideoJobs([direct], key, problems);
    lines.push(
      '',
      '| scenario | direct p50 / p99 ms | farebox p50 / p99 ms | added p50 / p99 ms | farebox ttfb p50 / p99 ms | farebox CPU ms per call |',
      '|---|---|---|---|---|---|',
    );
    for (const scenario of scenarios) {
      if (!ok.has(`${scenario}/farebox`)) continue;
      for (let i = 0; i < REPEAT; i++) {
        const n = sequentialOf(scenario);
        const d = await runSequential(
          requestFor(scenario, direct, s.simUrl, key),
          n.count,
          n.warmup,
          [],
          SEQUENTIAL_WARMUP_MS,
        );
        const f = await runSequential(
          requestFor(scenario, fb, s.simUrl, key),
          n.count,
          n.warmup,
          [s.fb.pid, s.settle.pid],
          SEQUENTIAL_WARMUP_MS,
        );
        if (!d.total || !f.total) continue;
        const added = [round(f.total.p50 - d.total.p50, 2), round(f.total.p99 - d.total.p99, 2)];
        const line = `| ${scenario} | ${d.total.p50} / ${d.total.p99} | ${f.total.p50} / ${f.total.p99} | ${added.join(' / ')} | ${f.ttfb ? `${f.ttfb.p50} / ${f.ttfb.p99}` : '-'} | ${f.serverCpuMsPerReq ?? '-'} |`;
        log(line);
        lines.push(line);
      }
    }
  }
  if (QUICK_IMAGES) lines.push('', ...imagesMarkdown(await imageCells(s, key)));
  process.stdout.write(lines.join('\n') + '\n');
}

/** The settlement cell on processes of its own. */
function settlementCell() {
  return runSettlement({
    redisUrl: REDIS_URL,
    server: SERVER,
    loadCore: LOAD_CORE,
    serverCore: SERVER_CORE,
    settings: SETTLE,
    log,
  });
}

/** The image scenarios on direct, farebox and (where it has the call) the peer. */
function imageCells(s: Servers, key: string) {
  const targets: Target[] = [
    { name: 'direct', url: s.simUrl, pid: s.sim.pid },
    { name: 'farebox', url: s.fbUrl, pid: s.fb.pid },
  ];
  if (s.peer) targets.push({ name: 'peer', url: s.peerUrl!, pid: s.peer.pid });
  return runImages(targets, s.simUrl, key, s.settle.pid, {
    concurrency: IMAGE_CONCURRENCY,
    durationS: IMAGE_DURATION,
    warmupS: Math.min(WARMUP, 2),
    sequential: IMAGE_SEQUENTIAL,
    log,
  });
}

/** VmHWM of each process before its peak was last reset (resetPeakRss), KiB: the run's peak is the larger. */
const peaks = new Map<number, number>();

/** Keep `pid`'s peak RSS so far before a cell resets it. */
function keepPeak(pid: number): void {
  peaks.set(pid, Math.max(peaks.get(pid) ?? 0, memOf(pid).hwmKiB));
}

/** `pid`'s peak RSS over the whole run, KiB. */
function runPeakKiB(pid: number): number {
  return Math.max(peaks.get(pid) ?? 0, memOf(pid).hwmKiB);
}

async function fullRun(prefix: string, key: string, redis: Redis): Promise<void> {
  const problems: string[] = [];
  const loadAvgStart = loadavg().map((v) => round(v, 2));
  const peerPkg = peerPackage();
  const baselineRssMiB = { node: await idleRss([]) };
  const s = await startServers(prefix);
  const redisPid = redisPinned ? await localRedisPid(REDIS_URL).catch(() => null) : null;
  const targets: Target[] = [
    { name: 'direct', url: s.simUrl, pid: s.sim.pid },
    { name: 'farebox', url: s.fbUrl, pid: s.fb.pid },
    { name: 'peer', url: s.peerUrl!, pid: s.peer!.pid },
  ];
  const byName = (n: TargetName) => targets.find((t) => t.name === n)!;
  const ok = await sanity(targets, s.simUrl, key, problems);
  for (const p of problems) log(`problem: ${p}`);

  // Memory of farebox on a fresh process: after 1,000 and after 10,000 calls (a leak grows between the two).
  const memory: MemoryPoint[] = [await memoryPoint(s, 'start (after the sanity calls)', redis)];
  const json = requestFor('chat-json', byName('farebox'), s.simUrl, key);
  let done = 0;
  for (const upTo of [1000, 10_000]) {
    log(`farebox memory: ${upTo} calls`);
    const r = await runLoad(json, 50, 0, upTo - done);
    done = upTo;
    if (r.non2xx || r.errors) problems.push(`farebox memory phase: ${r.non2xx} non-2xx, ${r.errors} errors`);
    memory.push(await memoryPoint(s, `after ${upTo.toLocaleString('en-US')} calls`, redis));
  }

  const sequential: SequentialCell[] = [];
  for (const scenario of SCENARIOS) {
    for (const t of targets) {
      if (!ok.has(`${scenario}/${t.name}`)) continue;
      log(`sequential ${scenario} ${t.name}`);
      const n = sequentialOf(scenario);
      // CPU as under load: direct's is the simulator's, farebox's its gateway's and settle process's.
      const pids = t.name === 'farebox' ? [t.pid, s.settle.pid] : [t.pid];
      const r = await runSequential(
        requestFor(scenario, t, s.simUrl, key),
        n.count,
        n.warmup,
        pids,
        SEQUENTIAL_WARMUP_MS,
      );
      sequential.push({ scenario, target: t.name, ...r });
    }
  }

  const load: LoadCell[] = [];
  for (const scenario of SCENARIOS) {
    for (const connections of connectionsOf(scenario)) {
      // Targets interleaved per cell, so that a drift of the machine hits all three alike.
      for (const t of targets) {
        if (!ok.has(`${scenario}/${t.name}`)) continue;
        const spec = requestFor(scenario, t, s.simUrl, key);
        log(`load ${scenario} c=${connections} ${t.name}`);
        if (warmupOf(scenario)) await runLoad(spec, connections, warmupOf(scenario));
        // farebox's CPU is its gateway's and its settle process's.
        const pids = t.name === 'farebox' ? [t.pid, s.settle.pid] : [t.pid];
        const cpu0 = pids.map(cpuMsOf);
        const sim0 = cpuMsOf(s.sim.pid);
        // What runs on the server core besides the servers: other processes, interrupts, the hypervisor.
        const onServerCore = [s.fb.pid, s.settle.pid, s.peer!.pid];
        const core0 = coreBusyMsOf(SERVER_CORE) - onServerCore.map(cpuMsOf).reduce((a, b) => a + b, 0);
        const waits = [t.pid, s.sim.pid, process.pid];
        const wait0 = waits.map(runWaitMsOf);
        const loadCore = loadCoreMeter(s, redisPid);
        // The server's peak RSS of this cell alone; the run's peak is kept (peaks) for the memory table.
        keepPeak(t.pid);
        resetPeakRss(t.pid);
        const wall0 = performance.now();
        const r = await runLoad(spec, connections, durationOf(scenario));
        const wall = performance.now() - wall0;
        const serverPeakRssMiB = mib(memOf(t.pid).hwmKiB, 'KiB');
        const [serverWait, simWait, loadWait] = waits.map((pid, i) =>
          round((100 * (runWaitMsOf(pid) - wait0[i]!)) / wall, 1),
        );
        const cpu = pids.map((pid, i) => cpuMsOf(pid) - cpu0[i]!);
        const server = cpu.reduce((a, b) => a + b, 0);
        const sim = cpuMsOf(s.sim.pid) - sim0;
        const other = round(
          (100 * (coreBusyMsOf(SERVER_CORE) - onServerCore.map(cpuMsOf).reduce((a, b) => a + b, 0) - core0)) / wall,
          1,
        );
        const lc = loadCore(r.ok);
        const cell: LoadCell = {
          scenario,
          target: t.name,
          ...r,
          serverCpuMsPerReq: r.ok ? round(server / r.ok, 4) : null,
          settleCpuMsPerReq: t.name === 'farebox' && r.ok ? round(cpu[1]! / r.ok, 4) : null,
          serverCpuPct: round((100 * server) / wall, 1),
          simCpuMsPerReq: r.ok ? round(sim / r.ok, 4) : null,
          serverRssMiB: mib(memOf(t.pid).rssKiB, 'KiB'),
          serverPeakRssMiB,
          waitPct: { server: serverWait!, loadgen: loadWait!, sim: simWait! },
          otherOnServerCorePct: other,
          loadCoreBusyPct: lc.busyPct,
          loadCoreMsPerReq: lc.perReq,
        };
        load.push(cell);
        if (other > 5) {
          problems.push(
            `${scenario} c=${connections} ${t.name}: ${other}% of the server core went to neither server (other load on the machine)`,
          );
        }
      }
    }
  }
  memory.push(await memoryPoint(s, 'end of run', redis));

  const peakRssMiB: Record<string, number> = {
    simulator: mib(runPeakKiB(s.sim.pid), 'KiB'),
    farebox: mib(runPeakKiB(s.fb.pid), 'KiB'),
    'farebox settle': mib(runPeakKiB(s.settle.pid), 'KiB'),
    peer: mib(runPeakKiB(s.peer!.pid), 'KiB'),
  };
  const results: BenchResults = {
    date: new Date().toISOString(),
    machine: machine(),
    settings: {
      durationS: DURATION,
      warmupS: WARMUP,
      sequential: SEQUENTIAL,
      concurrency: CONCURRENCY,
      realTraffic: {
        durationS: REAL_DURATION,
        warmupS: REAL_WARMUP,
        sequential: REAL_SEQUENTIAL,
        scenarios: Object.fromEntries(
          Object.entries(REAL_TRAFFIC).map(([k, v]) => [
            k,
            { ...v, requestBytes: Buffer.byteLength(requestFor(k as Scenario, byName('direct'), s.simUrl, key).body) },
          ]),
        ),
      },
      pinning: `Servers (farebox and its settle process, peer) on core ${SERVER_CORE}; load generator, simulator, dev chains${redisPinned ? ' and Redis' : ''} on core ${LOAD_CORE} (taskset)${redisPinned ? '' : '; Redis unpinned (not local, or taskset failed)'}.`,
    },
    loadAverage: { start: loadAvgStart, end: loadavg().map((v) => round(v, 2)) },
    versions: {
      farebox: (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version,
      ...peerPkg.versions,
      autocannon: packageVersion('autocannon'),
    },
    load,
    comparisons: compare(load),
    sequential,
    memory: { peakRssMiB, baselineRssMiB, farebox: memory },
    // After the peaks above are read: 4K answers would raise them.
    images: await imageCells(s, key),
    problems,
  };
  if (SETTLE.durationS) {
    // Its own processes: the text and image servers stop first, so that they take no CPU from it.
    await stopAll();
    results.settlement = await settlementCell();
  }
  mkdirSync(RESULTS, { recursive: true });
  writeFileSync(join(RESULTS, 'latest.json'), JSON.stringify(results, null, 2) + '\n');
  const md = toMarkdown(results);
  writeFileSync(join(RESULTS, 'latest.md'), md);
  process.stdout.write(md);
}

/** Stops the children and deletes the bench's Redis keys; set once Redis is open. */
let cleanup: () => Promise<void> = stopAll;

/** Whether Redis was pinned to the load core for this run. */
let redisPinned = false;

async function main(): Promise<number> {
  await pinSelf(LOAD_CORE);
  // Redis serves farebox like the simulator does: it runs beside them, off the measured core.
  const unpinRedis = await pinLocalRedis(REDIS_URL, LOAD_CORE);
  redisPinned = unpinRedis !== null;
  const prefix = `farebox-bench:${randomBytes(6).toString('hex')}:`;
  const redis = connectRedis({ url: REDIS_URL, prefix, failFast: true });
  let cleaned: Promise<void> | undefined;
  cleanup = () =>
    (cleaned ??= (async () => {
      await stopAll();
      await deleteKeys(redis, ['*']).catch((err: Error) => log(`could not delete ${prefix}*: ${err.message}`));
      // The gateway's default spool folder, made at its start: removed when empty (a debit left there is kept).
      try {
        rmdirSync(defaultSpoolDir({ redis: redisIdentity(redis), prefix }));
      } catch {
        // gone already, or it holds debits
      }
      redis.disconnect();
      await unpinRedis?.();
    })());
  try {
    const account = await createAccount(redis, {});
    const { key } = await createKey(redis, account.address);
    // The farebox child funds it on its dev chains (bench/farebox-target.ts).
    process.env.FAREBOX_BENCH_ACCOUNT = account.address;
    if (PROFILE) await profileOnly(PROFILE, prefix, key);
    else if (QUICK_NAMES) {
      if (QUICK!.length || QUICK_IMAGES) await quickRun(QUICK!, prefix, key);
      if (QUICK_SETTLEMENT) {
        await stopAll();
        process.stdout.write(settlementMarkdown(await settlementCell()).join('\n') + '\n');
      }
    } else await fullRun(prefix, key, redis);
    return 0;
  } finally {
    await cleanup();
  }
}

let bailing = false;

/** Clean up within 10 s, then exit with `code` whatever happened. */
function bail(code: number): void {
  if (bailing) return;
  bailing = true;
  const hard = setTimeout(() => {
    killAllNow();
    process.exit(code);
  }, 10_000);
  cleanup().finally(() => {
    clearTimeout(hard);
    process.exit(code);
  });
}

// Bounded in time whatever happens: every cell, the sequential runs and start-up, with room to spare.
/** Seconds of load (warm-up, cells, margin) and of one-at-a-time calls (at 50 per s, 5 per s if real traffic). */
const loadS = (s: Scenario, repeat: number) => connectionsOf(s).length * (warmupOf(s) + repeat * (durationOf(s) + 3));
const seqS = (s: Scenario) => sequentialOf(s).count / (REAL_TRAFFIC[s] ? 5 : 50) + 10;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const imageS = IMAGE_SCENARIOS.length * 3 * (IMAGE_DURATION + Math.min(WARMUP, 2) + 2 + IMAGE_SEQUENTIAL * 2) + 60;
// Start-up and funding (a deposit counts once confirmed), the two loads, and each phase's drain at its bound.
const settleS = SETTLE.durationS
  ? 120 +
    (SETTLE.confirmations * SETTLE.blockMs) / 1000 +
    SETTLE.durationS +
    SETTLE.backlogS +
    2 * (((SETTLE.confirmations + 2) * SETTLE.blockMs) / 1000 + 120) +
    60
  : 0;
const budgetS = PROFILE
  ? DURATION + WARMUP + 120
  : QUICK
    ? sum((QUICK ?? []).map((s) => loadS(s, REPEAT) + REPEAT * 2 * seqS(s))) +
      120 +
      (QUICK_IMAGES ? imageS : 0) +
      (QUICK_SETTLEMENT ? settleS : 0)
    : sum(SCENARIOS.map((s) => TARGETS.length * (loadS(s, 1) + seqS(s)))) + 180 + imageS + settleS;
const deadline = setTimeout(() => {
  log(`bench: over its ${Math.round(budgetS)} s budget; stopping`);
  bail(1);
}, budgetS * 1000);
deadline.unref();
process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    log(`bench: ${sig}; stopping`);
    bail(130);
  });
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    log(`bench failed: ${err.stack ?? err.message}`);
    bail(1);
  },
);
