// The job port's adapters against a stand-in provider that answers as the providers' API references show (not the
// simulator): what each sends (paths, auth, JSON or multipart, the fields and their types), how each reads a job's
// states, failures and refusals, how each stops a job, and the MP4 pass-through (ranges, a redirect whose target
// never gets the key).
import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { ProviderConfig } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import { geminiVideos, veoFormat } from '../../plugins/upstream/protocols/gemini/videos.js';
import { openaiVideos } from '../../plugins/upstream/protocols/openai/videos.js';
import { Upstreams } from '../../plugins/upstream/pools.js';
import { registerMultipart } from '../../plugins/intake/multipart.js';
import { sendVideoContent } from '../../plugins/upstream/video-content.js';
import { UpstreamRetry, type VideoSubmit } from '../../plugins/upstream/video-provider.js';

interface Seen {
  method: string;
  url: string;
  headers: Record<string, unknown>;
  body: unknown;
}
const seen: Seen[] = [];
/** What the stand-in answers next, per route. */
const answers = new Map<string, { status: number; body: unknown; headers?: Record<string, string> }>();

async function server(
  setup: (app: FastifyInstance) => void | Promise<void>,
): Promise<{ url: string; app: FastifyInstance }> {
  const app = Fastify({ logger: false, forceCloseConnections: true });
  await setup(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  return { url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, app };
}

const MP4 = Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 251));

const provider = await server(async (app) => {
  await registerMultipart(app);
  const record = async (req: {
    method: string;
    url: string;
    headers: Record<string, unknown>;
    body?: unknown;
    isMultipart?: () => boolean;
    parts?: () => AsyncIterable<{
      type: string;
      fieldname: string;
      value?: unknown;
      mimetype?: string;
      filename?: string;
      toBuffer?: () => Promise<Buffer>;
    }>;
  }) => {
    let body = req.body;
    if (req.isMultipart?.()) {
      const parts: unknown[] = [];
      for await (const p of req.parts!()) {
        parts.push(
          p.type === 'file'
            ? { field: p.fieldname, filename: p.filename, type: p.mimetype, size: (await p.toBuffer!()).length }
            : { field: p.fieldname, value: p.value },
        );
      }
      body = parts;
    }
    seen.push({ method: req.method, url: req.url, headers: req.headers, body });
  };
  const answer = (key: string) => async (req: FastifyRequest, reply: FastifyReply) => {
    await record(req as never);
    const a = answers.get(key) ?? { status: 500, body: { error: { message: 'no answer set' } } };
    return reply
      .code(a.status)
      .headers(a.headers ?? {})
      .send(a.body);
  };
  app.post('/v1/videos', answer('openai.create'));
  app.get('/v1/videos/:id', answer('openai.get'));
  app.delete('/v1/videos/:id', answer('openai.delete'));
  app.post('/v1beta/models/:call', answer('gemini.create'));
  app.get('/v1beta/models/:model/operations/:op', answer('gemini.get'));
  app.get('/v1beta/files/:file', async (req, reply) => {
    await record(req as never);
    return reply.code(302).header('location', `${storage.url}/blob/clip.mp4?sig=abc`).send();
  });
  app.get('/v1/videos/:id/content', async (req, reply) => {
    await record(req as never);
    const range = /^bytes=(\d+)-(\d+)$/.exec(String(req.headers.range ?? ''));
    if (!range) return reply.type('application/octet-stream').send(MP4);
    const [a, b] = [Number(range[1]), Number(range[2])];
    if (a >= MP4.length) return reply.code(416).header('content-range', `bytes */${MP4.length}`).send();
    return reply
      .code(206)
      .header('content-range', `bytes ${a}-${b}/${MP4.length}`)
      .type('video/mp4')
      .send(MP4.subarray(a, b + 1));
  });
});

const storage = await server((app) => {
  app.get('/blob/clip.mp4', async (req, reply) => {
    seen.push({ method: req.method, url: req.url, headers: req.headers, body: null });
    return reply.type('video/mp4').send(MP4);
  });
});

const upstreams = new Upstreams();
t.teardown(() => upstreams.close());
const cfg = (protocol: 'openai' | 'gemini', base: string): ProviderConfig => ({
  name: protocol,
  protocol,
  base_url: base,
  key_env: 'K',
  key: `${protocol}-key`,
  timeout_ms: 5_000,
  max_duration_ms: 60_000,
  max_tokens_field: 'max_completion_tokens',
});
const openai = openaiVideos(upstreams, cfg('openai', `${provider.url}/v1`));
const gemini = geminiVideos(upstreams, cfg('gemini', `${provider.url}/v1beta`));
const img = (field: string, size = 10) => ({
  field,
  format: 'png' as const,
  mimeType: 'image/png',
  bytes: Buffer.alloc(size, 1),
  width: 4,
  height: 4,
});
const base: Omit<VideoSubmit, 'url'> = { model: 'sora-2', prompt: 'a fox', width: 1280, height: 720, seconds: 8 };
const last = () => seen[seen.length - 1]!;

t.test('OpenAI: a text-to-video create is JSON, seconds a string; the video id is the job', async (t) => {
  answers.set('openai.create', {
    status: 200,
    body: { id: 'video_abc', object: 'video', status: 'queued', progress: 0 },
  });
  const r = await openai.submit({ ...base, url: `${provider.url}/v1/videos` });
  t.same(r, { upstreamId: 'video_abc' });
  t.equal(last().headers.authorization, 'Bearer openai-key');
  t.match(String(last().headers['content-type']), /^application\/json/);
  t.same(last().body, { model: 'sora-2', prompt: 'a fox', seconds: '8', size: '1280x720' });
});

t.test('OpenAI: with files, multipart: input_reference parts in order, then last_reference', async (t) => {
  answers.set('openai.create', { status: 200, body: { id: 'video_def', object: 'video', status: 'queued' } });
  await openai.submit({
    ...base,
    url: `${provider.url}/v1/videos`,
    firstFrame: img('input_reference', 11),
    lastFrame: img('last_reference', 12),
  });
  t.same(last().body, [
    { field: 'model', value: 'sora-2' },
    { field: 'prompt', value: 'a fox' },
    { field: 'seconds', value: '8' },
    { field: 'size', value: '1280x720' },
    { field: 'input_reference', filename: 'input_reference-1.png', type: 'image/png', size: 11 },
    { field: 'last_reference', filename: 'last_reference-1.png', type: 'image/png', size: 12 },
  ]);
  await openai.submit({
    ...base,
    url: `${provider.url}/v1/videos`,
    subjects: [img('input_reference', 3), img('input_reference', 4)],
  });
  t.same(
    (last().body as { field: string; size?: number }[]).filter((p) => p.size).map((p) => [p.field, p.size]),
    [
      ['input_reference', 3],
      ['input_reference', 4],
    ],
  );
});

t.test("OpenAI: a refusal is a 400 with the provider's message; a failure its own status", async (t) => {
  answers.set('openai.create', {
    status: 400,
    body: {
      error: {
        message: 'Your request was rejected by the safety system.',
        type: 'invalid_request_error',
        code: 'moderation_blocked',
      },
    },
  });
  const e = await openai.submit({ ...base, url: `${provider.url}/v1/videos` }).catch((err: unknown) => err);
  t.ok(e instanceof GatewayError && e.code === 'upstream_invalid_request' && e.status === 400);
  t.equal((e as Error).message, 'Your request was rejected by the safety system.');
  answers.set('openai.create', {
    status: 429,
    body: { error: { message: 'slow down' } },
    headers: { 'retry-after': '7' },
  });
  const r = await openai.submit({ ...base, url: `${provider.url}/v1/videos` }).catch((err: unknown) => err);
  t.ok(r instanceof GatewayError && r.code === 'upstream_rate_limited');
  t.same((r as GatewayError).headers, { 'retry-after': '7' });
});

t.test('OpenAI: job states as the video object names them', async (t) => {
  answers.set('openai.get', { status: 200, body: { id: 'video_abc', status: 'queued', progress: 0 } });
  t.same(await openai.poll('video_abc'), { status: 'in_progress', progress: 0 }, 'queued is in progress to callers');
  t.equal(last().url, '/v1/videos/video_abc');
  answers.set('openai.get', { status: 200, body: { id: 'video_abc', status: 'in_progress', progress: 42.7 } });
  t.same(await openai.poll('video_abc'), { status: 'in_progress', progress: 42 });
  answers.set('openai.get', {
    status: 200,
    body: {
      id: 'video_abc',
      status: 'completed',
      progress: 100,
      completed_at: 1_800_000_000,
      expires_at: 1_800_003_600,
    },
  });
  t.same(await openai.poll('video_abc'), {
    status: 'completed',
    content: { url: `${provider.url}/v1/videos/video_abc/content`, expiresAt: 1_800_003_600_000 },
  });
  answers.set('openai.get', {
    status: 200,
    body: { id: 'video_abc', status: 'failed', error: { code: 'moderation_blocked', message: 'Blocked.' } },
  });
  t.same(await openai.poll('video_abc'), { status: 'failed', code: 'moderation_blocked', message: 'Blocked.' });
  answers.set('openai.get', { status: 404, body: { error: { message: 'not found' } } });
  t.same((await openai.poll('video_abc')).status, 'failed', 'a job the provider lost is failed');
  answers.set('openai.get', { status: 503, body: { error: { message: 'busy' } }, headers: { 'retry-after': '3' } });
  const e = await openai.poll('video_abc').catch((err: unknown) => err);
  t.ok(e instanceof UpstreamRetry && e.retryAfterMs === 3000, 'a 5xx is waited out, Retry-After honoured');
});

t.test('Gemini: predictLongRunning with the key header, one instance, parameters by frame size', async (t) => {
  answers.set('gemini.create', { status: 200, body: { name: 'models/veo-3.1-generate-preview/operations/op123' } });
  const r = await gemini.submit({
    ...base,
    model: 'veo-3.1-generate-preview',
    url: `${provider.url}/v1beta/models/veo-3.1-generate-preview:predictLongRunning`,
    firstFrame: img('input_reference'),
    lastFrame: { ...img('last_reference'), mimeType: 'image/jpeg' },
  });
  t.same(r, { upstreamId: 'models/veo-3.1-generate-preview/operations/op123' });
  t.equal(last().url, '/v1beta/models/veo-3.1-generate-preview:predictLongRunning');
  t.equal(last().headers['x-goog-api-key'], 'gemini-key');
  t.notOk(last().headers.authorization);
  t.same(last().body, {
    instances: [
      {
        prompt: 'a fox',
        image: { bytesBase64Encoded: Buffer.alloc(10, 1).toString('base64'), mimeType: 'image/png' },
        lastFrame: { bytesBase64Encoded: Buffer.alloc(10, 1).toString('base64'), mimeType: 'image/jpeg' },
      },
    ],
    parameters: { aspectRatio: '16:9', resolution: '720p', durationSeconds: 8 },
  });
  await gemini.submit({
    ...base,
    url: `${provider.url}/v1beta/models/veo:predictLongRunning`,
    subjects: [img('input_reference'), img('input_reference')],
  });
  t.same(
    (
      last().body as { instances: { referenceImages: { referenceType: string }[] }[] }
    ).instances[0]!.referenceImages.map((x) => x.referenceType),
    ['asset', 'asset'],
  );
  t.same(
    [veoFormat(720, 1280), veoFormat(1920, 1080), veoFormat(854, 480), veoFormat(640, 480)],
    [
      { aspectRatio: '9:16', resolution: '720p' },
      { aspectRatio: '16:9', resolution: '1080p' },
      { aspectRatio: '16:9', resolution: '480p' },
      { aspectRatio: '4:3', resolution: '480p' },
    ],
  );
});

t.test('Gemini: the operation polled under the API base; done with a sample, an error, or filtered', async (t) => {
  const name = 'models/veo/operations/op123';
  answers.set('gemini.get', { status: 200, body: { name } });
  t.same(await gemini.poll(name), { status: 'in_progress', progress: 0 });
  t.equal(last().url, '/v1beta/models/veo/operations/op123');
  t.equal(last().headers['x-goog-api-key'], 'gemini-key');
  const uri = `${provider.url}/v1beta/files/abc:download?alt=media`;
  answers.set('gemini.get', {
    status: 200,
    body: {
      name,
      done: true,
      response: {
        '@type': 'type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse',
        generateVideoResponse: { generatedSamples: [{ video: { uri } }] },
      },
    },
  });
  const done = await gemini.poll(name);
  t.equal(done.status === 'completed' && done.content.url, uri);
  t.ok(
    done.status === 'completed' && Math.abs(done.content.expiresAt - Date.now() - 2 * 86_400_000) < 10_000,
    'kept two days',
  );
  answers.set('gemini.get', {
    status: 200,
    body: { name, done: true, error: { code: 13, message: 'Internal error.' } },
  });
  t.same(await gemini.poll(name), { status: 'failed', code: 'video_generation_failed', message: 'Internal error.' });
  answers.set('gemini.get', {
    status: 200,
    body: {
      name,
      done: true,
      response: {
        generateVideoResponse: { raiMediaFilteredCount: 1, raiMediaFilteredReasons: ['The prompt was blocked.'] },
      },
    },
  });
  t.same(await gemini.poll(name), { status: 'failed', code: 'content_filtered', message: 'The prompt was blocked.' });
});

t.test(
  'OpenAI: cancel is DELETE /videos/{id} with the key; deleted, gone, refused, or worth another try',
  async (t) => {
    answers.set('openai.delete', { status: 200, body: { id: 'video_abc', object: 'video.deleted', deleted: true } });
    t.equal(await openai.cancel('video_abc'), 'cancelled');
    t.same(
      [last().method, last().url, last().headers.authorization],
      ['DELETE', '/v1/videos/video_abc', 'Bearer openai-key'],
    );
    answers.set('openai.delete', { status: 200, body: { id: 'video_abc', object: 'video.deleted', deleted: false } });
    t.equal(await openai.cancel('video_abc'), 'refused', 'deleted: false keeps the job');
    answers.set('openai.delete', { status: 404, body: { error: { message: 'not found' } } });
    t.equal(await openai.cancel('video_abc'), 'gone');
    answers.set('openai.delete', {
      status: 400,
      body: { error: { message: 'Video is not finished.', type: 'invalid_request_error' } },
    });
    t.equal(await openai.cancel('video_abc'), 'refused', "a 4xx is the provider's final answer");
    answers.set('openai.delete', {
      status: 503,
      body: { error: { message: 'busy' } },
      headers: { 'retry-after': '2' },
    });
    const e = await openai.cancel('video_abc').catch((err: unknown) => err);
    t.ok(
      e instanceof UpstreamRetry && e.status === 503 && e.retryAfterMs === 2000,
      'a 5xx is worth another try, Retry-After kept',
    );
    answers.set('openai.delete', { status: 429, body: { error: { message: 'slow down' } } });
    t.ok((await openai.cancel('video_abc').catch((err: unknown) => err)) instanceof UpstreamRetry, 'so is a 429');
  },
);

t.test(
  'Gemini: no cancel for video operations (models.operations has get and list only): nothing is sent',
  async (t) => {
    const before = seen.length;
    t.equal(await gemini.cancel('models/veo/operations/op123'), 'unsupported');
    t.equal(seen.length, before, 'no request');
  },
);

t.test("a poll that trickles its answer ends at the poll's bound: a timeout, the provider hung up on", async (t) => {
  // Its answer's head at once, then one byte every 50 ms: never silent for the provider's timeout_ms (500 ms).
  let closed!: (sent: number) => void;
  const hungUp = () => new Promise<number>((resolve) => (closed = resolve));
  const body = JSON.stringify({ id: 'video_abc', object: 'video', status: 'in_progress', name: 'x', done: false });
  const trickle = createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) });
    let sent = 0;
    const timer = setInterval(() => {
      if (sent < body.length) res.write(body[sent++]!);
      else res.end();
    }, 50);
    res.on('close', () => {
      clearInterval(timer);
      closed(sent);
    });
  });
  await new Promise<void>((resolve) => trickle.listen(0, '127.0.0.1', resolve));
  t.teardown(() => trickle.close());
  const url = `http://127.0.0.1:${(trickle.address() as AddressInfo).port}`;
  const slow = (protocol: 'openai' | 'gemini', path: string) => ({
    ...cfg(protocol, `${url}${path}`),
    timeout_ms: 500,
  });
  const polls: [string, () => Promise<unknown>][] = [
    ['OpenAI', () => openaiVideos(upstreams, slow('openai', '/v1')).poll('video_abc')],
    ['Gemini', () => geminiVideos(upstreams, slow('gemini', '/v1beta')).poll('models/veo/operations/op1')],
    ['OpenAI cancel', () => openaiVideos(upstreams, slow('openai', '/v1')).cancel('video_abc')],
  ];
  for (const [name, poll] of polls) {
    const sent = hungUp();
    const err = await poll().catch((e: unknown) => e);
    t.ok(err instanceof GatewayError && err.code === 'upstream_timeout', `${name}: upstream_timeout`);
    const n = await sent;
    t.ok(n < body.length, `${name}: hung up on after ${n} of ${body.length} bytes`);
  }
});

t.test('content: ranges passed through; a redirect is followed and its target never gets the key', async (t) => {
  const app = Fastify({ logger: false });
  app.get('/c', async (req, reply) => {
    const q = req.query as { url: string; proto: 'openai' | 'gemini' };
    const a = q.proto === 'openai' ? openai : gemini;
    return sendVideoContent(
      upstreams,
      reply,
      { url: q.url, headers: (u) => a.contentHeaders(u), timeoutMs: 5_000 },
      req.headers.range,
    );
  });
  app.setErrorHandler((err, _req, reply) =>
    reply
      .code((err as GatewayError).status ?? 500)
      .headers((err as GatewayError).headers ?? {})
      .send({ code: (err as GatewayError).code }),
  );
  t.teardown(() => app.close());
  const get = (q: Record<string, string>, range?: string) =>
    app.inject({ url: `/c?${new URLSearchParams(q)}`, headers: range ? { range } : {} });

  const whole = await get({ proto: 'openai', url: `${provider.url}/v1/videos/video_abc/content` });
  t.same(
    [whole.statusCode, whole.headers['content-type'], whole.rawPayload.length],
    [200, 'video/mp4', MP4.length],
    'typed video/mp4 whatever the provider said',
  );
  t.equal(last().headers.authorization, 'Bearer openai-key');
  const part = await get({ proto: 'openai', url: `${provider.url}/v1/videos/video_abc/content` }, 'bytes=10-19');
  t.same(
    [part.statusCode, part.headers['content-range'], [...part.rawPayload]],
    [206, `bytes 10-19/${MP4.length}`, [...MP4.subarray(10, 20)]],
  );
  const past = await get({ proto: 'openai', url: `${provider.url}/v1/videos/video_abc/content` }, 'bytes=9000-9001');
  t.same(
    [past.statusCode, past.json().code, past.headers['content-range']],
    [416, 'invalid_range', `bytes */${MP4.length}`],
  );

  const g = await get({ proto: 'gemini', url: `${provider.url}/v1beta/files/abc:download?alt=media` });
  t.same([g.statusCode, g.rawPayload.length], [200, MP4.length], 'followed to the storage');
  const hops = seen.slice(-2);
  t.equal(hops[0]!.headers['x-goog-api-key'], 'gemini-key', "the provider's own origin gets the key");
  t.equal(hops[1]!.url, '/blob/clip.mp4?sig=abc');
  t.notOk(hops[1]!.headers['x-goog-api-key'], 'the redirect target does not');
  t.same(openai.contentHeaders('https://elsewhere.example/clip.mp4'), {}, "nor does any URL off the provider's origin");
});
