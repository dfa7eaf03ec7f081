/**
 * GET /metrics (plugins/metrics/metrics.ts, plugins/metrics/metrics-route.ts): Prometheus text format, the farebox_ metrics with
 * their documented labels, recorded by real calls; metrics on a port of their own by default, on the API port only
 * when configured and behind the bearer token.
 */
import t, { type Test } from 'tap';
import Fastify, { type FastifyInstance } from 'fastify';
import farebox from '../../plugins/gateway.js';
import { buildConfig, ConfigError, DEFAULT_METRICS_PORT, embeddedDefault, loadConfig } from '../../plugins/config.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { listUsage } from '../../plugins/billing/call-records.js';
import { countQueuedDebits } from '../../plugins/billing/call-records.js';
import { closeDevChains, dropPrefix, startHarness, testPrefix, type Harness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';

t.teardown(closeDevChains);

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples, HELP and TYPE lines of a Prometheus text exposition. */
function parseExposition(text: string): { samples: Sample[]; types: Map<string, string>; help: Set<string> } {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  const help = new Set<string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      if (meta[1] === 'HELP') help.add(meta[2]);
      else types.set(meta[2], meta[3]);
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types, help };
}

/** Samples of `name` whose labels include `labels`. */
function select(samples: Sample[], name: string, labels: Record<string, string> = {}): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** Sum of the selected samples (0 when there are none). */
function total(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return select(samples, name, labels).reduce((a, s) => a + s.value, 0);
}

async function scrape(url: string, headers: Record<string, string> = {}): Promise<Sample[]> {
  const res = await fetch(url, { headers });
  if (res.status !== 200) throw new Error(`GET ${url}: ${res.status}`);
  return parseExposition(await res.text()).samples;
}

/** Scrape until `ready` holds (metrics are recorded when the response closes, settlement later). */
async function scrapeUntil(url: string, ready: (s: Sample[]) => boolean, timeoutMs = 20_000): Promise<Sample[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await scrape(url);
    if (ready(s) || Date.now() > deadline) return s;
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function chat(h: Harness, content: string, model = 'gamma-k3'): Promise<Response> {
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content }] }),
  });
  await res.text();
  return res;
}

/** Check a histogram's series for `labels`: +Inf bucket = count, buckets non-decreasing; returns the count. */
function histogramCount(t: Test, samples: Sample[], name: string, labels: Record<string, string>): number {
  const buckets = select(samples, `${name}_bucket`, labels);
  const count = total(samples, `${name}_count`, labels);
  t.ok(buckets.length > 1, `${name} has buckets for ${JSON.stringify(labels)}`);
  const values = buckets.map((b) => b.value);
  t.same(
    values,
    [...values].sort((a, b) => a - b),
    `${name} buckets are cumulative`,
  );
  t.equal(
    select(samples, `${name}_bucket`, { ...labels, le: '+Inf' })[0]?.value,
    count,
    `${name} +Inf bucket equals _count`,
  );
  t.ok(total(samples, `${name}_sum`, labels) > 0, `${name}_sum is positive`);
  return count;
}

t.test('GET /metrics: text format, every farebox_ metric, labels and histograms recorded by calls', async (t) => {
  const h = await startHarness();
  t.teardown(() => h.close());

  const first = await fetch(h.metricsUrl);
  t.equal(first.status, 200);
  t.match(first.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/, 'Prometheus text format 0.0.4');
  const { types, help } = parseExposition(await first.text());
  for (const m of await createMetrics({ defaults: false }).registry.getMetricsAsJSON()) {
    t.ok(help.has(m.name), `# HELP ${m.name}`);
    t.equal(types.get(m.name), m.type, `# TYPE ${m.name} ${m.type}`);
  }
  t.ok(
    [...types.keys()].some((n) => n.startsWith('farebox_process_')),
    'process metrics under the farebox_process_ prefix',
  );

  t.equal((await chat(h, 'hello')).status, 200);
  t.equal((await chat(h, 'fail please #sim:status=500')).status, 502, 'upstream 500 -> 502');
  const messages = await fetch(`${h.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': h.key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'alpha-haiku-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }),
  });
  await messages.text();
  t.equal(messages.status, 200);
  const noKey = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] }),
  });
  await noKey.text();
  t.equal(noKey.status, 401);

  const s = await scrapeUntil(h.metricsUrl, (s) => total(s, 'farebox_requests_total') >= 4);
  const requests = select(s, 'farebox_requests_total');
  t.equal(requests.length, 4, 'one series per route, model and status');
  for (const r of requests)
    t.same(Object.keys(r.labels).sort(), ['model', 'route', 'status'], 'labels route, model, status');
  t.equal(total(s, 'farebox_requests_total', { route: 'chat_completions', model: 'gamma-k3', status: '200' }), 1);
  t.equal(total(s, 'farebox_requests_total', { route: 'chat_completions', model: 'gamma-k3', status: '502' }), 1);
  t.equal(total(s, 'farebox_requests_total', { route: 'messages', model: 'alpha-haiku-4-5', status: '200' }), 1);
  t.equal(
    total(s, 'farebox_requests_total', { route: 'chat_completions', model: 'none', status: '401' }),
    1,
    'refusals are requests too',
  );
  t.equal(
    total(s, 'farebox_upstream_errors_total', { provider: 'sim-open-weights', status: '500' }),
    1,
    'upstream error by provider and status',
  );
  t.equal(total(s, 'farebox_rejections_total', { code: 'missing_api_key' }), 1, 'refusal by error code');

  t.equal(
    histogramCount(t, s, 'farebox_request_duration_seconds', { route: 'chat_completions' }),
    3,
    'request duration observed per call, refusals included',
  );
  t.equal(histogramCount(t, s, 'farebox_request_duration_seconds', { route: 'messages' }), 1);
  t.equal(
    histogramCount(t, s, 'farebox_gateway_overhead_seconds', { route: 'chat_completions' }),
    2,
    'overhead observed per forwarded call',
  );
  t.equal(
    histogramCount(t, s, 'farebox_upstream_duration_seconds', { provider: 'sim-open-weights' }),
    2,
    'upstream time per upstream answer',
  );
  t.equal(histogramCount(t, s, 'farebox_upstream_duration_seconds', { provider: 'sim-anthropic' }), 1);
  t.equal(select(s, 'farebox_tokens_total').length, 0, 'no billing configured: nothing billed');
});

t.test(
  'billed calls: tokens and charged USD match the usage record; holds, settlement and watcher metrics',
  async (t) => {
    const h = await startHarness({ chains: true });
    t.teardown(() => h.close());
    const url = h.metricsUrl;

    t.equal((await chat(h, 'hello before funding')).status, 402, 'unfunded -> 402');
    await h.fund('chain_a', 5_000_000n);
    const res = await chat(h, 'hello #sim:tokens=7');
    t.equal(res.status, 200);

    const s = await scrapeUntil(
      url,
      (s) =>
        total(s, 'farebox_charged_usd_total') > 0 &&
        total(s, 'farebox_settlement_batches_total', { chain: 'chain_a', result: 'mined' }) >= 1,
    );
    t.equal(total(s, 'farebox_rejections_total', { code: 'insufficient_funds' }), 1, '402 counted by code');
    t.equal(total(s, 'farebox_holds_placed_total', { chain: 'chain_a' }), 1, 'one hold placed (the 402 placed none)');

    const [record] = await listUsage(h.redis, h.account);
    t.ok(record, 'the call has a usage record');
    t.equal(record.call_id, res.headers.get('x-request-id'));
    t.equal(
      total(s, 'farebox_tokens_total', { model: 'gamma-k3', kind: 'output' }),
      7,
      'output tokens by model and kind',
    );
    t.equal(
      total(s, 'farebox_tokens_total', { model: 'gamma-k3', kind: 'input' }),
      record.usage.input_tokens,
      'input tokens as billed',
    );
    const charged = select(s, 'farebox_charged_usd_total', { chain: 'chain_a', model: 'gamma-k3' });
    t.equal(charged.length, 1, 'charged USD by chain and model');
    t.equal(charged[0]?.value, Number(record.price), 'charged USD is the call price');
    t.equal(total(s, 'farebox_price_above_hold_total'), 0, 'price never above hold');

    t.equal(
      total(s, 'farebox_settlement_charges_total', { chain: 'chain_a', outcome: 'charged' }),
      1,
      'the charge mined',
    );
    t.equal(histogramCount(t, s, 'farebox_settlement_lag_seconds', { chain: 'chain_a' }), 1, 'settlement lag observed');
    t.equal(
      histogramCount(t, s, 'farebox_settlement_duration_seconds', { chain: 'chain_a' }),
      1,
      'batch duration observed',
    );
    t.ok(
      total(s, 'farebox_chain_events_total', { chain: 'chain_a', kind: 'deposited' }) >= 1,
      'the deposit applied by the watcher',
    );
    t.equal(select(s, 'farebox_holds_open').length, 1, 'holds open reported');
    t.equal(select(s, 'farebox_chain_watcher_lag_blocks', { chain: 'chain_a' }).length, 1, 'watcher lag reported');

    // Acknowledged and deleted in one step: the charged debit leaves the queue.
    await until('the charged debit left the queue', async () => (await countQueuedDebits(h.redis, 'chain_a')) === 0);
    // Queue gauges are measured every 5 s by the settler.
    const q = await scrapeUntil(
      url,
      (s) => select(s, 'farebox_debit_queue_depth', { chain: 'chain_a' })[0]?.value === 0,
    );
    t.match(
      select(q, 'farebox_debit_queue_depth', { chain: 'chain_a' }),
      [{ value: 0 }],
      'debit queue depth by chain: empty',
    );
    t.match(
      select(q, 'farebox_debit_queue_oldest_seconds', { chain: 'chain_a' }),
      [{ value: 0 }],
      'oldest debit age by chain: none',
    );
  },
);

t.test('by default /metrics has a port of its own: the API port does not answer it', async (t) => {
  const h = await startHarness();
  t.teardown(() => h.close());
  const port = h.metrics.server.port;
  t.type(port, 'number', 'the port /metrics listens on is known');
  t.not(port, 0);
  t.equal(h.config.metrics.port, 0, 'ephemeral, as the API port of the harness is');

  const main = await fetch(`${h.url}/metrics`);
  await main.text();
  t.equal(main.status, 404, 'not on the gateway port');
  await chat(h, 'hello');
  const s = await scrapeUntil(`http://127.0.0.1:${port}/metrics`, (s) => total(s, 'farebox_requests_total') >= 1);
  t.equal(total(s, 'farebox_requests_total', { route: 'chat_completions', status: '200' }), 1, 'the gateway registry');
  const other = await fetch(`http://127.0.0.1:${port}/other`);
  await other.text();
  t.equal(other.status, 404, 'only /metrics there');
});

t.test('metrics.port: the port of its own as configured; it closes with the gateway', async (t) => {
  const h = await startHarness({ edit: (c) => void (c.metrics = { port: 0 }) });
  const port = h.metrics.server.port;
  t.ok(port, 'listening');
  t.ok((await scrape(`http://127.0.0.1:${port}/metrics`)).length > 0);
  await h.close();
  await t.rejects(fetch(`http://127.0.0.1:${port}/metrics`), 'the metrics server closes with the gateway');
});

t.test(
  'the metrics port defaults to 9464 (ephemeral beside an ephemeral API port); METRICS_PORT sets it for farebox serve',
  async (t) => {
    // Config values only: nothing here listens, so a gateway beside the suite on 9464 is no matter.
    const env = { FAREBOX_SIM_KEY: 'k' };
    t.equal(DEFAULT_METRICS_PORT, 9464);
    t.equal(buildConfig(embeddedDefault('http://127.0.0.1:9'), env).metrics.port, 9464, 'server.port 8080 -> 9464');
    t.equal(
      buildConfig({ ...embeddedDefault('http://127.0.0.1:9'), server: { port: 0 } }, env).metrics.port,
      0,
      'server.port 0 -> 0',
    );
    t.equal(buildConfig({ ...embeddedDefault('http://127.0.0.1:9'), metrics: { port: 9100 } }, env).metrics.port, 9100);
    t.equal(
      loadConfig({ ...env, METRICS_PORT: '9200' }, 'http://127.0.0.1:9').metrics.port,
      9200,
      'METRICS_PORT over the embedded default',
    );
    t.equal(
      loadConfig({ ...env, PORT: '0' }, 'http://127.0.0.1:9').metrics.port,
      0,
      'PORT=0 -> ephemeral metrics port',
    );
    t.equal(loadConfig({ ...env, PORT: '0', METRICS_PORT: '9300' }, 'http://127.0.0.1:9').metrics.port, 9300);
  },
);

t.test('metrics on the API port without a token are refused at config validation, naming the field', async (t) => {
  const env = { FAREBOX_SIM_KEY: 'k', FAREBOX_METRICS_TOKEN: 'x' };
  const refused = (metrics: unknown, field: RegExp) => {
    const err = (() => {
      try {
        buildConfig({ ...embeddedDefault('http://127.0.0.1:9'), metrics }, env);
        return null;
      } catch (e) {
        return e as Error;
      }
    })();
    t.ok(err instanceof ConfigError, `${JSON.stringify(metrics)}: a ConfigError`);
    t.match(err?.message, field, JSON.stringify(metrics));
  };
  refused({ on_api_port: true }, /metrics\.token_env: required with metrics\.on_api_port/);
  refused({ on_api_port: true, enabled: true }, /metrics\.token_env/);
  refused({ on_api_port: true, token_env: 'FAREBOX_METRICS_TOKEN', port: 9100 }, /metrics\.port: .*exclude each other/);
  const ok = buildConfig(
    { ...embeddedDefault('http://127.0.0.1:9'), metrics: { on_api_port: true, token_env: 'FAREBOX_METRICS_TOKEN' } },
    env,
  );
  t.equal(ok.metrics.port, undefined, 'on the API port: no port of its own');
});

t.test(
  'metrics.on_api_port with token_env: 401 without the bearer token, 200 with it; no port of its own',
  async (t) => {
    const h = await startHarness({
      edit: (c) => void (c.metrics = { on_api_port: true, token_env: 'FAREBOX_METRICS_TOKEN' }),
      env: { FAREBOX_METRICS_TOKEN: 'scrape-secret' },
    });
    t.teardown(() => h.close());
    t.equal(h.metrics.server.port, undefined, 'no metrics server of its own');
    t.equal(h.metricsUrl, `${h.url}/metrics`);
    const get = async (headers: Record<string, string>) => {
      const res = await fetch(`${h.url}/metrics`, { headers });
      return { status: res.status, body: await res.text() };
    };
    t.equal((await get({})).status, 401, 'no token');
    t.equal((await get({ authorization: 'Bearer wrong' })).status, 401, 'wrong token');
    t.equal((await get({ authorization: 'scrape-secret' })).status, 401, 'token without the Bearer scheme');
    t.equal((await get({ authorization: 'Bearer scrape-secret-and-more' })).status, 401, 'a longer token');
    const ok = await get({ authorization: 'Bearer scrape-secret' });
    t.equal(ok.status, 200);
    t.match(ok.body, /# TYPE farebox_requests_total counter/);
  },
);

t.test('metrics.port with token_env: the port of its own asks for the token', async (t) => {
  const h = await startHarness({
    edit: (c) => void (c.metrics = { port: 0, token_env: 'FAREBOX_METRICS_TOKEN' }),
    env: { FAREBOX_METRICS_TOKEN: 'scrape-secret' },
  });
  t.teardown(() => h.close());
  const url = `http://127.0.0.1:${h.metrics.server.port}/metrics`;
  const denied = await fetch(url);
  await denied.text();
  t.equal(denied.status, 401);
  t.ok((await scrape(url, { authorization: 'Bearer scrape-secret' })).length > 0, '200 with the token');
});

t.test('metrics.enabled false: no /metrics anywhere', async (t) => {
  const h = await startHarness({ edit: (c) => void (c.metrics = { enabled: false }) });
  t.teardown(() => h.close());
  const res = await fetch(`${h.url}/metrics`);
  await res.text();
  t.equal(res.status, 404);
  t.equal(h.metrics.server.port, undefined, 'no metrics server');
});

t.test('metrics.token_env naming an unset variable: the plugin refuses to start', async (t) => {
  const input = embeddedDefault('http://127.0.0.1:9');
  const prefix = testPrefix();
  input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
  input.metrics = { port: 0, token_env: 'FAREBOX_METRICS_TOKEN_UNSET' };
  const env = { FAREBOX_SIM_KEY: 'sim-key' };
  const config = buildConfig(input, env, true);
  const redis = connectRedis(config.redis);
  const app = Fastify({ logger: false });
  t.teardown(async () => {
    await app.close().catch(() => {});
    await dropPrefix(redis, prefix);
    await redis.quit();
  });
  void app.register(farebox, { config, redis, env });
  await t.rejects(async () => {
    await app.ready();
  }, /FAREBOX_METRICS_TOKEN_UNSET/);
});
