/**
 * Load at a fixed concurrency with autocannon, timing every response ourselves: autocannon's histogram has 1 ms
 * steps, but each response's own duration (process.hrtime from the write of the request) is sub-ms. Time to
 * first byte is the first body byte of the response (for SSE: the first event), taken on the same clock.
 */
import autocannon, { type Client } from 'autocannon';
import type { RequestSpec } from './scenarios.js';
import { Sample, round, type Percentiles } from './stats.js';

/** What one load run measured. */
export interface LoadResult {
  connections: number;
  seconds: number;
  /** 2xx responses per second. */
  rps: number;
  ok: number;
  /** Responses with a status outside 2xx. */
  non2xx: number;
  /** Socket errors and timeouts (autocannon's `errors` counts both). */
  errors: number;
  latency: Percentiles | null;
  ttfb: Percentiles | null;
}

/** BENCH_RATE: requests per second across all connections (0: as fast as answers come), for an A/B at equal load. */
const RATE = Number(process.env.BENCH_RATE ?? 0);

function sinceMs(start: [number, number]): number {
  const d = process.hrtime(start);
  return d[0] * 1e3 + d[1] / 1e6;
}

/** Run `spec` on `connections` connections for `seconds`, or until `amount` responses if given. */
export function runLoad(spec: RequestSpec, connections: number, seconds: number, amount?: number): Promise<LoadResult> {
  const latency = new Sample();
  const ttfb = new Sample();
  let ok = 0;
  let non2xx = 0;
  const setupClient = (client: Client) => {
    let first = -1;
    client.on('request', () => {
      first = -1;
    });
    client.on('body', () => {
      if (first >= 0) return;
      const req = client.pipelinedRequests.peek();
      if (req) first = sinceMs(req.startTime);
    });
    client.on('response', (status, _bytes, durationMs) => {
      if (status < 200 || status > 299) {
        non2xx++;
        return;
      }
      ok++;
      latency.push(durationMs);
      if (spec.stream && first >= 0) ttfb.push(first);
    });
  };
  const started = process.hrtime();
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url: spec.url,
        method: spec.method,
        headers: spec.headers,
        ...(spec.method === 'POST' ? { body: spec.body } : {}),
        connections,
        pipelining: 1,
        timeout: 10,
        ...(RATE > 0 ? { overallRate: RATE } : {}),
        ...(amount ? { amount } : { duration: seconds }),
        setupClient,
      },
      (err, result) => {
        if (err) return reject(err);
        const elapsed = sinceMs(started) / 1000;
        resolve({
          connections,
          seconds: round(elapsed, 2),
          rps: round(ok / elapsed, 1),
          ok,
          non2xx,
          errors: result.errors,
          latency: latency.percentiles(),
          ttfb: spec.stream ? ttfb.percentiles() : null,
        });
      },
    );
  });
}
