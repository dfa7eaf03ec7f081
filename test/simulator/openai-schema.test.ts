import t, { type Test } from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { validator } from '../helpers/conformance.js';
import { referencePng, sleep } from '../helpers/media.js';

// OpenAI's published component schemas (test/fixtures/openai-response-schemas.json, through the shared helper).
const completion = validator('CreateChatCompletionResponse');
const chunk = validator('CreateChatCompletionStreamResponse');
const errorResponse = validator('ErrorResponse');
const imagesResponse = validator('ImagesResponse');
const videoResource = validator('VideoResource');

// Renders last a second, so the first job is polled while in progress even on a loaded machine.
const sim = await startSimulator({ videoRenderMs: 1000 });
t.teardown(() => sim.close());

async function post(body: Record<string, unknown>, auth = true): Promise<Response> {
  return fetch(sim.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(auth ? { authorization: 'Bearer x' } : {}) },
    body: JSON.stringify(body),
  });
}

function check(t: Test, validate: ReturnType<typeof validator>, value: unknown, what: string): void {
  const errors = validate(value);
  t.same(errors, [], what, errors.length === 0 ? {} : { diagnostic: true, value });
}

const tools = [
  {
    type: 'function',
    function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
  },
];
const cases: Array<[string, Record<string, unknown>]> = [
  ['text', { messages: [{ role: 'user', content: 'hello #sim:tokens=5' }] }],
  ['length', { messages: [{ role: 'user', content: '#sim:tokens=50' }], max_tokens: 3 }],
  ['stop', { messages: [{ role: 'user', content: '#sim:tokens=50' }], stop: ['e'] }],
  ['empty', { messages: [{ role: 'user', content: '#sim:tokens=0' }] }],
  ['tool call', { messages: [{ role: 'user', content: 'weather' }], tools, tool_choice: 'required' }],
  [
    'truncated tool call',
    { messages: [{ role: 'user', content: 'weather' }], tools, tool_choice: 'required', max_completion_tokens: 2 },
  ],
];

t.test('chat.completion JSON conforms to CreateChatCompletionResponse', async (t) => {
  t.not(
    completion({ id: 'x', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0 }] }).length,
    0,
    'the schema rejects a malformed body',
  );
  t.not(
    chunk({
      id: 'x',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [],
      usage: { prompt_tokens: 'one' },
    }).length,
    0,
    'and a malformed chunk',
  );
  for (const [name, body] of cases) {
    const res = await post({ model: 'beta-5.5', ...body });
    t.equal(res.status, 200);
    check(t, completion, await res.json(), name);
  }
});

t.test(
  'every stream chunk conforms to CreateChatCompletionStreamResponse (with and without include_usage)',
  async (t) => {
    for (const [name, body] of cases) {
      for (const includeUsage of [false, true]) {
        const res = await post({
          model: 'gamma-k3',
          ...body,
          stream: true,
          ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
        });
        const lines = (await res.text()).split('\n\n').filter((l) => l !== '');
        t.equal(lines.at(-1), 'data: [DONE]');
        const chunks = lines.slice(0, -1).map((l) => JSON.parse(l.slice('data: '.length)) as unknown);
        t.ok(chunks.length >= 2, 'role chunk and finish chunk at least');
        chunks.forEach((c, i) => check(t, chunk, c, `${name}, include_usage=${includeUsage}, chunk ${i}`));
      }
    }
  },
);

t.test('error bodies conform to ErrorResponse (auth, validation, directives)', async (t) => {
  const responses = [
    await post({ model: 'beta-5.5', messages: [{ role: 'user', content: 'x' }] }, false),
    await post({ model: 'beta-5.5', messages: [] }),
    await post({ model: 'beta-5.5', messages: [{ role: 'user', content: 'x' }], n: 3 }),
    ...(await Promise.all(
      [400, 404, 429, 500, 503].map((s) =>
        post({ model: 'beta-5.5', messages: [{ role: 'user', content: `#sim:status=${s}` }] }),
      ),
    )),
  ];
  for (const res of responses) {
    t.ok(res.status >= 400);
    check(t, errorResponse, await res.json(), `status ${res.status}`);
  }
});

const AUTH = { authorization: 'Bearer x' };
const postJson = (path: string, body: unknown) =>
  fetch(sim.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...AUTH },
    body: JSON.stringify(body),
  });

t.test(
  'image answers conform to ImagesResponse (generations, edits, url form) and their errors to ErrorResponse',
  async (t) => {
    t.not(imagesResponse({ created: 1, data: [{ b64_json: 1 }] }).length, 0, 'the schema rejects a malformed body');
    // The documented sizes: ImagesResponse.size enumerates 1024x1024, 1024x1536 and 1536x1024.
    const generations: Array<Record<string, unknown>> = [
      { model: 'gpt-image-1', prompt: 'a', size: '1024x1024', quality: 'low' },
      { model: 'gpt-image-1', prompt: 'b', size: '1024x1536', output_format: 'webp', background: 'transparent', n: 2 },
      { model: 'gpt-image-1.5', prompt: 'c', size: '1536x1024', output_format: 'jpeg', quality: 'high' },
      { model: 'dall-e-3', prompt: 'd', size: '1024x1024' },
      { model: 'dall-e-2', prompt: 'e', size: '256x256', response_format: 'b64_json' },
    ];
    for (const body of generations) {
      const res = await postJson('/v1/images/generations', body);
      t.equal(res.status, 200);
      check(t, imagesResponse, await res.json(), `generations ${JSON.stringify(body)}`);
    }
    const form = new FormData();
    form.append('model', 'gpt-image-1');
    form.append('prompt', 'edit');
    form.append('size', '1024x1024');
    form.append('image[]', new Blob([await referencePng(64, 64)], { type: 'image/png' }), 'a.png');
    form.append('image[]', new Blob([await referencePng(64, 64, true)], { type: 'image/png' }), 'b.png');
    const edit = await fetch(sim.url + '/v1/images/edits', { method: 'POST', headers: AUTH, body: form });
    t.equal(edit.status, 200);
    check(t, imagesResponse, await edit.json(), 'edits');
    const errors = [
      await postJson('/v1/images/generations', { prompt: 'x #sim:image=refuse' }),
      await postJson('/v1/images/generations', { prompt: 'x', size: 'huge' }),
      await postJson('/v1/images/generations', { prompt: 'x #sim:status=500' }),
    ];
    for (const res of errors) check(t, errorResponse, await res.json(), `image error ${res.status}`);
  },
);

t.test(
  'video objects conform to VideoResource (queued, in progress, completed, failed, from JSON and multipart); errors to ErrorResponse',
  async (t) => {
    t.not(
      videoResource({ id: 'video_1', object: 'video', status: 'done' }).length,
      0,
      'the schema rejects a malformed object',
    );
    // The documented sizes: VideoSize enumerates 720x1280, 1280x720, 1024x1792 and 1792x1024 (the spec's other sizes are outside it).
    const created = [
      await postJson('/v1/videos', { model: 'sora-2', prompt: 'a', size: '1280x720', seconds: '4' }),
      await postJson('/v1/videos', {
        model: 'sora-2-pro',
        prompt: 'b #sim:video=fail',
        size: '720x1280',
        seconds: '8',
      }),
    ];
    const form = new FormData();
    form.append('model', 'sora-2');
    form.append('prompt', 'c');
    form.append('size', '720x1280');
    form.append('seconds', '4');
    form.append('input_reference', new Blob([await referencePng(72, 128)], { type: 'image/png' }), 'c.png');
    created.push(await fetch(sim.url + '/v1/videos', { method: 'POST', headers: AUTH, body: form }));
    const ids: string[] = [];
    for (const res of created) {
      const v = (await res.json()) as { id: string; status: string };
      check(t, videoResource, v, 'created');
      t.equal(v.status, 'queued');
      ids.push(v.id);
    }
    const statuses = new Set<string>();
    for (const id of ids) {
      for (;;) {
        const v = (await (await fetch(`${sim.url}/v1/videos/${id}`, { headers: AUTH })).json()) as { status: string };
        check(t, videoResource, v, `poll (${v.status})`);
        statuses.add(v.status);
        if (v.status === 'completed' || v.status === 'failed') break;
        await sleep(40);
      }
    }
    t.ok(
      ['in_progress', 'completed', 'failed'].every((s) => statuses.has(s)),
      `polls saw in_progress, completed and failed (${[...statuses].join(', ')})`,
    );
    const errors = [
      await postJson('/v1/videos', { prompt: 'x', size: '1x1' }),
      await fetch(`${sim.url}/v1/videos/video_missing`, { headers: AUTH }),
      await postJson('/v1/videos', { prompt: 'x #sim:status=429' }),
    ];
    for (const res of errors) check(t, errorResponse, await res.json(), `video error ${res.status}`);
  },
);
