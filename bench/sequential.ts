/**
 * One request at a time on one keep-alive connection (no load): the latency a caller sees from each target.
 * Total time runs from the request's write to the end of the body; time to first byte to the first body chunk.
 */
import { Agent, request } from 'node:http';
import { cpuMsOf } from './children.js';
import type { RequestSpec } from './scenarios.js';
import { Sample, round, type Percentiles } from './stats.js';

/** What the sequential run measured. */
export interface SequentialResult {
  requests: number;
  failed: number;
  total: Percentiles | null;
  ttfb: Percentiles | null;
  /**
   * CPU (user+system) of the processes named by the caller per measured 2xx response, ms: what one call costs a
   * server that has nothing else to do (no event-loop turn shared with other calls). Absent when none were named.
   */
  serverCpuMsPerReq?: number | null;
}

interface Timing {
  status: number;
  totalMs: number;
  ttfbMs: number;
  body: string;
}

/** Send `spec` once on `agent`; rejects after `timeoutMs`. */
export function sendOnce(spec: RequestSpec, agent: Agent, timeoutMs = 10_000, keepBody = false): Promise<Timing> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let ttfb = -1;
    const chunks: Buffer[] = [];
    const req = request(spec.url, { method: spec.method, headers: spec.headers, agent, timeout: timeoutMs }, (res) => {
      res.on('data', (c: Buffer) => {
        if (ttfb < 0) ttfb = performance.now() - start;
        if (keepBody) chunks.push(c);
      });
      res.on('end', () => {
        const totalMs = performance.now() - start;
        resolve({
          status: res.statusCode ?? 0,
          totalMs,
          ttfbMs: ttfb < 0 ? totalMs : ttfb,
          body: Buffer.concat(chunks).toString('utf8'),
        });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(spec.method === 'POST' ? spec.body : undefined);
  });
}

/**
 * Unmeasured requests until `warmup` of them have run and `warmupMs` has passed, then `count` measured ones, strictly
 * one after the other; with `cpuPids`, their CPU over the measured ones. The time matters on a VM: for about the
 * first second of back-to-back calls, every wake-up of a process on the other core costs more (direct's p50 about
 * twice its later one), and a call through a gateway has more wake-ups than a direct one.
 */
export async function runSequential(
  spec: RequestSpec,
  count: number,
  warmup: number,
  cpuPids: number[] = [],
  warmupMs = 0,
): Promise<SequentialResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const total = new Sample();
  const ttfb = new Sample();
  const cpu = () => cpuPids.reduce((a, pid) => a + cpuMsOf(pid), 0);
  let failed = 0;
  let cpuMs = 0;
  try {
    const warmUntil = performance.now() + warmupMs;
    for (let i = 0; i < warmup || performance.now() < warmUntil; i++) await sendOnce(spec, agent).catch(() => null);
    const cpu0 = cpu();
    for (let i = 0; i < count; i++) {
      let t: Timing;
      try {
        t = await sendOnce(spec, agent);
      } catch {
        failed++;
        continue;
      }
      if (t.status < 200 || t.status > 299) {
        failed++;
        continue;
      }
      total.push(t.totalMs);
      ttfb.push(t.ttfbMs);
    }
    cpuMs = cpuPids.length ? cpu() - cpu0 : 0;
  } finally {
    agent.destroy();
  }
  return {
    requests: count,
    failed,
    total: total.percentiles(),
    ttfb: spec.stream ? ttfb.percentiles() : null,
    ...(cpuPids.length ? { serverCpuMsPerReq: total.size ? round(cpuMs / total.size, 4) : null } : {}),
  };
}
