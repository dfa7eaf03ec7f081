/** The benchmark's results: their JSON shape and the markdown tables written beside it. */
import { cpus } from 'node:os';
import { readFileSync } from 'node:fs';
import { imagesMarkdown, type ImageResults } from './images.js';
import { settlementMarkdown, type SettlementResults } from './settlement.js';
import type { LoadResult } from './load.js';
import type { RealTraffic, Scenario, TargetName } from './scenarios.js';
import type { SequentialResult } from './sequential.js';
import type { Percentiles } from './stats.js';
import { round } from './stats.js';

/** The machine the numbers come from. */
export interface Machine {
  cpu: string;
  cores: number;
  node: string;
  kernel: string;
  /**
   * How an idle core waits (Linux cpuidle driver, and haltpoll's guest_halt_poll_ns where loaded): with no polling, a
   * VM's idle vCPU halts and each wake-up goes through the hypervisor, which one call at a time pays on every hop
   * between the two cores. Null where it cannot be read.
   */
  idle: string | null;
}

/** One load cell: a scenario at a concurrency against one target. */
export interface LoadCell extends LoadResult {
  scenario: Scenario;
  target: TargetName;
  /**
   * CPU (user+system) the measured server spent per 2xx response, ms; the simulator's own for `direct`; for
   * farebox, its gateway's and its settle process's together.
   */
  serverCpuMsPerReq: number | null;
  /** farebox only: its settle process's share of serverCpuMsPerReq. */
  settleCpuMsPerReq: number | null;
  /** The simulator's CPU per 2xx response, ms. */
  simCpuMsPerReq: number | null;
  /** The measured server's VmRSS after the cell, MiB. */
  serverRssMiB: number | null;
  /** The measured server's peak RSS during the cell (VmHWM, reset before it), MiB; absent in runs before it. */
  serverPeakRssMiB?: number | null;
  /** CPU the measured server used during the cell, % of one core (100 = its core saturated). */
  serverCpuPct: number;
  /**
   * Share of the cell (%) that each main thread spent runnable but waiting for its core: the measured server,
   * the load generator, the simulator. The last two share core 0 and wait for each other; a gateway's main
   * thread on core 1 waits for its own helper threads (GC, libuv pool) and, for farebox, its settle process.
   */
  waitPct: { server: number; loadgen: number; sim: number };
  /**
   * Busy time of the server core that no server process accounts for, % of the cell: other processes,
   * interrupts, the hypervisor's steal. Near 0 on a quiet machine.
   */
  otherOnServerCorePct: number;
  /** Busy time of the load core (load generator, simulator, Redis, dev chains), % of the cell. */
  loadCoreBusyPct: number;
  /**
   * CPU per 2xx response on the load core, ms, of the load generator, Redis and the dev chains (the simulator's is
   * simCpuMsPerReq); null where Redis is not a local process.
   */
  loadCoreMsPerReq: { loadgen: number | null; redis: number | null; chains: number | null };
}

/** One sequential cell. */
export interface SequentialCell extends SequentialResult {
  scenario: Scenario;
  target: TargetName;
}

/** Memory of farebox at fixed points, MiB: VmRSS as the kernel sees it, then RSS and heap at rest (memAfterGc). */
export interface MemoryPoint {
  /** When it was taken, e.g. "after 1,000 calls". */
  when: string;
  rssMiB: number;
  heapUsedAfterGcMiB: number;
  rssAfterGcMiB: number;
  /** V8's committed heap (young generation included: it grows under load and is kept). */
  heapTotalAfterGcMiB: number;
  /** Memory of Buffers and other objects outside the V8 heap. */
  externalAfterGcMiB: number;
  /** Full GCs run before RSS stopped falling. */
  gcs: number;
  /** VmRSS of farebox's settle process at the same point. */
  settleRssMiB: number;
  /** Seconds waited for the settlement backlog to clear before reading (null: it did not clear in 60 s). */
  settleWaitS: number | null;
}

/** Everything one run produced (bench/results/latest.json). */
export interface BenchResults {
  date: string;
  machine: Machine;
  settings: {
    durationS: number;
    warmupS: number;
    sequential: number;
    concurrency: number[];
    /** The real-traffic cells' own settings (bench/scenarios.ts REAL_TRAFFIC), with each body's measured bytes. */
    realTraffic?: { durationS: number; warmupS: number; sequential: number; scenarios: Record<string, RealTraffic> };
    pinning: string;
  };
  /** 1, 5 and 15 min load averages of the machine at the start and the end (others' work shows here). */
  loadAverage: { start: number[]; end: number[] };
  versions: Record<string, string>;
  load: LoadCell[];
  /** farebox against direct and the peer, per load cell. */
  comparisons: Comparison[];
  sequential: SequentialCell[];
  memory: {
    /** VmHWM (peak resident set) of each server process at the end of the run, MiB. */
    peakRssMiB: Record<string, number>;
    /** RSS of an idle node, MiB. */
    baselineRssMiB: { node: number };
    farebox: MemoryPoint[];
  };
  /** The image scenarios (bench/images.ts), run after the rest, so they leave the peaks above alone. */
  images?: ImageResults;
  /** The settlement cell (bench/settlement.ts), run last, on dev chains of its own that mine on an interval. */
  settlement?: SettlementResults;
  problems: string[];
}

const readTrimmed = (path: string): string | null => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null; // not Linux, or not this driver
  }
};

/** CPU model, cores, Node, kernel and idle driver of this machine. */
export function machine(): Machine {
  const driver = readTrimmed('/sys/devices/system/cpu/cpuidle/current_driver');
  const pollNs = readTrimmed('/sys/module/haltpoll/parameters/guest_halt_poll_ns');
  const idle = driver === null ? null : pollNs === null ? driver : `${driver}, guest_halt_poll_ns=${pollNs}`;
  return {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    node: process.version,
    kernel: readTrimmed('/proc/sys/kernel/osrelease') ?? '',
    idle,
  };
}

const f = (v: number | null | undefined, digits = 2) =>
  v === null || v === undefined || Number.isNaN(v) ? '-' : v.toFixed(digits);
const p = (x: Percentiles | null, k: 'p50' | 'p90' | 'p99') => f(x?.[k] ?? null);

function row(cells: Array<string | number>): string {
  return `| ${cells.join(' | ')} |`;
}

function table(head: string[], rows: Array<Array<string | number>>): string[] {
  return [row(head), row(head.map(() => '---')), ...rows.map(row)];
}

/** farebox against direct and the peer on one load cell (ratios of req/s; added latency in ms). */
export interface Comparison {
  scenario: Scenario;
  connections: number;
  fareboxOverDirect: number | null;
  fareboxOverPeer: number | null;
  peerOverDirect: number | null;
  addedP50Ms: number | null;
  addedP99Ms: number | null;
}

/** The comparisons of every load cell that farebox ran. */
export function compare(load: LoadCell[]): Comparison[] {
  const out: Comparison[] = [];
  const cell = (s: Scenario, c: number, t: TargetName) =>
    load.find((x) => x.scenario === s && x.connections === c && x.target === t);
  const ratio = (a?: LoadCell, b?: LoadCell) => (a && b && b.rps > 0 ? round(a.rps / b.rps, 3) : null);
  for (const fb of load.filter((x) => x.target === 'farebox')) {
    const d = cell(fb.scenario, fb.connections, 'direct');
    const peer = cell(fb.scenario, fb.connections, 'peer');
    const added = (k: 'p50' | 'p99') => (d?.latency && fb.latency ? round(fb.latency[k] - d.latency[k]) : null);
    out.push({
      scenario: fb.scenario,
      connections: fb.connections,
      fareboxOverDirect: ratio(fb, d),
      fareboxOverPeer: ratio(fb, peer),
      peerOverDirect: ratio(peer, d),
      addedP50Ms: added('p50'),
      addedP99Ms: added('p99'),
    });
  }
  return out;
}

/**
 * The real-traffic cells side by side: per scenario and target, the server's CPU per call (the gateway's own for
 * farebox and the peer: direct's is the simulator's, which the gateways add theirs to), the latency added over direct
 * one call at a time and under load, and the server's peak RSS during the load cell.
 */
function realTrafficMarkdown(r: BenchResults): string[] {
  const real = r.settings.realTraffic;
  if (!real) return [];
  const rows: Array<Array<string | number>> = [];
  for (const [name, shape] of Object.entries(real.scenarios)) {
    const scenario = name as Scenario;
    const seq = (t: TargetName) => r.sequential.find((x) => x.scenario === scenario && x.target === t);
    for (const load of r.load.filter((x) => x.scenario === scenario)) {
      const d = r.load.find(
        (x) => x.scenario === scenario && x.connections === load.connections && x.target === 'direct',
      );
      const s = seq(load.target);
      const sd = seq('direct');
      const added = (a: Percentiles | null | undefined, b: Percentiles | null | undefined, k: 'p50' | 'p99') =>
        load.target !== 'direct' && a && b ? f(a[k] - b[k]) : '-';
      rows.push([
        scenario,
        shape.requestBytes === null ? '-' : f(shape.requestBytes / 1024, 1),
        shape.outputTokens,
        load.connections,
        load.target,
        f(s?.serverCpuMsPerReq, 3),
        f(load.serverCpuMsPerReq, 3),
        f(load.rps, 0),
        `${p(s?.total ?? null, 'p50')} / ${p(s?.total ?? null, 'p99')}`,
        `${added(s?.total, sd?.total, 'p50')} / ${added(s?.total, sd?.total, 'p99')}`,
        `${p(load.latency, 'p50')} / ${p(load.latency, 'p99')}`,
        `${added(load.latency, d?.latency, 'p50')} / ${added(load.latency, d?.latency, 'p99')}`,
        f(load.serverPeakRssMiB, 1),
        load.non2xx + load.errors,
      ]);
    }
  }
  return [
    '## Real traffic: agent turns and long streams',
    '',
    `Agent turns as the Claude Code CLI sends them (messages-*: system blocks and tools with cache_control, a ` +
      `tool_use/tool_result history) and their chat completions equivalents, asking for a short answer; and streams of 4,000 output tokens. ${real.durationS} s per load cell after ${real.warmupS} s of warm-up, at the connections shown, ` +
      `${real.sequential} calls one at a time. CPU per call: the server's (direct: the simulator's; farebox: its ` +
      `gateway and settle process). Added: over direct, ms.`,
    '',
    ...table(
      [
        'scenario',
        'request KiB',
        'output tokens',
        'conc',
        'target',
        'server CPU ms/call one at a time',
        'server CPU ms/call under load',
        'req/s under load',
        'one at a time p50 / p99',
        'added p50 / p99',
        'under load p50 / p99',
        'added p50 / p99',
        'peak RSS MiB',
        'failed',
      ],
      rows,
    ),
    '',
  ];
}

/** The results as markdown. */
export function toMarkdown(r: BenchResults): string {
  const m = r.machine;
  const lines: string[] = [
    `# farebox benchmark, ${r.date}`,
    '',
    `Machine: ${m.cpu}, ${m.cores} cores, Node ${m.node}, Linux ${m.kernel}${m.idle ? `, cpuidle ${m.idle}` : ''}. ${r.settings.pinning}`,
    `Load average (1/5/15 min): ${r.loadAverage.start.join(' ')} at the start, ${r.loadAverage.end.join(' ')} at the end.`,
    `Load: autocannon, ${r.settings.durationS} s per cell after ${r.settings.warmupS} s of warm-up; latencies are each response's own time (ms, sub-ms clock).`,
    `Versions: ${Object.entries(r.versions)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    '',
    '## Under load',
    '',
    ...table(
      [
        'scenario',
        'conc',
        'target',
        'req/s',
        'p50',
        'p90',
        'p99',
        'TTFB p50',
        'TTFB p99',
        'non-2xx',
        'errors',
        'server CPU ms/req',
        'of it settle',
        'server CPU %',
        'server peak RSS MiB',
        'sim CPU ms/req',
        'run-queue wait % server/loadgen/sim',
        'other on server core %',
        'load core busy %',
        'load core CPU ms/req loadgen/redis/chains',
      ],
      r.load.map((x) => [
        x.scenario,
        x.connections,
        x.target,
        f(x.rps, 0),
        p(x.latency, 'p50'),
        p(x.latency, 'p90'),
        p(x.latency, 'p99'),
        p(x.ttfb, 'p50'),
        p(x.ttfb, 'p99'),
        x.non2xx,
        x.errors,
        f(x.serverCpuMsPerReq, 3),
        f(x.settleCpuMsPerReq, 3),
        f(x.serverCpuPct, 0),
        f(x.serverPeakRssMiB, 1),
        f(x.simCpuMsPerReq, 3),
        `${x.waitPct.server} / ${x.waitPct.loadgen} / ${x.waitPct.sim}`,
        f(x.otherOnServerCorePct, 1),
        f(x.loadCoreBusyPct, 0),
        [x.loadCoreMsPerReq.loadgen, x.loadCoreMsPerReq.redis, x.loadCoreMsPerReq.chains]
          .map((v) => f(v, 3))
          .join(' / '),
      ]),
    ),
    '',
    '## farebox against direct and the peer (same cell)',
    '',
    ...table(
      [
        'scenario',
        'conc',
        'farebox/direct req/s',
        'farebox/peer req/s',
        'added p50 ms',
        'added p99 ms',
        'peer/direct req/s',
      ],
      r.comparisons.map((c) => [
        c.scenario,
        c.connections,
        f(c.fareboxOverDirect),
        f(c.fareboxOverPeer),
        f(c.addedP50Ms),
        f(c.addedP99Ms),
        f(c.peerOverDirect),
      ]),
    ),
    '',
    ...realTrafficMarkdown(r),
    `## One request at a time (${r.settings.sequential} requests each${r.settings.realTraffic ? `; ${r.settings.realTraffic.sequential} of real traffic` : ''})`,
    '',
  ];
  const direct = (s: Scenario) => r.sequential.find((x) => x.scenario === s && x.target === 'direct');
  lines.push(
    ...table(
      [
        'scenario',
        'target',
        'total p50',
        'total p99',
        'TTFB p50',
        'TTFB p99',
        'added p50',
        'added p99',
        'added TTFB p50',
        'server CPU ms/call',
        'failed',
      ],
      r.sequential.map((x) => {
        const d = direct(x.scenario);
        const add = (a: Percentiles | null, b: Percentiles | null | undefined, k: 'p50' | 'p99') =>
          x.target !== 'direct' && a && b ? f(a[k] - b[k], 3) : '-';
        return [
          x.scenario,
          x.target,
          f(x.total?.p50, 3),
          f(x.total?.p99, 3),
          f(x.ttfb?.p50, 3),
          f(x.ttfb?.p99, 3),
          add(x.total, d?.total, 'p50'),
          add(x.total, d?.total, 'p99'),
          add(x.ttfb, d?.ttfb, 'p50'),
          f(x.serverCpuMsPerReq, 3),
          x.failed,
        ];
      }),
    ),
    '',
    '## Memory',
    '',
    ...table(
      ['process', 'peak RSS MiB (VmHWM)'],
      Object.entries(r.memory.peakRssMiB).map(([k, v]) => [k, f(v, 1)]),
    ),
    '',
    `Every server runs plain JS (farebox and the simulator compiled to dist/); an idle node holds ${f(r.memory.baselineRssMiB.node, 1)} MiB.`,
    '',
    'Each point is read once farebox has settled every call so far onchain (the settlement backlog of a burst is ' +
      'work in flight, not a leak), then again at rest: after full GCs 100 ms apart until RSS falls by less than ' +
      '0.5 MiB (one GC right after load leaves pages of dead objects committed; V8 frees them on the next GCs).',
    '',
    ...table(
      [
        'farebox',
        'settled after s',
        'RSS MiB',
        'GCs',
        'RSS at rest MiB',
        'heap used at rest MiB',
        'heap committed at rest MiB',
        'external at rest MiB',
        'settle process RSS MiB',
      ],
      r.memory.farebox.map((x) => [
        x.when,
        x.settleWaitS === null ? 'not in 60 s' : f(x.settleWaitS, 1),
        f(x.rssMiB, 1),
        String(x.gcs),
        f(x.rssAfterGcMiB, 1),
        f(x.heapUsedAfterGcMiB, 1),
        f(x.heapTotalAfterGcMiB, 1),
        f(x.externalAfterGcMiB, 1),
        f(x.settleRssMiB, 1),
      ]),
    ),
    '',
  );
  if (r.images) lines.push(...imagesMarkdown(r.images));
  if (r.settlement) lines.push(...settlementMarkdown(r.settlement), '');
  if (r.problems.length) lines.push('## Problems', '', ...r.problems.map((x) => `- ${x}`), '');
  return lines.join('\n');
}

/** Bytes or KiB to MiB, 1 decimal. */
export function mib(value: number, unit: 'B' | 'KiB'): number {
  return round(unit === 'B' ? value / 1048576 : value / 1024, 1);
}
