/**
 * deploy/: every metric the alert rules and the Grafana dashboard read is one the gateway exports, with the labels
 * it has and the right function for its type; and compose.yaml, prometheus.yml and k8s.yaml agree with each other
 * and with the config they start the gateway on.
 */
import t, { type Test } from 'tap';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import { loadConfig, type FareboxConfig } from '../plugins/config.js';
import { createMetrics } from '../plugins/metrics/metrics.js';

const DEPLOY = fileURLToPath(new URL('../deploy/', import.meta.url));
const read = (file: string) => readFileSync(join(DEPLOY, file), 'utf8');
const yaml = (file: string) => parse(read(file), { merge: true }) as Record<string, unknown>;

// ---- The gateway's metrics: name -> type and label names ----

interface Exported {
  type: string;
  labels: Set<string>;
}
const registry = createMetrics().registry;
const exported = new Map<string, Exported>();
for (const m of await registry.getMetricsAsJSON()) {
  const metric = registry.getSingleMetric(m.name) as unknown as { labelNames?: readonly string[] };
  exported.set(m.name, { type: String(m.type), labels: new Set(metric.labelNames ?? []) });
}
const SCRAPE_LABELS = ['instance', 'job'];

/** The exported metric a series name belongs to (histograms expose _bucket, _sum and _count). */
function metricOf(series: string): { name: string; suffix: string } | undefined {
  if (exported.has(series)) return { name: series, suffix: '' };
  const m = /^(.*)_(bucket|sum|count)$/.exec(series);
  if (m && exported.get(m[1])?.type === 'histogram') return { name: m[1], suffix: m[2] };
  return undefined;
}

const SERIES = /\bfarebox_[a-z0-9_]+/g;

/** Check one PromQL expression against the exported metrics; `legend` holds label names used in templates. */
function checkExpr(t: Test, where: string, expr: string, legend: string[] = []): void {
  const used = [...new Set(expr.match(SERIES) ?? [])];
  const labels = new Set(SCRAPE_LABELS);
  for (const series of used) {
    const m = metricOf(series);
    t.ok(m, `${where}: ${series} is exported by the gateway`);
    if (!m) continue;
    for (const l of exported.get(m.name)!.labels) labels.add(l);
    if (m.suffix === 'bucket') labels.add('le');
  }
  // Selector labels belong to their metric.
  for (const sel of expr.matchAll(/\b(farebox_[a-z0-9_]+)\{([^}]*)\}/g)) {
    const m = metricOf(sel[1]);
    if (!m) continue;
    for (const l of new Set([...sel[2].matchAll(/([a-z_]+)\s*(?:=~|!~|!=|=)/g)].map((x) => x[1]))) {
      t.ok(exported.get(m.name)!.labels.has(l) || SCRAPE_LABELS.includes(l), `${where}: ${sel[1]} has label ${l}`);
    }
  }
  // rate/increase only on counters and histogram series; histogram_quantile only on buckets.
  for (const f of expr.matchAll(/\b(rate|irate|increase)\(\s*(farebox_[a-z0-9_]+)/g)) {
    const m = metricOf(f[2]);
    if (m)
      t.ok(
        m.suffix !== '' || exported.get(m.name)!.type === 'counter',
        `${where}: ${f[1]}() of ${f[2]} (a ${exported.get(m.name)!.type})`,
      );
  }
  for (const f of expr.matchAll(/histogram_quantile\([^,]+,[^]*?\b(farebox_[a-z0-9_]+)/g)) {
    t.match(f[1], /_bucket$/, `${where}: histogram_quantile over a _bucket series`);
  }
  // Grouping and template labels exist when the expression reads only farebox metrics.
  const foreign = /\b(up|redis_[a-z_]+|probe_[a-z_]+|vector)\b(?=\s*[({])/.test(expr.replace(SERIES, ''));
  if (used.length > 0 && !foreign) {
    const grouped = [...expr.matchAll(/\b(?:by|on|without|ignoring)\s*\(([^)]*)\)/g)].flatMap((g) =>
      g[1]
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    );
    for (const l of new Set([...grouped, ...legend]))
      t.ok(labels.has(l), `${where}: label ${l} exists on ${used.join(', ')}`);
  }
  let depth = 0;
  for (const c of expr) {
    if (c === '(') depth++;
    if (c === ')') depth--;
    if (depth < 0) break;
  }
  t.equal(depth, 0, `${where}: parentheses balance`);
}

/** Label names a template (annotation or legend) reads: {{ $labels.x }} and {{x}}. */
function templateLabels(text: string): string[] {
  return [...text.matchAll(/\{\{\s*(?:\$labels\.)?([a-z_]+)\s*\}\}/g)].map((m) => m[1]);
}

// ---- Alert rules ----

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

t.test('alerts.yml: well-formed rules over metrics the gateway exports', async (t) => {
  const doc = yaml('alerts.yml') as { groups: { name: string; rules: Rule[] }[] };
  const rules = doc.groups.flatMap((g) => g.rules);
  t.ok(rules.length >= 15, 'rules present');
  const names = new Set<string>();
  for (const r of rules) {
    t.match(r.alert, /^Farebox[A-Z][A-Za-z0-9]+$/, `${r.alert}: named FareboxSomething`);
    t.notOk(names.has(r.alert), `${r.alert}: unique`);
    names.add(r.alert);
    t.type(r.expr, 'string', `${r.alert}: has an expr`);
    if (r.for !== undefined) t.match(r.for, /^\d+[smh]$/, `${r.alert}: for is a duration`);
    t.ok(['critical', 'warning'].includes(r.labels?.severity ?? ''), `${r.alert}: severity label`);
    t.ok(r.annotations?.summary && r.annotations.description, `${r.alert}: summary and description annotations`);
    const legend = templateLabels(`${r.annotations?.summary ?? ''} ${r.annotations?.description ?? ''}`).filter(
      (l) => l !== 'value',
    );
    checkExpr(t, r.alert, r.expr, legend);
  }

  // What the brief asked the rules to cover.
  const all = rules.map((r) => r.expr).join('\n');
  for (const m of [
    'farebox_debit_queue_oldest_seconds',
    'farebox_settlement_lag_seconds_bucket',
    'farebox_balance_drift_usd_total',
    'farebox_upstream_errors_total',
    'farebox_requests_total',
    'farebox_chain_watcher_lag_blocks',
    'farebox_chain_errors_total',
    'farebox_holds_released_total{reason="instance_died"}',
    'farebox_price_above_hold_total',
    'redis_up',
    'probe_success',
    'farebox_chain_halted',
    'farebox_chain_anomalies_total',
    'farebox_escrow_admin_events_total',
    'farebox_settlement_fee_capped_total',
    'farebox_chain_unmatched_charges_total',
    'farebox_chain_node_behind_total',
    'farebox_reconcile_last_round_timestamp_seconds',
    'farebox_escrow_withdrawal_delay_seconds',
    'farebox_chain_admission_stopped',
  ]) {
    t.ok(all.includes(m), `an alert reads ${m}`);
  }
  // The backlog's alerts follow the escrow's withdrawal delay, not fixed ages.
  for (const r of rules.filter((x) => x.expr.includes('farebox_debit_queue_oldest_seconds'))) {
    t.match(
      r.expr,
      /farebox_debit_queue_oldest_seconds\)\s*\/\s*on \(chain\)[^>]*farebox_escrow_withdrawal_delay_seconds\)\s*>\s*0?\.\d+\s*$/,
      `${r.alert}: a ratio of the backlog's age to the withdrawal delay`,
    );
  }
  t.match(all, /farebox_requests_total\{status=~"5\.\."\}/, 'a 5xx rate rule');
});

// ---- Grafana dashboard ----

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  gridPos: { h: number; w: number; x: number; y: number };
  targets?: { refId: string; expr: string; legendFormat?: string; datasource?: { uid?: string } }[];
}

t.test(
  'grafana-dashboard.json: parses, a Prometheus datasource variable, every panel queries exported metrics',
  async (t) => {
    const d = JSON.parse(read('grafana-dashboard.json')) as {
      uid: string;
      title: string;
      schemaVersion: number;
      panels: Panel[];
      templating: { list: { name: string; type: string; query: unknown; datasource?: { uid?: string } }[] };
    };
    t.ok(d.schemaVersion >= 39, 'schemaVersion of a current Grafana');
    t.ok(d.uid && d.title, 'uid and title');
    const dsVar = d.templating.list.find((v) => v.type === 'datasource');
    t.equal(dsVar?.query, 'prometheus', 'a Prometheus datasource variable');
    const dsRef = `\${${dsVar?.name}}`;
    for (const v of d.templating.list.filter((v) => v.type === 'query')) {
      t.equal(v.datasource?.uid, dsRef, `variable ${v.name} uses the datasource variable`);
    }

    const ids = new Set<number>();
    const cells = new Set<string>();
    const panels = d.panels.filter((p) => p.type !== 'row');
    t.ok(panels.length >= 20, 'panels present');
    for (const p of d.panels) {
      t.notOk(ids.has(p.id), `panel ${p.id} id unique`);
      ids.add(p.id);
      const { x, y, w, h } = p.gridPos;
      t.ok(x >= 0 && w > 0 && x + w <= 24 && h > 0, `${p.title}: inside the 24-column grid`);
      for (let i = x; i < x + w; i++)
        for (let j = y; j < y + h; j++) {
          if (cells.has(`${i},${j}`)) t.fail(`${p.title}: overlaps another panel at ${i},${j}`);
          cells.add(`${i},${j}`);
        }
    }
    for (const p of panels) {
      t.equal(p.datasource?.uid, dsRef, `${p.title}: datasource is the variable`);
      t.ok(p.targets && p.targets.length > 0, `${p.title}: has targets`);
      const refs = new Set<string>();
      for (const target of p.targets ?? []) {
        t.ok(target.refId && !refs.has(target.refId), `${p.title}: refId ${target.refId} unique`);
        refs.add(target.refId);
        t.equal(target.datasource?.uid, dsRef, `${p.title}/${target.refId}: datasource is the variable`);
        t.type(target.expr, 'string', `${p.title}/${target.refId}: has an expr`);
        checkExpr(t, `${p.title}/${target.refId}`, target.expr, templateLabels(target.legendFormat ?? ''));
      }
    }

    const all = panels.flatMap((p) => (p.targets ?? []).map((q) => q.expr)).join('\n');
    for (const m of [
      'farebox_requests_total',
      'farebox_request_duration_seconds_bucket',
      'farebox_gateway_overhead_seconds_bucket',
      'farebox_upstream_duration_seconds_bucket',
      'farebox_upstream_errors_total',
      'farebox_tokens_total',
      'farebox_charged_usd_total',
      'farebox_rejections_total',
      'farebox_holds_open',
      'farebox_debit_queue_depth',
      'farebox_debit_queue_oldest_seconds',
      'farebox_settlement_lag_seconds_bucket',
      'farebox_settlement_failures_total',
      'farebox_balance_drift_usd_total',
      'farebox_chain_watcher_lag_blocks',
      'farebox_escrow_withdrawal_delay_seconds',
      'farebox_chain_admission_stopped',
    ]) {
      t.ok(all.includes(m), `a panel reads ${m}`);
    }
  },
);

// ---- compose.yaml, prometheus.yml, redis.conf, k8s.yaml ----

/** The overlay script of a command (`node -e '...' && exec farebox ...`). */
function overlayScript(command: unknown): string | undefined {
  const text = Array.isArray(command) ? command.join(' ') : String(command ?? '');
  return /node -e '([^']*)'/.exec(text)?.[1];
}

const PROVIDER_ENV = { ANTHROPIC_API_KEY: 'a', OPENAI_API_KEY: 'o', TOGETHER_API_KEY: 't', GEMINI_API_KEY: 'g' };

/** Run an instance's start-up overlay over farebox.example.json and load the config it produces. */
function configFor(script: string, overlay: string): FareboxConfig {
  const dir = mkdtempSync(join(tmpdir(), 'farebox-deploy-'));
  try {
    const out = join(dir, 'farebox.json');
    execFileSync(process.execPath, ['-e', script], {
      cwd: dir,
      env: {
        PATH: process.env.PATH,
        FAREBOX_BASE_CONFIG: join(DEPLOY, 'farebox.example.json'),
        FAREBOX_CONFIG: out,
        FAREBOX_OVERLAY: overlay,
      },
    });
    return loadConfig({ FAREBOX_CONFIG: out, ...PROVIDER_ENV });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Service {
  image?: string;
  hostname?: string;
  command?: unknown;
  environment?: Record<string, string>;
  volumes?: string[];
  secrets?: string[];
  configs?: { source: string; target: string }[];
  ports?: string[];
}

t.test('redis.conf: AOF on, never evicts, hashes small enough stay listpacks', async (t) => {
  const lines = read('redis.conf')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  t.ok(lines.includes('appendonly yes'), 'appendonly yes');
  t.ok(
    lines.some((l) => /^appendfsync (everysec|always)$/.test(l)),
    'appendfsync everysec or always',
  );
  t.ok(lines.includes('maxmemory-policy noeviction'), 'maxmemory-policy noeviction');
  // Call records are sized for Redis's default listpack limits of hashes (billing/call-records.ts): never lower.
  const setting = (name: string) => Number(lines.find((l) => l.startsWith(`${name} `))?.split(/\s+/)[1] ?? NaN);
  t.ok(setting('hash-max-listpack-value') >= 64, 'hash-max-listpack-value at least 64');
  t.ok(setting('hash-max-listpack-entries') >= 32, 'hash-max-listpack-entries at least 32');
});

t.test(
  'compose.yaml: Redis with redis.conf, gateways and a settle process on one Redis, Prometheus and Grafana wired',
  async (t) => {
    const compose = yaml('compose.yaml') as {
      services: Record<string, Service>;
      secrets: Record<string, { environment?: string }>;
      configs: Record<string, { content: string }>;
    };
    const services = compose.services;
    for (const s of ['redis', 'prometheus', 'grafana']) t.ok(services[s], `service ${s}`);

    // Every file mounted from the checkout exists.
    for (const [name, s] of Object.entries(services)) {
      for (const v of s.volumes ?? []) {
        const source = v.split(':')[0];
        if (source.startsWith('.')) t.ok(existsSync(join(DEPLOY, source)), `${name}: ${source} exists`);
      }
    }
    const redis = services.redis;
    t.ok(
      redis.volumes?.some((v) => v.startsWith('./redis.conf:')),
      'redis mounts redis.conf',
    );
    const confPath = redis.volumes!.find((v) => v.startsWith('./redis.conf:'))!.split(':')[1];
    t.same(redis.command, ['redis-server', confPath], 'redis-server runs on it');

    // Every farebox service runs `farebox $FAREBOX_RUN` on its overlaid config: `serve`, or `settle --metrics-port N`.
    const farebox = Object.entries(services).filter(([name]) => name.startsWith('farebox-'));
    const gateways = farebox.filter(([, s]) => s.environment?.FAREBOX_RUN === 'serve');
    const settles = farebox.filter(([, s]) => /^settle --metrics-port \d+$/.test(s.environment?.FAREBOX_RUN ?? ''));
    t.ok(gateways.length >= 2, 'several gateway instances');
    t.equal(settles.length, 1, 'one settle process');
    t.equal(gateways.length + settles.length, farebox.length, 'every farebox service serves or settles');
    const prom = yaml('prometheus.yml') as {
      rule_files: string[];
      scrape_configs: {
        job_name: string;
        static_configs: { targets: string[] }[];
        authorization?: { credentials_file?: string };
        params?: Record<string, string[]>;
      }[];
    };
    const job = prom.scrape_configs.find((j) => j.job_name === 'farebox')!;
    const settleJob = prom.scrape_configs.find((j) => j.job_name === 'farebox-settle')!;
    t.ok(job, 'a farebox scrape job');
    t.ok(settleJob, 'a farebox-settle scrape job');
    t.equal(settleJob.authorization?.credentials_file, job.authorization?.credentials_file, 'the same token for both');
    const scraped = (j: typeof job) => j.static_configs.flatMap((c) => c.targets).sort();
    const expected: string[] = [];
    const expectedSettle: string[] = [];
    for (const [name, s] of farebox) {
      const env = s.environment ?? {};
      const settle = !gateways.some(([g]) => g === name);
      t.match(String(s.command), /exec farebox \$\$FAREBOX_RUN$/, `${name}: runs farebox $FAREBOX_RUN`);
      t.equal(env.REDIS_URL, 'redis://redis:6379', `${name}: the one Redis`);
      t.ok(
        s.volumes?.some((v) => v.startsWith('./farebox.example.json:')),
        `${name}: mounts farebox.example.json`,
      );
      const script = overlayScript(s.command);
      t.ok(script, `${name}: start-up overlay`);
      const config = configFor(script!, env.FAREBOX_OVERLAY ?? '{}');
      t.ok(config.chains, `${name}: its config loads, with the four chains`);
      const port = settle ? Number(/--metrics-port (\d+)/.exec(env.FAREBOX_RUN!)![1]) : config.metrics.port;
      t.type(port, 'number', `${name}: metrics on a port of their own`);
      t.notOk(config.metrics.on_api_port, `${name}: no metrics on the API port`);
      t.notOk(
        (s.ports ?? []).some((p) => p.split(':').at(-1) === String(port)),
        `${name}: the metrics port is not published`,
      );
      (settle ? expectedSettle : expected).push(`${name}:${port}`);
      t.ok(config.metrics.token_env && env[config.metrics.token_env], `${name}: metrics token variable set`);
      const keyEnvs = Object.values(config.chains!)
        .map((c) => c.settler_key_env)
        .filter((k): k is string => !!k);
      t.ok(keyEnvs.length > 0, `${name}: the chains name their settler keys`);
      if (settle) {
        for (const k of keyEnvs) t.ok(env[k], `${name}: settler key ${k}`);
        for (const k of Object.values(config.providers).map((p) => p.key_env))
          t.notOk(env[k], `${name}: no provider key ${k}`);
      } else {
        for (const k of keyEnvs) t.notOk(env[k], `${name}: no settler key ${k} on a gateway`);
        t.equal(config.billing.settler, false, `${name}: does not settle`);
        t.ok(config.billing.watcher, `${name}: stands by as watcher`);
        // The debit spool outlives the container: a named volume, under a hostname that does not change.
        t.equal(s.hostname, name, `${name}: a fixed hostname`);
        const spoolVolume = (s.volumes ?? []).find(
          (v) => !v.startsWith('.') && config.billing.spool_dir?.startsWith(v.split(':')[1] + '/'),
        );
        t.ok(spoolVolume, `${name}: spool_dir on a named volume`);
      }
    }
    t.same(scraped(job), expected.sort(), 'Prometheus scrapes every gateway on its metrics port');
    t.same(scraped(settleJob), expectedSettle, 'and the settle process on its own, in a job of its own');

    // Token: the compose secret Prometheus reads is the gateways' token variable.
    const secret = /^\/run\/secrets\/(.+)$/.exec(job.authorization?.credentials_file ?? '')?.[1];
    t.ok(secret && services.prometheus.secrets?.includes(secret), 'Prometheus gets the token as a compose secret');
    const tokenEnv = configFor(
      overlayScript(gateways[0][1].command)!,
      gateways[0][1].environment?.FAREBOX_OVERLAY ?? '{}',
    ).metrics.token_env;
    t.equal(compose.secrets[secret!]?.environment, tokenEnv, 'the secret is the metrics token variable');

    // Health probes cover every gateway.
    const health = prom.scrape_configs.find((j) => j.job_name === 'farebox-health');
    t.same(
      health?.static_configs.flatMap((c) => c.targets).sort(),
      gateways.map(([name, s]) => `http://${name}:${s.environment?.PORT}/v1/health`).sort(),
      'health probes',
    );

    // Prometheus mounts the rules where prometheus.yml looks for them.
    for (const file of ['prometheus.yml', 'alerts.yml']) {
      const mount = services.prometheus.volumes?.find((v) => v.startsWith(`./${file}:`))?.split(':')[1];
      t.ok(mount, `prometheus mounts ${file}`);
      if (file === 'alerts.yml') t.ok(prom.rule_files.includes(mount!), 'rule_files names the mounted alerts.yml');
    }

    // Grafana: the provisioned dashboards path holds grafana-dashboard.json; the datasource is Prometheus.
    const dashMount = services.grafana.volumes?.find((v) => v.startsWith('./grafana-dashboard.json:'))?.split(':')[1];
    t.ok(dashMount, 'grafana mounts the dashboard');
    const providers =
      compose.configs[services.grafana.configs!.find((c) => c.target.includes('/provisioning/dashboards/'))!.source];
    const path = (parse(providers.content) as { providers: { options: { path: string } }[] }).providers[0].options.path;
    t.ok(dashMount!.startsWith(`${path}/`), 'the dashboard is in the provisioned folder');
    const dsConfig =
      compose.configs[services.grafana.configs!.find((c) => c.target.includes('/provisioning/datasources/'))!.source];
    t.match(
      parse(dsConfig.content),
      { datasources: [{ type: 'prometheus', url: 'http://prometheus:9090' }] },
      'Prometheus datasource',
    );
  },
);

t.test('k8s.yaml: workloads, Services and a ConfigMap that agree', async (t) => {
  const docs = parseAllDocuments(read('k8s.yaml'));
  for (const d of docs) t.same(d.errors, [], 'document parses');
  const objects = docs.map(
    (d) =>
      d.toJS() as {
        kind: string;
        metadata: { name: string };
        spec?: Record<string, unknown>;
        data?: Record<string, string>;
      },
  );
  const kinds = new Set(objects.map((o) => o.kind));
  for (const k of ['StatefulSet', 'Deployment', 'Service', 'ConfigMap']) t.ok(kinds.has(k), `a ${k}`);
  const roles = objects.find((o) => o.kind === 'ConfigMap')!;
  type Container = {
    command: string[];
    env: { name: string; valueFrom?: { configMapKeyRef?: { name: string; key: string } } }[];
    envFrom?: { secretRef?: { name: string } }[];
    ports: { name: string; containerPort: number }[];
  };
  type DeploymentSpec = {
    replicas: number;
    strategy?: { type: string };
    selector: { matchLabels: Record<string, string> };
    template: {
      metadata: { labels: Record<string, string> };
      spec: { containers: (Container & { volumeMounts: { name: string; mountPath: string }[] })[] };
    };
    volumeClaimTemplates?: { metadata: { name: string } }[];
  };
  const workload = (o: { kind: string }) => o.kind === 'Deployment' || o.kind === 'StatefulSet';
  const deployments = objects.filter(workload);
  let settlers = 0;
  for (const dep of deployments) {
    const spec = dep.spec as DeploymentSpec;
    t.match(
      spec.template.metadata.labels,
      spec.selector.matchLabels,
      `${dep.metadata.name}: selector matches its pods`,
    );
    const c = spec.template.spec.containers[0];
    const ref = c.env.find((e) => e.name === 'FAREBOX_OVERLAY')?.valueFrom?.configMapKeyRef;
    t.equal(ref?.name, roles.metadata.name, `${dep.metadata.name}: overlay from the ConfigMap`);
    const config = configFor(overlayScript(c.command)!, roles.data![ref!.key]);
    const run = /exec farebox (serve|settle --metrics-port (\d+))$/.exec(c.command.join(' '));
    t.ok(run, `${dep.metadata.name}: runs farebox serve or settle`);
    const settle = run?.[1]?.startsWith('settle') ?? false;
    const metricsPort = settle ? Number(run![2]) : config.metrics.port;
    t.notOk(config.metrics.on_api_port, `${dep.metadata.name}: no metrics on the API port`);
    t.ok(
      c.ports.some((p) => p.containerPort === metricsPort),
      `${dep.metadata.name}: metrics port exposed`,
    );
    const keys = (c.envFrom ?? []).some((e) => e.secretRef?.name === 'farebox-settler-keys');
    if (settle) {
      settlers++;
      t.equal(spec.replicas, 1, 'one settler replica');
      t.equal(spec.strategy?.type, 'Recreate', 'never two settlers during an update');
      t.ok(keys, 'the settler has the settler keys');
    } else {
      t.notOk(keys, `${dep.metadata.name}: no settler keys on a gateway`);
      t.equal(config.billing.settler, false, `${dep.metadata.name}: does not settle`);
      // The debit spool outlives the pod: a StatefulSet's claim, mounted where spool_dir points.
      t.equal(dep.kind, 'StatefulSet', `${dep.metadata.name}: pods keep their names and volumes`);
      const mount = c.volumeMounts.find((m) => config.billing.spool_dir?.startsWith(m.mountPath + '/'));
      t.ok(
        mount && spec.volumeClaimTemplates?.some((v) => v.metadata.name === mount.name),
        `${dep.metadata.name}: spool_dir on its own claim`,
      );
    }
  }
  t.equal(settlers, 1, 'one settler Deployment');
  // The calls' Service selects gateway pods only.
  const calls = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'farebox')!;
  const callSelector = (calls.spec as { selector: Record<string, string> }).selector;
  for (const dep of deployments) {
    const labels = (dep.spec as DeploymentSpec).template.metadata.labels;
    const selected = Object.entries(callSelector).every(([k, v]) => labels[k] === v);
    const settle = (dep.spec as DeploymentSpec).template.spec.containers[0].command
      .join(' ')
      .includes('exec farebox settle');
    t.equal(selected, !settle, `${dep.metadata.name}: ${settle ? 'not ' : ''}behind the calls' Service`);
  }
  t.same(
    (calls.spec as { ports: { targetPort: string }[] }).ports.map((p) => p.targetPort),
    ['http'],
    "the calls' Service exposes no metrics port",
  );
  for (const svc of objects.filter((o) => o.kind === 'Service')) {
    const selector = (svc.spec as { selector: Record<string, string> }).selector;
    const matches = objects.filter(
      (o) =>
        workload(o) &&
        Object.entries(selector).every(
          ([k, v]) =>
            (o.spec as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels[k] ===
            v,
        ),
    );
    t.ok(matches.length > 0, `${svc.metadata.name}: selects pods`);
  }
});
