// No free provider work: a caller who hangs up on a video submit while the provider accepts it gets its upstream job
// cancelled (OpenAI: DELETE /videos/{id}; the Gemini API has no cancel for its operations: counted, not sent), pays
// nothing and leaves no job; text and image calls abandoned before anything billable reached the caller stay free.
// Each is counted per account (farebox_abandoned_calls_total). Driven through the official openai SDK, aborted.
import t, { type Test } from 'tap';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import OpenAI, { toFile } from 'openai';
import { listCallRecords, type CallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { cancelWithRetries } from '../../plugins/jobs/video-cancel.js';
import { keys } from '../../plugins/store/keys.js';
import { UpstreamRetry, type UpstreamCancel } from '../../plugins/upstream/video-provider.js';
import { closeDevChains } from '../helpers/harness.js';
import { referencePng } from '../helpers/media.js';
import { until } from '../helpers/wait.js';
import { sdk, videoHarness } from './helpers.js';

// Renders of 10 s: a job the gateway cancels is still rendering when the cancel comes.
const h = await videoHarness({ chains: true, renderMs: 10_000 });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 20_000_000n);
const openai = sdk(h);

/** The abandoned-call count of the harness account on `endpoint`. */
async function abandoned(endpoint: string): Promise<number> {
  const m = await h.metrics.abandonedCalls.get();
  return m.values.find((v) => v.labels.account === h.account && v.labels.endpoint === endpoint)?.value ?? 0;
}

/** Cancels counted for `provider` with `outcome`. */
async function cancels(provider: string, outcome: string): Promise<number> {
  const m = await h.metrics.videoCancels.get();
  return m.values.find((v) => v.labels.provider === provider && v.labels.outcome === outcome)?.value ?? 0;
}

/**
 * Start `call` with an AbortController, abort it once the simulator has received the request it forwards
 * (`matches`), and expect the SDK's abort. The simulator answers after its `#sim:delay_ms`, so the caller is gone
 * before anything comes back.
 */
async function abandon(
  matches: (r: { method: string; url: string }) => boolean,
  call: (signal: AbortSignal) => Promise<unknown>,
): Promise<void> {
  const seen = h.sim.received.length;
  const ac = new AbortController();
  const done = call(ac.signal).then(
    () => 'answered',
    (err: unknown) => err,
  );
  await until('the provider got the request', async () => h.sim.received.slice(seen).some(matches));
  ac.abort();
  const outcome = await done;
  if (!(outcome instanceof OpenAI.APIUserAbortError))
    throw new Error(`expected the SDK's abort, got ${String(outcome)}`);
}

/** The account's newest call record once its hold is closed, with the wallet as it then stands. */
async function newestClosed(): Promise<CallRecord> {
  return until('the newest call closed', async () => {
    const [r] = await listCallRecords(h.redis, h.account, 1);
    return r && r.status !== 'held' ? r : null;
  });
}

t.test(
  'a video submit whose caller left while the provider accepted it: the upstream job is deleted, the account counted, nothing charged, no job',
  async (t) => {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const counted = await abandoned('videos');
    const seen = h.sim.received.length;
    await abandon(
      (r) => r.method === 'POST' && r.url === '/v1/videos',
      (signal) =>
        openai.videos.create(
          { model: 'vidA-v6', prompt: 'left early #sim:delay_ms=800', seconds: '8', size: '1280x720' },
          { signal },
        ),
    );
    const del = await until('the provider is asked to delete the job', async () =>
      h.sim.received.slice(seen).find((r) => r.method === 'DELETE'),
    );
    const upstreamId = /^\/v1\/videos\/(video_[A-Za-z0-9]+)$/.exec(del.url)?.[1];
    t.ok(upstreamId, `DELETE /v1/videos/{id} (${del.url})`);
    t.equal(del.headers.authorization, 'Bearer sim-key', "with the operator's key");
    t.equal(
      h.sim.received.slice(seen).filter((r) => r.method === 'POST').length,
      1,
      'one job was created upstream, the one deleted',
    );
    const gone = await fetch(`${h.sim.url}/v1/videos/${upstreamId}`, { headers: { authorization: 'Bearer sim-key' } });
    t.equal(gone.status, 404, 'the provider no longer has the job: its render stopped');
    await until('the cancel counted', async () => (await cancels('sim-openai', 'cancelled')) === 1);

    const record = await newestClosed();
    t.match(record, { model: 'vidA-v6', status: 'free', priceAtomic: 0n }, 'the hold was released: free');
    const jobId = record.owner.replace(/^job:/, '');
    t.match(jobId, /^video_[0-9a-f]{32}$/);
    t.equal(await h.redis.exists(keys.video(jobId)), 0, 'no job recorded');
    const after = await readWallet(h.redis, h.account, 'chain_a');
    t.same(
      [after.held, after.pending, after.available],
      [before.held, before.pending, before.available],
      'the wallet as it was',
    );
    t.equal(await abandoned('videos'), counted + 1, 'farebox_abandoned_calls_total counted the account');
  },
);

/**
 * A raw connection to the gateway, for pipelining: its socket (connected; destroyed at the test's end), the bytes it
 * received, and the gateway's responses to its requests, in order, as the gateway's server makes them.
 */
async function pipelining(t: Test): Promise<{ socket: Socket; received: () => number; responses: ServerResponse[] }> {
  const u = new URL(h.url);
  const responses: ServerResponse[] = [];
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (req.socket.remotePort === socket.localPort) responses.push(res);
  };
  h.app.server.on('request', onRequest);
  t.teardown(() => void h.app.server.off('request', onRequest));
  const socket = connect(Number(u.port), u.hostname);
  socket.on('error', () => {});
  t.teardown(() => socket.destroy());
  let received = 0;
  socket.on('data', (d: Buffer) => (received += d.length));
  await new Promise((resolve) => socket.once('connect', resolve));
  return { socket, received: () => received, responses };
}

/** A POST of `body` to `path` as raw HTTP/1.1 with the harness key. */
function rawPost(path: string, body: unknown): string {
  const b = JSON.stringify(body);
  return `POST ${path} HTTP/1.1\r\nhost: ${new URL(h.url).host}\r\nauthorization: Bearer ${h.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
}

/** A chat completions request as raw HTTP/1.1 with the harness key. */
function chatPost(model: string, content: string): string {
  return rawPost('/v1/chat/completions', { model, messages: [{ role: 'user', content }] });
}

t.test(
  'a video 200 that never left for the caller (queued behind a slow answer on its connection when the caller hung up): the job fails, its render is stopped, nothing charged',
  async (t) => {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const seen = h.sim.received.length;
    // Two requests pipelined on one connection: the submit's answer waits behind the slow chat answer.
    const { socket, received } = await pipelining(t);
    socket.write(
      chatPost('beta-5.5', 'slow #sim:delay_ms=5000') +
        rawPost('/v1/videos', { model: 'vidA-v6', prompt: 'queued', seconds: '4' }),
    );
    const jobId = await until('the job recorded', async () => {
      const records = await listCallRecords(h.redis, h.account, 5);
      const id = records.find((r) => r.owner.startsWith('job:'))?.owner.slice(4);
      return id !== undefined && (await h.redis.exists(keys.video(id))) === 1 ? id : null;
    });
    socket.destroy();
    t.equal(received(), 0, 'the caller got nothing');
    const del = await until('the provider is asked to delete the job', async () =>
      h.sim.received.slice(seen).find((r) => r.method === 'DELETE'),
    );
    t.match(del.url, /^\/v1\/videos\/video_/, 'DELETE /v1/videos/{id}');
    const job = await sdk(h).videos.retrieve(jobId);
    t.equal(job.status, 'failed');
    t.equal(job.error?.code, 'client_disconnected');
    const record = await until("the job's hold released", async () => {
      const records = await listCallRecords(h.redis, h.account, 5);
      const r = records.find((x) => x.owner === `job:${jobId}`);
      return r && r.status !== 'held' ? r : null;
    });
    t.match(record, { status: 'free', priceAtomic: 0n });
    const after = await until('the wallet as it was', async () => {
      const w = await readWallet(h.redis, h.account, 'chain_a');
      return w.held === before.held ? w : null;
    });
    t.same([after.pending, after.available], [before.pending, before.available]);
  },
);

t.test(
  'calls pipelined on one connection whose caller hangs up all end, free: the first before its answer, the queued one whose whole answer never left the process',
  async (t) => {
    const { socket, received, responses } = await pipelining(t);
    socket.write(
      chatPost('beta-5.5', 'first, slow #sim:delay_ms=5000') + chatPost('beta-5.5', 'second, queued behind it'),
    );
    const mine = async () =>
      (await listCallRecords(h.redis, h.account, 10)).filter((r) => r.model === 'beta-5.5').slice(0, 2);
    // The second's whole answer, with its price, is written into its response, queued behind the first's.
    const queued = await until('the second answer written', async () =>
      responses[1]?.writableEnded ? responses[1] : null,
    );
    t.equal(queued.socket, null, 'still waiting for the connection');
    socket.destroy();
    const records = await until('both ended', async () => {
      const rs = await mine();
      return rs.length === 2 && rs.every((r) => r.status !== 'held') ? rs : null;
    });
    t.equal(received(), 0, 'the caller got nothing');
    t.same(
      records.map((r) => [r.status, r.priceAtomic]),
      [
        ['free', 0n],
        ['free', 0n],
      ],
      'both free',
    );
  },
);

t.test('twelve calls pipelined on one connection: no listener warning, all end free when it closes', async (t) => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
  process.on('warning', onWarning);
  t.teardown(() => void process.off('warning', onWarning));
  const { socket, responses } = await pipelining(t);
  const posts = Array.from({ length: 12 }, (_, i) =>
    chatPost('beta-5.5', i === 0 ? 'pipelined, slow #sim:delay_ms=5000' : `pipelined ${i}`),
  );
  socket.write(posts.join(''));
  // The eleven answers after the first are written whole into their responses, queued behind the first's.
  await until('eleven answers queued', async () =>
    responses.length === 12 && responses.slice(1).every((r) => r.writableEnded) ? true : null,
  );
  socket.destroy();
  const records = await until('all ended', async () => {
    const rs = (await listCallRecords(h.redis, h.account, 40)).filter((r) => r.model === 'beta-5.5').slice(0, 12);
    return rs.every((r) => r.status !== 'held') ? rs : null;
  });
  t.equal(records.length, 12);
  t.ok(
    records.every((r) => r.status === 'free' && r.priceAtomic === 0n),
    'none charged',
  );
  t.same(warnings, [], 'no warning');
});

t.test(
  'Gemini has no cancel for video operations: nothing is sent, the render is counted as not stopped; the caller still pays nothing',
  async (t) => {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const counted = await abandoned('videos');
    const seen = h.sim.received.length;
    const frame = await toFile(await referencePng(640, 480), 'frame.png', { type: 'image/png' });
    await abandon(
      (r) => r.method === 'POST' && r.url.endsWith(':predictLongRunning'),
      (signal) =>
        openai.videos.create(
          {
            model: 'vidC-3',
            prompt: 'left early #sim:delay_ms=800',
            seconds: '5' as never,
            size: '640x480' as never,
            input_reference: frame,
          },
          { signal },
        ),
    );
    await until('the cancel counted', async () => (await cancels('sim-gemini', 'unsupported')) === 1);
    t.same(
      h.sim.received
        .slice(seen)
        .map((r) => `${r.method} ${r.url.split('?')[0]}`)
        .filter((r) => !r.endsWith(':predictLongRunning')),
      [],
      'no request beyond the submit',
    );
    t.match(await newestClosed(), { model: 'vidC-3', status: 'free', priceAtomic: 0n });
    const after = await readWallet(h.redis, h.account, 'chain_a');
    t.same([after.held, after.available], [before.held, before.available]);
    t.equal(await abandoned('videos'), counted + 1);
  },
);

t.test(
  'a text call whose caller left before the first byte is free and counted; one cut after content reached it is charged, not counted',
  async (t) => {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const counted = await abandoned('chat_completions');
    await abandon(
      (r) => r.method === 'POST' && r.url === '/v1/chat/completions',
      (signal) =>
        openai.chat.completions.create(
          { model: 'beta-5.6-sol', messages: [{ role: 'user', content: 'never read #sim:delay_ms=800' }] },
          { signal },
        ),
    );
    t.match(await newestClosed(), { model: 'beta-5.6-sol', status: 'free', priceAtomic: 0n }, 'free');
    t.equal((await readWallet(h.redis, h.account, 'chain_a')).available, before.available, 'nothing debited');
    t.equal(await abandoned('chat_completions'), counted + 1, 'counted for the account');

    // Left after generated tokens reached it: charged for them, so not an abandoned call.
    const ac = new AbortController();
    const stream = await openai.chat.completions.create(
      {
        model: 'beta-5.6-sol',
        stream: true,
        messages: [{ role: 'user', content: 'read some #sim:tokens=200 #sim:chunk_delay_ms=20' }],
      },
      { signal: ac.signal },
    );
    let deltas = 0;
    await (async () => {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content) deltas++;
        if (deltas >= 5) ac.abort();
      }
    })().catch(() => {});
    const cut = await newestClosed();
    t.ok(cut.priceAtomic > 0n, `charged for what it read (${cut.price})`);
    t.equal(await abandoned('chat_completions'), counted + 1, 'not counted');
  },
);

t.test('an image call whose caller left before the first byte is free and counted', async (t) => {
  for (const model of ['img-pro', 'img-2']) {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const counted = await abandoned('image_generations');
    await abandon(
      (r) => r.method === 'POST' && (r.url === '/v1/images/generations' || r.url.endsWith(':generateContent')),
      (signal) => openai.images.generate({ model, prompt: 'never read #sim:delay_ms=800' }, { signal }),
    );
    t.match(await newestClosed(), { model, status: 'free', priceAtomic: 0n }, `${model}: free`);
    t.equal((await readWallet(h.redis, h.account, 'chain_a')).available, before.available, `${model}: nothing debited`);
    t.equal(await abandoned('image_generations'), counted + 1, `${model}: counted for the account`);
  }
});

t.test(
  'a cancel the provider cannot answer is tried again after each wait, then given up; an answer ends it',
  async (t) => {
    const errors: number[] = [];
    const onError = (_err: unknown, attempt: number) => errors.push(attempt);
    let tries = 0;
    const flaky = async (): Promise<UpstreamCancel> => {
      tries++;
      if (tries < 3) throw new UpstreamRetry(503, undefined, 'busy');
      return 'cancelled';
    };
    t.equal(await cancelWithRetries(flaky, { waitsMs: [5, 5], onError }), 'cancelled', 'the third try is answered');
    t.same(errors, [1, 2]);

    errors.length = 0;
    tries = 0;
    const down = async (): Promise<UpstreamCancel> => {
      tries++;
      throw new Error('connection refused');
    };
    t.equal(await cancelWithRetries(down, { waitsMs: [5, 5], onError }), 'failed', 'given up');
    t.equal(tries, 3, 'three tries, no more');

    tries = 0;
    const refusing = async (): Promise<UpstreamCancel> => {
      tries++;
      return 'refused';
    };
    t.equal(await cancelWithRetries(refusing, { waitsMs: [5, 5], onError }), 'refused');
    t.equal(tries, 1, 'a refusal is final');

    const stop = new AbortController();
    tries = 0;
    const pending = cancelWithRetries(down, { waitsMs: [60_000], stop: stop.signal, onError });
    await until('the first try', async () => tries === 1);
    stop.abort();
    t.equal(await pending, 'failed', 'a stopping instance waits no more');
    t.equal(tries, 1);
  },
);
