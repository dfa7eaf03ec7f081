// POST /v1/images/generations through the official openai SDK on the embedded default: img-pro on the simulator's
// Gemini protocol, img-2 on its OpenAI Images protocol (README "Images").
import t from 'tap';
import OpenAI from 'openai';
import sharp from 'sharp';
import { validator } from '../helpers/conformance.js';
import { startHarness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { ASPECT_RATIOS } from '../../policies/image-request.js';

const h = await startHarness({
  edit: (c) => {
    // Timeouts come sooner than the default 10 minutes, and well after a 4K render on a loaded machine (seconds).
    for (const p of Object.values(c.providers as Record<string, { timeout_ms?: number }>)) p.timeout_ms = 8_000;
  },
});
t.teardown(() => h.close());

const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const imagesResponse = validator('ImagesResponse');
const last = () => h.sim.received[h.sim.received.length - 1]!;

// Gemini API image generation guide, "Aspect ratios and image size" (Gemini 3 Pro Image).
const GEMINI: Record<string, [string, string, string]> = {
  '1:1': ['1024x1024', '2048x2048', '4096x4096'],
  '2:3': ['848x1264', '1696x2528', '3392x5056'],
  '3:2': ['1264x848', '2528x1696', '5056x3392'],
  '3:4': ['896x1200', '1792x2400', '3584x4800'],
  '4:3': ['1200x896', '2400x1792', '4800x3584'],
  '4:5': ['928x1152', '1856x2304', '3712x4608'],
  '5:4': ['1152x928', '2304x1856', '4608x3712'],
  '9:16': ['768x1376', '1536x2752', '3072x5504'],
  '16:9': ['1376x768', '2752x1536', '5504x3072'],
  '21:9': ['1584x672', '3168x1344', '6336x2688'],
};
// gpt-image-2 takes the ratio itself at the class's area, within its bounds (README "Images").
const GPT_IMAGE_2: Record<string, [string, string, string]> = {
  '1:1': ['1024x1024', '2048x2048', '2880x2880'],
  '2:3': ['832x1248', '1680x2512', '2336x3520'],
  '3:2': ['1248x832', '2512x1680', '3520x2336'],
  '3:4': ['880x1184', '1776x2368', '2480x3312'],
  '4:3': ['1184x880', '2368x1776', '3312x2480'],
  '4:5': ['912x1152', '1824x2288', '2560x3216'],
  '5:4': ['1152x912', '2288x1824', '3216x2560'],
  '9:16': ['768x1360', '1536x2736', '2160x3840'],
  '16:9': ['1360x768', '2736x1536', '3840x2160'],
  '21:9': ['1568x672', '3136x1344', '3840x1632'],
};
const SIZES = ['1K', '2K', '4K'] as const;

type Generated = {
  created: number;
  data: { b64_json?: string; url?: string }[];
  usage?: Record<string, unknown>;
  output_format?: string;
};

function generate(body: Record<string, unknown>) {
  return openai.images.generate(body as never).withResponse() as unknown as Promise<{
    data: Generated;
    response: Response;
  }>;
}

/** An image's pixel size, read from its header (sharp reads no more of it). */
async function dims(bytes: Buffer): Promise<string> {
  const m = await sharp(bytes).metadata();
  t.equal(m.format, 'png');
  return `${m.width}x${m.height}`;
}

/**
 * OpenAI's published ImagesResponse lists three sizes in `size`; gpt-image-2 renders any size and its answer names
 * it: the rest of the answer is held to the schema, and the size to the one asked for.
 */
function conformsBut(data: Generated & { size?: string }): unknown[] {
  const { size: _size, ...rest } = data;
  return imagesResponse(rest);
}

t.test(
  "img-pro: every size and aspect ratio is the PNG of Gemini's table, as b64_json in an ImagesResponse",
  async (t) => {
    for (const ratio of ASPECT_RATIOS) {
      for (const [i, size] of SIZES.entries()) {
        const { data, response } = await generate({
          model: 'img-pro',
          prompt: `a harbour at dawn ${ratio} ${size}`,
          size,
          aspect_ratio: ratio,
        });
        t.same(imagesResponse(data), [], `${ratio} ${size}: conforms`);
        t.equal(await dims(Buffer.from(data.data[0]!.b64_json!, 'base64')), GEMINI[ratio]![i], `${ratio} ${size}`);
        t.match(response.headers.get('x-request-id'), /^req_/);
        const sent = last().body as {
          generationConfig: { responseModalities: string[]; imageConfig: Record<string, string> };
        };
        t.same(
          sent.generationConfig.imageConfig,
          size === '1K' ? { aspectRatio: ratio } : { aspectRatio: ratio, imageSize: size },
          'imageConfig as asked',
        );
      }
    }
  },
);

t.test(
  'img-2 (gpt-image-2): every size and aspect ratio of the spec is rendered at its ratio and class, and priced so',
  async (t) => {
    for (const ratio of ASPECT_RATIOS) {
      for (const [i, size] of SIZES.entries()) {
        const { data, response } = await generate({
          model: 'img-2',
          prompt: `a harbour at dawn ${ratio} ${size}`,
          size,
          aspect_ratio: ratio,
        });
        t.same(conformsBut(data), [], `${ratio} ${size}: conforms`);
        t.equal(
          await dims(Buffer.from(data.data[0]!.b64_json!, 'base64')),
          GPT_IMAGE_2[ratio]![i],
          `${ratio} ${size}: the pixels asked for`,
        );
        t.equal((last().body as { size: string }).size, GPT_IMAGE_2[ratio]![i]);
        t.match(response.headers.get('x-request-id'), /^req_/);
      }
    }
  },
);

t.test(
  "a size class or ratio the model's upstream cannot render is a 400 naming the field, never a smaller image at a larger price",
  async (t) => {
    const g = await startHarness({
      edit: (c) => {
        // An operator's model on gpt-image-1, which renders three sizes: 1K at 1:1, 3:2 and 2:3 (its documented sizes).
        c.models.push({ id: 'img-1', family: 'img', provider: 'sim-openai', upstream_model: 'gpt-image-1' });
        // And one whose config narrows what Gemini renders.
        c.models.push({
          id: 'img-narrow',
          family: 'img',
          provider: 'sim-gemini',
          upstream_model: 'gemini-3-pro-image-preview',
          sizes: ['1K', '2K'],
          aspect_ratios: ['1:1', '16:9'],
        });
        c.prices = {
          image: {
            'img-1': { '1K': '0.04', '2K': '0.07', '4K': '0.12' },
            'img-narrow': { '1K': '0.1', '2K': '0.1', '4K': '0.2' },
          },
        };
      },
    });
    t.teardown(() => g.close());
    const o = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
    const before = g.sim.received.length;
    const refused: [Record<string, unknown>, string][] = [
      [{ model: 'img-1', size: '2K' }, 'size'],
      [{ model: 'img-1', size: '4K', aspect_ratio: '16:9' }, 'size'],
      [{ model: 'img-1', aspect_ratio: '16:9' }, 'aspect_ratio'],
      [{ model: 'img-1', aspect_ratio: '4:3' }, 'aspect_ratio'],
      [{ model: 'img-narrow', size: '4K' }, 'size'],
      [{ model: 'img-narrow', aspect_ratio: '9:16' }, 'aspect_ratio'],
    ];
    for (const [body, param] of refused) {
      const e = (await o.images
        .generate({ prompt: 'a dune', ...body } as never)
        .catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
      t.ok(e instanceof OpenAI.BadRequestError, JSON.stringify(body));
      t.match(
        e.error,
        { code: 'invalid_request', param, message: new RegExp(`^${param}: ${String(body.model)} renders `) },
        JSON.stringify(body),
      );
    }
    t.equal(g.sim.received.length, before, 'the provider was never asked');
    for (const aspect_ratio of ['1:1', '3:2', '2:3']) {
      const r = (await o.images.generate({
        model: 'img-1',
        prompt: 'a dune',
        aspect_ratio,
      } as never)) as unknown as Generated;
      t.ok(r.data[0]!.b64_json, `img-1 renders 1K at ${aspect_ratio}`);
    }
  },
);

t.test("defaults are 1K, 1:1, b64_json; usage passed through (Gemini's as ImageGenUsage)", async (t) => {
  for (const model of ['img-pro', 'img-2']) {
    const { data, response } = await generate({ model, prompt: 'a lighthouse' });
    t.same(conformsBut(data), []);
    t.equal(await dims(Buffer.from(data.data[0]!.b64_json!, 'base64')), '1024x1024', model);
    t.equal(data.output_format, 'png');
    t.type(data.created, 'number');
    t.match(
      data.usage,
      {
        input_tokens: Number,
        output_tokens: Number,
        total_tokens: Number,
        input_tokens_details: { text_tokens: Number, image_tokens: Number },
      },
      `${model}: usage`,
    );
    t.match(response.headers.get('content-type'), /application\/json/);
  }
});

t.test(
  "the upstream requests: the operator's key, the provider's model, the gateway's own settings, price-neutral fields passed on",
  async (t) => {
    const { response: r2 } = await generate({
      model: 'img-2',
      prompt: 'a kite',
      size: '2K',
      aspect_ratio: '16:9',
      quality: 'medium',
      user: 'u-7',
      moderation: 'low',
      output_format: 'png',
      generationConfig: { seed: 1 },
    });
    const o = last();
    t.equal(o.url, '/v1/images/generations');
    t.equal(o.headers.authorization, 'Bearer sim-key');
    t.same(
      o.body,
      {
        user: 'u-7',
        output_format: 'png',
        model: 'gpt-image-2',
        prompt: 'a kite',
        size: '2736x1536',
        quality: 'medium',
      },
      "quality pinned by the gateway; the caller's moderation and Gemini's fields not sent",
    );
    t.equal(r2.headers.get('x-gw-dropped-fields'), 'moderation,generationConfig');
    const { response: rg } = await generate({
      model: 'img-pro',
      prompt: 'a kite',
      aspect_ratio: '9:16',
      size: '4K',
      quality: 'high',
      generationConfig: { temperature: 0.4, candidateCount: 1 },
      safetySettings: [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_NONE' }],
    });
    const g = last();
    t.equal(g.url, '/v1beta/models/gemini-3-pro-image-preview:generateContent');
    t.equal(g.headers['x-goog-api-key'], 'sim-key');
    t.notOk(g.headers.authorization, 'no bearer on Gemini');
    t.same(
      g.body,
      {
        contents: [{ role: 'user', parts: [{ text: 'a kite' }] }],
        generationConfig: {
          temperature: 0.4,
          candidateCount: 1,
          responseModalities: ['IMAGE'],
          maxOutputTokens: 8192,
          imageConfig: { aspectRatio: '9:16', imageSize: '4K' },
        },
      },
      "the image alone, its output tokens capped; sampling passed on; the caller's safety settings and OpenAI's fields not sent",
    );
    t.equal(rg.headers.get('x-gw-dropped-fields'), 'quality,safetySettings');
    t.notOk(
      JSON.stringify(o.headers).includes(h.key) || JSON.stringify(g.headers).includes(h.key),
      "the caller's key never goes upstream",
    );
  },
);

t.test(
  'image fields are an allow-list: what the price does not cover is refused before any hold, naming it',
  async (t) => {
    const before = h.sim.received.length;
    const refused: [Record<string, unknown>, string][] = [
      [{ model: 'img-2', quality: 'high' }, 'quality'],
      [{ model: 'img-2', quality: 'low' }, 'quality'],
      [{ model: 'img-2', input_fidelity: 'high' }, 'input_fidelity'],
      [{ model: 'img-2', partial_images: 2 }, 'partial_images'],
      [{ model: 'img-2', tools: [] }, 'tools'],
      [{ model: 'img-pro', generationConfig: { maxOutputTokens: 32_768 } }, 'generationConfig.maxOutputTokens'],
      [
        { model: 'img-pro', generationConfig: { thinkingConfig: { thinkingBudget: 24_576 } } },
        'generationConfig.thinkingConfig',
      ],
      [
        { model: 'img-pro', generationConfig: { responseModalities: ['TEXT', 'IMAGE'] } },
        'generationConfig.responseModalities',
      ],
      [{ model: 'img-pro', generationConfig: { candidateCount: 4 } }, 'generationConfig.candidateCount'],
      [{ model: 'img-pro', generationConfig: { imageConfig: { imageSize: '4K' } } }, 'generationConfig.imageConfig'],
      [{ model: 'img-pro', generationConfig: 'x' }, 'generationConfig'],
      [{ model: 'img-pro', tools: [{ google_search: {} }] }, 'tools'],
      [{ model: 'img-pro', toolConfig: {} }, 'toolConfig'],
      [{ model: 'img-pro', cachedContent: 'cachedContents/x' }, 'cachedContent'],
      [{ model: 'img-pro', systemInstruction: { parts: [{ text: 'x'.repeat(1000) }] } }, 'systemInstruction'],
    ];
    for (const [body, param] of refused) {
      const e = (await generate({ prompt: 'a kite', ...body }).catch((x: unknown) => x)) as InstanceType<
        typeof OpenAI.APIError
      >;
      t.ok(e instanceof OpenAI.BadRequestError, JSON.stringify(body));
      t.match(e.error, { code: 'invalid_request', param, type: 'invalid_request_error' }, JSON.stringify(body));
    }
    t.equal(h.sim.received.length, before, 'the provider was never asked');
    for (const quality of ['medium', 'auto']) {
      await generate({ model: 'img-2', prompt: 'a kite', quality });
      t.equal((last().body as { quality: string }).quality, 'medium', `quality ${quality}: the gateway's`);
    }
  },
);

t.test("an operator who allows callers' safety settings gets them sent; its pinned quality is what goes", async (t) => {
  const g = await startHarness({
    edit: (c) => {
      for (const m of c.models as { id: string; caller_safety?: boolean; quality?: string }[]) {
        if (m.id.startsWith('img')) m.caller_safety = true;
        if (m.id === 'img-2') m.quality = 'high';
      }
    },
  });
  t.teardown(() => g.close());
  const o = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
  await o.images.generate({ model: 'img-2', prompt: 'a kite', moderation: 'low', quality: 'high' } as never);
  t.match(g.sim.received.at(-1)!.body, { moderation: 'low', quality: 'high' });
  const safety = [{ category: 'HARM_CATEGORY_HARASSMENT', threshold: 'BLOCK_ONLY_HIGH' }];
  await o.images.generate({ model: 'img-pro', prompt: 'a kite', safetySettings: safety } as never);
  t.same((g.sim.received.at(-1)!.body as { safetySettings: unknown }).safetySettings, safety);
});

t.test(
  'response_format url: a gateway URL that serves the PNG with no key, on any instance, and expires',
  async (t) => {
    for (const model of ['img-pro', 'img-2']) {
      const { data } = await generate({ model, prompt: 'a bridge', response_format: 'url', aspect_ratio: '3:2' });
      t.same(conformsBut(data), [], `${model}: conforms`);
      t.same(Object.keys(data.data[0]!), ['url']);
      const url = new URL(data.data[0]!.url!);
      t.equal(url.origin, h.url, 'served by the gateway');
      t.match(url.pathname, /^\/v1\/images\/content\/[A-Za-z0-9_-]{32}$/);
      t.notOk(
        data.data[0]!.url!.includes('sim-key') || data.data[0]!.url!.includes(new URL(h.sim.url).port),
        'nothing of the upstream in it',
      );
      const res = await fetch(url);
      t.equal(res.status, 200);
      t.equal(res.headers.get('content-type'), 'image/png');
      t.match(res.headers.get('cache-control'), /^private, max-age=\d+$/);
      t.equal(await dims(Buffer.from(await res.arrayBuffer())), model === 'img-pro' ? '1264x848' : '1248x832');
    }
    const missing = await fetch(`${h.url}/v1/images/content/${'A'.repeat(32)}`);
    t.equal(missing.status, 404);
    t.equal(((await missing.json()) as { error: { code: string } }).error.code, 'not_found');

    // A second instance on the same Redis serves the first one's URL; a short TTL expires it.
    const other = await startHarness({
      prefix: h.prefix,
      edit: (c) => {
        c.images = { url_ttl_ms: 1_500 };
      },
    });
    t.teardown(() => other.close());
    const o = new OpenAI({ baseURL: `${other.url}/v1`, apiKey: h.key, maxRetries: 0 });
    const r = (await o.images.generate({
      model: 'img-pro',
      prompt: 'a tower',
      response_format: 'url',
    } as never)) as unknown as Generated;
    const id = new URL(r.data[0]!.url!).pathname.split('/').pop();
    const elsewhere = await fetch(`${h.url}/v1/images/content/${id}`);
    t.equal(elsewhere.status, 200, 'another instance serves it');
    const gone = await until(
      'gone after its TTL',
      async () => {
        const res = await fetch(`${h.url}/v1/images/content/${id}`);
        await res.arrayBuffer();
        return res.status === 404;
      },
      6_000,
      100,
    ); // url_ttl_ms 1500, and a loaded machine's slack
    t.ok(gone, 'gone after its TTL');
  },
);

t.test('public_url names the origin of image URLs', async (t) => {
  const g = await startHarness({
    edit: (c) => {
      c.images = { public_url: 'https://images.example.com/' };
    },
  });
  t.teardown(() => g.close());
  const o = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
  const r = (await o.images.generate({
    model: 'img-2',
    prompt: 'x',
    response_format: 'url',
  } as never)) as unknown as Generated;
  t.match(r.data[0]!.url, /^https:\/\/images\.example\.com\/v1\/images\/content\/[A-Za-z0-9_-]{32}$/);
});

t.test(
  "outside the embedded default a caller's Host never names image URLs: the dashboard's origins, or no url answers",
  async (t) => {
    const hostile = { defaultHeaders: { 'x-forwarded-host': 'evil.example' } };
    const bare = await startHarness({ embedded: false });
    t.teardown(() => bare.close());
    const before = bare.sim.received.length;
    const res = await fetch(`${bare.url}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${bare.key}`, 'content-type': 'application/json', host: 'evil.example' },
      body: JSON.stringify({ model: 'img-2', prompt: 'x', response_format: 'url' }),
    });
    t.equal(res.status, 400);
    t.match(await res.json(), {
      error: { code: 'invalid_request', param: 'response_format', message: /no public origin/ },
    });
    t.equal(bare.sim.received.length, before, 'refused before the provider was asked');
    const dash = await startHarness({
      embedded: false,
      edit: (c) => {
        c.dashboard = { origins: ['https://gw.example.com', 'https://alt.example.com'] };
      },
    });
    t.teardown(() => dash.close());
    const o = new OpenAI({ baseURL: `${dash.url}/v1`, apiKey: dash.key, maxRetries: 0, ...hostile });
    const r = (await o.images.generate({
      model: 'img-2',
      prompt: 'x',
      response_format: 'url',
    } as never)) as unknown as Generated;
    t.match(
      r.data[0]!.url,
      /^https:\/\/gw\.example\.com\/v1\/images\/content\/[A-Za-z0-9_-]{32}$/,
      "the dashboard's first origin, not the caller's host",
    );
  },
);

t.test("validation: a 400 in OpenAI's shape naming the field, before the upstream is called", async (t) => {
  const cases: [Record<string, unknown>, string, string][] = [
    [{ model: 'img-x', prompt: 'p' }, 'unknown_model', 'model'],
    [{ model: 'gamma-k3', prompt: 'p' }, 'wrong_endpoint', 'model'],
    [{ model: 'vidA-v6', prompt: 'p' }, 'wrong_endpoint', 'model'],
    [{ model: 'img-pro' }, 'invalid_request', 'prompt'],
    [{ model: 'img-pro', prompt: '' }, 'invalid_request', 'prompt'],
    [{ model: 'img-pro', prompt: 'p', size: '1024x1024' }, 'invalid_request', 'size'],
    [{ model: 'img-pro', prompt: 'p', aspect_ratio: '2:1' }, 'invalid_request', 'aspect_ratio'],
    [{ model: 'img-pro', prompt: 'p', n: 2 }, 'invalid_request', 'n'],
    [{ model: 'img-pro', prompt: 'p', response_format: 'png' }, 'invalid_request', 'response_format'],
  ];
  const before = h.sim.received.length;
  for (const [body, code, param] of cases) {
    const e = (await generate(body).catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
    t.ok(e instanceof OpenAI.BadRequestError, JSON.stringify(body));
    t.match(e.error, { code, param, type: 'invalid_request_error' }, JSON.stringify(body));
    t.match(e.headers?.get('x-request-id'), /^req_/);
  }
  t.equal(h.sim.received.length, before, 'the upstream was never called');
  const chat = await openai.chat.completions
    .create({ model: 'img-pro', messages: [{ role: 'user', content: 'hi' }] })
    .catch((x: { error: unknown }) => x.error);
  t.match(chat, { code: 'wrong_endpoint' }, 'an image model on chat completions');
});

t.test("refusals are 400 content_refused with the provider's reason; failures 502, 504, 429", async (t) => {
  const fail = async (model: string, prompt: string, extra: Record<string, unknown> = {}) =>
    (await generate({ model, prompt, ...extra }).catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
  for (const rf of ['b64_json', 'url']) {
    const blocked = await fail('img-pro', 'x #sim:image=refuse', { response_format: rf });
    t.equal(blocked.status, 400);
    t.match(blocked.error, { code: 'content_refused', message: /blocked the prompt \(SAFETY\)/ });
    const withheld = await fail('img-pro', 'x #sim:image=refuse_output', { response_format: rf });
    t.match(withheld.error, { code: 'content_refused', message: /withheld the image \(IMAGE_SAFETY\)/ });
    const moderated = await fail('img-2', 'x #sim:image=refuse', { response_format: rf });
    t.equal(moderated.status, 400);
    t.match(moderated.error, { code: 'content_refused', message: /rejected by the safety system/ });
    for (const model of ['img-pro', 'img-2']) {
      t.equal((await fail(model, 'x #sim:status=500', { response_format: rf })).status, 502, `${model} ${rf}: 5xx`);
      t.equal(
        (await fail(model, 'x #sim:status=503', { response_format: rf })).status,
        503,
        `${model} ${rf}: overloaded`,
      );
      t.equal(
        (await fail(model, 'x #sim:status=429', { response_format: rf })).status,
        429,
        `${model} ${rf}: rate limited`,
      );
      const early = await fail(model, 'x #sim:hangup_after=40', { response_format: rf });
      t.equal(early.status, 502, `${model} ${rf}: hang-up before the image`);
      t.match(early.error, { code: 'upstream_error' });
    }
  }
  // A provider silent past timeout_ms: a 504, the four side by side (each waits out the 8 s).
  const timeouts = ['b64_json', 'url'].flatMap((rf) =>
    ['img-pro', 'img-2'].map(async (model) => {
      const late = await fail(model, 'x #sim:delay_ms=9000', { response_format: rf });
      t.equal(late.status, 504, `${model} ${rf}: timeout`);
    }),
  );
  await Promise.all(timeouts);
  // A hang-up in the middle of the image cuts the streamed answer; the SDK sees a broken connection.
  for (const model of ['img-pro', 'img-2']) {
    const cut = (await fail(model, 'x #sim:hangup_after=3000')) as unknown as Error & { cause?: Error };
    t.equal(cut.message, 'terminated', `${model}: the body was cut`);
    t.equal(cut.cause?.message, 'other side closed');
  }
});

t.test(
  "the url store's byte budget: room is reserved before the provider renders; past it, a 503 that costs nothing",
  async (t) => {
    // One 1K reservation of img-pro (1.1 megapixels at 3 bytes, times 9/8, and 1 MiB: 4.8 MB) fits; a 2K one (16 MB) does not.
    const g = await startHarness({
      edit: (c) => {
        c.images = { store_max_bytes: 7_000_000 };
      },
    });
    t.teardown(() => g.close());
    const o = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
    const first = (await o.images.generate({
      model: 'img-pro',
      prompt: 'a field',
      response_format: 'url',
    } as never)) as unknown as Generated;
    t.ok(first.data[0]!.url);
    const asked = g.sim.received.length;
    const full = (await o.images
      .generate({ model: 'img-pro', prompt: 'a field', response_format: 'url', size: '2K' } as never)
      .catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
    t.equal(full.status, 503);
    t.match(full.error, { code: 'service_unavailable', message: /image store is full/ });
    t.equal(g.sim.received.length, asked, 'the provider was never asked to render what could not be stored');
    const again = (await o.images.generate({
      model: 'img-pro',
      prompt: 'a field',
      response_format: 'url',
    } as never)) as unknown as Generated;
    t.ok(again.data[0]!.url, "the first call took its image's own size, not its reservation: room for another");
    const b64 = (await o.images.generate({
      model: 'img-pro',
      prompt: 'a field',
      size: '2K',
    } as never)) as unknown as Generated;
    t.ok(b64.data[0]!.b64_json, 'b64_json needs no store');
  },
);
