// The debit spool: what waits reaches Redis in order; a debit Redis refuses outright is set aside, not retried,
// and the debits behind it still go through. A spool belongs to one Redis and prefix: its folder and files say
// which, only this user may read or change them, and a gone process's file of another Redis is never adopted.
import t, { type Test } from 'tap';
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
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { Cluster, Redis, ReplyError } from 'ioredis';
import { Billing, DebitNotReached } from '../../plugins/billing/billing.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { connectRedis, redisIdentity, redisUnavailable } from '../../plugins/store/redis.js';
import { makeUsage } from '../../pricing/index.js';
import {
  DebitSpool,
  defaultSpoolDir,
  SpoolFolderRefused,
  type SpoolEvents,
  type SpooledDebit,
} from '../../plugins/billing/spool.js';

const dir = mkdtempSync(join(tmpdir(), 'farebox-spool-unit-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const quiet = { error() {}, warn() {} };
const owner = { redis: 'redis://127.0.0.1:6379/0', prefix: 'spool-test:' };

/** A client of a port nothing listens on: every command fails at once, as while Redis is down. */
async function redisDown(prefix: string) {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((done) => probe.close(done));
  const r = connectRedis({ url: `redis://127.0.0.1:${port}`, prefix, failFast: true });
  r.on('error', () => {});
  return r;
}

const debit = (n: number): SpooledDebit => ({
  requestId: `req_${n}`,
  callId: `call_${n}`,
  account: '0xabc',
  chain: 'chain_a',
  owner: 'i',
  price: BigInt(n),
  usageJson: '{}',
  retentionMs: 1_000,
  model: 'm',
});

t.test('Redis being away is retried; an error reply of Redis itself is not', async (t) => {
  const closed = Object.assign(new Error('Connection is closed.'), {});
  t.ok(redisUnavailable(closed));
  t.ok(redisUnavailable(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' })));
  t.ok(redisUnavailable(new Error('Command timed out')));
  t.ok(redisUnavailable(new ReplyError('LOADING Redis is loading the dataset in memory')));
  t.ok(redisUnavailable(new ReplyError("READONLY You can't write against a read only replica.")));
  t.notOk(
    redisUnavailable(new ReplyError('ERR user_script:42: Script attempted to access nonexistent global variable')),
  );
});

t.test('a refused debit is set aside in the .refused file and the ones behind it reach Redis', async (t) => {
  let away = true;
  const taken: string[] = [];
  const refused: string[] = [];
  const spool = new DebitSpool(
    dir,
    owner,
    `host-1-abcdef`,
    100,
    async (d) => {
      if (away) throw new Error('Connection is closed.');
      if (d.requestId === 'req_2') throw new ReplyError('ERR Error running script: bad number');
      taken.push(d.requestId);
      return { debited: d.price, capped: false, late: false };
    },
    redisUnavailable,
    {
      spooled() {},
      drained() {},
      lost() {},
      resized() {},
      notAdopted() {},
      refused: (d) => refused.push(d.requestId),
    },
    quiet,
  );
  for (const n of [1, 2, 3]) spool.add(debit(n));
  await new Promise((r) => setTimeout(r, 50));
  t.equal(spool.size, 3, 'all wait while Redis is away');
  away = false;
  t.ok(await spool.flush(5_000), 'the spool empties');
  t.same(taken, ['req_1', 'req_3'], 'in order, past the refused one');
  t.same(refused, ['req_2']);
  t.same(readdirSync(dir), ['host-1-abcdef.refused'], 'the queue file is gone; the refused debit is kept');
  const [header, line] = readFileSync(join(dir, 'host-1-abcdef.refused'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as object);
  t.same(header, { farebox_spool: 1, ...owner }, 'the file names the Redis it belongs to');
  t.match(line, { requestId: 'req_2', price: '2' });
  await spool.stop();
});

t.test('a debit sent to a Redis that never answers is spooled after 5 s, not held for the whole outage', async (t) => {
  // A server that takes connections and says nothing: a Redis gone silent (or a connection that died unanswered).
  const sockets: Socket[] = [];
  const silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  const port = (silent.address() as AddressInfo).port;
  const r = connectRedis({ url: `redis://127.0.0.1:${port}`, prefix: 'spool-test:' });
  r.on('error', () => {});
  const spoolDir = join(dir, 'silent');
  const billing = new Billing(
    r,
    { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 30_000, spool: { dir: spoolDir, maxEntries: 10 } },
    createMetrics(),
    quiet,
  );
  t.teardown(async () => {
    r.disconnect();
    for (const socket of sockets) socket.destroy();
    await new Promise((done) => silent.close(done));
  });
  const hold = {
    requestId: 'req_silent',
    callId: 'call_silent',
    account: '0xabc',
    keyId: 'k',
    chain: 'chain_a' as const,
    model: 'm',
    amount: 10n,
    owner: billing.instance,
  };
  const started = Date.now();
  t.equal(await billing.debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 5n }), null);
  const waited = Date.now() - started;
  t.ok(waited >= 4_900 && waited < 8_000, `given up after ${waited} ms`);
  t.equal(billing.spool?.size, 1, 'the debit waits in the spool');
  await billing.spool?.stop();
});

t.test(
  'a full spool loses what does not fit, counted in farebox_debits_lost_total; what fits still goes in',
  async (t) => {
    const r = await redisDown('spool-full:');
    const metrics = createMetrics();
    const errors: string[] = [];
    const billing = new Billing(
      r,
      {
        retentionMs: 60_000,
        holdTtlMs: 60_000,
        instanceTimeoutMs: 30_000,
        spool: { dir: join(dir, 'full'), maxEntries: 2 },
      },
      metrics,
      {
        error: (_o: object, msg: string) => errors.push(msg),
        warn() {},
      },
    );
    t.teardown(async () => {
      await billing.spool?.stop();
      r.disconnect();
    });
    for (const n of [1, 2, 3]) {
      const hold = {
        requestId: `req_full_${n}`,
        callId: `call_full_${n}`,
        account: '0xabc',
        keyId: 'k',
        chain: 'chain_a' as const,
        model: 'm',
        amount: 10n,
        owner: billing.instance,
      };
      t.equal(
        await billing.debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 5n }),
        null,
        `debit ${n} not answered by Redis`,
      );
    }
    t.equal(billing.spool?.size, 2, 'two wait: the spool holds at most spool_max');
    t.equal(
      (await metrics.debitsLost.get()).values.reduce((s, v) => s + v.value, 0),
      1,
      'the third is counted lost',
    );
    t.equal(
      (await metrics.debitsSpooled.get()).values.reduce((s, v) => s + v.value, 0),
      2,
    );
    t.ok(errors.length >= 1, 'and logged');
  },
);

t.test(
  'without a spool, a debit that cannot reach Redis throws DebitNotReached after its retries, never a silent null',
  async (t) => {
    const r = await redisDown('spool-none:');
    t.teardown(() => r.disconnect());
    const billing = new Billing(
      r,
      { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 30_000 },
      createMetrics(),
      quiet,
    );
    const hold = {
      requestId: 'req_nospool',
      callId: 'call_nospool',
      account: '0xabc',
      keyId: 'k',
      chain: 'chain_a' as const,
      model: 'm',
      amount: 10n,
      owner: billing.instance,
    };
    const started = Date.now();
    const err = await billing
      .debit(hold, { usage: makeUsage({ output_tokens: 1 }), price: 5n })
      .catch((e: unknown) => e);
    t.ok(err instanceof DebitNotReached, 'DebitNotReached');
    t.equal((err as DebitNotReached).requestId, 'req_nospool');
    t.ok(Date.now() - started >= 5_000, 'after its retries');
  },
);

/** A connection's options only: it never connects. */
const lazy = (url: string, opts: object = {}) => new Redis(url, { lazyConnect: true, ...opts });
const none: SpoolEvents = { spooled() {}, drained() {}, lost() {}, resized() {}, refused() {}, notAdopted() {} };
const taken = async (d: SpooledDebit) => ({ debited: d.price, capped: false, late: false });

t.test(
  'a spool is named by the Redis its connection writes to: server and DB, or the seeds in any order, never a password',
  async (t) => {
    const db0 = redisIdentity(lazy('redis://:hunter2@127.0.0.1:6379/0'));
    t.equal(db0, 'redis://127.0.0.1:6379/0', 'host, port and DB; no password');
    t.equal(redisIdentity(lazy('redis://127.0.0.1:6379')), db0, 'DB 0 when unnamed');
    t.equal(redisIdentity(lazy('rediss://user:pw@CACHE.example:6380/2')), 'redis://cache.example:6380/2');
    t.equal(redisIdentity(lazy('', { path: '/run/redis.sock', db: 3 })), 'unix:/run/redis.sock?db=3');
    const sentinel = (sentinels: object[]) =>
      redisIdentity(
        new Redis({ sentinels, name: 'main', db: 1, sentinelPassword: 'pw', password: 'pw', lazyConnect: true }),
      );
    t.equal(sentinel([{ host: 'b', port: 26380 }, { host: 'a' }]), 'sentinel://main@a:26379,b:26380/1');
    t.equal(
      sentinel([
        { host: 'a', port: 26379 },
        { host: 'b', port: 26380 },
      ]),
      'sentinel://main@a:26379,b:26380/1',
      'the same seeds in another order',
    );
    const cluster = new Cluster(['redis://:pw@y:7002', { host: 'x', port: 7000 }, 7001], { lazyConnect: true });
    t.equal(redisIdentity(cluster), 'cluster://127.0.0.1:7001,x:7000,y:7002');

    const db1 = redisIdentity(lazy('redis://127.0.0.1:6379/1'));
    const a = defaultSpoolDir({ redis: db0, prefix: 'farebox:' }, '/base');
    const b = defaultSpoolDir({ redis: db1, prefix: 'farebox:' }, '/base');
    t.not(a, b, 'one prefix on two DBs: two folders');
    t.match(basename(a), /^127\.0\.0\.1_6379_0-farebox-[0-9a-f]{12}$/, `readable, then a hash: ${basename(a)}`);
    t.equal(join(a, '..'), `/base/farebox-spool-${process.getuid!()}`, "under a folder of this user's own");
    t.not(defaultSpoolDir({ redis: db0, prefix: 'other:' }, '/base'), a, 'another prefix: another folder');
  },
);

/** Start a spool in `folder` (undefined: the default one) that adopts what it may, let it drain, stop it: what it did. */
async function startAndDrain(
  t: Test,
  folder: string | undefined,
  owner: { redis: string; prefix: string },
  tag: string,
) {
  const drained: string[] = [];
  const errors: string[] = [];
  let notAdopted = -1;
  const spool = new DebitSpool(
    folder,
    owner,
    `${hostname()}-${process.pid}-${tag}`,
    100,
    async (d) => {
      drained.push(d.requestId);
      return taken(d);
    },
    redisUnavailable,
    { ...none, notAdopted: (n) => (notAdopted = n) },
    { error: (_o, msg) => errors.push(msg), warn() {} },
  );
  spool.start();
  t.ok(await spool.flush(5_000));
  await spool.stop();
  return { drained, errors, notAdopted };
}

t.test(
  "a gone process's spool file is adopted only if its header names this Redis and prefix; another's, or none, stays, logged and counted",
  async (t) => {
    const folder = join(dir, 'adopt');
    mkdirSync(folder, { mode: 0o700 });
    const owner = { redis: 'redis://127.0.0.1:6379/0', prefix: 'p:' };
    const dead = `${hostname()}-99999999`; // above any pid_max: a process that is gone
    const line = (n: number) => JSON.stringify({ ...debit(n), price: String(n) });
    const files = {
      other: [JSON.stringify({ farebox_spool: 1, redis: 'redis://127.0.0.1:6379/1', prefix: 'p:' }), line(1)],
      otherPrefix: [JSON.stringify({ farebox_spool: 1, redis: owner.redis, prefix: 'q:' }), line(2)],
      old: [line(3)],
      ours: [JSON.stringify({ farebox_spool: 1, ...owner }), line(4), line(5)],
    };
    const names = {
      other: `${dead}-aaaaaa.jsonl`,
      otherPrefix: `${dead}-bbbbbb.jsonl`,
      old: `${dead}-cccccc.jsonl`,
      ours: `${dead}-dddddd.jsonl`,
    };
    for (const k of Object.keys(files) as (keyof typeof files)[])
      writeFileSync(join(folder, names[k]), `${files[k].join('\n')}\n`, { mode: 0o600 });
    const { drained, errors, notAdopted } = await startAndDrain(t, folder, owner, 'eeeeee');
    t.same(drained, ['req_4', 'req_5'], 'only the file of this Redis and prefix is drained, in order');
    t.equal(notAdopted, 3, 'the others are counted');
    t.equal(errors.length, 3, 'and logged at error');
    t.match(errors.join('\n'), /belongs to redis:\/\/127\.0\.0\.1:6379\/1 with prefix "p:"/);
    t.match(errors.join('\n'), /belongs to redis:\/\/127\.0\.0\.1:6379\/0 with prefix "q:"/);
    t.match(errors.join('\n'), /names no Redis/);
    for (const k of ['other', 'otherPrefix', 'old'] as const) {
      t.equal(
        readFileSync(join(folder, names[k]), 'utf8'),
        `${files[k].join('\n')}\n`,
        `${k}: left in place, unchanged`,
      );
    }
    t.notOk(existsSync(join(folder, names.ours)), 'the adopted file is gone');
  },
);

t.test(
  'a spooled line that is no debit (a hand edit) is set aside, and the debits behind it are charged',
  async (t) => {
    const folder = join(dir, 'unreadable');
    mkdirSync(folder, { mode: 0o700 });
    const owner = { redis: 'redis://127.0.0.1:6379/0', prefix: 'u:' };
    const { price: _p, ...noPrice } = { ...debit(1), price: '1' };
    const bad = [
      JSON.stringify(noPrice),
      JSON.stringify({ ...debit(2), price: '2.5' }),
      JSON.stringify({ ...debit(3), price: '3', chain: 'chain_z' }),
      '{"requestId":',
      JSON.stringify({ ...debit(5), price: '9007199254740992' }),
    ];
    writeFileSync(
      join(folder, `${hostname()}-99999999-ffffff.jsonl`),
      `${[JSON.stringify({ farebox_spool: 1, ...owner }), ...bad, JSON.stringify({ ...debit(4), price: '4' })].join('\n')}\n`,
      { mode: 0o600 },
    );
    const { drained, errors } = await startAndDrain(t, folder, owner, 'abcdef');
    t.same(drained, ['req_4'], 'the debit behind them reached Redis');
    t.equal(errors.filter((e) => /no debit/.test(e)).length, 5, 'each logged at error');
    const refused = readFileSync(join(folder, `${hostname()}-${process.pid}-abcdef.refused`), 'utf8')
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => (JSON.parse(l) as { unreadable: unknown }).unreadable);
    t.same(refused, [
      noPrice,
      { ...debit(2), price: '2.5' },
      { ...debit(3), price: '3', chain: 'chain_z' },
      bad[3],
      { ...debit(5), price: '9007199254740992' },
    ]);
  },
);

t.test(
  "debits an earlier version left in its default folder (farebox-spool/<prefix>) are reported, not drained: they may be any Redis's",
  async (t) => {
    const base = mkdtempSync(join(dir, 'tmp-'));
    const tmp = process.env.TMPDIR;
    process.env.TMPDIR = base;
    t.teardown(() => {
      // Assigning undefined would set the text 'undefined': a temporary folder inside the checkout.
      if (tmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = tmp;
    });
    const owner = { redis: 'redis://127.0.0.1:6379/0', prefix: 'farebox:' };
    const legacy = join(base, 'farebox-spool', 'farebox_');
    mkdirSync(legacy, { recursive: true });
    const left = `${hostname()}-99999999-aaaaaa.jsonl`;
    writeFileSync(join(legacy, left), `${JSON.stringify({ ...debit(1), price: '1' })}\n`);
    writeFileSync(join(legacy, `${hostname()}-99999998-bbbbbb.jsonl`), '');
    const { drained, errors, notAdopted } = await startAndDrain(t, undefined, owner, 'ffffff');
    t.same(drained, [], 'nothing drained');
    t.equal(notAdopted, 1, 'the file with a debit is counted; the empty one is not');
    t.match(errors, [/earlier version not adopted/]);
    t.ok(existsSync(join(legacy, left)), 'left in place');
  },
);

t.test(
  'spool folders are 0700 and files 0600; a folder others may only read is narrowed, one they may change or of another user refused',
  async (t) => {
    const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);
    const owner = { redis: 'redis://127.0.0.1:6379/0', prefix: 'p:' };
    const open = (
      folder: string,
      log: { error(o: object, msg: string): void; warn(o: object, msg: string): void } = quiet,
    ) =>
      new DebitSpool(
        folder,
        owner,
        'h-1-abcdef',
        10,
        async () => {
          throw new Error('Connection is closed.');
        },
        redisUnavailable,
        none,
        log,
      );

    const fresh = join(dir, 'modes', 'deeper');
    const spool = open(fresh);
    spool.add(debit(1));
    await spool.stop();
    t.equal(mode(join(dir, 'modes')), '700', 'folders it makes are 0700');
    t.equal(mode(fresh), '700');
    t.equal(mode(join(fresh, 'h-1-abcdef.jsonl')), '600', 'files 0600');
    t.same(
      JSON.parse(readFileSync(join(fresh, 'h-1-abcdef.jsonl'), 'utf8').split('\n')[0]!),
      { farebox_spool: 1, ...owner },
      'headed by its Redis',
    );

    // As earlier versions made them: 0755 and 0644. Only this user could write there, so its files are its own.
    const earlier = join(dir, 'earlier');
    mkdirSync(earlier);
    chmodSync(earlier, 0o755);
    writeFileSync(join(earlier, 'h-2-abcdef.refused'), '{}\n');
    chmodSync(join(earlier, 'h-2-abcdef.refused'), 0o644);
    const warned: string[] = [];
    await open(earlier, { error() {}, warn: (_o, msg) => void warned.push(msg) }).stop();
    t.equal(mode(earlier), '700', 'narrowed to 0700');
    t.equal(mode(join(earlier, 'h-2-abcdef.refused')), '600', 'its files to 0600');
    t.match(warned, [/narrowed to 0700/]);

    for (const m of [0o777, 0o770, 0o702]) {
      const writable = mkdtempSync(join(dir, 'writable-'));
      chmodSync(writable, m);
      // A group writes here that is not this process's (65534: nogroup), or anyone does.
      if (process.getuid?.() === 0) chownSync(writable, 0, 65534);
      if (m === 0o770 && process.getuid?.() !== 0) continue;
      t.throws(
        () => open(writable),
        new SpoolFolderRefused(writable, `group or others may write to it (mode 0${m.toString(8)})`),
        `mode 0${m.toString(8)} refused`,
      );
      t.throws(() => open(writable), {
        message: new RegExp(`^debit spool folder ${writable}: group or others may write to it`),
      });
    }

    // A volume made group-writable for this process's own group (Kubernetes' fsGroup): used, with a warning.
    const grouped = mkdtempSync(join(dir, 'fsgroup-'));
    chmodSync(grouped, 0o2770);
    const ownGroupWarned: string[] = [];
    await open(grouped, { error() {}, warn: (_o, msg) => void ownGroupWarned.push(msg) }).stop();
    t.match(ownGroupWarned, [/writable by a group of this process/]);
    t.equal(mode(grouped), '770', 'left as the volume was mounted');

    // Root gives a folder away; anyone else finds one of root's.
    const asRoot = process.getuid?.() === 0;
    const foreign = asRoot ? mkdtempSync(join(dir, 'nobody-')) : '/';
    if (asRoot) chownSync(foreign, 65534, 65534);
    t.throws(() => open(foreign), {
      name: 'SpoolFolderRefused',
      message: new RegExp(
        `^debit spool folder ${foreign}: owned by uid ${statSync(foreign).uid}, not by this process's`,
      ),
    });
    t.same(
      readdirSync(foreign).filter((f) => f.endsWith('.jsonl')),
      [],
      'nothing written there',
    );
  },
);

t.test(
  'a spool folder removed while the gateway runs (a cleaner of the temporary folder) is made again for the next debit',
  async (t) => {
    const spoolOwner = { redis: 'redis://127.0.0.1:6379/0', prefix: `spool-gone-${process.pid}:` };
    const operatorDir = join(dir, 'operator', 'spool');
    for (const folder of [undefined, operatorDir]) {
      const where = folder ?? defaultSpoolDir(spoolOwner);
      t.teardown(() => rmSync(where, { recursive: true, force: true }));
      let away = true;
      const landed: string[] = [];
      const spool = new DebitSpool(
        folder,
        spoolOwner,
        `${hostname()}-${process.pid}-gone${folder ? 'op' : 'def'}`,
        100,
        async (d) => {
          if (away) throw new Error('Connection is closed.');
          landed.push(d.requestId);
          return taken(d);
        },
        redisUnavailable,
        none,
        quiet,
      );
      t.ok(existsSync(where), `made at start: ${folder ? "the operator's folder" : 'the default folder'}`);
      rmSync(where, { recursive: true });
      t.equal(spool.add(debit(7)), true, 'a debit while Redis is away is kept');
      t.equal(statSync(where).mode & 0o777, 0o700, 'in its folder, made again for this user alone');
      const [, line] = readFileSync(join(where, readdirSync(where)[0]!), 'utf8')
        .trim()
        .split('\n');
      t.match(JSON.parse(line!), { requestId: 'req_7', price: '7' }, 'on disk before the debit returns');
      away = false;
      t.ok(await spool.flush(5_000), 'and reaches Redis once it is back');
      t.same(landed, ['req_7']);
      await spool.stop();
    }
  },
);

t.test('a debit whose retention is a fractional count of ms (retention_days 0.7) is a debit', async (t) => {
  const folder = join(dir, 'fraction');
  mkdirSync(folder, { mode: 0o700 });
  const owner = { redis: 'redis://127.0.0.1:6379/0', prefix: 'f:' };
  writeFileSync(
    join(folder, `${hostname()}-99999999-fedcba.jsonl`),
    `${JSON.stringify({ farebox_spool: 1, ...owner })}\n${JSON.stringify({ ...debit(6), price: '6', retentionMs: 0.7 * 86_400_000 })}\n`,
    { mode: 0o600 },
  );
  const { drained, errors } = await startAndDrain(t, folder, owner, 'fedcba');
  t.same(drained, ['req_6']);
  t.same(errors, []);
});
