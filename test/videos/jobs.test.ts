// Video jobs outlive requests and instances: a restart while a job runs (it completes and is charged once), two
// instances that see the end of one job at once (charged once), a hold that belongs to the job (the sweeper leaves
// it until the job's deadline, then releases it), the deadline itself, and polls that cost one Redis round trip
// (the job's read beside the key's poll limit) and no upstream call.
import t from 'tap';
import type { Redis } from 'ioredis';
import { Admission } from '../../plugins/billing/admission.js';
import { Billing, DebitNotReached } from '../../plugins/billing/billing.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { RateLimiter } from '../../plugins/billing/rate-limit.js';
import { readWallet, redisNow } from '../../plugins/billing/wallets.js';
import { VideoJobs } from '../../plugins/jobs/video-jobs.js';
import { newVideoId, type NewVideoJob, VIDEO_HOLD_MARGIN_MS, VideoStore } from '../../plugins/jobs/video-store.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { keys } from '../../plugins/store/keys.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { Upstreams } from '../../plugins/upstream/pools.js';
import { DEFAULT_PRICES } from '../../pricing/index.js';
import { closeDevChains, dropPrefix, testPrefix, testRedis, type Harness } from '../helpers/harness.js';
import { probe } from '../helpers/media.js';
import { outageRelay } from '../helpers/outage.js';
import { until } from '../helpers/wait.js';
import { sdk, videoHarness } from './helpers.js';

t.teardown(() => closeDevChains());
const quiet = { error() {}, warn() {} };
const usd = (s: string) => BigInt(Math.round(Number(s) * 1e6));

async function recordOf(h: Harness, requestId: string, status: string) {
  return until(
    `record ${status}`,
    async () => {
      const r = await getCallRecord(h.redis, requestId);
      return r?.status === status ? r : null;
    },
    30_000,
  );
}

t.test('a gateway restarted while its job renders: another instance completes it, charged once', async (t) => {
  const sim = await startSimulator({ videoRenderMs: 1500 });
  const prefix = testPrefix();
  t.teardown(() => sim.close());
  const a = await videoHarness({ chains: true, sim, prefix });
  t.teardown(async () => dropPrefix(a.redis, prefix));
  await a.fund('chain_a', 5_000_000n);
  const before = await readWallet(a.redis, a.account, 'chain_a');
  const { data: job, response } = await sdk(a)
    .videos.create({ model: 'vidA-v6', prompt: 'survives a restart', seconds: '12' })
    .withResponse();
  const requestId = response.headers.get('x-request-id')!;
  await a.close();

  const b = await videoHarness({ chains: true, sim, prefix });
  t.teardown(() => b.close());
  const openai = sdk(b, a.key);
  let v = await openai.videos.retrieve(job.id);
  t.equal(v.status, 'in_progress', 'the job survived the restart, still in progress');
  v = await until(
    'completed after the restart',
    async () => {
      const x = await openai.videos.retrieve(job.id);
      return x.status === 'completed' ? x : null;
    },
    20_000,
    100,
  );
  const clip = await probe(Buffer.from(await (await openai.videos.downloadContent(v.id)).arrayBuffer()));
  t.same([clip.width, clip.height, Math.round(clip.duration)], [1280, 720, 12]);
  const price = usd(DEFAULT_PRICES.video['vidA-v6']!['12']!);
  const record = await recordOf(b, requestId, 'settled');
  t.equal(record.priceAtomic, price, 'the listed price');
  const after = await until('the charge applied', async () => {
    const w = await readWallet(b.redis, a.account, 'chain_a');
    return w.pending === 0n && w.held === 0n ? w : null;
  });
  t.equal(before.synced - after.synced, price, 'the escrow charged it exactly once');
});

/** A second instance's video jobs on the same Redis and config, its poller not started (driven by the test). */
function instanceOf(h: Harness, name: string, redis: Redis = h.redis): VideoJobs {
  const metrics = createMetrics({ defaults: false });
  const billing = new Billing(
    redis,
    { retentionMs: 86_400_000, holdTtlMs: 60_000, instanceTimeoutMs: 2_000 },
    metrics,
    quiet,
  );
  const admission = new Admission(new RateLimiter(redis, h.config.limits), billing, quiet);
  const config = { ...h.config, videos: { ...h.config.videos, poller: true } };
  return new VideoJobs({
    redis,
    config,
    upstreams: new Upstreams(),
    admission,
    metrics,
    log: quiet,
    instance: name,
  });
}

t.test('two instances that see a job end at once: it moves once and is debited once', async (t) => {
  const h = await videoHarness({ chains: true, renderMs: 300, videos: { poller: false } });
  t.teardown(() => h.close());
  await h.fund('chain_a', 5_000_000n);
  const before = await readWallet(h.redis, h.account, 'chain_a');
  const { data: job, response } = await sdk(h)
    .videos.create({ model: 'vidA-v6', prompt: 'raced', seconds: '4' })
    .withResponse();
  const requestId = response.headers.get('x-request-id')!;
  const [one, two] = [instanceOf(h, 'one'), instanceOf(h, 'two')];
  // Both see the provider's job completed.
  const upstreamId = (await one.store.get(job.id))!.upstreamId;
  await until(
    'rendered',
    async () => {
      const v = (await (
        await fetch(`${h.sim.url}/v1/videos/${upstreamId}`, { headers: { authorization: 'Bearer sim-key' } })
      ).json()) as { status: string };
      return v.status === 'completed';
    },
    30_000,
  );
  const now = await redisNow(h.redis);
  await Promise.all([one.poller.follow(job.id, now), two.poller.follow(job.id, now), one.poller.follow(job.id, now)]);
  t.equal((await one.store.get(job.id))?.status, 'completed');
  t.equal(await h.redis.zscore('videos-open', job.id), null, 'closed');
  // A later pass (a lease handed over, an instance that stopped between the steps) changes nothing.
  await two.poller.follow(job.id, now);
  const price = usd(DEFAULT_PRICES.video['vidA-v6']!['4']!);
  t.equal((await recordOf(h, requestId, 'settled')).priceAtomic, price);
  // A second debit would have left its amount pending for good: the escrow charges a call id once.
  const after = await until('the charge applied', async () => {
    const w = await readWallet(h.redis, h.account, 'chain_a');
    return w.pending === 0n && w.held === 0n ? w : null;
  });
  t.equal(before.synced - after.synced, price, 'charged once');
});

t.test(
  "the hold belongs to the job: no sweep releases it while the job lives; it expires a settle margin past the job's deadline",
  async (t) => {
    const prefix = testPrefix();
    const sim = await startSimulator({ videoRenderMs: 600_000 });
    t.teardown(() => sim.close());
    const a = await videoHarness({ chains: true, sim, prefix, videos: { deadline_ms: 60_000 } });
    // The test's own connection: the harness closes the gateway's with it.
    const r = connectRedis({ url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix });
    t.teardown(async () => {
      await dropPrefix(r, prefix);
      await closeRedis(r);
    });
    await a.fund('chain_a', 5_000_000n);
    const { data: job, response } = await sdk(a)
      .videos.create({ model: 'vidA-v6', prompt: 'orphaned', seconds: '4' })
      .withResponse();
    const requestId = response.headers.get('x-request-id')!;
    const held = await getCallRecord(a.redis, requestId);
    t.equal(held?.owner, `job:${job.id}`);
    const { deadline } = (await new VideoStore(a.redis, 0).get(job.id))!;
    t.equal(
      held!.expires! - Number(deadline),
      VIDEO_HOLD_MARGIN_MS,
      "the hold outlives the job's deadline by the hold margin",
    );
    t.ok(
      Math.abs(Number(deadline) - (job.created_at * 1000 + 60_000)) < 2_000,
      'the deadline is deadline_ms past the submit',
    );
    // The instance that took the hold dies: every other instance's sweep runs, long after its heartbeat stopped.
    await a.close();
    const sweeper = new Billing(
      r,
      { retentionMs: 86_400_000, holdTtlMs: 60_000, instanceTimeoutMs: 2_000 },
      createMetrics({ defaults: false }),
      quiet,
    );
    t.equal(await sweeper.sweep(held!.expires! - 5_000), 0, 'swept 115 s on: nothing released');
    t.equal((await getCallRecord(r, requestId))?.status, 'held', 'still held for the job');
    t.equal(await sweeper.sweep(held!.expires! + 1), 1, 'swept past the deadline: released');
    const free = await getCallRecord(r, requestId);
    t.same([free?.status, free?.released], ['free', 'expired']);
    t.equal((await readWallet(r, a.account, 'chain_a')).held, 0n);
  },
);

t.test('a job still rendering at its deadline is failed and free, and its render stopped upstream', async (t) => {
  const h = await videoHarness({ chains: true, renderMs: 600_000, videos: { deadline_ms: 800 } });
  t.teardown(() => h.close());
  await h.fund('chain_a', 5_000_000n);
  const openai = sdk(h);
  const { data: job, response } = await openai.videos
    .create({ model: 'vidA-v6', prompt: 'too slow', seconds: '4' })
    .withResponse();
  const upstreamId = (await new VideoStore(h.redis, 0).get(job.id))!.upstreamId;
  const v = await until(
    'failed at its deadline',
    async () => {
      const x = await openai.videos.retrieve(job.id);
      return x.status === 'failed' ? x : null;
    },
    10_000,
    100,
  );
  t.equal(v.error?.code, 'deadline_exceeded');
  const record = await recordOf(h, response.headers.get('x-request-id')!, 'free');
  t.equal(record.priceAtomic, 0n);
  const deleted = await until(
    'the render stopped',
    async () => h.sim.received.find((r) => r.method === 'DELETE' && r.url === `/v1/videos/${upstreamId}`) ?? null,
  );
  t.equal(deleted.headers.authorization, 'Bearer sim-key', "the operator's key asked the provider to stop it");
});

t.test(
  'a clip that completes after the poll before the deadline is seen at the last poll, at the deadline',
  async (t) => {
    // Polls at 3 s (rendering), then at the deadline, 6 s (the backoff would say 7.5 s); the clip is done at 4 s.
    const h = await videoHarness({
      chains: true,
      renderMs: 4_000,
      videos: { deadline_ms: 6_000, poll_initial_ms: 3_000, poll_max_ms: 15_000 },
    });
    t.teardown(() => h.close());
    await h.fund('chain_a', 5_000_000n);
    const openai = sdk(h);
    const { data: job, response } = await openai.videos
      .create({ model: 'vidA-v6', prompt: 'done before its deadline', seconds: '4' })
      .withResponse();
    const v = await until(
      'the job ended',
      async () => {
        const x = await openai.videos.retrieve(job.id);
        return x.status === 'in_progress' ? null : x;
      },
      20_000,
      100,
    );
    t.equal(v.status, 'completed', 'completed, not failed at its deadline');
    const record = await recordOf(h, response.headers.get('x-request-id')!, 'settled');
    t.equal(record.priceAtomic, usd(DEFAULT_PRICES.video['vidA-v6']!['4']!), 'charged its listed price');
    const upstreamId = (await new VideoStore(h.redis, 0).get(job.id))!.upstreamId;
    t.notOk(
      h.sim.received.some((r) => r.method === 'DELETE' && r.url === `/v1/videos/${upstreamId}`),
      'its clip was not deleted upstream',
    );
  },
);

/** Submit a 4 s vidA clip through the SDK and wait until the provider has rendered it (nothing polls it meanwhile). */
async function submitRendered(h: Harness, one: ReturnType<typeof instanceOf>, prompt: string) {
  const { data: job, response } = await sdk(h).videos.create({ model: 'vidA-v6', prompt, seconds: '4' }).withResponse();
  const upstreamId = (await one.store.get(job.id))!.upstreamId;
  await until(
    'rendered',
    async () => {
      const v = (await (
        await fetch(`${h.sim.url}/v1/videos/${upstreamId}`, { headers: { authorization: 'Bearer sim-key' } })
      ).json()) as { status: string };
      return v.status === 'completed';
    },
    30_000,
  );
  return { job, requestId: response.headers.get('x-request-id')! };
}

t.test('a clip seen completed after its hold was released fails, free: no wallet pays beyond its hold', async (t) => {
  const h = await videoHarness({ chains: true, renderMs: 300, videos: { poller: false } });
  t.teardown(() => h.close());
  await h.fund('chain_a', 5_000_000n);
  const before = await readWallet(h.redis, h.account, 'chain_a');
  const one = instanceOf(h, 'one');
  const { job, requestId } = await submitRendered(h, one, 'late');
  // The sweeper released the hold (say a stalled poller let it expire) just before the poll that sees the clip.
  const held = await getCallRecord(h.redis, requestId);
  const sweeper = new Billing(
    h.redis,
    { retentionMs: 86_400_000, holdTtlMs: 60_000, instanceTimeoutMs: 2_000 },
    createMetrics({ defaults: false }),
    quiet,
  );
  // A new instance releases nothing for its first instance timeout (a lapsed heartbeat may be a live instance's).
  await sweeper.sweep(held!.expires! - 2_000);
  t.equal(await sweeper.sweep(held!.expires! + 1), 1);
  await one.poller.follow(job.id, await redisNow(h.redis));
  const v = await sdk(h).videos.retrieve(job.id);
  t.equal(v.status, 'failed');
  t.equal(v.error?.code, 'deadline_exceeded');
  t.match(await getCallRecord(h.redis, requestId), { status: 'free', priceAtomic: 0n, late: false });
  t.equal(await h.redis.zscore('videos-open', job.id), null, 'closed');
  const after = await readWallet(h.redis, h.account, 'chain_a');
  t.same([after.synced, after.pending, after.held], [before.synced, 0n, 0n], 'nothing charged');
});

t.test(
  "a job whose submit's answer never went out is not completed by its render: it fails at its deadline, free",
  async (t) => {
    const h = await videoHarness({ chains: true, renderMs: 300, videos: { poller: false } });
    t.teardown(() => h.close());
    await h.fund('chain_a', 5_000_000n);
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const one = instanceOf(h, 'one');
    const { job, requestId } = await submitRendered(h, one, 'unanswered');
    await until('accepted once its answer went out', async () => (await one.store.get(job.id))?.pending === false);
    // As a submit answered 503 leaves its job: the record written (the write's reply lost), never accepted, its hold's
    // release still waiting in the gateway's spool.
    await h.redis.hset(keys.video(job.id), 'pending', '1');
    await one.poller.follow(job.id, await redisNow(h.redis));
    t.match(await one.store.get(job.id), { status: 'in_progress', pending: true }, 'rendered, not completed');
    t.equal((await getCallRecord(h.redis, requestId))?.status, 'held', 'its hold untouched');
    await one.poller.follow(job.id, (await one.store.get(job.id))!.deadline);
    const v = await sdk(h).videos.retrieve(job.id);
    t.equal(v.status, 'failed');
    t.equal(v.error?.code, 'deadline_exceeded');
    t.match(await getCallRecord(h.redis, requestId), { status: 'free', priceAtomic: 0n });
    const after = await readWallet(h.redis, h.account, 'chain_a');
    t.same([after.synced, after.pending, after.held], [before.synced, 0n, 0n], 'nothing charged');
  },
);

t.test('a job whose debit cannot reach Redis stays open and its hold is closed by a later pass, once', async (t) => {
  const h = await videoHarness({ chains: true, renderMs: 300, videos: { poller: false } });
  t.teardown(() => h.close());
  await h.fund('chain_a', 5_000_000n);
  const one = instanceOf(h, 'one');
  const { job, requestId } = await submitRendered(h, one, 'unreached');
  // An admission whose debit gives up (Redis away through its retries, no spool).
  const unreached = {
    finish: async () => {
      throw new DebitNotReached(requestId, new Error('Connection is closed.'));
    },
  } as unknown as Admission;
  const config = { ...h.config, videos: { ...h.config.videos, poller: true } };
  const failing = new VideoJobs({
    redis: h.redis,
    config,
    upstreams: new Upstreams(),
    admission: unreached,
    metrics: createMetrics({ defaults: false }),
    log: quiet,
    instance: 'failing',
  });
  await t.rejects(failing.poller.follow(job.id, await redisNow(h.redis)), DebitNotReached);
  t.equal((await one.store.get(job.id))?.status, 'completed', 'the job completed');
  t.equal((await one.store.get(job.id))?.holdClosed, false, 'but its hold is not closed');
  t.ok(await h.redis.zscore('videos-open', job.id), 'and stays open');
  t.equal((await getCallRecord(h.redis, requestId))?.status, 'held', 'its hold untouched');
  await one.poller.follow(job.id, await redisNow(h.redis));
  t.equal((await one.store.get(job.id))?.holdClosed, true);
  t.equal((await recordOf(h, requestId, 'settled')).priceAtomic, usd(DEFAULT_PRICES.video['vidA-v6']!['4']!));
});

t.test(
  "a poll is one Redis round trip (its poll limit and the job's read sent together) and no upstream call",
  async (t) => {
    // No chains (no heartbeats) and no poller on this instance: every command on its connection is a poll's.
    const h = await videoHarness({ videos: { poller: false } });
    t.teardown(() => h.close());
    const openai = sdk(h);
    const job = await openai.videos.create({ model: 'vidA-v6', prompt: 'polled', seconds: '4' });
    await openai.videos.retrieve(job.id); // the key is resolved and cached by now
    // Each command as sent, with the commands still unanswered at that moment.
    const sent: { name: string; inFlight: string[] }[] = [];
    const pending = new Set<string>();
    const redis = h.redis as Redis & { sendCommand: Redis['sendCommand'] };
    const original = redis.sendCommand.bind(redis);
    redis.sendCommand = ((cmd: { name: string; promise: Promise<unknown> }, ...rest: unknown[]) => {
      const tag = `${cmd.name}#${sent.length}`;
      sent.push({ name: cmd.name, inFlight: [...pending].map((p) => p.split('#')[0]!) });
      pending.add(tag);
      const out = (original as (...a: unknown[]) => unknown)(cmd, ...rest);
      cmd.promise.finally(() => pending.delete(tag)).catch(() => {});
      return out;
    }) as Redis['sendCommand'];
    const gets = h.sim.received.filter((r) => r.method === 'GET').length;
    for (let i = 0; i < 50; i++) t.equal((await openai.videos.retrieve(job.id)).id, job.id);
    redis.sendCommand = original;
    t.same(
      sent.map((c) => c.name),
      Array(50).fill(['evalsha', 'hgetall']).flat(),
      "50 polls: the poll limit's script and the job's HGETALL each, nothing else",
    );
    t.ok(
      sent.filter((c) => c.name === 'hgetall').every((c) => c.inFlight.includes('evalsha')),
      "each HGETALL sent before the script's answer: one round trip",
    );
    t.equal(h.sim.received.filter((r) => r.method === 'GET').length, gets, 'the provider was not asked');
  },
);

t.test('one poller at a time: the lease names one instance, and another takes it when that one stops', async (t) => {
  const h = await videoHarness({ videos: { poller: false } });
  t.teardown(() => h.close());
  const [one, two] = [instanceOf(h, 'one'), instanceOf(h, 'two')];
  one.start();
  two.start();
  t.teardown(async () => {
    await one.stop();
    await two.stop();
  });
  const holder = await until('a lease holder', async () => h.redis.get('video-poller-lease'));
  t.ok(holder === 'one' || holder === 'two');
  // Several rounds of both pollers, and no takeover: nothing to await, a short look.
  await new Promise((r) => setTimeout(r, 300));
  t.equal(await h.redis.get('video-poller-lease'), holder, 'the holder keeps it');
  await (holder === 'one' ? one : two).stop();
  const next = await until(
    'taken over',
    async () => {
      const v = await h.redis.get('video-poller-lease');
      return v && v !== holder ? v : null;
    },
    5_000,
  );
  t.equal(next, holder === 'one' ? 'two' : 'one');
  const job = await sdk(h).videos.create({ model: 'vidA-v6', prompt: 'after a handover', seconds: '4' });
  await until(
    'completed by the new holder',
    async () => (await sdk(h).videos.retrieve(job.id)).status === 'completed',
    10_000,
    100,
  );
});

t.test('a poller whose Redis stops answering mid-pass still stops within its bound', async (t) => {
  const h = await videoHarness({ videos: { poller: false } });
  t.teardown(() => h.close());
  const relay = await outageRelay();
  t.teardown(() => relay.close());
  const conn = connectRedis({ url: relay.url, prefix: h.redis.options.keyPrefix! });
  conn.on('error', () => {});
  t.teardown(() => conn.disconnect());
  const jobs = instanceOf(h, 'stuck', conn);
  jobs.start();
  await until('the lease held', async () => (await h.redis.get('video-poller-lease')) === 'stuck');
  relay.down();
  // Its next pass's command waits in the connection's queue for a Redis that is gone.
  const queue = (conn as unknown as { offlineQueue: { length: number } }).offlineQueue;
  await until('a command waiting for Redis', async () => queue.length > 0);
  const started = Date.now();
  await jobs.stop();
  // The poller's bound is 2 s; before it had one, stop waited for the command to give up (20 reconnects, ~10 s).
  t.ok(Date.now() - started < 4_000, `stopped in ${Date.now() - started} ms`);
});

/** A job written straight to the store: no hold, no upstream job. */
function storeOnlyJob(name: string): NewVideoJob {
  return {
    id: newVideoId(),
    account: '0xabc',
    keyId: 'k',
    model: 'vidA-v6',
    family: 'vidA',
    seconds: 4,
    size: '1280x720',
    prompt: 'p',
    chain: undefined,
    requestId: `req_${name}`,
    callId: `call_${name}`,
    held: 0n,
    price: 0n,
    provider: 'sim-openai',
    upstreamModel: 'm',
    upstreamId: 'u',
  };
}

t.test("a job's record written again (a write sent again after a reconnect) leaves the job as it stands", async (t) => {
  const { redis } = await testRedis(t);
  const store = new VideoStore(redis, 3_600_000);
  const job = storeOnlyJob('x');
  const first = await store.create(job, 60_000, 1_000);
  t.equal(await store.finish(job.id, { status: 'failed', code: 'x', message: 'y' }, first.createdAt + 5), 'failed');
  await store.holdClosed(job.id);
  const again = await store.create(job, 60_000, 1_000);
  t.same([again.createdAt, again.deadline], [first.createdAt, first.deadline], 'answered as the first write was');
  const stored = await store.get(job.id);
  t.equal(stored?.status, 'failed', 'the job stays ended');
  t.equal(await store.openCount(), 0, 'and is not open again');
});

t.test('an accept that finds Redis away is tried again until it lands', async (t) => {
  const h = await videoHarness({ videos: { poller: false } });
  t.teardown(() => h.close());
  const relay = await outageRelay();
  t.teardown(() => relay.close());
  const conn = connectRedis({ url: relay.url, prefix: h.redis.options.keyPrefix!, failFast: true });
  conn.on('error', () => {});
  t.teardown(() => conn.disconnect());
  let failed!: () => void;
  const firstFailure = new Promise<void>((resolve) => (failed = resolve));
  const jobs = new VideoJobs({
    redis: conn,
    config: h.config,
    upstreams: new Upstreams(),
    admission: {} as Admission,
    metrics: createMetrics({ defaults: false }),
    log: { ...quiet, warn: () => failed() },
    instance: 'accepting',
  });
  const store = new VideoStore(h.redis, 3_600_000);
  const job = await store.create(storeOnlyJob('accept'), 60_000, 1_000);
  t.equal(job.pending, true, 'a new job is pending');
  relay.down();
  jobs.accept(job.id, { requestId: 'req_accept', account: '0xabc' });
  await firstFailure;
  t.equal((await store.get(job.id))?.pending, true, 'not accepted while Redis is away');
  relay.up();
  await until('accepted once Redis is back', async () => (await store.get(job.id))?.pending === false);
  await jobs.stop();
});
