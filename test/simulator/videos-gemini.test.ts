import t from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { probe, readUntilDrop, referencePng, sleep } from '../helpers/media.js';

const sim = await startSimulator({ videoRenderMs: 500 });
t.teardown(() => sim.close());
const MODEL = 'veo-3.1-generate-preview';
const KEY = { 'x-goog-api-key': 'k' };

type Operation = {
  name: string;
  done?: boolean;
  response?: { '@type': string; generateVideoResponse: { generatedSamples: Array<{ video: { uri: string } }> } };
  error?: { code: number; message: string };
};

function submit(body: unknown, headers: Record<string, string> = KEY): Promise<Response> {
  return fetch(`${sim.url}/v1beta/models/${MODEL}:predictLongRunning`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** Polls GET /v1beta/{name} every 50 ms until done; returns every answer seen. */
async function untilDone(name: string): Promise<Operation[]> {
  const seen: Operation[] = [];
  for (let i = 0; i < 400; i++) {
    const res = await fetch(`${sim.url}/v1beta/${name}`, { headers: KEY });
    const op = (await res.json()) as Operation;
    seen.push(op);
    if (op.done) return seen;
    await sleep(50);
  }
  throw new Error(`${name} never finished`);
}

const image = (png: Buffer) => ({ bytesBase64Encoded: png.toString('base64'), mimeType: 'image/png' });

t.test(
  'predictLongRunning -> {name}; the operation is not done, then done with generatedSamples[0].video.uri; the uri (with the key) is the MP4',
  async (t) => {
    const first = await referencePng(128, 96, true);
    const last = await referencePng(128, 96, false, 2);
    const ref = await referencePng(64, 64, false, 5);
    sim.images.received.length = 0;
    const res = await submit({
      instances: [
        {
          prompt: 'a lantern drifting',
          image: image(first),
          lastFrame: image(last),
          referenceImages: [{ image: image(ref), referenceType: 'asset' }],
        },
      ],
      parameters: { aspectRatio: '4:3', resolution: '480p', durationSeconds: '5', personGeneration: 'allow_adult' },
    });
    t.equal(res.status, 200);
    const { name, ...rest } = (await res.json()) as Operation;
    t.match(name, new RegExp(`^models/${MODEL}/operations/[a-z0-9]+$`));
    t.same(rest, {}, 'the submit answers the name alone');
    t.same(
      sim.images.received[0]!.images.map((r) => [r.field, r.mimeType, r.width, r.height, r.hasAlpha]),
      [
        ['image', 'image/png', 128, 96, true],
        ['lastFrame', 'image/png', 128, 96, false],
        ['referenceImages', 'image/png', 64, 64, false],
      ],
    );

    const seen = await untilDone(name!);
    t.ok(seen.length >= 2, 'not done at first');
    for (const op of seen.slice(0, -1)) t.same(op, { name, done: false });
    const done = seen.at(-1)!;
    t.equal(done.name, name);
    t.equal(
      done.response!['@type'],
      'type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse',
    );
    const samples = done.response!.generateVideoResponse.generatedSamples;
    t.equal(samples.length, 1);
    const uri = samples[0]!.video.uri;
    t.match(uri, new RegExp(`^${sim.url}/v1beta/files/[a-z0-9]+:download\\?alt=media$`));

    const noKey = await fetch(uri);
    t.equal(noKey.status, 403, 'the download takes the API key');
    t.match(await noKey.json(), { error: { status: 'PERMISSION_DENIED' } });
    const mp4 = await fetch(uri, { headers: KEY });
    t.equal(mp4.status, 200);
    t.equal(mp4.headers.get('content-type'), 'video/mp4');
    const bytes = Buffer.from(await mp4.arrayBuffer());
    const p = await probe(bytes);
    t.match(p, { codec: 'h264', width: 640, height: 480, pixFmt: 'yuv420p', frames: 5 * 24 });
    t.ok(Math.abs(p.duration - 5) <= 1 / 24, `duration ${p.duration}`);

    const part = await fetch(uri, { headers: { ...KEY, range: 'bytes=10-2009' } });
    t.equal(part.status, 206);
    t.equal(part.headers.get('content-range'), `bytes 10-2009/${bytes.length}`);
    t.ok(Buffer.from(await part.arrayBuffer()).equals(bytes.subarray(10, 2010)));
    const byQuery = await fetch(`${uri}&key=k`, { headers: { range: 'bytes=-10' } });
    t.equal(byQuery.status, 206, '?key= works for downloads too');
    t.ok(Buffer.from(await byQuery.arrayBuffer()).equals(bytes.subarray(-10)));
  },
);

t.test('aspectRatio x resolution -> frame size; durationSeconds as a string or a number', async (t) => {
  const cases: Array<[Record<string, unknown>, number, number, number]> = [
    [{}, 1280, 720, 8],
    [{ aspectRatio: '16:9', resolution: '1080p', durationSeconds: 4 }, 1920, 1080, 4],
    [{ aspectRatio: '9:16', resolution: '720p', durationSeconds: '6' }, 720, 1280, 6],
    [{ aspectRatio: '16:9', resolution: '480p', durationSeconds: 30 }, 854, 480, 30],
  ];
  const names = await Promise.all(
    cases.map(
      async ([parameters]) =>
        ((await (await submit({ instances: [{ prompt: 'sizes' }], parameters })).json()) as Operation).name,
    ),
  );
  for (const [i, [, width, height, seconds]] of cases.entries()) {
    const uri = (await untilDone(names[i]!)).at(-1)!.response!.generateVideoResponse.generatedSamples[0]!.video.uri;
    const p = await probe(Buffer.from(await (await fetch(uri, { headers: KEY })).arrayBuffer()));
    t.match(p, { codec: 'h264', width, height }, `${width}x${height}`);
    t.ok(Math.abs(p.duration - seconds) <= 1 / 24, `${seconds} s -> ${p.duration}`);
  }
});

t.test('#sim:video=fail -> done with error {code, message} (google.rpc.Status); no file', async (t) => {
  const { name } = (await (await submit({ instances: [{ prompt: 'doomed #sim:video=fail' }] })).json()) as Operation;
  const done = (await untilDone(name)).at(-1)!;
  t.match(done, { name, done: true, error: { code: 13, message: String } });
  t.notOk('response' in done);
});

t.test(
  'bad parameters, instances and images -> 400 INVALID_ARGUMENT; unknown operation -> 404; no key -> 403',
  async (t) => {
    const png = image(await referencePng(32, 32));
    const cases: Array<[unknown, string]> = [
      [{ instances: [] }, 'no instance'],
      [{ instances: [{}] }, 'no prompt'],
      [{ instances: [{ prompt: 'x' }], parameters: { aspectRatio: '1:1' } }, 'aspectRatio'],
      [{ instances: [{ prompt: 'x' }], parameters: { resolution: '4k' } }, 'resolution beyond 1920'],
      [{ instances: [{ prompt: 'x' }], parameters: { durationSeconds: 31 } }, 'durationSeconds'],
      [{ instances: [{ prompt: 'x' }], parameters: { durationSeconds: '7.5' } }, 'fractional durationSeconds'],
      [{ instances: [{ prompt: 'x' }], parameters: { numberOfVideos: 2 } }, 'numberOfVideos'],
      [{ instances: [{ prompt: 'x', lastFrame: png }] }, 'lastFrame without image'],
      [
        { instances: [{ prompt: 'x', referenceImages: Array(4).fill({ image: png, referenceType: 'asset' }) }] },
        'four referenceImages',
      ],
      [{ instances: [{ prompt: 'x', image: { gcsUri: 'gs://b/o.png', mimeType: 'image/png' } }] }, 'image by URI'],
      [
        { instances: [{ prompt: 'x', image: { bytesBase64Encoded: 'bm9wZQ==', mimeType: 'image/png' } }] },
        'not an image',
      ],
    ];
    for (const [body, what] of cases) {
      const res = await submit(body);
      t.equal(res.status, 400, what);
      t.match(await res.json(), { error: { code: 400, status: 'INVALID_ARGUMENT', message: String } }, what);
    }
    const missing = await fetch(`${sim.url}/v1beta/models/${MODEL}/operations/nope`, { headers: KEY });
    t.equal(missing.status, 404);
    t.match(await missing.json(), { error: { code: 404, status: 'NOT_FOUND' } });
    t.equal((await fetch(`${sim.url}/v1beta/files/nope:download?alt=media`, { headers: KEY })).status, 404);
    t.equal((await submit({ instances: [{ prompt: 'x' }] }, {})).status, 403);
    const { name } = (await (await submit({ instances: [{ prompt: 'x' }] })).json()) as Operation;
    const other = name.replace(MODEL, 'veo-other');
    t.equal(
      (await fetch(`${sim.url}/v1beta/${other}`, { headers: KEY })).status,
      404,
      'an operation is found under its own model only',
    );
  },
);

t.test(
  'no cancel, as the Gemini API has none for model operations (get and list only): {name}:cancel is a 404 and the render goes on',
  async (t) => {
    const { name } = (await (await submit({ instances: [{ prompt: 'uncancellable' }] })).json()) as Operation;
    const cancel = await fetch(`${sim.url}/v1beta/${name}:cancel`, {
      method: 'POST',
      headers: { ...KEY, 'content-type': 'application/json' },
      body: '{}',
    });
    t.equal(cancel.status, 404);
    t.match(await cancel.json(), { error: { code: 404, status: 'NOT_FOUND' } });
    t.match((await untilDone(name)).at(-1), { name, done: true, response: Object }, 'the operation completes');
  },
);

t.test('#sim:status and #sim:delay_ms on submit; #sim:hangup_after cuts the download', async (t) => {
  const res = await submit({ instances: [{ prompt: 'x #sim:status=429' }] });
  t.equal(res.status, 429);
  t.match(await res.json(), { error: { code: 429, status: 'RESOURCE_EXHAUSTED' } });
  const t0 = performance.now();
  t.equal(
    (
      await submit({
        instances: [{ prompt: 'x #sim:delay_ms=150' }],
        parameters: { durationSeconds: 1, resolution: '480p' },
      })
    ).status,
    200,
  );
  t.ok(performance.now() - t0 >= 140);
  const { name } = (await (
    await submit({
      instances: [{ prompt: 'cut #sim:hangup_after=3000' }],
      parameters: { durationSeconds: 2, resolution: '480p' },
    })
  ).json()) as Operation;
  const uri = (await untilDone(name)).at(-1)!.response!.generateVideoResponse.generatedSamples[0]!.video.uri;
  const cut = await fetch(uri, { headers: KEY });
  t.same(await readUntilDrop(cut), { bytes: 3000, dropped: true });
});
