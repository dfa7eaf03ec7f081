import t, { type Test } from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { validator } from '../helpers/conformance.js';

// OpenAI's published component schemas (test/fixtures/openai-response-schemas.json, through the shared helper).
const completion = validator('CreateChatCompletionResponse');
const chunk = validator('CreateChatCompletionStreamResponse');
const errorResponse = validator('ErrorResponse');

const sim = await startSimulator();
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

const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
const cases: Array<[string, Record<string, unknown>]> = [
  ['text', { messages: [{ role: 'user', content: 'hello #sim:tokens=5' }] }],
  ['length', { messages: [{ role: 'user', content: '#sim:tokens=50' }], max_tokens: 3 }],
  ['stop', { messages: [{ role: 'user', content: '#sim:tokens=50' }], stop: ['e'] }],
  ['empty', { messages: [{ role: 'user', content: '#sim:tokens=0' }] }],
  ['tool call', { messages: [{ role: 'user', content: 'weather' }], tools, tool_choice: 'required' }],
  ['truncated tool call', { messages: [{ role: 'user', content: 'weather' }], tools, tool_choice: 'required', max_completion_tokens: 2 }],
];

t.test('chat.completion JSON conforms to CreateChatCompletionResponse', async (t) => {
  t.not(completion({ id: 'x', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0 }] }).length, 0, 'the schema rejects a malformed body');
  t.not(chunk({ id: 'x', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 'one' } }).length, 0, 'and a malformed chunk');
  for (const [name, body] of cases) {
    const res = await post({ model: 'beta-5.5', ...body });
    t.equal(res.status, 200);
    check(t, completion, await res.json(), name);
  }
});

t.test('every stream chunk conforms to CreateChatCompletionStreamResponse (with and without include_usage)', async (t) => {
  for (const [name, body] of cases) {
    for (const includeUsage of [false, true]) {
      const res = await post({ model: 'gamma-k3', ...body, stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) });
      const lines = (await res.text()).split('\n\n').filter((l) => l !== '');
      t.equal(lines.at(-1), 'data: [DONE]');
      const chunks = lines.slice(0, -1).map((l) => JSON.parse(l.slice('data: '.length)) as unknown);
      t.ok(chunks.length >= 2, 'role chunk and finish chunk at least');
      chunks.forEach((c, i) => check(t, chunk, c, `${name}, include_usage=${includeUsage}, chunk ${i}`));
    }
  }
});

t.test('error bodies conform to ErrorResponse (auth, validation, directives)', async (t) => {
  const responses = [
    await post({ model: 'beta-5.5', messages: [{ role: 'user', content: 'x' }] }, false),
    await post({ model: 'beta-5.5', messages: [] }),
    await post({ model: 'beta-5.5', messages: [{ role: 'user', content: 'x' }], n: 3 }),
    ...(await Promise.all([400, 404, 429, 500, 503].map((s) => post({ model: 'beta-5.5', messages: [{ role: 'user', content: `#sim:status=${s}` }] })))),
  ];
  for (const res of responses) {
    t.ok(res.status >= 400);
    check(t, errorResponse, await res.json(), `status ${res.status}`);
  }
});
