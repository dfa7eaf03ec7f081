import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { probe, readUntilDrop, referencePng, sleep } from '../helpers/media.js';

const sim = await startSimulator({ videoRenderMs: 400 });
t.teardown(() => sim.close());
// Renders of 1.5 s, for polls that must see a job in progress several times even on a loaded machine.
const slow = await startSimulator({ videoRenderMs: 1500 });
t.teardown(() => slow.close());
const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 });
const AUTH = { authorization: 'Bearer x' };

type Video = {
  id: string;
  object: string;
  status: string;
  progress: number;
  created_at: number;
  completed_at: number | null;
  expires_at: number | null;
  seconds: string;
  size: string;
  error: { code: string; message: string } | null;
  [k: string]: unknown;
};

async function submit(
  body: Record<string, unknown> | FormData,
  headers: Record<string, string> = AUTH,
  url = sim.url,
): Promise<Response> {
  const form = body instanceof FormData;
  return fetch(url + '/v1/videos', {
    method: 'POST',
    headers: form ? headers : { ...headers, 'content-type': 'application/json' },
    body: form ? body : JSON.stringify(body),
  });
}

async function poll(id: string, url = sim.url): Promise<Video> {
  return (await (await fetch(`${url}/v1/videos/${id}`, { headers: AUTH })).json()) as Video;
}

/** Polls every 50 ms until the job is completed or failed; returns every state seen. */
async function untilDone(id: string, url = sim.url): Promise<Video[]> {
  const seen: Video[] = [];
  for (let i = 0; i < 400; i++) {
    const v = await poll(id, url);
    seen.push(v);
    if (v.status === 'completed' || v.status === 'failed') return seen;
    await sleep(50);
  }
  throw new Error(`${id} never finished`);
}

const content = (id: string, headers: Record<string, string> = {}, url = sim.url) =>
  fetch(`${url}/v1/videos/${id}/content`, { headers: { ...AUTH, ...headers } });

t.test(
  'submit -> queued video object; polls: in_progress with rising progress -> completed; the MP4 is h264 of the exact size and duration',
  async (t) => {
    const res = await submit(
      { model: 'sora-2', prompt: 'waves on a shore', size: '1280x720', seconds: '4' },
      AUTH,
      slow.url,
    );
    t.equal(res.status, 200);
    const v = (await res.json()) as Video;
    t.match(v, {
      id: /^video_/,
      object: 'video',
      model: 'sora-2',
      status: 'queued',
      progress: 0,
      created_at: Number,
      completed_at: null,
      expires_at: null,
      prompt: 'waves on a shore',
      seconds: '4',
      size: '1280x720',
      remixed_from_video_id: null,
      error: null,
    });
    const early = await content(v.id, {}, slow.url);
    t.equal(early.status, 404, 'no content before completion');
    t.match(await early.json(), {
      error: { message: /status is '(queued|in_progress)'/, type: 'invalid_request_error', param: null },
    });

    const seen = await untilDone(v.id, slow.url);
    const running = seen.filter((s) => s.status === 'in_progress');
    t.ok(running.length >= 2, `polled while rendering (${running.length} times)`);
    const progress = running.map((s) => s.progress);
    t.ok(
      progress.every((p, i) => i === 0 || p >= progress[i - 1]!),
      `progress never falls: ${progress.join(' ')}`,
    );
    t.ok(progress.at(-1)! > progress[0]!, 'and rises');
    t.ok(progress.every((p) => p > 0 && p < 100));
    const done = seen.at(-1)!;
    t.match(done, { status: 'completed', progress: 100, error: null });
    t.ok(done.completed_at! >= done.created_at);
    t.equal(done.expires_at, done.completed_at! + 3600);

    const mp4 = await content(v.id, {}, slow.url);
    t.equal(mp4.status, 200);
    t.equal(mp4.headers.get('content-type'), 'video/mp4');
    t.equal(mp4.headers.get('accept-ranges'), 'bytes');
    const bytes = Buffer.from(await mp4.arrayBuffer());
    t.equal(Number(mp4.headers.get('content-length')), bytes.length);
    const p = await probe(bytes);
    t.match(p, { codec: 'h264', width: 1280, height: 720, pixFmt: 'yuv420p', frames: 4 * 24 });
    t.ok(Math.abs(p.duration - 4) <= 1 / 24, `duration ${p.duration} within one frame of 4 s`);
    t.equal(bytes.subarray(4, 8).toString(), 'ftyp');
    t.ok(bytes.indexOf('moov') < bytes.indexOf('mdat'), '+faststart: moov before mdat');
  },
);

t.test(
  "sizes and durations of the spec's families render exactly (vidA 720x1280 12 s, vidB 854x480 5 s, vidC 640x480 8 s, 1920x1080 5 s)",
  async (t) => {
    const cases: Array<[string, number]> = [
      ['720x1280', 12],
      ['854x480', 5],
      ['640x480', 8],
      ['1920x1080', 5],
    ];
    const jobs = await Promise.all(
      cases.map(
        async ([size, seconds]) =>
          (await (await submit({ model: 'vidB-2.5', prompt: `clip ${size}`, size, seconds })).json()) as Video,
      ),
    );
    for (const [i, [size, seconds]] of cases.entries()) {
      const job = jobs[i]!;
      t.equal(job.seconds, String(seconds), 'an integer seconds is answered as the documented string');
      t.equal((await untilDone(job.id)).at(-1)!.status, 'completed');
      const p = await probe(Buffer.from(await (await content(job.id)).arrayBuffer()));
      const [width, height] = size.split('x').map(Number);
      t.match(p, { codec: 'h264', width, height, pixFmt: 'yuv420p' }, size);
      t.ok(Math.abs(p.duration - seconds) <= 1 / 24, `${size}: ${p.duration} s for ${seconds} s`);
    }
  },
);

t.test(
  'Range requests: 206 with content-range and the right bytes; suffix and open ranges; 416 past the end',
  async (t) => {
    const v = (await (await submit({ prompt: 'ranges', size: '640x480', seconds: 2 })).json()) as Video;
    await untilDone(v.id);
    const full = Buffer.from(await (await content(v.id)).arrayBuffer());
    const size = full.length;
    const ranges: Array<[string, number, number]> = [
      ['bytes=0-99', 0, 99],
      ['bytes=100-', 100, size - 1],
      ['bytes=-50', size - 50, size - 1],
      [`bytes=1000-${size + 500}`, 1000, size - 1],
    ];
    for (const [range, start, end] of ranges) {
      const res = await content(v.id, { range });
      t.equal(res.status, 206, range);
      t.equal(res.headers.get('content-range'), `bytes ${start}-${end}/${size}`);
      t.equal(res.headers.get('accept-ranges'), 'bytes');
      const part = Buffer.from(await res.arrayBuffer());
      t.equal(Number(res.headers.get('content-length')), part.length);
      t.ok(part.equals(full.subarray(start, end + 1)), `${range}: the right bytes`);
    }
    const past = await content(v.id, { range: `bytes=${size}-` });
    t.equal(past.status, 416);
    t.equal(past.headers.get('content-range'), `bytes */${size}`);
    const several = await content(v.id, { range: 'bytes=0-1,5-6' });
    t.equal(several.status, 200, 'several ranges: the whole file');
    await several.arrayBuffer();
  },
);

t.test('#sim:video=fail -> failed with an error object; no content', async (t) => {
  const v = (await (
    await submit({ prompt: 'doomed #sim:video=fail', size: '1280x720', seconds: '8' })
  ).json()) as Video;
  t.equal(v.status, 'queued');
  const done = (await untilDone(v.id)).at(-1)!;
  t.match(done, { status: 'failed', error: { code: String, message: String }, completed_at: Number, expires_at: null });
  t.equal((await content(v.id)).status, 404);
});

t.test("#sim:render_ms=N sets one job's render time", async (t) => {
  const quick = (await (
    await submit({ prompt: 'quick #sim:render_ms=0 #sim:video=fail', size: '1280x720', seconds: '4' })
  ).json()) as Video;
  t.equal((await poll(quick.id)).status, 'failed', "ended at once, where the simulator's own render time is 400 ms");
  const long = (await (
    await submit({ prompt: 'long #sim:render_ms=60000', size: '1280x720', seconds: '4' })
  ).json()) as Video;
  await sleep(600);
  const later = await poll(long.id);
  t.ok(later.status === 'queued' && later.progress < 5, "still rendering after the simulator's own time");
});

t.test("a bad size or seconds -> 400 in OpenAI's shape naming the param", async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ size: '1281x720' }, 'size'],
    [{ size: '2560x1440' }, 'size'],
    [{ size: '300x200' }, 'size'],
    [{ size: 'large' }, 'size'],
    [{ seconds: '0' }, 'seconds'],
    [{ seconds: '31' }, 'seconds'],
    [{ seconds: 4.5 }, 'seconds'],
    [{ seconds: 'four' }, 'seconds'],
    [{ prompt: undefined }, 'prompt'],
  ];
  for (const [fields, param] of cases) {
    const res = await submit({ prompt: 'x', ...fields });
    t.equal(res.status, 400, JSON.stringify(fields));
    t.match(
      await res.json(),
      { error: { message: String, type: 'invalid_request_error', param } },
      JSON.stringify(fields),
    );
  }
  t.equal((await submit({ prompt: 'x' }, {})).status, 401);
  const unknown = await fetch(`${sim.url}/v1/videos/video_nope`, { headers: AUTH });
  t.equal(unknown.status, 404);
  t.match(await unknown.json(), { error: { type: 'invalid_request_error' } });
});

t.test(
  'multipart: input_reference + last_reference, or up to 30 input_reference parts, recorded as sent; the rules -> 400',
  async (t) => {
    const frame = await referencePng(160, 90, true);
    const last = await referencePng(160, 90, false, 3);
    const form = new FormData();
    form.append('model', 'vidB-2.5');
    form.append('prompt', 'from first to last');
    form.append('size', '854x480');
    form.append('seconds', '5');
    form.append('input_reference', new Blob([frame], { type: 'image/png' }), 'first.png');
    form.append('last_reference', new Blob([last], { type: 'image/png' }), 'last.png');
    sim.images.received.length = 0;
    const res = await submit(form);
    t.equal(res.status, 200);
    t.match(await res.json(), { status: 'queued', size: '854x480', seconds: '5' });
    t.same(
      sim.images.received[0]!.images.map((r) => [r.field, r.width, r.height, r.hasAlpha, r.bytes.length]),
      [
        ['input_reference', 160, 90, true, frame.length],
        ['last_reference', 160, 90, false, last.length],
      ],
    );
    t.match(sim.received.at(-1)!.body, {
      prompt: 'from first to last',
      files: [{ field: 'input_reference', filename: 'first.png', size: frame.length }, { field: 'last_reference' }],
    });

    const refs = (n: number, extra?: (f: FormData) => void) => {
      const f = new FormData();
      f.append('prompt', '@image1 meets @image2');
      f.append('size', '1280x720');
      f.append('seconds', '5');
      for (let i = 0; i < n; i++) f.append('input_reference', new Blob([frame], { type: 'image/png' }), `${i}.png`);
      extra?.(f);
      return f;
    };
    sim.images.received.length = 0;
    t.equal((await submit(refs(30))).status, 200, '30 references');
    t.equal(sim.images.received[0]!.images.length, 30);
    const rejected: Array<[FormData, string]> = [
      [refs(31), 'input_reference'],
      [refs(2, (f) => f.append('last_reference', new Blob([last], { type: 'image/png' }), 'l.png')), 'last_reference'],
      [refs(0, (f) => f.append('last_reference', new Blob([last], { type: 'image/png' }), 'l.png')), 'last_reference'],
      [
        refs(1, (f) => f.set('input_reference', new Blob([Buffer.from('nope')], { type: 'image/png' }), 'x.png')),
        'input_reference',
      ],
    ];
    for (const [f, param] of rejected) {
      const r = await submit(f);
      t.equal(r.status, 400, param);
      t.match(await r.json(), { error: { param } });
    }
    const json = await submit({
      prompt: 'json reference',
      size: '1280x720',
      input_reference: { image_url: `data:image/png;base64,${frame.toString('base64')}` },
    });
    t.equal(json.status, 200, 'JSON input_reference as a data URL');
    t.equal(sim.images.received.at(-1)!.images[0]!.width, 160);
  },
);

t.test('#sim:status and #sim:delay_ms on submit; #sim:hangup_after cuts the download', async (t) => {
  const failed = await submit({ prompt: 'x #sim:status=503' });
  t.equal(failed.status, 503);
  t.match(await failed.json(), { error: { type: 'server_error' } });
  const t0 = performance.now();
  t.equal((await submit({ prompt: 'x #sim:delay_ms=150', size: '640x480', seconds: 1 })).status, 200);
  t.ok(performance.now() - t0 >= 140);
  const v = (await (
    await submit({ prompt: 'cut #sim:hangup_after=5000', size: '640x480', seconds: 2 })
  ).json()) as Video;
  await untilDone(v.id);
  const res = await content(v.id);
  t.equal(res.status, 200);
  t.ok(Number(res.headers.get('content-length')) > 5000);
  t.same(await readUntilDrop(res), { bytes: 5000, dropped: true });
  const ranged = await content(v.id, { range: 'bytes=100-' });
  t.equal(ranged.status, 206);
  t.same(await readUntilDrop(ranged), { bytes: 5000, dropped: true }, 'a range is cut as well');
});

t.test('DELETE -> video.deleted; the job is gone', async (t) => {
  const v = (await (await submit({ prompt: 'short-lived', size: '640x480', seconds: 1 })).json()) as Video;
  const del = await fetch(`${sim.url}/v1/videos/${v.id}`, { method: 'DELETE', headers: AUTH });
  t.same(await del.json(), { id: v.id, object: 'video.deleted', deleted: true });
  t.equal((await fetch(`${sim.url}/v1/videos/${v.id}`, { headers: AUTH })).status, 404);
});

t.test(
  'videos.delete of a job still rendering stops it: deleted, in the request log, never completed, no content',
  async (t) => {
    const params = {
      model: 'sora-2',
      prompt: 'stopped midway #sim:render_ms=300',
      size: '720x1280',
      seconds: '4',
    } as const;
    const v = await openai.videos.create(params);
    const twin = await openai.videos.create(params);
    t.not((await openai.videos.retrieve(v.id)).status, 'completed', 'still rendering');
    t.same(await openai.videos.delete(v.id), { id: v.id, object: 'video.deleted', deleted: true });
    t.ok(
      sim.received.some(
        (r) => r.method === 'DELETE' && r.url === `/v1/videos/${v.id}` && r.headers.authorization === 'Bearer x',
      ),
      'the log has the delete',
    );
    t.equal((await untilDone(twin.id)).at(-1)!.status, 'completed', 'its twin, submitted with it, completes');
    t.equal(
      (await fetch(`${sim.url}/v1/videos/${v.id}`, { headers: AUTH })).status,
      404,
      'the deleted one is still gone, never completed',
    );
    t.equal((await content(v.id)).status, 404, 'no content');
    t.equal(
      (await fetch(`${sim.url}/v1/videos/${v.id}`, { method: 'DELETE', headers: AUTH })).status,
      404,
      'a second delete: not found',
    );
  },
);

t.test('openai SDK: videos.create (with a file), retrieve, downloadContent', async (t) => {
  const created = await openai.videos.create({
    model: 'sora-2',
    prompt: 'a kite',
    size: '720x1280',
    seconds: '4',
    input_reference: await toFile(await referencePng(72, 128), 'kite.png', { type: 'image/png' }),
  });
  t.equal(created.status, 'queued');
  let video = created;
  while (video.status !== 'completed' && video.status !== 'failed') {
    await sleep(100);
    video = await openai.videos.retrieve(created.id);
  }
  t.equal(video.status, 'completed');
  const res = await openai.videos.downloadContent(created.id);
  const p = await probe(Buffer.from(await res.arrayBuffer()));
  t.match(p, { codec: 'h264', width: 720, height: 1280 });
});
