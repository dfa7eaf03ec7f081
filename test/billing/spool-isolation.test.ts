// Two deployments on one host with the same Redis prefix but another Redis (DB 0 through a relay that can go away,
// DB 1 direct) never mix their debit spools: the second never adopts the first's spooled debit (default folders are
// named by the Redis, and a file naming another Redis is left where it is), and a restarted first deployment charges
// it. Spool folders are 0700 and files 0600; a folder of another user, or one others may write to, is refused at start.
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../../plugins/chains/dev-chains.js';
import { buildConfig, embeddedDefault, type ConfigInput } from '../../plugins/config.js';
import farebox from '../../plugins/gateway.js';
import { devChainsConfig } from '../../plugins/serve.js';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { closeDevChains, devChains, dropPrefix, startHarness, testPrefix, type Harness } from '../helpers/harness.js';
import { outageRelay } from '../helpers/outage.js';
import { until } from '../helpers/wait.js';

// The default spool folder is made under the system's temporary folder: this test's own.
const root = mkdtempSync(join(tmpdir(), 'farebox-spool-isolation-'));
process.env.TMPDIR = root;
const REDIS = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const ENV = { FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey };
// Three gateways per scenario, each starting on dev chains: more than the default 120 s on a busy machine.
t.setTimeout(300_000);
const relay = await outageRelay();
const prefix = testPrefix();
const otherDb = (() => {
  const u = new URL(REDIS);
  u.pathname = `/${Number(u.pathname.slice(1) || 0) + 1}`;
  return u.toString();
})();
// The test's own reads, straight to each Redis.
const db0 = connectRedis({ url: REDIS, prefix });
const db1 = connectRedis({ url: otherDb, prefix });
t.teardown(async () => {
  relay.up();
  await dropPrefix(db0, prefix);
  await dropPrefix(db1, prefix);
  await closeRedis(db0);
  await closeRedis(db1);
  await relay.close();
  await closeDevChains();
  rmSync(root, { recursive: true, force: true });
});

async function deployment(url: string, spoolDir?: string): Promise<Harness> {
  const g = await startHarness({
    chains: true,
    prefix,
    edit: (c) => {
      c.redis = { ...c.redis!, url };
      c.billing = { ...c.billing, hold_grace_ms: 2_000, ...(spoolDir ? { spool_dir: spoolDir } : {}) };
    },
  });
  g.redis.on('error', () => {}); // the outage is the test's own
  return g;
}

/** A stream answered in full through the SDK while the deployment's Redis goes away after its first chunk. */
async function deliveredWhileAway(t: Test, g: Harness, tokens: number): Promise<string> {
  const openai = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
  const { data: stream, response } = await openai.chat.completions
    .create({
      model: 'gamma-k3',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: `#sim:tokens=${tokens} #sim:chunk_delay_ms=30` }],
    })
    .withResponse();
  let completionTokens = 0;
  let first = true;
  for await (const chunk of stream) {
    if (first) relay.down();
    first = false;
    if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
  }
  t.equal(completionTokens, tokens, 'the caller got its whole answer, Redis gone');
  await until('the debit spooled', async () => (await g.metrics.debitsSpooled.get()).values[0]?.value === 1);
  return response.headers.get('x-request-id')!;
}

/** Spool files (the queues of instances) under `dir`, one level of folders deep. */
function spoolFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) out.push(...spoolFiles(join(dir, e.name)));
    else if (e.name.endsWith('.jsonl')) out.push(join(dir, e.name));
  }
  return out;
}

const mode = (path: string) => (statSync(path).mode & 0o777).toString(8);

/**
 * Deployment A spools a delivered call's debit and stops, its Redis still away; B (same prefix, DB 1) starts on
 * `spoolDir` (undefined: the default folder) and is checked by `whileBRuns`; then A's Redis comes back and a new A
 * starts: the call is charged in A's Redis, once, and B's Redis never saw it.
 */
async function neverMixed(
  t: Test,
  spoolDir: string | undefined,
  whileBRuns: (b: Harness, file: string) => Promise<void>,
): Promise<void> {
  const a = await deployment(relay.url, spoolDir);
  const a2 = Fastify({ logger: false });
  t.teardown(async () => {
    relay.up();
    await a.app.close();
    await a2.close();
    await a.sim.close();
    a.redis.disconnect();
  });
  await a.fund('chain_a', 5_000_000n);
  const requestId = await deliveredWhileAway(t, a, 40);
  const [file, ...more] = spoolFiles(spoolDir ?? root);
  t.ok(file && more.length === 0, 'one spool file waits');
  await a.app.close(); // A stops with Redis still away: its debit stays in the file
  t.ok(existsSync(file!), 'left in the spool by the stopped A');

  const b = await deployment(otherDb, spoolDir);
  t.teardown(() => b.close());
  t.ok(existsSync(file!), "B, started on the same host, did not take A's spooled debit");
  await whileBRuns(b, file!);
  t.equal(await getCallRecord(db1, requestId), null, "B's Redis has no record of A's call");

  relay.up();
  await a2.register(farebox, { config: a.config, env: ENV });
  await a2.ready();
  const record = await until(
    "A's call charged in A's Redis",
    async () => {
      const r = await getCallRecord(db0, requestId);
      return r && r.status !== 'held' ? r : null;
    },
    30_000,
  );
  t.not(record.status, 'free', 'the delivered call did not end free');
  t.equal(record.usage.output_tokens, 40, 'billed its whole answer');
  t.ok(record.priceAtomic > 0n, 'at a price');
  // Pending (debited in Redis) or already settled onchain: either way the wallet owes the price, once.
  const w = await readWallet(db0, a.account, 'chain_a');
  t.equal(w.held, 0n, 'nothing left held');
  t.equal(5_000_000n - w.synced + w.pending, record.priceAtomic, "A's wallet pays the price once");
  t.notOk(existsSync(file!), 'the new A took the file');
}

t.test(
  "same prefix, another Redis: default spool folders are apart, 0700 with 0600 files, and B never adopts A's debit",
  async (t) => {
    await neverMixed(t, undefined, async (b, file) => {
      const base = join(root, `farebox-spool-${process.getuid!()}`);
      const folders = readdirSync(base);
      t.equal(folders.length, 2, 'one folder per Redis');
      t.ok(
        folders.every((f) => f.includes(prefix.replace(/[^A-Za-z0-9.]+/g, '_').replace(/^_+|_+$/g, ''))),
        `each named with the prefix: ${folders.join(', ')}`,
      );
      t.equal(mode(base), '700', "the user's farebox-spool folder is 0700");
      for (const f of folders) t.equal(mode(join(base, f)), '700', `${f} is 0700`);
      t.equal(mode(file), '600', 'the spool file is 0600');
      const header = JSON.parse(readFileSync(file, 'utf8').split('\n')[0]!) as { redis: string; prefix: string };
      t.match(
        header,
        { farebox_spool: 1, redis: `redis://127.0.0.1:${new URL(relay.url).port}/0`, prefix },
        'the file names its Redis and prefix first',
      );
      t.equal((await b.metrics.debitsSpooled.get()).values[0]?.value ?? 0, 0, 'B spooled nothing');
    });
  },
);

t.test(
  "one spool_dir for both: a file whose header names another Redis is left in place, counted, never drained into B's",
  async (t) => {
    const shared = mkdtempSync(join(tmpdir(), 'shared-'));
    await neverMixed(t, shared, async (b) => {
      const text = await b.metrics.registry.metrics();
      t.match(text, /^farebox_debit_spool_files_not_adopted 1$/m, 'B counts the file it left');
    });
  },
);

/** Register a gateway whose config is edited by `edit`; resolves with the error its registration failed with, if any. */
async function registration(edit: (c: ConfigInput) => void): Promise<Error | undefined> {
  const input = embeddedDefault('http://127.0.0.1:1');
  input.redis = { url: REDIS, prefix };
  input.server = { port: 0, host: '127.0.0.1' };
  input.chains = devChainsConfig(await devChains());
  edit(input);
  const app = Fastify({ logger: false });
  try {
    await app.register(farebox, { config: buildConfig(input, ENV, true), env: ENV });
    await app.ready();
    return undefined;
  } catch (err) {
    return err as Error;
  } finally {
    await app.close();
  }
}

const asRoot = process.getuid?.() === 0;

t.test(
  'a spool folder of another user, a link, or one others may write to is refused at start, naming it',
  async (t) => {
    // Root can give a folder away; anyone else finds one of root's.
    const foreign = asRoot ? mkdtempSync(join(root, 'nobody-')) : '/';
    if (asRoot) chownSync(foreign, 65534, 65534);
    const owned = await registration((c) => (c.billing = { ...c.billing, spool_dir: foreign }));
    t.match(
      owned?.message,
      `debit spool folder ${foreign}: owned by uid ${statSync(foreign).uid}`,
      'billing.spool_dir of another user',
    );

    const open = mkdtempSync(join(root, 'open-'));
    chmodSync(open, 0o777);
    const writable = await registration((c) => (c.billing = { ...c.billing, spool_dir: open }));
    t.match(writable?.message, `debit spool folder ${open}: group or others may write to it (mode 0777)`);

    // The default folder's parent in the shared temporary folder: a link planted there, or a folder of another user.
    const tmp = process.env.TMPDIR;
    t.teardown(() => {
      process.env.TMPDIR = tmp;
    });
    const planted = mkdtempSync(join(root, 'planted-'));
    mkdirSync(join(planted, 'elsewhere'));
    symlinkSync(join(planted, 'elsewhere'), join(planted, `farebox-spool-${process.getuid!()}`));
    process.env.TMPDIR = planted;
    const link = await registration(() => {});
    t.match(
      link?.message,
      `debit spool folder ${join(planted, `farebox-spool-${process.getuid!()}`)}: a symbolic link`,
    );
    t.same(readdirSync(join(planted, 'elsewhere')), [], 'nothing was made where the link points');
    if (asRoot) {
      const taken = mkdtempSync(join(root, 'taken-'));
      mkdirSync(join(taken, `farebox-spool-${process.getuid!()}`));
      chownSync(join(taken, `farebox-spool-${process.getuid!()}`), 65534, 65534);
      process.env.TMPDIR = taken;
      const other = await registration(() => {});
      t.match(
        other?.message,
        `debit spool folder ${join(taken, `farebox-spool-${process.getuid!()}`)}: owned by uid 65534`,
      );
    }
    process.env.TMPDIR = tmp;
    t.equal(await registration(() => {}), undefined, 'the default folder of this user starts');
  },
);
