// The image adapters against samples in the providers' documented shapes (not the simulator's): requests built,
// answers read chunk by chunk at any cut, refusals and errors told apart.
import t from 'tap';
import type { Readable } from 'node:stream';
import {
  geminiCallerFields,
  GeminiImageReader,
  geminiImageRequest,
  imageUsageOf,
} from '../../plugins/upstream/protocols/gemini/images.js';
import {
  Base64Bytes,
  ImageString,
  type ImageAnswerReader,
  type ImageSink,
} from '../../plugins/upstream/image-answer.js';
import {
  openaiCallerFields,
  openaiImageError,
  OpenAIImageReader,
  openaiImageRequest,
} from '../../plugins/upstream/protocols/openai/images.js';
import type { ImageModel, ModelRoute, ProviderConfig } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import { parseImageRequest, type ImageRequest } from '../../policies/image-request.js';
import { referencePng } from '../helpers/media.js';

const png = await referencePng(40, 30);
const b64 = png.toString('base64');

/** Feed `body` in pieces of `step` bytes; what reached the sink, and the end. */
function read(make: (sink: ImageSink) => ImageAnswerReader, body: string, step: number) {
  const got: { format?: string; b64: string; ended: boolean } = { b64: '', ended: false };
  const reader = make({
    begin: (f) => (got.format = f),
    piece: (p) => (got.b64 += p.toString('latin1')),
    end: () => (got.ended = true),
  });
  const bytes = Buffer.from(body);
  for (let i = 0; i < bytes.length; i += step) reader.feed(bytes.subarray(i, i + step));
  return { got, end: reader.end() };
}
const gemini = (s: ImageSink) => new GeminiImageReader(s);
const openai = (s: ImageSink) => new OpenAIImageReader(s);

// A generateContent answer as the Gemini API documents it, with a thought part (its interim image) and signatures.
const GEMINI_ANSWER = {
  candidates: [
    {
      content: {
        role: 'model',
        parts: [
          { text: 'Here is the harbour.', thoughtSignature: 'c2lnbmF0dXJl' },
          {
            thought: true,
            inlineData: { mimeType: 'image/png', data: Buffer.from('not the final image, a draft').toString('base64') },
          },
          { inlineData: { mimeType: 'image/png', data: b64 }, thoughtSignature: 'c2ln' },
        ],
      },
      finishReason: 'STOP',
      index: 0,
      safetyRatings: [],
    },
  ],
  usageMetadata: {
    promptTokenCount: 12,
    candidatesTokenCount: 1130,
    totalTokenCount: 1400,
    thoughtsTokenCount: 258,
    promptTokensDetails: [{ modality: 'TEXT', tokenCount: 12 }],
    candidatesTokensDetails: [
      { modality: 'TEXT', tokenCount: 10 },
      { modality: 'IMAGE', tokenCount: 1120 },
    ],
  },
  modelVersion: 'gemini-3-pro-image-preview',
  responseId: 'abc',
};

t.test('Gemini: the first image that is not a thought, at any cut, its usage as ImageGenUsage', async (t) => {
  for (const step of [1, 7, 100, 1 << 20]) {
    const { got, end } = read(gemini, JSON.stringify(GEMINI_ANSWER), step);
    t.equal(got.format, 'png', `step ${step}`);
    t.equal(got.b64, b64);
    t.ok(got.ended);
    t.match(end, { image: true, failure: null });
    t.same(end.usage, {
      input_tokens: 12,
      input_tokens_details: { text_tokens: 12, image_tokens: 0 },
      output_tokens: 1388,
      output_tokens_details: { image_tokens: 1120, text_tokens: 268 },
      total_tokens: 1400,
    });
  }
  // Every slash escaped, as JSON allows: the mime type's too.
  const snake = JSON.stringify({
    candidates: [{ content: { parts: [{ inline_data: { mime_type: 'image/png', data: b64 } }] } }],
  }).replace(/\//g, '\\/');
  const r = read(gemini, snake, 5);
  t.equal(r.got.b64, b64, 'inline_data, and escaped slashes');
  t.ok(r.end.image);
  const audioFirst = JSON.stringify({
    candidates: [
      {
        content: {
          parts: [
            { inlineData: { mimeType: 'audio/wav', data: 'UklGRg==' } },
            { inlineData: { mimeType: 'image/png', data: b64 } },
          ],
        },
      },
    ],
  });
  t.equal(read(gemini, audioFirst, 3).got.b64, b64, 'not an image: the next one');
});

t.test(
  'Gemini: blocks and answers without an image become content_refused with the reason; others a 502',
  async (t) => {
    const cases: [unknown, string, RegExp][] = [
      [
        { promptFeedback: { blockReason: 'PROHIBITED_CONTENT' }, usageMetadata: { promptTokenCount: 3 } },
        'content_refused',
        /blocked the prompt \(PROHIBITED_CONTENT\)/,
      ],
      [
        { promptFeedback: { blockReason: 'SAFETY', blockReasonMessage: 'unsafe' } },
        'content_refused',
        /\(SAFETY\): unsafe/,
      ],
      [
        { candidates: [{ finishReason: 'IMAGE_SAFETY', finishMessage: 'Unable to show the generated image.' }] },
        'content_refused',
        /withheld the image \(IMAGE_SAFETY\): Unable to show/,
      ],
      [
        {
          candidates: [
            { content: { parts: [{ text: 'I cannot draw that.' }] }, finishReason: 'IMAGE_PROHIBITED_CONTENT' },
          ],
        },
        'content_refused',
        /IMAGE_PROHIBITED_CONTENT\): I cannot draw that/,
      ],
      [
        { candidates: [{ content: { parts: [{ text: 'I would rather describe it.' }] }, finishReason: 'STOP' }] },
        'content_refused',
        /without an image: I would rather describe it/,
      ],
      [{ candidates: [{ finishReason: 'MAX_TOKENS' }] }, 'upstream_error', /finishReason MAX_TOKENS/],
      [{ candidates: [] }, 'upstream_error', /without an image/],
    ];
    for (const [body, code, message] of cases) {
      const { got, end } = read(gemini, JSON.stringify(body), 4);
      t.equal(got.format, undefined);
      t.equal(end.image, false);
      t.match(end.failure, { code, message }, JSON.stringify(body));
    }
    const cut = read(gemini, JSON.stringify(GEMINI_ANSWER).slice(0, 400), 50);
    t.equal(cut.end.image, false, 'an answer cut inside the image holds none');
  },
);

t.test('OpenAI: the ImagesResponse image, created and usage; a response without one is none', async (t) => {
  const body = {
    created: 1713833628,
    background: 'opaque',
    data: [{ b64_json: b64 }],
    output_format: 'png',
    quality: 'high',
    size: '1024x1024',
    usage: {
      input_tokens: 50,
      input_tokens_details: { text_tokens: 10, image_tokens: 40 },
      output_tokens: 50,
      total_tokens: 100,
    },
  };
  for (const step of [1, 9, 1 << 20]) {
    const { got, end } = read(openai, JSON.stringify(body), step);
    t.equal(got.b64, b64);
    t.match(end, { image: true, created: 1713833628, usage: body.usage, failure: null });
  }
  t.match(read(openai, JSON.stringify({ created: 1, data: [] }), 3).end, {
    image: false,
    failure: { code: 'upstream_error' },
  });
  t.match(
    read(
      openai,
      JSON.stringify({
        created: 1,
        data: [{ b64_json: Buffer.from('hello world, no image here').toString('base64') }],
      }),
      3,
    ).end,
    { image: false },
  );
});

t.test(
  "OpenAI errors: safety refusals are content_refused with the provider's message; the rest as any upstream's",
  async (t) => {
    const moderation = JSON.stringify({
      error: {
        message: 'Your request was rejected by the safety system.',
        type: 'image_generation_user_error',
        param: null,
        code: 'moderation_blocked',
      },
    });
    t.match(openaiImageError(400, moderation, undefined), {
      code: 'content_refused',
      status: 400,
      message: 'Your request was rejected by the safety system.',
    });
    const dalle = JSON.stringify({
      error: {
        message: 'Your request was rejected as a result of our safety system.',
        type: 'invalid_request_error',
        code: 'content_policy_violation',
      },
    });
    t.match(openaiImageError(400, dalle, undefined), { code: 'content_refused' });
    t.match(
      openaiImageError(400, JSON.stringify({ error: { message: 'Invalid size', code: 'invalid_value' } }), undefined),
      { code: 'upstream_invalid_request', message: 'Invalid size' },
    );
    t.match(openaiImageError(500, 'oops', undefined), { code: 'upstream_error', status: 502 });
    t.match(openaiImageError(429, '{}', '7'), { code: 'upstream_rate_limited', headers: { 'retry-after': '7' } });
  },
);

const provider = (protocol: 'openai' | 'gemini', base: string): ProviderConfig => ({
  name: `p-${protocol}`,
  protocol,
  base_url: base,
  key_env: 'K',
  key: 'operator-key',
  timeout_ms: 1000,
  max_duration_ms: 1000,
  max_tokens_field: 'max_completion_tokens',
});
const route = (protocol: 'openai' | 'gemini', upstreamModel: string): ModelRoute<ImageModel> => {
  const p = provider(protocol, protocol === 'gemini' ? 'https://g.example/v1beta' : 'https://o.example/v1');
  return {
    model: { kind: 'image', id: 'img-x', family: 'img', provider: p.name, caller_safety: false },
    provider: p,
    upstreamModel,
    url:
      protocol === 'gemini'
        ? `${p.base_url}/models/${upstreamModel}:generateContent`
        : `${p.base_url}/images/generations`,
  };
};

async function drain(body: string | Readable): Promise<Buffer> {
  if (typeof body === 'string') return Buffer.from(body);
  const chunks: Buffer[] = [];
  for await (const c of body) chunks.push(Buffer.from(c as Buffer));
  return Buffer.concat(chunks);
}

/** A request as police leaves it: the caller's other fields through the adapter's allow-list. */
function policed(
  r: ModelRoute<ImageModel>,
  body: Record<string, unknown>,
): ImageRequest & { dropped: readonly string[] } {
  const parsed = parseImageRequest(body);
  const { fields, dropped } =
    r.provider.protocol === 'gemini' ? geminiCallerFields(r, parsed.extra) : openaiCallerFields(r, parsed.extra);
  return { ...parsed, extra: fields, dropped };
}

function refusedParam(f: () => unknown): string | undefined {
  try {
    f();
  } catch (err) {
    if (err instanceof GatewayError) return err.param;
    throw err;
  }
  return 'accepted';
}

t.test(
  "caller fields: an allow-list per protocol; the gateway's own settings refused, safety settings dropped, the other protocol's dropped",
  async (t) => {
    const o = route('openai', 'gpt-image-2');
    const g = route('gemini', 'gemini-3-pro-image-preview');
    t.same(
      policed(o, {
        model: 'm',
        prompt: 'p',
        background: 'opaque',
        output_format: 'webp',
        output_compression: 40,
        user: 'u',
        style: 'vivid',
      }).extra,
      { background: 'opaque', output_format: 'webp', output_compression: 40, user: 'u', style: 'vivid' },
      'price-neutral fields pass',
    );
    const openaiDrops = policed(o, {
      model: 'm',
      prompt: 'p',
      moderation: 'low',
      generationConfig: { seed: 1 },
      safetySettings: [],
      quality: 'auto',
    });
    t.same([openaiDrops.extra, openaiDrops.dropped], [{}, ['moderation', 'generationConfig', 'safetySettings']]);
    t.same(
      policed(o, { model: 'm', prompt: 'p', quality: 'medium' }).extra,
      {},
      'the pinned quality is accepted, and sent by the gateway',
    );
    for (const [body, param] of [
      [{ quality: 'high' }, 'quality'],
      [{ quality: 'low' }, 'quality'],
      [{ input_fidelity: 'high' }, 'input_fidelity'],
      [{ partial_images: 1 }, 'partial_images'],
      [{ mask: 'x' }, 'mask'],
      [{ top_secret: 1 }, 'top_secret'],
    ] as const)
      t.equal(
        refusedParam(() => policed(o, { model: 'm', prompt: 'p', ...body })),
        param,
        JSON.stringify(body),
      );
    const dalle2 = route('openai', 'dall-e-2');
    t.equal(
      refusedParam(() => policed(dalle2, { model: 'm', prompt: 'p', quality: 'standard' })),
      'quality',
      'a model without a quality setting takes none',
    );
    const gem = policed(g, {
      model: 'm',
      prompt: 'p',
      generationConfig: { temperature: 0.2, topP: 0.9, top_k: 4, seed: 7, candidateCount: 1 },
      safetySettings: [{}],
      quality: 'high',
      user: 'u',
    });
    t.same(gem.extra, { generationConfig: { temperature: 0.2, topP: 0.9, top_k: 4, seed: 7 } });
    t.same(gem.dropped, ['safetySettings', 'quality', 'user']);
    for (const [body, param] of [
      [{ generationConfig: { maxOutputTokens: 9 } }, 'generationConfig.maxOutputTokens'],
      [{ generationConfig: { thinkingConfig: {} } }, 'generationConfig.thinkingConfig'],
      [{ generationConfig: { responseModalities: ['TEXT'] } }, 'generationConfig.responseModalities'],
      [{ generation_config: { response_modalities: ['TEXT'] } }, 'generation_config.response_modalities'],
      [{ generationConfig: { candidateCount: 2 } }, 'generationConfig.candidateCount'],
      [{ generationConfig: 3 }, 'generationConfig'],
      [{ tools: [] }, 'tools'],
      [{ toolConfig: {} }, 'toolConfig'],
      [{ cachedContent: 'c' }, 'cachedContent'],
      [{ systemInstruction: {} }, 'systemInstruction'],
      [{ contents: [] }, 'contents'],
    ] as const)
      t.equal(
        refusedParam(() => policed(g, { model: 'm', prompt: 'p', ...body })),
        param,
        JSON.stringify(body),
      );
    const allowing = { ...g, model: { ...g.model, caller_safety: true } };
    t.same(
      policed(allowing, { model: 'm', prompt: 'p', safetySettings: [{ category: 'c' }] }).extra,
      { safetySettings: [{ category: 'c' }] },
      'allowed by the operator',
    );
    t.same(
      policed({ ...o, model: { ...o.model, caller_safety: true } }, { model: 'm', prompt: 'p', moderation: 'low' })
        .extra,
      { moderation: 'low' },
    );
  },
);

t.test(
  'OpenAI requests: JSON generations, DALL-E asked for b64_json, multipart edits with image or image[]',
  async (t) => {
    const dalleRoute = route('openai', 'dall-e-3');
    const req = policed(dalleRoute, {
      model: 'img-x',
      prompt: 'a kite',
      size: '2K',
      aspect_ratio: '16:9',
      style: 'vivid',
    });
    const dalle = openaiImageRequest(dalleRoute, req, null);
    t.equal(dalle.url, 'https://o.example/v1/images/generations');
    t.equal(dalle.headers.authorization, 'Bearer operator-key');
    t.same(JSON.parse(String(dalle.body)), {
      style: 'vivid',
      model: 'dall-e-3',
      prompt: 'a kite',
      size: '1792x1024',
      quality: 'standard',
      response_format: 'b64_json',
    });
    const jpeg = Buffer.from('ffd8ffe000104a46494600', 'hex');
    for (const images of [
      [{ bytes: png, format: 'png' as const }],
      [
        { bytes: png, format: 'png' as const },
        { bytes: jpeg, format: 'jpeg' as const },
      ],
    ]) {
      const edit = openaiImageRequest(route('openai', 'gpt-image-1'), req, images);
      t.equal(edit.url, 'https://o.example/v1/images/edits');
      const bytes = await drain(edit.body);
      t.equal(Number(edit.headers['content-length']), bytes.length, "content-length is the body's");
      const form = await new Response(bytes, { headers: { 'content-type': edit.headers['content-type']! } }).formData();
      t.same(
        [form.get('model'), form.get('prompt'), form.get('size'), form.get('style'), form.get('quality')],
        ['gpt-image-1', 'a kite', '1536x1024', 'vivid', 'medium'],
      );
      const name = images.length === 1 ? 'image' : 'image[]';
      const files = form.getAll(name) as File[];
      t.equal(files.length, images.length, `${images.length} in ${name}`);
      t.same(Buffer.from(await files[0]!.arrayBuffer()), png);
      t.same(
        files.map((f) => f.type),
        images.map((i) => (i.format === 'png' ? 'image/png' : 'image/jpeg')),
      );
    }
  },
);

t.test(
  'Gemini requests: prompt then inline images, encoded as sent; the image alone, output capped, sampling kept',
  async (t) => {
    const gRoute = route('gemini', 'gemini-3-pro-image-preview');
    const req = policed(gRoute, {
      model: 'img-x',
      prompt: 'a "quoted" kite',
      size: '4K',
      aspect_ratio: '21:9',
      quality: 'high',
      generationConfig: { temperature: 0.5 },
    });
    const big = Buffer.alloc(200_000, 3);
    png.copy(big);
    const r = geminiImageRequest(gRoute, req, [
      { bytes: png, format: 'png' },
      { bytes: big, format: 'png' },
    ]);
    t.equal(r.url, 'https://g.example/v1beta/models/gemini-3-pro-image-preview:generateContent');
    t.equal(r.headers['x-goog-api-key'], 'operator-key');
    const bytes = await drain(r.body);
    t.equal(Number(r.headers['content-length']), bytes.length);
    const body = JSON.parse(bytes.toString()) as {
      contents: { role: string; parts: { text?: string; inlineData?: { mimeType: string; data: string } }[] }[];
    } & Record<string, unknown>;
    t.same(Object.keys(body).sort(), ['contents', 'generationConfig']);
    t.same(body.generationConfig, {
      temperature: 0.5,
      candidateCount: 1,
      responseModalities: ['IMAGE'],
      maxOutputTokens: 8192,
      imageConfig: { aspectRatio: '21:9', imageSize: '4K' },
    });
    const parts = body.contents[0]!.parts;
    t.equal(parts[0]!.text, 'a "quoted" kite');
    t.same(Buffer.from(parts[1]!.inlineData!.data, 'base64'), png);
    t.same(Buffer.from(parts[2]!.inlineData!.data, 'base64'), big);
    t.equal(parts[2]!.inlineData!.mimeType, 'image/png');
    const capped = { ...route('gemini', 'm'), model: { ...gRoute.model, max_output_tokens: 3000 } };
    const plain = geminiImageRequest(capped, parseImageRequest({ model: 'img-x', prompt: 'p' }), null);
    t.same(
      JSON.parse(String(plain.body)).generationConfig,
      { candidateCount: 1, responseModalities: ['IMAGE'], maxOutputTokens: 3000, imageConfig: { aspectRatio: '1:1' } },
      "the model's cap",
    );
  },
);

t.test("an image's base64 is decoded piece by piece, whatever the cuts", async (t) => {
  const data = Buffer.from(Array.from({ length: 10_001 }, (_, i) => (i * 13) & 255));
  const text = data.toString('base64');
  for (const step of [1, 3, 5, 4096]) {
    const d = new Base64Bytes(step === 1 ? 0 : 8000, 1 << 20);
    for (let i = 0; i < text.length; i += step) d.add(Buffer.from(text.slice(i, i + step)));
    t.same(d.bytes(), data, `step ${step}`);
  }
  const small = new Base64Bytes(0, 10);
  small.add(Buffer.from(text.slice(0, 40)));
  t.ok(small.over, 'more than its maximum: not kept');
  const s = new ImageString({
    begin() {
      t.fail('not an image');
    },
    piece() {},
    end() {},
  });
  s.piece(Buffer.from(Buffer.from('GIF89a-------------').toString('base64')));
  s.end();
  t.notOk(s.isImage);
  t.same(imageUsageOf({}), {
    input_tokens: 0,
    input_tokens_details: { text_tokens: 0, image_tokens: 0 },
    output_tokens: 0,
    output_tokens_details: { image_tokens: 0, text_tokens: 0 },
    total_tokens: 0,
  });
});
