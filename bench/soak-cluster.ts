/**
 * The soak's deployment, every server in a process of its own on one private Redis: the simulator, the four dev
 * chains (bench/server.ts `chains`, published in Redis), `farebox settle`, and gateways run by `farebox serve` on a
 * config file each (billing.settler and billing.watcher off, a spool folder each), as a production deployment of
 * stateless gateways beside one settle process runs. Gateways can be killed, stopped and started again on the
 * same spool folder; the chains can be paused (SIGSTOP).
 */
import { createWriteStream, mkdirSync, writeFileSync, type WriteStream } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { ChainsConfig } from '../plugins/chains/config.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../plugins/chains/dev-chains.js';
import { embeddedDefault, type ConfigInput } from '../plugins/config.js';
import { DEV_CHAINS_KEY } from '../plugins/embedded.js';
import { freePort, readyUrl, spawnNode, stopChild, waitForPort, type Child } from './children.js';

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

/** How the servers run: compiled (dist/, as `npm run soak` builds it) or from the sources under tsx (the tests). */
export type Runner = 'compiled' | 'source';

function scripts(runner: Runner): { server: string; cli: string; nodeArgs: string[] } {
  return runner === 'compiled'
    ? { server: join(ROOT, 'dist', 'bench', 'server.js'), cli: join(ROOT, 'bin', 'farebox.js'), nodeArgs: [] }
    : { server: join(ROOT, 'bench', 'server.ts'), cli: join(ROOT, 'bin', 'cli.ts'), nodeArgs: ['--import', 'tsx'] };
}

/** One gateway instance: its config and spool folder stay, its process comes and goes. */
export interface Gateway {
  readonly name: string;
  readonly spoolDir: string;
  /** http://127.0.0.1:port of the running process (a new port at each start). */
  url: string;
  /** Its /metrics, on a port of its own (a new one at each start). */
  metricsUrl: string;
  child: Child | null;
  /** Answering calls (the load balancer's view: the load goes elsewhere while it is not). */
  up: boolean;
  starts: number;
}

/** What the deployment is started with. */
export interface ClusterOptions {
  runner: Runner;
  /** Folder for config files, spools and logs. */
  dir: string;
  redisUrl: string;
  prefix: string;
  gateways: number;
  /** Over the config's billing section of every gateway. */
  billing?: Record<string, unknown>;
  /** The config's limits section. */
  limits?: ConfigInput['limits'];
}

/** The running deployment. */
export interface Cluster {
  readonly simUrl: string;
  readonly chains: ChainsConfig;
  readonly chainsChild: Child;
  readonly settle: Child;
  /** The settle process's /metrics. */
  readonly settleMetrics: string;
  readonly gateways: Gateway[];
  /** Start (or start again) a gateway; resolves once it listens (Redis may be away). */
  startGateway(g: Gateway): Promise<void>;
  /** Stop a gateway with `signal` (SIGKILL: at once; SIGTERM: waits for its shutdown, at most `graceMs`). */
  stopGateway(
    g: Gateway,
    signal: 'SIGKILL' | 'SIGTERM',
    graceMs?: number,
  ): Promise<{ exitedMs: number; forced: boolean }>;
  close(): Promise<void>;
}

// What `farebox serve` would take from the environment over its config file: the soak's config files say it all.
const OVERRIDES = ['PORT', 'HOST', 'REDIS_URL', 'FAREBOX_REDIS_PREFIX', 'FAREBOX_CONFIG'];

function childEnv(configFile: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of OVERRIDES) delete env[k];
  return {
    ...env,
    FAREBOX_CONFIG: configFile,
    FAREBOX_SIM_KEY: 'sim-key',
    [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey,
    LOG_LEVEL: 'warn',
  };
}

/** Copy a child's output into `<dir>/logs/<name>.log` (children.ts keeps only a short tail). */
function logTo(dir: string, child: Child): WriteStream {
  const out = createWriteStream(join(dir, 'logs', `${child.name.replace(/\W+/g, '-')}.log`), { flags: 'a' });
  child.proc.stdout!.on('data', (d: Buffer) => out.write(d));
  child.proc.stderr!.on('data', (d: Buffer) => out.write(d));
  child.proc.once('exit', () => out.end());
  return out;
}

/** Resolves with the first stdout line of `child` that is JSON with `field`. */
function jsonLine(child: Child, field: string, timeoutMs = 60_000): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(
      () => finish(new Error(`${child.name}: no ready line after ${timeoutMs} ms\n${child.tail.join('\n')}`)),
      timeoutMs,
    );
    const onData = (d: Buffer) => {
      buf += d.toString();
      for (const line of buf.split('\n').slice(0, -1)) {
        try {
          const msg = JSON.parse(line) as Record<string, unknown>;
          if (field in msg) return finish(null, msg);
        } catch {
          // a log line
        }
      }
    };
    const onExit = () => finish(new Error(`${child.name} exited before it was ready:\n${child.tail.join('\n')}`));
    const finish = (err: Error | null, msg?: Record<string, unknown>) => {
      clearTimeout(timer);
      child.proc.stdout!.off('data', onData);
      child.proc.off('exit', onExit);
      if (err) reject(err);
      else resolve(msg!);
    };
    child.proc.stdout!.on('data', onData);
    child.proc.once('exit', onExit);
  });
}

/** Start the simulator, the chains, the settle process and `opts.gateways` gateways. */
export async function startCluster(opts: ClusterOptions, redis: Redis): Promise<Cluster> {
  const { server, cli, nodeArgs } = scripts(opts.runner);
  mkdirSync(join(opts.dir, 'logs'), { recursive: true });
  const cores = '0-1';
  const sim = spawnNode('simulator', cores, nodeArgs, server, ['sim']);
  logTo(opts.dir, sim);
  const simUrl = await readyUrl(sim, 60_000);
  const chainsChild = spawnNode('dev chains', cores, nodeArgs, server, ['chains', opts.redisUrl, opts.prefix]);
  logTo(opts.dir, chainsChild);
  await readyUrl(chainsChild, 60_000);
  const published = await redis.get(DEV_CHAINS_KEY);
  if (!published) throw new Error('the chains process published no chains');
  const chains = JSON.parse(published) as ChainsConfig;

  const configOf = (port: number, spoolDir: string, metricsPort = 0): ConfigInput => ({
    ...embeddedDefault(simUrl),
    server: { host: '127.0.0.1', port },
    metrics: { port: metricsPort },
    redis: { url: opts.redisUrl, prefix: opts.prefix },
    chains,
    limits: opts.limits,
    billing: { settler: false, watcher: false, spool_dir: spoolDir, ...opts.billing },
  });

  const settleFile = join(opts.dir, 'settle.json');
  writeFileSync(settleFile, JSON.stringify(configOf(0, join(opts.dir, 'spool-settle'))));
  const settle = spawnNode(
    'farebox settle',
    cores,
    nodeArgs,
    cli,
    ['settle', '--metrics-port', '0', '--json'],
    childEnv(settleFile),
  );
  logTo(opts.dir, settle);
  const settleMetrics = String((await jsonLine(settle, 'instance')).metrics);

  const gateways: Gateway[] = Array.from({ length: opts.gateways }, (_, i) => ({
    name: `gateway-${i + 1}`,
    spoolDir: join(opts.dir, `spool-${i + 1}`),
    url: '',
    metricsUrl: '',
    child: null,
    up: false,
    starts: 0,
  }));

  const startGateway = async (g: Gateway) => {
    // A new port at each start: a killed gateway's port may be taken by any process meanwhile.
    const port = await freePort();
    const metricsPort = await freePort();
    const file = join(opts.dir, `${g.name}.json`);
    writeFileSync(file, JSON.stringify(configOf(port, g.spoolDir, metricsPort)));
    const child = spawnNode(`${g.name}#${g.starts + 1}`, cores, nodeArgs, cli, ['serve'], childEnv(file));
    logTo(opts.dir, child);
    g.child = child;
    g.starts++;
    await waitForPort(child, port, 60_000);
    g.url = `http://127.0.0.1:${port}`;
    g.metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    g.up = true;
  };

  const stopGateway = async (g: Gateway, signal: 'SIGKILL' | 'SIGTERM', graceMs = 20_000) => {
    g.up = false;
    const child = g.child;
    if (!child) return { exitedMs: 0, forced: false };
    const started = Date.now();
    const exited = new Promise<void>((r) =>
      child.proc.exitCode !== null || child.proc.signalCode !== null ? r() : child.proc.once('exit', () => r()),
    );
    child.proc.kill(signal);
    let forced = false;
    const timer = setTimeout(() => {
      forced = true;
      child.proc.kill('SIGKILL');
    }, graceMs);
    await exited;
    clearTimeout(timer);
    g.child = null;
    return { exitedMs: Date.now() - started, forced };
  };

  for (const g of gateways) await startGateway(g);

  return {
    simUrl,
    chains,
    chainsChild,
    settle,
    settleMetrics,
    gateways,
    startGateway,
    stopGateway,
    async close() {
      // A paused process would not hear SIGTERM.
      chainsChild.proc.kill('SIGCONT');
      for (const g of gateways) await stopGateway(g, 'SIGTERM', 10_000);
      await stopChild(settle);
      await stopChild(chainsChild);
      await stopChild(sim);
    },
  };
}
