/**
 * The image scenarios of the benchmark: one b64_json image per call, 1K and 4K, on each image protocol, through
 * farebox, directly to the simulator (the provider's own call), and through the peer where it has the same call
 * (the OpenAI Images API; the peer has no Gemini image protocol). Per cell: rate, latency, the servers' CPU per call
 * and their peak RSS during the cell alone (VmHWM reset before it); then one call at a time, farebox against direct,
 * for the added latency.
 *
 * farebox's img-2 runs on gpt-image-2 here (bench/farebox-target.ts), so its 4K is a 4K-class image (2880x2880) rather
 * than gpt-image-1's 1024x1024. BENCH_IMAGE_SCENARIOS (comma-separated) runs some of the scenarios only.
 */
import { Agent } from 'node:http';
import { cpuMsOf, memOf, resetPeakRss } from './children.js';
import { runLoad, type LoadResult } from './load.js';
import type { RequestSpec, Target, TargetName } from './scenarios.js';
import { runSequential, sendOnce, type SequentialResult } from './sequential.js';
import { round } from './stats.js';

/** The image scenarios: protocol and size class. */
export const IMAGE_SCENARIOS = ['image-gemini-1k', 'image-gemini-4k', 'image-openai-1k', 'image-openai-4k'] as const;
/** One image scenario. */
export type ImageScenario = (typeof IMAGE_SCENARIOS)[number];

const PROMPT = 'A harbour at dawn, fishing boats and gulls';

/** The provider's size for each scenario, as farebox maps it (plugins/upstream/protocols/openai/image-sizes.ts). */
const OPENAI_SIZE: Record<'1k' | '4k', string> = { '1k': '1024x1024', '4k': '2880x2880' };

/** The request of `scenario` to `target`, or null when the target has no such call. */
export function imageRequestFor(
  scenario: ImageScenario,
  target: Target,
  simUrl: string,
  key: string,
): RequestSpec | null {
  const [, protocol, cls] = scenario.split('-') as [string, 'gemini' | 'openai', '1k' | '4k'];
  const size = cls === '1k' ? '1K' : '4K';
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (target.name === 'farebox') {
    headers.authorization = `Bearer ${key}`;
    const body = { model: protocol === 'gemini' ? 'img-pro' : 'img-2', prompt: PROMPT, size };
    return {
      method: 'POST',
      url: `${target.url}/v1/images/generations`,
      headers,
      body: JSON.stringify(body),
      stream: false,
    };
  }
  if (protocol === 'gemini') {
    if (target.name === 'peer') return null;
    headers['x-goog-api-key'] = 'sim-key';
    const body = {
      contents: [{ role: 'user', parts: [{ text: PROMPT }] }],
      generationConfig: {
        responseModalities: ['TEXT', 'IMAGE'],
        imageConfig: size === '1K' ? { aspectRatio: '1:1' } : { aspectRatio: '1:1', imageSize: size },
      },
    };
    return {
      method: 'POST',
      url: `${target.url}/v1beta/models/gemini-3-pro-image-preview:generateContent`,
      headers,
      body: JSON.stringify(body),
      stream: false,
    };
  }
  headers.authorization = 'Bearer sim-key';
  if (target.name === 'peer') {
    headers['x-portkey-provider'] = 'openai';
    headers['x-portkey-custom-host'] = `${simUrl}/v1`;
  }
  const body = { model: 'gpt-image-2', prompt: PROMPT, size: OPENAI_SIZE[cls] };
  return {
    method: 'POST',
    url: `${target.url}/v1/images/generations`,
    headers,
    body: JSON.stringify(body),
    stream: false,
  };
}

/** Whether a body holds a whole image: an ImagesResponse's b64_json, or a Gemini answer's inline image. */
export function completeImage(body: string): boolean {
  try {
    const j = JSON.parse(body) as {
      data?: { b64_json?: string }[];
      candidates?: { content?: { parts?: { inlineData?: { data?: string } }[] } }[];
    };
    const b64 = j.data?.[0]?.b64_json ?? j.candidates?.[0]?.content?.parts?.find((p) => p.inlineData)?.inlineData?.data;
    return typeof b64 === 'string' && b64.startsWith('iVBOR') && b64.length > 10_000;
  } catch {
    return false;
  }
}

/** One image load cell. */
export interface ImageCell extends LoadResult {
  scenario: ImageScenario;
  target: TargetName;
  /** CPU of the measured server per 2xx (farebox: with its settle process), ms. */
  serverCpuMsPerReq: number | null;
  /** Peak RSS of the measured server during the cell, MiB (for direct: the simulator's). */
  peakRssMiB: number;
}

/** One image sequential cell. */
export interface ImageSequentialCell extends SequentialResult {
  scenario: ImageScenario;
  target: TargetName;
}

/** What the image part of a run measured. */
export interface ImageResults {
  concurrency: number;
  durationS: number;
  sequential: number;
  load: ImageCell[];
  sequentialCells: ImageSequentialCell[];
  problems: string[];
}

/** Run every image scenario on every target that has it; `settlePid` is counted with farebox's CPU. */
export async function runImages(
  targets: Target[],
  simUrl: string,
  key: string,
  settlePid: number,
  opts: { concurrency: number; durationS: number; warmupS: number; sequential: number; log: (s: string) => void },
): Promise<ImageResults> {
  const problems: string[] = [];
  const only = process.env.BENCH_IMAGE_SCENARIOS?.split(',').map((x) => x.trim());
  const scenarios = IMAGE_SCENARIOS.filter((x) => !only || only.includes(x));
  const agent = new Agent({ keepAlive: false });
  const ok = new Set<string>();
  for (const scenario of scenarios) {
    for (const t of targets) {
      const spec = imageRequestFor(scenario, t, simUrl, key);
      if (!spec) continue;
      try {
        const r = await sendOnce(spec, agent, 60_000, true);
        if (r.status === 200 && completeImage(r.body)) ok.add(`${scenario}/${t.name}`);
        else
          problems.push(
            `${t.name} ${scenario}: HTTP ${r.status}, body ${JSON.stringify(r.body.slice(0, 200))}; left out`,
          );
      } catch (err) {
        problems.push(`${t.name} ${scenario}: ${(err as Error).message}; left out`);
      }
    }
  }
  agent.destroy();
  const load: ImageCell[] = [];
  for (const scenario of scenarios) {
    for (const t of targets) {
      if (!ok.has(`${scenario}/${t.name}`)) continue;
      const spec = imageRequestFor(scenario, t, simUrl, key)!;
      opts.log(`images ${scenario} c=${opts.concurrency} ${t.name}`);
      if (opts.warmupS) await runLoad(spec, opts.concurrency, opts.warmupS);
      const pids = t.name === 'farebox' ? [t.pid, settlePid] : [t.pid];
      const cpu0 = pids.map(cpuMsOf);
      resetPeakRss(t.pid);
      const r = await runLoad(spec, opts.concurrency, opts.durationS);
      const cpu = pids.map((pid, i) => cpuMsOf(pid) - cpu0[i]!).reduce((a, b) => a + b, 0);
      load.push({
        ...r,
        scenario,
        target: t.name,
        serverCpuMsPerReq: r.ok ? round(cpu / r.ok, 2) : null,
        peakRssMiB: round(memOf(t.pid).hwmKiB / 1024, 1),
      });
      if (r.non2xx || r.errors) problems.push(`images ${scenario} ${t.name}: ${r.non2xx} non-2xx, ${r.errors} errors`);
    }
  }
  const sequentialCells: ImageSequentialCell[] = [];
  if (opts.sequential) {
    for (const scenario of scenarios) {
      for (const t of targets) {
        if (!ok.has(`${scenario}/${t.name}`)) continue;
        opts.log(`images sequential ${scenario} ${t.name}`);
        const r = await runSequential(
          imageRequestFor(scenario, t, simUrl, key)!,
          opts.sequential,
          Math.min(10, opts.sequential),
        );
        sequentialCells.push({ ...r, scenario, target: t.name });
      }
    }
  }
  return {
    concurrency: opts.concurrency,
    durationS: opts.durationS,
    sequential: opts.sequential,
    load,
    sequentialCells,
    problems,
  };
}

const f = (v: number | null | undefined, digits = 2) =>
  v === null || v === undefined || Number.isNaN(v) ? '-' : v.toFixed(digits);

/** The image tables, as markdown. */
export function imagesMarkdown(r: ImageResults): string[] {
  const lines = [
    `## Images (b64_json, ${r.concurrency} at a time, ${r.durationS} s per cell; one at a time: ${r.sequential} calls)`,
    '',
    "direct is the simulator's own protocol (Gemini generateContent, OpenAI Images); peak RSS is the server's during its cell alone.",
    '',
    '| scenario | target | req/s | p50 ms | p99 ms | added p50 / p99 ms | CPU ms per call | peak RSS MiB | one at a time p50 / p99 ms | added one at a time p50 / p99 ms | non-2xx / errors |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const c of r.load) {
    const d = r.load.find((x) => x.scenario === c.scenario && x.target === 'direct');
    const seq = r.sequentialCells.find((x) => x.scenario === c.scenario && x.target === c.target);
    const dseq = r.sequentialCells.find((x) => x.scenario === c.scenario && x.target === 'direct');
    const added =
      c.target !== 'direct' && d?.latency && c.latency
        ? `${f(c.latency.p50 - d.latency.p50, 1)} / ${f(c.latency.p99 - d.latency.p99, 1)}`
        : '-';
    const seqAdded =
      c.target !== 'direct' && seq?.total && dseq?.total
        ? `${f(seq.total.p50 - dseq.total.p50)} / ${f(seq.total.p99 - dseq.total.p99)}`
        : '-';
    lines.push(
      `| ${c.scenario} | ${c.target} | ${f(c.rps, 1)} | ${f(c.latency?.p50, 1)} | ${f(c.latency?.p99, 1)} | ${added} | ${f(c.serverCpuMsPerReq)} | ${f(c.peakRssMiB, 1)} | ${seq?.total ? `${f(seq.total.p50)} / ${f(seq.total.p99)}` : '-'} | ${seqAdded} | ${c.non2xx} / ${c.errors} |`,
    );
  }
  lines.push('');
  if (r.problems.length) lines.push(...r.problems.map((x) => `- ${x}`), '');
  return lines;
}
