/**
 * The package as a user gets it: `npm pack` of this checkout, installed from its tarball in an empty folder, where
 * `farebox serve` starts on the embedded default and answers a call with the key it prints, and a host app imports
 * the package and registers it in its Fastify instance. And the image compose and k8s run is the one the Dockerfile
 * builds from that package.
 */
import t from 'tap';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import { connectRedis } from '../plugins/store/redis.js';
import { dropPrefix, testPrefix } from './helpers/harness.js';
import { builtAfterSources } from './helpers/wait.js';
import { freePort } from './helpers/ports.js';

// One install from the registry (npm's cache first), two servers started from it.
t.setTimeout(240_000);

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { name: string; version: string };
const IMAGE = `registry.example.com/${pkg.name}:${pkg.version}`;
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

t.test('the Dockerfile builds the image compose and k8s run, from the package npm pack makes', async (t) => {
  const dockerfile = read('Dockerfile');
  const base = /^ARG NODE_IMAGE=node:(\d+)-([a-z]+)-slim$/m.exec(dockerfile);
  t.ok(base, 'one Node image for both stages, a Debian slim one');
  t.equal(Number(base?.[1]) % 2, 0, 'an LTS line (even major)');
  const stages = [...dockerfile.matchAll(/^FROM (\S+)(?: AS (\S+))?$/gm)];
  t.same(
    stages.map((s) => s[1]),
    ['${NODE_IMAGE}', '${NODE_IMAGE}'],
    'a build stage and the image, on it',
  );
  const [build, image] = dockerfile.split(/^FROM .*$/m).slice(1);
  t.match(build, /npm ci /, 'the build stage installs the checkout from its lock');
  t.match(build, /npm run build .*npm pack /, 'builds, then packs');
  t.match(image, /COPY --from=build \S+\.tgz /, 'the image takes only the tarball');
  t.match(image, /npm install --global [^\n]*\.tgz/, 'and installs it as any user would');
  t.match(image, /^USER node$/m, 'not as root');
  t.match(image, /^CMD \["farebox", "serve"\]$/m, 'runs farebox serve');
  // COPY . . must not carry a host's installed or built files over the stage's own.
  const ignored = read('.dockerignore').split('\n');
  for (const p of ['node_modules', 'dist', '.git']) t.ok(ignored.includes(p), `.dockerignore: ${p}`);

  const docs = parseAllDocuments(read('deploy/k8s.yaml')).map((d) => d.toJS() as Record<string, unknown>);
  const k8sImages = JSON.stringify(docs).match(/"image":"[^"]*"/g) ?? [];
  t.ok(k8sImages.length >= 2, 'k8s.yaml: the gateways and the settler');
  t.same(new Set(k8sImages), new Set([`"image":"${IMAGE}"`]), `k8s.yaml runs ${IMAGE}`);
  t.match(read('deploy/k8s.yaml'), `docker build -t ${IMAGE} .`, "k8s.yaml's comment builds that name");
  t.match(read('deploy/README.md'), `docker build -t ${IMAGE} .`, 'deploy/README.md too');

  const compose = parse(read('deploy/compose.yaml'), { merge: true }) as {
    services: Record<string, { image?: string; build?: { context: string; dockerfile: string }; volumes?: string[] }>;
  };
  const farebox = Object.entries(compose.services).filter(([name]) => name.startsWith('farebox-'));
  t.ok(farebox.length >= 2, 'compose.yaml: farebox services');
  for (const [name, s] of farebox) {
    t.equal(s.image, IMAGE, `${name}: the image k8s.yaml names`);
    t.equal(resolve(ROOT, 'deploy', s.build?.context ?? '.'), resolve(ROOT), `${name}: built from the checkout`);
    t.equal(s.build?.dockerfile, 'Dockerfile', `${name}: by the Dockerfile`);
    // Files of deploy/ (the config) only: no checkout mounted into the container.
    for (const v of s.volumes ?? []) {
      const source = v.split(':')[0];
      if (source.startsWith('.')) t.match(source, /^\.\/[^/]+\.[a-z]+$/, `${name}: mounts ${source}, a file`);
    }
  }
});

// ---- The package, installed ----

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const redis = connectRedis({ url: REDIS_URL, prefix: 'farebox-package-test:' });
const prefixes = [testPrefix(), testPrefix()];
const work = mkdtempSync(join(tmpdir(), 'farebox-package-'));
const children: ChildProcess[] = [];
// Whatever happens to this file (a failed install included), no server or temporary folder outlives it.
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
});
t.teardown(async () => {
  // Each server gone before its keys are dropped: one still stopping could write after the drop.
  await Promise.all(children.map((c) => stop(c, 'SIGKILL')));
  for (const p of prefixes) await dropPrefix(redis, p);
  await redis.quit();
  rmSync(work, { recursive: true, force: true });
});

/** npm's environment without the variables of an npm that runs this test (npm test sets its own config there). */
const npmEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));

function run(cmd: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile(cmd, args, { cwd, env: npmEnv, maxBuffer: 64 * 2 ** 20 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stderr}`)) : resolve(stdout),
    ),
  );
}

function stop(child: ChildProcess, signal: NodeJS.Signals): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill(signal);
  });
}

/** Start `cmd` in the installed folder; resolves with its output once `ready` matches it. */
function start(
  cmd: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: RegExp,
): Promise<{ child: ChildProcess; stdout: string }> {
  const child = spawn(cmd, args, { cwd: app, env: { ...npmEnv, ...env } });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) =>
      reject(new Error(`${cmd} exited (${code}) before it was ready:\n${stdout}\n${stderr}`)),
    );
    child.stdout!.on('data', (d) => {
      stdout += d;
      if (ready.test(stdout)) {
        child.removeAllListeners('exit');
        resolve({ child, stdout });
      }
    });
  });
}

/**
 * The folder to pack: the checkout when its dist/ is built after every source (npm ci builds it); else a copy built
 * apart, so other test files running the checkout's dist/ never see it half written.
 */
async function packable(): Promise<string> {
  if (builtAfterSources('dist/bin/cli.js') && existsSync(join(ROOT, 'dist/contracts/artifacts.json'))) return ROOT;
  const stage = join(work, 'stage');
  mkdirSync(join(stage, 'bin'), { recursive: true });
  mkdirSync(join(stage, 'contracts'));
  for (const f of ['package.json', '.gitignore', 'README.md', 'bin/farebox.js'])
    copyFileSync(join(ROOT, f), join(stage, f));
  for (const f of ['Escrow.sol', 'TestStablecoin.sol'])
    copyFileSync(join(ROOT, 'contracts', f), join(stage, 'contracts', f));
  symlinkSync(join(ROOT, 'node_modules'), join(stage, 'node_modules'));
  const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
  await run(process.execPath, [tsc, '-p', join(ROOT, 'tsconfig.build.json'), '--outDir', join(stage, 'dist')], stage);
  await run(process.execPath, [join(stage, 'dist/contracts/compile.js')], stage);
  return stage;
}

const app = join(work, 'app');

/** Pack, then install the tarball in the empty folder `app`: the package's file list. */
async function install(): Promise<string[]> {
  const t0 = performance.now();
  const from = await packable();
  const packed = JSON.parse(
    await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], from),
  ) as { filename: string; files: { path: string }[] }[];
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'host-app', private: true, type: 'module' }));
  // What a user runs: npm install of the tarball (npm's cache first); prepare is not run for it.
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', join(work, packed[0].filename)], app);
  t.comment(`packed and installed in ${Math.round(performance.now() - t0)} ms`);
  return packed[0].files.map((f) => f.path);
}
// Awaited by each test below, not at the top level: tap ends a root test with a teardown once it idles between tests.
const installed = install();
installed.catch(() => {});

t.test('npm pack: the built package, without tests, sources or source maps', async (t) => {
  const files = await installed;
  for (const f of [
    'package.json',
    'README.md',
    'bin/farebox.js',
    'dist/bin/cli.js',
    'dist/plugins/gateway.js',
    'dist/plugins/gateway.d.ts',
    'dist/plugins/dashboard/index.js',
    'dist/plugins/dashboard/browser/dashboard-client.js',
    'dist/contracts/artifacts.json',
    'dist/contracts/compile.js',
  ])
    t.ok(files.includes(f), `has ${f}`);
  const stray = files.filter(
    (f) =>
      /\.map$|\.test\.|\.tmp$|\.sol$/.test(f) ||
      (f.endsWith('.ts') && !f.endsWith('.d.ts')) ||
      /^dist\/(test|bench|deploy)\//.test(f) ||
      /^(test|bench|deploy|plugins|policies|pricing|contracts|docs)\//.test(f),
  );
  t.same(stray, [], 'nothing else');
  const modules = join(app, 'node_modules');
  // The runtime needs no dev dependency: the contracts come compiled, the dashboard's script built.
  for (const dev of ['typescript', 'solc', 'tsx', 'tap']) t.notOk(existsSync(join(modules, dev)), `no ${dev}`);
  t.ok(existsSync(join(modules, '.bin/farebox')), 'node_modules/.bin/farebox');
});

t.test('installed: farebox serve starts on the embedded default and bills a call with the key it prints', async (t) => {
  await installed;
  const port = await freePort();
  const { child, stdout } = await start(
    join(app, 'node_modules/.bin/farebox'),
    ['serve'],
    {
      FAREBOX_CONFIG: '',
      FAREBOX_REDIS_PREFIX: prefixes[0],
      REDIS_URL,
      HOST: '127.0.0.1',
      PORT: String(port),
      METRICS_PORT: '0',
      FAREBOX_DEV_CHAIN_PORT: '0',
      LOG_LEVEL: 'warn',
    },
    /^ {2}Dashboard: [^\n]*\n/m,
  );
  const url = `http://127.0.0.1:${port}`;
  t.match(stdout, `farebox: embedded default at ${url} `);
  const key = /^ {2}export FAREBOX_KEY=(sk_[A-Za-z0-9_-]+)$/m.exec(stdout)?.[1];
  t.ok(key, 'the demo key printed');
  t.equal((await fetch(`${url}/v1/health`)).status, 200, '/v1/health');
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', messages: [{ role: 'user', content: 'Say hello' }] }),
  });
  t.equal(res.status, 200, 'a chat completion');
  t.equal(((await res.json()) as { object: string }).object, 'chat.completion');
  const signIn = await fetch(`${url}/dashboard/`);
  t.equal(signIn.status, 200, "the dashboard's sign-in page");
  const script = /<script type="module" src="([^"]+)"/.exec(await signIn.text())?.[1];
  t.ok(script, 'names its script');
  const js = await fetch(new URL(script!, signIn.url));
  t.equal(js.status, 200, 'the script, shipped built (the package has no TypeScript compiler to make it)');
  t.equal(await stop(child, 'SIGTERM'), 0, 'stops on SIGTERM');
});

t.test("installed: a host app imports farebox and registers it in its own Fastify (README's example)", async (t) => {
  await installed;
  writeFileSync(
    join(app, 'host.js'),
    [
      "import Fastify from 'fastify';",
      "import farebox from 'farebox';",
      'const app = Fastify();',
      "app.get('/internal/ping', async () => 'pong');",
      'await app.register(farebox);',
      "await app.listen({ port: 0, host: '127.0.0.1' });",
      'console.log(`listening on ${app.server.address().port}`);',
      "process.once('SIGTERM', () => app.close().then(() => process.exit(0)));",
    ].join('\n'),
  );
  const { child, stdout } = await start(
    process.execPath,
    ['host.js'],
    {
      FAREBOX_CONFIG: '',
      FAREBOX_REDIS_PREFIX: prefixes[1],
      REDIS_URL,
      METRICS_PORT: '0',
      FAREBOX_DEV_CHAIN_PORT: '0',
      LOG_LEVEL: 'warn',
    },
    /^listening on \d+$/m,
  );
  const url = `http://127.0.0.1:${/^listening on (\d+)$/m.exec(stdout)![1]}`;
  t.equal(await (await fetch(`${url}/internal/ping`)).text(), 'pong', "the host's own route");
  const health = await fetch(`${url}/v1/health`);
  t.equal(health.status, 200, "farebox's /v1/health");
  t.equal(await stop(child, 'SIGTERM'), 0, 'the app closes with farebox in it');
});
