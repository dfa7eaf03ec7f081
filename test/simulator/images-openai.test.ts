import OpenAI, { toFile } from 'openai';
import t from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { inspectImage, readUntilDrop, referencePng } from '../helpers/media.js';

const sim = await startSimulator();
t.teardown(() => sim.close());
const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 });
const AUTH = { authorization: 'Bearer x' };

function generate(body: Record<string, unknown>, headers: Record<string, string> = AUTH): Promise<Response> {
  return fetch(sim.url + '/v1/images/generations', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

type ImagesJson = {
  created: number;
  data: Array<{ b64_json?: string; url?: string; revised_prompt?: string }>;
  [k: string]: unknown;
};

t.test(
  'generations -> real images of the asked size (auto = 1024x1024), with structure that depends on the prompt',
  async (t) => {
    const cases: Array<[string, string | undefined, number, number]> = [
      ['gpt-image-1', undefined, 1024, 1024],
      ['gpt-image-1', 'auto', 1024, 1024],
      ['gpt-image-1', '1024x1536', 1024, 1536],
      ['gpt-image-1', '1536x1024', 1536, 1024],
      ['gpt-image-2', '512x288', 512, 288],
      ['gpt-image-2', '2048x2048', 2048, 2048],
      ['gpt-image-2', '3840x1632', 3840, 1632],
    ];
    for (const [model, size, width, height] of cases) {
      const res = await generate({ model, prompt: 'a lighthouse at dusk', ...(size ? { size } : {}) });
      t.equal(res.status, 200, `${model} size ${size}`);
      const body = (await res.json()) as ImagesJson;
      t.equal(body.data.length, 1);
      t.equal(body.size, `${width}x${height}`);
      const info = await inspectImage(Buffer.from(body.data[0]!.b64_json!, 'base64'));
      t.match(
        info,
        { format: 'png', width, height, channels: 3, hasAlpha: false, colours: true },
        `${width}x${height} PNG with structure`,
      );
    }
    const a = (
      (await (
        await generate({
          model: 'dall-e-2',
          prompt: 'a lighthouse at dusk',
          size: '256x256',
          response_format: 'b64_json',
        })
      ).json()) as ImagesJson
    ).data[0]!.b64_json;
    const again = (
      (await (
        await generate({
          model: 'dall-e-2',
          prompt: 'a lighthouse at dusk',
          size: '256x256',
          response_format: 'b64_json',
        })
      ).json()) as ImagesJson
    ).data[0]!.b64_json;
    const b = (
      (await (
        await generate({ model: 'dall-e-2', prompt: 'a harbour at noon', size: '256x256', response_format: 'b64_json' })
      ).json()) as ImagesJson
    ).data[0]!.b64_json;
    t.equal(again, a, 'same prompt, same image');
    t.not(b, a, 'another prompt, another image');
  },
);

t.test(
  'each model takes only its own sizes, qualities, prompt length and backgrounds, as the provider refuses the rest',
  async (t) => {
    const refused: Array<[Record<string, unknown>, string]> = [
      [{ model: 'gpt-image-1', size: '2048x2048' }, 'size'],
      [{ model: 'gpt-image-1', size: '1792x1024' }, 'size'],
      [{ model: 'gpt-image-2', size: '1000x1000' }, 'size'],
      [{ model: 'gpt-image-2', size: '3840x2176' }, 'size'],
      [{ model: 'gpt-image-2', size: '3008x2880' }, 'size'],
      [{ model: 'gpt-image-2', size: '2400x768' }, 'size'],
      [{ model: 'gpt-image-2', background: 'transparent' }, 'background'],
      [{ model: 'dall-e-3', size: '1536x1024' }, 'size'],
      [{ model: 'dall-e-3', quality: 'high' }, 'quality'],
      [{ model: 'gpt-image-1', quality: 'hd' }, 'quality'],
      [{ model: 'dall-e-3', prompt: 'p'.repeat(4001) }, 'prompt'],
      [{ model: 'gpt-image-2', prompt: 'p'.repeat(32_001) }, 'prompt'],
    ];
    for (const [body, param] of refused) {
      const res = await generate({ prompt: 'a fox', ...body });
      t.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
      t.match(await res.json(), { error: { param, type: 'invalid_request_error' } });
    }
  },
);

t.test('gpt-image answer: settings echoed, usage in the documented shape; n images differ', async (t) => {
  const res = await generate({
    model: 'gpt-image-1',
    prompt: 'two kites',
    n: 2,
    size: '1024x1024',
    quality: 'low',
    output_format: 'png',
  });
  const body = (await res.json()) as ImagesJson & { usage: Record<string, unknown> };
  t.match(body, { created: Number, background: 'opaque', output_format: 'png', quality: 'low', size: '1024x1024' });
  t.equal(body.data.length, 2);
  t.not(body.data[0]!.b64_json, body.data[1]!.b64_json, 'each of n images is its own');
  t.same(
    body.usage.output_tokens_details,
    { image_tokens: 2 * 272, text_tokens: 0 },
    'low 1024x1024: 272 tokens an image',
  );
  t.equal(body.usage.output_tokens, 544);
  const input = body.usage.input_tokens_details as { text_tokens: number; image_tokens: number };
  t.equal(input.image_tokens, 0);
  t.equal(body.usage.input_tokens, input.text_tokens);
  t.equal(body.usage.total_tokens, 544 + input.text_tokens);
  t.ok(res.headers.get('x-request-id'));
});

t.test('output_format jpeg / webp and a transparent background', async (t) => {
  const jpeg = (await (
    await generate({
      model: 'gpt-image-2',
      prompt: 'fog',
      size: '640x480',
      output_format: 'jpeg',
      output_compression: 50,
    })
  ).json()) as ImagesJson;
  t.match(await inspectImage(Buffer.from(jpeg.data[0]!.b64_json!, 'base64')), {
    format: 'jpeg',
    width: 640,
    height: 480,
    colours: true,
  });
  const webp = (await (
    await generate({ prompt: 'fog', size: '1536x1024', output_format: 'webp', background: 'transparent' })
  ).json()) as ImagesJson;
  t.equal(webp.background, 'transparent');
  t.match(await inspectImage(Buffer.from(webp.data[0]!.b64_json!, 'base64')), {
    format: 'webp',
    width: 1536,
    height: 1024,
    hasAlpha: true,
  });
  const png = (await (
    await generate({ prompt: 'fog', size: '1536x1024', background: 'transparent' })
  ).json()) as ImagesJson;
  t.match(await inspectImage(Buffer.from(png.data[0]!.b64_json!, 'base64')), {
    format: 'png',
    channels: 4,
    hasAlpha: true,
    colours: true,
  });
  const bad = await generate({ prompt: 'fog', output_format: 'jpeg', background: 'transparent' });
  t.equal(bad.status, 400);
  t.match(await bad.json(), { error: { param: 'background', type: 'invalid_request_error' } });
});

t.test('response_format: url on dall-e models serves the image; GPT image models refuse the parameter', async (t) => {
  const body = (await (
    await generate({ model: 'dall-e-3', prompt: 'a red door', size: '1024x1024' })
  ).json()) as ImagesJson;
  t.notOk('usage' in body, 'no usage for dall-e');
  const item = body.data[0]!;
  t.equal(item.revised_prompt, 'a red door');
  t.match(item.url, new RegExp(`^${sim.url}/blobs/img-[\\w-]+\\.png$`));
  const img = await fetch(item.url!);
  t.equal(img.status, 200);
  t.equal(img.headers.get('content-type'), 'image/png');
  t.match(await inspectImage(Buffer.from(await img.arrayBuffer())), { width: 1024, height: 1024, colours: true });
  const b64 = (await (
    await generate({ model: 'dall-e-2', prompt: 'a red door', size: '256x256', response_format: 'b64_json' })
  ).json()) as ImagesJson;
  t.type(b64.data[0]!.b64_json, 'string');
  const missing = await fetch(sim.url + '/blobs/img-nothing.png');
  t.equal(missing.status, 404);
  const refused = await generate({ model: 'gpt-image-1', prompt: 'a red door', response_format: 'url' });
  t.equal(refused.status, 400);
  t.match(await refused.json(), { error: { param: 'response_format', code: 'unknown_parameter' } });
});

t.test('validation and auth answer OpenAI errors naming the param', async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ model: 'gpt-image-1' }, 'prompt'],
    [{ prompt: 'x', size: '1024' }, 'size'],
    [{ prompt: 'x', size: '9000x9000' }, 'size'],
    [{ prompt: 'x', n: 0 }, 'n'],
    [{ prompt: 'x', quality: 'ultra' }, 'quality'],
    [{ prompt: 'x', output_format: 'gif' }, 'output_format'],
  ];
  for (const [body, param] of cases) {
    const res = await generate(body);
    t.equal(res.status, 400, param);
    t.match(await res.json(), { error: { message: String, type: 'invalid_request_error', param } });
  }
  const noKey = await generate({ prompt: 'x' }, {});
  t.equal(noKey.status, 401);
  t.match(await noKey.json(), { error: { type: 'invalid_request_error' } });
});

t.test(
  'edits: 1 and 14 references in `image` or `image[]` parts; the recorded references are what was sent',
  async (t) => {
    for (const field of ['image', 'image[]']) {
      for (const count of [1, 14]) {
        const sent = await Promise.all(
          Array.from({ length: count }, (_, i) => ({ width: 64 + 16 * i, height: 48 + 8 * i, alpha: i % 2 === 1 })).map(
            async (s, i) => ({
              ...s,
              bytes: await referencePng(s.width, s.height, s.alpha, i),
            }),
          ),
        );
        const form = new FormData();
        form.append('model', 'gpt-image-1');
        form.append('prompt', `blend ${count} in ${field}`);
        form.append('size', '1024x1536');
        sent.forEach((s, i) => form.append(field, new Blob([s.bytes], { type: 'image/png' }), `ref${i}.png`));
        sim.images.received.length = 0;
        const res = await fetch(sim.url + '/v1/images/edits', { method: 'POST', headers: AUTH, body: form });
        t.equal(res.status, 200, `${count} in ${field}`);
        const body = (await res.json()) as ImagesJson & { usage: { input_tokens_details: { image_tokens: number } } };
        t.match(await inspectImage(Buffer.from(body.data[0]!.b64_json!, 'base64')), {
          width: 1024,
          height: 1536,
          colours: true,
        });
        t.ok(body.usage.input_tokens_details.image_tokens >= 85 * count, 'input image tokens counted');
        t.equal(sim.images.received.length, 1, 'one log entry for the request');
        const log = sim.images.received[0]!;
        t.match(log, { method: 'POST', url: '/v1/images/edits', at: Number });
        t.same(
          log.images.map((r) => ({
            field: r.field,
            mimeType: r.mimeType,
            format: r.format,
            width: r.width,
            height: r.height,
            hasAlpha: r.hasAlpha,
            channels: r.channels,
          })),
          sent.map((s) => ({
            field,
            mimeType: 'image/png',
            format: 'png',
            width: s.width,
            height: s.height,
            hasAlpha: s.alpha,
            channels: s.alpha ? 4 : 3,
          })),
        );
        t.ok(
          log.images.every((r, i) => r.bytes.equals(sent[i]!.bytes)),
          'the bytes as sent',
        );
      }
    }
    const last = sim.received.at(-1)!;
    t.match(
      last.body,
      { prompt: 'blend 14 in image[]', files: Array },
      'the request log keeps the form, files summarised',
    );
  },
);

t.test('edits through the openai SDK; a mask is recorded; too many, none or broken images -> 400', async (t) => {
  const png = await referencePng(100, 80);
  sim.images.received.length = 0;
  const res = await openai.images.edit({
    model: 'gpt-image-1',
    prompt: 'add a hat',
    image: [
      await toFile(png, 'a.png', { type: 'image/png' }),
      await toFile(await referencePng(90, 90, true), 'b.png', { type: 'image/png' }),
    ],
    mask: await toFile(await referencePng(100, 80, true), 'mask.png', { type: 'image/png' }),
  });
  t.equal(res.data!.length, 1);
  t.same(
    sim.images.received[0]!.images.map((r) => [r.field.replace('[]', ''), r.width, r.height, r.hasAlpha]),
    [
      ['image', 100, 80, false],
      ['image', 90, 90, true],
      ['mask', 100, 80, true],
    ],
  );
  const post = (form: FormData) => fetch(sim.url + '/v1/images/edits', { method: 'POST', headers: AUTH, body: form });
  const tooMany = new FormData();
  tooMany.append('prompt', 'x');
  for (let i = 0; i < 17; i++) tooMany.append('image[]', new Blob([png], { type: 'image/png' }), `${i}.png`);
  const none = new FormData();
  none.append('prompt', 'x');
  const broken = new FormData();
  broken.append('prompt', 'x');
  broken.append('image', new Blob([Buffer.from('not an image')], { type: 'image/png' }), 'x.png');
  for (const [form, what] of [
    [tooMany, '17 images'],
    [none, 'no image'],
    [broken, 'not an image'],
  ] as const) {
    const r = await post(form);
    t.equal(r.status, 400, what);
    t.match(await r.json(), { error: { param: 'image', type: 'invalid_request_error' } }, what);
  }
  const json = await fetch(sim.url + '/v1/images/edits', {
    method: 'POST',
    headers: { ...AUTH, 'content-type': 'application/json' },
    body: '{"prompt":"x"}',
  });
  t.equal(json.status, 400, 'edits take multipart');
});

t.test(
  '#sim:image=refuse (and refuse_output) -> 400 moderation_blocked, as OpenAI answers a safety block',
  async (t) => {
    for (const directive of ['refuse', 'refuse_output']) {
      const res = await generate({ prompt: `something #sim:image=${directive}` });
      t.equal(res.status, 400);
      t.match(await res.json(), {
        error: {
          type: 'image_generation_user_error',
          code: 'moderation_blocked',
          param: null,
          message: /safety system/,
        },
      });
    }
    const err = await openai.images
      .generate({ model: 'gpt-image-1', prompt: 'x #sim:image=refuse' })
      .catch((e: unknown) => e);
    t.type(err, OpenAI.BadRequestError);
    t.equal((err as InstanceType<typeof OpenAI.APIError>).code, 'moderation_blocked');
  },
);

t.test('#sim:status, #sim:delay_ms, #sim:hangup_after on generations and edits', async (t) => {
  for (const status of [429, 500, 503]) {
    const res = await generate({ prompt: `x #sim:status=${status}` });
    t.equal(res.status, status);
    t.match(await res.json(), { error: { message: String, type: String } });
    if (status === 429) t.equal(res.headers.get('retry-after'), '1');
  }
  const t0 = performance.now();
  t.equal((await generate({ model: 'gpt-image-2', prompt: 'x #sim:delay_ms=150', size: '64x64' })).status, 200);
  t.ok(performance.now() - t0 >= 140, 'delay_ms holds the answer');
  const cut = await generate({ model: 'gpt-image-2', prompt: 'x #sim:hangup_after=1000', size: '512x512' });
  t.equal(cut.status, 200, 'headers first');
  t.ok(Number(cut.headers.get('content-length')) > 1000, 'announcing the whole body');
  t.same(await readUntilDrop(cut), { bytes: 1000, dropped: true }, '1000 bytes, then the socket drops');
  const form = new FormData();
  form.append('prompt', 'edit #sim:status=502');
  form.append('image', new Blob([await referencePng(32, 32)], { type: 'image/png' }), 'a.png');
  const edit = await fetch(sim.url + '/v1/images/edits', { method: 'POST', headers: AUTH, body: form });
  t.equal(edit.status, 502);
});

t.test('openai SDK: images.generate parses the answer', async (t) => {
  const res = await openai.images.generate({
    model: 'gpt-image-1',
    prompt: 'a boat',
    size: '1536x1024',
    quality: 'high',
  });
  t.equal(res.size, '1536x1024');
  t.equal(res.usage!.output_tokens, 6208, "high 1536x1024: the guide's figure");
  t.match(await inspectImage(Buffer.from(res.data![0]!.b64_json!, 'base64')), { width: 1536, height: 1024 });
});
