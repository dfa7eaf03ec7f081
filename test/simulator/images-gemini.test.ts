import t from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { inspectImage, readUntilDrop, referencePng } from '../helpers/media.js';

const sim = await startSimulator();
t.teardown(() => sim.close());
const MODEL = 'gemini-3-pro-image-preview';
const KEY = { 'x-goog-api-key': 'k' };

function generate(body: unknown, headers: Record<string, string> = KEY, model = MODEL): Promise<Response> {
  return fetch(`${sim.url}/v1beta/models/${model}:generateContent`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}
const ask = (text: string, generationConfig?: unknown) => ({
  contents: [{ role: 'user', parts: [{ text }] }],
  ...(generationConfig ? { generationConfig } : {}),
});

type Part = { text?: string; inlineData?: { mimeType: string; data: string } };
type Answer = {
  candidates?: Array<{ content?: { role: string; parts: Part[] }; finishReason: string; index: number }>;
  promptFeedback?: { blockReason: string };
  usageMetadata: {
    promptTokenCount: number;
    candidatesTokenCount?: number;
    totalTokenCount: number;
    promptTokensDetails: unknown[];
    candidatesTokensDetails?: Array<{ modality: string; tokenCount: number }>;
  };
  modelVersion: string;
  responseId: string;
};

const imageOf = (a: Answer) =>
  Buffer.from(a.candidates![0]!.content!.parts.find((p) => p.inlineData)!.inlineData!.data, 'base64');

// Gemini API image generation guide, "Aspect ratios and image size" (Gemini 3 Pro Image), copied here to check the simulator's own copy.
const TABLE: Record<string, Record<string, [number, number]>> = {
  '1:1': { '1K': [1024, 1024], '2K': [2048, 2048], '4K': [4096, 4096] },
  '2:3': { '1K': [848, 1264], '2K': [1696, 2528], '4K': [3392, 5056] },
  '3:2': { '1K': [1264, 848], '2K': [2528, 1696], '4K': [5056, 3392] },
  '3:4': { '1K': [896, 1200], '2K': [1792, 2400], '4K': [3584, 4800] },
  '4:3': { '1K': [1200, 896], '2K': [2400, 1792], '4K': [4800, 3584] },
  '4:5': { '1K': [928, 1152], '2K': [1856, 2304], '4K': [3712, 4608] },
  '5:4': { '1K': [1152, 928], '2K': [2304, 1856], '4K': [4608, 3712] },
  '9:16': { '1K': [768, 1376], '2K': [1536, 2752], '4K': [3072, 5504] },
  '16:9': { '1K': [1376, 768], '2K': [2752, 1536], '4K': [5504, 3072] },
  '21:9': { '1K': [1584, 672], '2K': [3168, 1344], '4K': [6336, 2688] },
};

t.test(
  "every aspect ratio and size class -> a PNG of the table's pixel size, with structure; 1120 / 2000 output tokens",
  async (t) => {
    for (const [ratio, sizes] of Object.entries(TABLE)) {
      for (const [imageSize, [width, height]] of Object.entries(sizes)) {
        const res = await generate(
          ask(`a quiet valley ${ratio} ${imageSize}`, {
            responseModalities: ['TEXT', 'IMAGE'],
            imageConfig: { aspectRatio: ratio, imageSize },
          }),
        );
        t.equal(res.status, 200, `${ratio} ${imageSize}`);
        const a = (await res.json()) as Answer;
        const info = await inspectImage(imageOf(a));
        t.match(
          info,
          { format: 'png', width, height, hasAlpha: false, colours: true },
          `${ratio} ${imageSize}: ${width}x${height}`,
        );
        const image = a.usageMetadata.candidatesTokensDetails!.find((d) => d.modality === 'IMAGE')!;
        t.equal(image.tokenCount, imageSize === '4K' ? 2000 : 1120);
      }
    }
  },
);

t.test(
  'the answer: text then inlineData parts, role model, finishReason STOP, usageMetadata, modelVersion, responseId',
  async (t) => {
    const a = (await (await generate(ask('a paper boat'))).json()) as Answer;
    t.equal(a.candidates!.length, 1);
    const c = a.candidates![0]!;
    t.match(c, { content: { role: 'model' }, finishReason: 'STOP', index: 0 });
    t.equal(c.content!.parts.length, 2);
    t.type(c.content!.parts[0]!.text, 'string');
    t.equal(c.content!.parts[1]!.inlineData!.mimeType, 'image/png');
    t.match(await inspectImage(imageOf(a)), { width: 1024, height: 1024 }, 'defaults: 1:1 at 1K');
    t.equal(a.modelVersion, MODEL);
    t.match(a.responseId, /^\w+$/);
    const u = a.usageMetadata;
    t.equal(u.totalTokenCount, u.promptTokenCount + u.candidatesTokenCount!);
    t.equal(
      u.candidatesTokenCount,
      u.candidatesTokensDetails!.reduce((s, d) => s + d.tokenCount, 0),
    );
    t.same(u.promptTokensDetails, [{ modality: 'TEXT', tokenCount: u.promptTokenCount }]);
    const imageOnly = (await (await generate(ask('a paper boat', { responseModalities: ['IMAGE'] }))).json()) as Answer;
    t.same(
      imageOnly.candidates![0]!.content!.parts.map((p) => Object.keys(p)),
      [['inlineData']],
      'responseModalities IMAGE: the image alone',
    );
    const textOnly = (await (await generate(ask('a paper boat', { responseModalities: ['TEXT'] }))).json()) as Answer;
    t.same(
      textOnly.candidates![0]!.content!.parts.map((p) => Object.keys(p)),
      [['text']],
      'responseModalities TEXT: no image',
    );
    const snake = (await (
      await generate({
        contents: [{ parts: [{ text: 'a paper boat' }] }],
        generation_config: { response_modalities: ['image'], image_config: { aspect_ratio: '16:9', image_size: '2K' } },
      })
    ).json()) as Answer;
    t.match(
      await inspectImage(imageOf(snake)),
      { width: 2752, height: 1536 },
      'snake_case request fields are read too',
    );
    const key = await fetch(`${sim.url}/v1beta/models/${MODEL}:generateContent?key=k`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(ask('x')),
    });
    t.equal(key.status, 200, 'the key may come as ?key=');
  },
);

t.test(
  '1 and 14 reference images as inlineData/mimeType or inline_data/mime_type parts; the recorded ones are what was sent',
  async (t) => {
    for (const spelling of ['camel', 'snake'] as const) {
      for (const count of [1, 14]) {
        const sent = await Promise.all(
          Array.from({ length: count }, async (_, i) => ({
            width: 40 + 8 * i,
            height: 30 + 4 * i,
            alpha: i % 3 === 0,
            bytes: await referencePng(40 + 8 * i, 30 + 4 * i, i % 3 === 0, i),
          })),
        );
        const parts: unknown[] = sent.map((s) =>
          spelling === 'camel'
            ? { inlineData: { mimeType: 'image/png', data: s.bytes.toString('base64') } }
            : { inline_data: { mime_type: 'image/png', data: s.bytes.toString('base64') } },
        );
        parts.push({ text: `combine ${count}` });
        sim.images.received.length = 0;
        const res = await generate({
          contents: [{ role: 'user', parts }],
          generationConfig: { imageConfig: { aspectRatio: '4:5' } },
        });
        t.equal(res.status, 200, `${count} ${spelling}`);
        const a = (await res.json()) as Answer;
        t.match(await inspectImage(imageOf(a)), { width: 928, height: 1152 });
        t.same(
          a.usageMetadata.promptTokensDetails.at(-1),
          { modality: 'IMAGE', tokenCount: 560 * count },
          '560 tokens an input image',
        );
        const log = sim.images.received;
        t.equal(log.length, 1);
        t.equal(log[0]!.url, `/v1beta/models/${MODEL}:generateContent`);
        t.same(
          log[0]!.images.map((r) => ({
            field: r.field,
            mimeType: r.mimeType,
            width: r.width,
            height: r.height,
            hasAlpha: r.hasAlpha,
          })),
          sent.map((s) => ({
            field: spelling === 'camel' ? 'inlineData' : 'inline_data',
            mimeType: 'image/png',
            width: s.width,
            height: s.height,
            hasAlpha: s.alpha,
          })),
        );
        t.ok(
          log[0]!.images.every((r, i) => r.bytes.equals(sent[i]!.bytes)),
          'the bytes as sent',
        );
      }
    }
    const wide = await referencePng(320, 136);
    const a = (await (
      await generate({
        contents: [
          { parts: [{ inlineData: { mimeType: 'image/png', data: wide.toString('base64') } }, { text: 'edit' }] },
        ],
      })
    ).json()) as Answer;
    t.match(
      await inspectImage(imageOf(a)),
      { width: 1584, height: 672 },
      'no aspectRatio: the nearest to the reference image (21:9)',
    );
    const fifteen = Array.from({ length: 15 }, () => ({
      inlineData: { mimeType: 'image/png', data: wide.toString('base64') },
    }));
    t.equal((await generate({ contents: [{ parts: [...fifteen, { text: 'x' }] }] })).status, 400, '15 images -> 400');
    const broken = await generate({
      contents: [{ parts: [{ inlineData: { mimeType: 'image/png', data: 'bm90IGFuIGltYWdl' } }, { text: 'x' }] }],
    });
    t.equal(broken.status, 400);
    t.match(await broken.json(), { error: { code: 400, status: 'INVALID_ARGUMENT', message: String } });
  },
);

t.test('bad imageConfig, bad body, no key -> errors in the Gemini shape', async (t) => {
  const cases: Array<[unknown, string]> = [
    [ask('x', { imageConfig: { aspectRatio: '2:1' } }), 'aspect ratio'],
    [ask('x', { imageConfig: { imageSize: '1k' } }), 'size class with a lower-case k'],
    [ask('x', { imageConfig: { imageSize: '8K' } }), 'size class'],
    [ask('x', { responseModalities: ['AUDIO'] }), 'modality'],
    [{ contents: [] }, 'no contents'],
  ];
  for (const [body, what] of cases) {
    const res = await generate(body);
    t.equal(res.status, 400, what);
    t.match(await res.json(), { error: { code: 400, message: String, status: 'INVALID_ARGUMENT' } }, what);
  }
  const noKey = await generate(ask('x'), {});
  t.equal(noKey.status, 403);
  t.match(await noKey.json(), { error: { code: 403, status: 'PERMISSION_DENIED' } });
  const other = await fetch(`${sim.url}/v1beta/models/${MODEL}:streamGenerateContentX`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...KEY },
    body: '{}',
  });
  t.equal(other.status, 404, 'a method the simulator does not serve');
  t.match(await other.json(), { error: { status: 'NOT_FOUND' } });
});

t.test(
  '#sim:image=refuse -> promptFeedback.blockReason, no candidates; refuse_output -> a candidate with IMAGE_SAFETY and no image',
  async (t) => {
    const blocked = (await (await generate(ask('something #sim:image=refuse'))).json()) as Answer;
    t.notOk('candidates' in blocked, 'no candidates');
    t.match(blocked, {
      promptFeedback: { blockReason: 'SAFETY' },
      usageMetadata: { promptTokenCount: Number },
      modelVersion: MODEL,
    });
    const out = (await (await generate(ask('something #sim:image=refuse_output'))).json()) as Answer;
    t.same(out.candidates, [{ finishReason: 'IMAGE_SAFETY', index: 0 }], 'a candidate without content');
    t.notOk('promptFeedback' in out);
  },
);

t.test(
  '#sim:status, #sim:delay_ms, #sim:hangup_after -> the Gemini error shape, a late answer, a cut body',
  async (t) => {
    const statuses: Array<[number, string]> = [
      [429, 'RESOURCE_EXHAUSTED'],
      [500, 'INTERNAL'],
      [503, 'UNAVAILABLE'],
      [504, 'DEADLINE_EXCEEDED'],
    ];
    for (const [status, name] of statuses) {
      const res = await generate(ask(`x #sim:status=${status}`));
      t.equal(res.status, status);
      t.match(await res.json(), { error: { code: status, status: name, message: String } });
    }
    const t0 = performance.now();
    t.equal((await generate(ask('x #sim:delay_ms=150', { responseModalities: ['TEXT'] }))).status, 200);
    t.ok(performance.now() - t0 >= 140, 'delay_ms holds the answer');
    const cut = await generate(ask('x #sim:hangup_after=2000'));
    t.ok(Number(cut.headers.get('content-length')) > 2000);
    t.same(await readUntilDrop(cut), { bytes: 2000, dropped: true });
  },
);
