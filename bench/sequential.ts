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
 * `warmup` unmeasured requests, then `count` measured ones, strictly one after the other; with `cpuPids`, their CPU
 * over the measured ones.
 */
export async function runSequential(
  spec: RequestSpec,
  count: number,
  warmup: number,
  cpuPids: number[] = [],
): Promise<SequentialResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const total = new Sample();
  const ttfb = new Sample();
  const cpu = () => cpuPids.reduce((a, pid) => a + cpuMsOf(pid), 0);
  let cpu0 = 0;
  let failed = 0;
  try {
    for (let i = 0; i < warmup + count; i++) {
      if (i === warmup) cpu0 = cpu();
      let t: Timing;
      try {
        t = await sendOnce(spec, agent);
      } catch {
        if (i >= warmup) failed++;
        continue;
      }
      if (i < warmup) continue;
      if (t.status < 200 || t.status > 299) {
        failed++;
        continue;
      }
      total.push(t.totalMs);
      ttfb.push(t.ttfbMs);
    }
  } finally {
    agent.destroy();
  }
  const cpuMs = cpuPids.length ? cpu() - cpu0 : 0;
  return {
    requests: count,
    failed,
    total: total.percentiles(),
    ttfb: spec.stream ? ttfb.percentiles() : null,
    ...(cpuPids.length ? { serverCpuMsPerReq: total.size ? round(cpuMs / total.size, 4) : null } : {}),
  };
}
