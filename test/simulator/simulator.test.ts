import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t, { type Test as Tap } from 'tap';
import Fastify from 'fastify';
import simulator, { startSimulator, type RecordedRequest } from '../../plugins/simulator/index.js';

const sim = await startSimulator();
t.teardown(() => sim.close());
const anthropic = new Anthropic({ baseURL: sim.url, apiKey: 'x', maxRetries: 0 });
const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 });
const MODEL = 'alpha-sonnet-4-6';

const ask = (content: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  max_tokens: 1000,
  messages: [{ role: 'user' as const, content }],
  ...extra,
});

/** Awaits a rejection and checks its class (tap's rejects compares error names, which openai leaves as 'Error'). */
async function rejectsWith(
  t: Tap,
  p: Promise<unknown>,
  cls: abstract new (...a: never[]) => Error,
  msg?: string,
): Promise<unknown> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  t.type(err, cls, msg ?? `rejects with ${cls.name}`);
  return err;
}

function words(text: string): number {
  return text === '' ? 0 : text.split(' ').length;
}

function textOf(m: Anthropic.Message): string {
  return m.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
}

/** Raw SSE of a POST: the event names and data objects in order. */
async function sse(
  path: string,
  headers: Record<string, string>,
  body: unknown,
): Promise<Array<{ event?: string; data: string }>> {
  const res = await fetch(sim.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const out: Array<{ event?: string; data: string }> = [];
  for (const block of (await res.text()).split('\n\n')) {
    if (block === '') continue;
    const ev = /^event: (.*)$/m.exec(block)?.[1];
    out.push({ event: ev, data: /^data: (.*)$/m.exec(block)![1]! });
  }
  return out;
}
const ANTHROPIC_HEADERS = { 'x-api-key': 'x', 'anthropic-version': '2023-06-01' };

t.test('anthropic create -> message with a short deterministic answer; output_tokens = words', async (t) => {
  const m = await anthropic.messages.create(ask('Say something'));
  t.match(m.id, /^msg_01/);
  t.equal(m.type, 'message');
  t.equal(m.role, 'assistant');
  t.equal(m.model, MODEL);
  t.equal(m.stop_reason, 'end_turn');
  t.equal(m.stop_sequence, null);
  const n = words(textOf(m));
  t.ok(n >= 4 && n <= 8, `a handful of words (${n})`);
  t.equal(m.usage.output_tokens, n);
  t.ok(m.usage.input_tokens > 0);
  t.equal(m.usage.cache_creation_input_tokens, 0);
  t.equal(m.usage.cache_read_input_tokens, 0);
  t.same(m.usage.cache_creation, { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 });
  const again = await anthropic.messages.create(ask('Say something'));
  t.equal(textOf(again), textOf(m), 'same prompt, same text');
  const other = await anthropic.messages.create(ask('Say something else'));
  t.not(textOf(other), textOf(m), 'another prompt, another text');
});

t.test('anthropic #sim:tokens=N -> exactly N tokens; max_tokens caps it with stop_reason max_tokens', async (t) => {
  const m = await anthropic.messages.create(ask('go #sim:tokens=37'));
  t.equal(m.usage.output_tokens, 37);
  t.equal(words(textOf(m)), 37);
  t.equal(m.stop_reason, 'end_turn');
  const capped = await anthropic.messages.create(ask('go #sim:tokens=37', { max_tokens: 10 }));
  t.equal(capped.usage.output_tokens, 10);
  t.equal(words(textOf(capped)), 10);
  t.equal(capped.stop_reason, 'max_tokens');
  const none = await anthropic.messages.create(ask('go #sim:tokens=0'));
  t.same(none.content, []);
  t.equal(none.usage.output_tokens, 0);
});

t.test('anthropic stream -> full named-event sequence, one text_delta per token, cumulative usage', async (t) => {
  const events = await sse('/v1/messages', ANTHROPIC_HEADERS, { ...ask('stream #sim:tokens=20'), stream: true });
  const names = events.map((e) => e.event);
  t.same(names, [
    'message_start',
    'content_block_start',
    'ping',
    ...Array<string>(20).fill('content_block_delta'),
    'content_block_stop',
    'message_delta',
    'message_stop',
  ]);
  for (const e of events) t.equal(JSON.parse(e.data).type, e.event, 'data.type matches the event name');
  const start = JSON.parse(events[0]!.data);
  t.ok(start.message.usage.input_tokens > 0);
  const delta = JSON.parse(events.at(-2)!.data);
  t.same(delta.delta, { stop_reason: 'end_turn', stop_sequence: null });
  t.equal(delta.usage.output_tokens, 20);
  t.equal(delta.usage.input_tokens, start.message.usage.input_tokens);

  const stream = anthropic.messages.stream(ask('stream #sim:tokens=20'));
  const texts: string[] = [];
  stream.on('text', (x) => texts.push(x));
  const final = await stream.finalMessage();
  t.equal(texts.length, 20, 'one text event per token');
  t.equal(final.usage.output_tokens, 20);
  t.equal(textOf(final), texts.join(''));
  t.equal(
    textOf(final),
    textOf(await anthropic.messages.create(ask('stream #sim:tokens=20'))),
    'stream and JSON agree',
  );
});

t.test('anthropic stop_sequences cut the text -> stop_reason stop_sequence', async (t) => {
  const full = textOf(await anthropic.messages.create(ask('stops #sim:tokens=12')));
  const stop = ' ' + full.split(' ')[5]!;
  const m = await anthropic.messages.create(ask('stops #sim:tokens=12', { stop_sequences: [stop] }));
  t.equal(m.stop_reason, 'stop_sequence');
  t.equal(m.stop_sequence, stop);
  t.ok(full.startsWith(textOf(m) + stop), 'the text ends right before the stop sequence');
  t.equal(m.usage.output_tokens, words(textOf(m)));
  const s = await anthropic.messages.stream(ask('stops #sim:tokens=12', { stop_sequences: [stop] })).finalMessage();
  t.equal(textOf(s), textOf(m));
  t.equal(s.stop_sequence, stop);
});

const weather = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: {
    type: 'object' as const,
    properties: { city: { type: 'string' }, days: { type: 'integer' } },
    required: ['city'],
  },
};
const clock = {
  name: 'get_time',
  input_schema: { type: 'object' as const, properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } } },
};

t.test('anthropic forced tool_choice -> tool_use block; streamed input_json_delta gives the same input', async (t) => {
  const m = await anthropic.messages.create(ask('weather?', { tools: [weather, clock], tool_choice: { type: 'any' } }));
  t.equal(m.stop_reason, 'tool_use');
  t.equal(m.content.length, 1);
  const block = m.content[0] as Anthropic.ToolUseBlock;
  t.equal(block.type, 'tool_use');
  t.match(block.id, /^toolu_01/);
  t.equal(block.name, 'get_weather');
  t.match(block.input, { city: String, days: Number });
  t.equal(m.usage.output_tokens, Math.ceil(JSON.stringify(block.input).length / 4));

  const named = await anthropic.messages.create(
    ask('time?', { tools: [weather, clock], tool_choice: { type: 'tool', name: 'get_time' } }),
  );
  t.same((named.content[0] as Anthropic.ToolUseBlock).input, { zone: 'UTC' });

  const stream = anthropic.messages.stream(ask('weather?', { tools: [weather, clock], tool_choice: { type: 'any' } }));
  let deltas = 0;
  stream.on('inputJson', () => deltas++);
  const final = await stream.finalMessage();
  t.same((final.content[0] as Anthropic.ToolUseBlock).input, block.input);
  t.equal(deltas, final.usage.output_tokens, 'one input_json_delta per token');

  const auto = await anthropic.messages.create(ask('weather?', { tools: [weather], tool_choice: { type: 'auto' } }));
  t.equal(auto.content[0]!.type, 'text', 'auto -> text');
  await rejectsWith(
    t,
    anthropic.messages.create(ask('x', { tools: [weather], tool_choice: { type: 'tool', name: 'nope' } })),
    Anthropic.BadRequestError,
  );
});

t.test(
  'anthropic accepts a Claude Code shaped request (system blocks and messages, thinking, output_config, ?beta=true)',
  async (t) => {
    const res = await fetch(sim.url + '/v1/messages?beta=true', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...ANTHROPIC_HEADERS, 'anthropic-beta': 'claude-code-20250219' },
      body: JSON.stringify({
        model: MODEL,
        max_tokens: 32000,
        stream: true,
        system: [{ type: 'text', text: 'You are Claude Code.', cache_control: { type: 'ephemeral' } }],
        messages: [
          { role: 'system', content: 'reminder' },
          { role: 'user', content: [{ type: 'text', text: 'hi #sim:tokens=3', cache_control: { type: 'ephemeral' } }] },
        ],
        thinking: { type: 'adaptive' },
        output_config: { effort: 'high' },
        context_management: { edits: [] },
        metadata: { user_id: 'u' },
        tools: [weather],
      }),
    });
    t.equal(res.status, 200);
    t.match(await res.text(), /event: message_stop/);
  },
);

t.test('count_tokens -> { input_tokens } equal to the input usage of the same prompt', async (t) => {
  const params = {
    model: MODEL,
    system: 'Be brief.',
    messages: [{ role: 'user' as const, content: 'Count me, please.' }],
    tools: [weather],
  };
  const counted = await anthropic.messages.countTokens(params);
  t.same(Object.keys(counted), ['input_tokens']);
  const m = await anthropic.messages.create({ ...params, max_tokens: 10 });
  t.equal(counted.input_tokens, m.usage.input_tokens);
});

t.test('anthropic auth: no x-api-key -> 401 authentication_error; no anthropic-version -> 400', async (t) => {
  const body = JSON.stringify(ask('x'));
  const noKey = await fetch(sim.url + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body,
  });
  t.equal(noKey.status, 401);
  t.match(await noKey.json(), {
    type: 'error',
    error: { type: 'authentication_error', message: String },
    request_id: String,
  });
  const noVersion = await fetch(sim.url + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': 'k' },
    body,
  });
  t.equal(noVersion.status, 400);
  t.match(await noVersion.json(), { type: 'error', error: { type: 'invalid_request_error' } });
  const missing = await fetch(sim.url + '/v1/messages', {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...ANTHROPIC_HEADERS },
    body: '{"model":"m","messages":[]}',
  });
  t.equal(missing.status, 400, 'max_tokens is required');
});

t.test('anthropic #sim:status -> the provider error body, typed SDK errors, retry-after on 429', async (t) => {
  const cases: Array<[number, string, new (...a: never[]) => Error]> = [
    [400, 'invalid_request_error', Anthropic.BadRequestError],
    [403, 'permission_error', Anthropic.PermissionDeniedError],
    [429, 'rate_limit_error', Anthropic.RateLimitError],
    [500, 'api_error', Anthropic.InternalServerError],
    [529, 'overloaded_error', Anthropic.InternalServerError],
  ];
  for (const [status, type, cls] of cases) {
    const err = await anthropic.messages.create(ask(`fail #sim:status=${status}`)).catch((e: unknown) => e);
    t.type(err, cls, `${status} -> ${cls.name}`);
    const api = err as InstanceType<typeof Anthropic.APIError>;
    t.equal(api.status, status);
    t.match(api.error, { type: 'error', error: { type } });
    if (status === 429) t.equal(api.headers?.get('retry-after'), '1');
  }
  const streamed = await anthropic.messages
    .stream(ask('fail #sim:status=529'))
    .finalMessage()
    .catch((e: unknown) => e);
  t.type(streamed, Anthropic.InternalServerError, 'a stream fails before its first event');
});

t.test('anthropic #sim:hangup_after=N -> N deltas, then the connection drops (JSON: no body)', async (t) => {
  const stream = anthropic.messages.stream(ask('drop #sim:tokens=20 #sim:hangup_after=5'));
  const texts: string[] = [];
  stream.on('text', (x) => texts.push(x));
  stream.on('error', () => {});
  await t.rejects(stream.finalMessage());
  t.equal(texts.length, 5);
  await rejectsWith(t, anthropic.messages.create(ask('drop #sim:hangup_after=0')), Anthropic.APIConnectionError);
  const zero = anthropic.messages.stream(ask('drop #sim:tokens=3 #sim:hangup_after=0'));
  zero.on('error', () => {});
  await t.rejects(zero.finalMessage());
});

t.test('delay_ms holds the first byte; chunk_delay_ms spaces the chunks (lower bounds only)', async (t) => {
  let t0 = performance.now();
  await anthropic.messages.create(ask('slow #sim:delay_ms=150'));
  t.ok(performance.now() - t0 >= 140, 'delay_ms');
  t0 = performance.now();
  const chunks: number[] = [];
  const s = await openai.chat.completions.create({
    model: 'beta-5.5',
    stream: true,
    messages: [{ role: 'user', content: 'slow #sim:tokens=4 #sim:chunk_delay_ms=50' }],
  });
  for await (const c of s) if (c.choices[0]?.delta.content) chunks.push(performance.now());
  t.equal(chunks.length, 4);
  t.ok(chunks[3]! - t0 >= 140, 'three gaps of 50 ms');
});

t.test('recorded requests: method, url with query, headers, body, kept in process', async (t) => {
  sim.clear();
  await anthropic.messages.create(ask('record me'), { query: { beta: 'true' } });
  await openai.chat.completions.create({ model: 'beta-5.5', messages: [{ role: 'user', content: 'and me' }] });
  t.equal(sim.received.length, 2);
  const [a, o] = sim.received;
  t.match(a, {
    method: 'POST',
    url: '/v1/messages?beta=true',
    headers: { authorization: 'Bearer x', 'anthropic-version': String },
    body: { model: MODEL, messages: [{ content: 'record me' }] },
  });
  t.match(o, {
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { authorization: 'Bearer x' },
    body: { model: 'beta-5.5' },
  });
  t.ok(a!.at <= o!.at);
  const served = await fetch(sim.url + '/__sim/requests');
  t.equal(served.status, 404, 'no HTTP route to the log (it holds provider keys) unless started with an inspect token');
  await served.arrayBuffer();
});

t.test('inspectToken: GET and DELETE /__sim/requests for its bearer only', async (t) => {
  const inspected = await startSimulator({ inspectToken: 'tok-123' });
  t.teardown(() => inspected.close());
  await fetch(inspected.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer provider-key' },
    body: JSON.stringify({ model: 'beta-5.5', messages: [{ role: 'user', content: 'hi' }] }),
  });
  for (const headers of [{}, { authorization: 'Bearer tok-12' }, { authorization: 'Bearer provider-key' }] as Record<
    string,
    string
  >[]) {
    const res = await fetch(inspected.url + '/__sim/requests', { headers });
    t.equal(res.status, 401, JSON.stringify(headers));
    t.match(await res.json(), { error: { message: String } });
  }
  const listed = (await (
    await fetch(inspected.url + '/__sim/requests', { headers: { authorization: 'Bearer tok-123' } })
  ).json()) as unknown[];
  t.equal(listed.length, 1, 'the provider call alone: looks at the log are not logged');
  t.match(listed[0], { url: '/v1/chat/completions', headers: { authorization: 'Bearer provider-key' } });
  t.equal((await fetch(inspected.url + '/__sim/requests', { method: 'DELETE' })).status, 401);
  const del = await fetch(inspected.url + '/__sim/requests', {
    method: 'DELETE',
    headers: { authorization: 'Bearer tok-123' },
  });
  t.equal(del.status, 204);
  t.equal(inspected.received.length, 0);
});

t.test('the request log keeps at least maxRecorded of the latest requests, and never twice as many', async (t) => {
  const app = Fastify({ logger: false });
  const received: RecordedRequest[] = [];
  await app.register(simulator, { received, maxRecorded: 3 });
  t.teardown(() => app.close());
  const lengths: number[] = [];
  for (let i = 0; i < 10; i++) {
    const res = await app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: 'Bearer x' },
      payload: { model: 'beta-5.5', messages: [{ role: 'user', content: `n${i}` }] },
    });
    t.equal(res.statusCode, 200);
    lengths.push(received.length);
  }
  t.same(lengths, [1, 2, 3, 4, 5, 3, 4, 5, 3, 4]);
  t.same(
    received.map((r) => (r.body as { messages: { content: string }[] }).messages[0]!.content),
    ['n6', 'n7', 'n8', 'n9'],
    'the latest, in order',
  );
});

t.test('a body with __proto__ or constructor keys is data, answered like any other', async (t) => {
  const res = await fetch(`${sim.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer x' },
    body: '{"model":"beta-5.5","messages":[{"role":"user","content":"hi"}],"__proto__":{"polluted":1},"constructor":{"prototype":{"polluted":1}}}',
  });
  t.equal(res.status, 200);
  t.equal(({} as { polluted?: number }).polluted, undefined, 'no prototype touched');
});

t.test('openai create -> chat.completion; completion_tokens = words; usage details present', async (t) => {
  const c = await openai.chat.completions.create({
    model: 'beta-5.6-sol',
    messages: [
      { role: 'system', content: 'be nice' },
      { role: 'user', content: 'Say something' },
    ],
  });
  t.match(c.id, /^chatcmpl-/);
  t.equal(c.object, 'chat.completion');
  t.equal(c.model, 'beta-5.6-sol');
  t.equal(c.choices.length, 1);
  const choice = c.choices[0]!;
  t.equal(choice.finish_reason, 'stop');
  t.equal(choice.message.role, 'assistant');
  t.equal(choice.message.refusal, null);
  t.equal(c.usage!.completion_tokens, words(choice.message.content!));
  t.equal(c.usage!.total_tokens, c.usage!.prompt_tokens + c.usage!.completion_tokens);
  t.equal(c.usage!.prompt_tokens_details!.cached_tokens, 0);
  t.equal(c.usage!.completion_tokens_details!.reasoning_tokens, 0);
  const anth = await anthropic.messages.create(ask('Say something'));
  t.equal(choice.message.content, textOf(anth), 'the same prompt gives the same words on both protocols');
});

t.test(
  'openai stream with include_usage -> role chunk, one chunk per token, finish chunk, usage chunk, [DONE]',
  async (t) => {
    const s = await openai.chat.completions.create({
      model: 'gamma-k3',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'stream #sim:tokens=20' }],
    });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const c of s) chunks.push(c);
    t.equal(chunks.length, 1 + 20 + 1 + 1);
    t.same(chunks[0]!.choices[0]!.delta, { role: 'assistant', content: '', refusal: null });
    const content = chunks.slice(1, 21).map((c) => c.choices[0]!.delta.content);
    t.ok(
      content.every((x) => typeof x === 'string' && x.trim().split(' ').length === 1),
      'one word per content chunk',
    );
    t.equal(chunks[21]!.choices[0]!.finish_reason, 'stop');
    for (const c of chunks.slice(0, -1)) t.equal(c.usage, null, 'usage: null before the last chunk');
    const last = chunks.at(-1)!;
    t.same(last.choices, []);
    t.equal(last.usage!.completion_tokens, 20);
    t.ok(new Set(chunks.map((c) => c.id)).size === 1, 'one id for all chunks');

    const raw = await sse(
      '/v1/chat/completions',
      { authorization: 'Bearer x' },
      { model: 'gamma-k3', stream: true, messages: [{ role: 'user', content: '#sim:tokens=2' }] },
    );
    t.equal(raw.at(-1)!.data, '[DONE]');
    t.equal(raw.length, 1 + 2 + 1 + 1, 'no usage chunk without include_usage');
    t.notOk('usage' in JSON.parse(raw[1]!.data), 'no usage field without include_usage');
  },
);

t.test('openai max_tokens / max_completion_tokens cap the answer -> finish_reason length; stop cuts it', async (t) => {
  const msg = [{ role: 'user' as const, content: 'long #sim:tokens=30' }];
  const a = await openai.chat.completions.create({ model: 'beta-5.5', messages: msg, max_tokens: 6 });
  t.equal(a.choices[0]!.finish_reason, 'length');
  t.equal(a.usage!.completion_tokens, 6);
  t.equal(words(a.choices[0]!.message.content!), 6);
  const b = await openai.chat.completions.create({ model: 'beta-5.5', messages: msg, max_completion_tokens: 8 });
  t.equal(b.usage!.completion_tokens, 8);
  const full = (await openai.chat.completions.create({ model: 'beta-5.5', messages: msg })).choices[0]!.message
    .content!;
  const stop = ' ' + full.split(' ')[3]!;
  const c = await openai.chat.completions.create({ model: 'beta-5.5', messages: msg, stop: ['@@', stop] });
  t.equal(c.choices[0]!.finish_reason, 'stop');
  t.ok(full.startsWith(c.choices[0]!.message.content! + stop));
  t.equal(c.usage!.completion_tokens, words(c.choices[0]!.message.content!));
  await rejectsWith(
    t,
    openai.chat.completions.create({ model: 'beta-5.5', messages: msg, stop: ['a', 'b', 'c', 'd', 'e'] }),
    OpenAI.BadRequestError,
  );
  await rejectsWith(
    t,
    openai.chat.completions.create({ model: 'beta-5.5', messages: msg, n: 2 }),
    OpenAI.BadRequestError,
  );
  await rejectsWith(
    t,
    openai.chat.completions.create({ model: 'beta-5.5', messages: msg, stream_options: { include_usage: true } }),
    OpenAI.BadRequestError,
    'stream_options needs stream',
  );
});

const fnTools: OpenAI.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', parameters: weather.input_schema } },
  { type: 'function', function: { name: 'get_time', parameters: clock.input_schema } },
];

t.test('openai tool_choice required / named -> tool_calls; streamed arguments rebuild the same call', async (t) => {
  const msg = [{ role: 'user' as const, content: 'weather?' }];
  const c = await openai.chat.completions.create({
    model: 'beta-5.5',
    messages: msg,
    tools: fnTools,
    tool_choice: 'required',
  });
  const choice = c.choices[0]!;
  t.equal(choice.finish_reason, 'tool_calls');
  t.equal(choice.message.content, null);
  const call = choice.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
  t.match(call.id, /^call_/);
  t.equal(call.function.name, 'get_weather');
  t.match(JSON.parse(call.function.arguments), { city: String, days: Number });
  t.equal(c.usage!.completion_tokens, Math.ceil(call.function.arguments.length / 4));

  const named = await openai.chat.completions.create({
    model: 'beta-5.5',
    messages: msg,
    tools: fnTools,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
  });
  t.equal(
    (named.choices[0]!.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall).function.name,
    'get_time',
  );

  const s = await openai.chat.completions.create({
    model: 'beta-5.5',
    messages: msg,
    tools: fnTools,
    tool_choice: 'required',
    stream: true,
    stream_options: { include_usage: true },
  });
  let args = '';
  let name = '';
  let finish: string | null = null;
  let argChunks = 0;
  for await (const ch of s) {
    const tc = ch.choices[0]?.delta.tool_calls?.[0];
    if (tc?.function?.name) name = tc.function.name;
    if (tc?.function?.arguments) {
      args += tc.function.arguments;
      argChunks++;
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  t.equal(name, 'get_weather');
  t.equal(args, call.function.arguments);
  t.equal(finish, 'tool_calls');
  t.equal(argChunks, c.usage!.completion_tokens, 'one arguments chunk per token');
  const plain = await openai.chat.completions.create({ model: 'beta-5.5', messages: msg, tools: fnTools });
  t.type(plain.choices[0]!.message.content, 'string', 'no tool_choice -> text');
});

t.test('openai auth and #sim:status -> OpenAI error shape and typed SDK errors', async (t) => {
  const res = await fetch(sim.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"model":"m","messages":[]}',
  });
  t.equal(res.status, 401);
  t.match(await res.json(), { error: { message: String, type: 'invalid_request_error', param: null, code: null } });
  const unknown = await fetch(sim.url + '/v1/models');
  t.equal(unknown.status, 404);
  t.match(await unknown.json(), { error: { type: 'invalid_request_error', message: /GET \/v1\/models/ } });
  const unknownMessages = await fetch(sim.url + '/v1/messages/batches', { method: 'POST' });
  t.match(
    await unknownMessages.json(),
    { type: 'error', error: { type: 'not_found_error' } },
    'Anthropic paths answer in Anthropic shape',
  );
  const cases: Array<[number, new (...a: never[]) => Error]> = [
    [400, OpenAI.BadRequestError],
    [429, OpenAI.RateLimitError],
    [500, OpenAI.InternalServerError],
    [503, OpenAI.InternalServerError],
  ];
  for (const [status, cls] of cases) {
    const err = await openai.chat.completions
      .create({ model: 'beta-5.5', messages: [{ role: 'user', content: `#sim:status=${status}` }] })
      .catch((e: unknown) => e);
    t.type(err, cls, `${status} -> ${cls.name}`);
    const api = err as InstanceType<typeof OpenAI.APIError>;
    t.equal(api.status, status);
    t.type(api.type, 'string');
    if (status === 429) {
      t.equal(api.code, 'rate_limit_exceeded');
      t.equal(api.headers?.get('retry-after'), '1');
    }
  }
});

t.test('openai #sim:hangup_after=N -> N content chunks, then the connection drops', async (t) => {
  const s = await openai.chat.completions.create({
    model: 'beta-5.5',
    stream: true,
    messages: [{ role: 'user', content: '#sim:tokens=20 #sim:hangup_after=7' }],
  });
  let content = 0;
  await t.rejects(async () => {
    for await (const c of s) if (c.choices[0]?.delta.content) content++;
  });
  t.equal(content, 7);
  const json = openai.chat.completions.create({
    model: 'beta-5.5',
    messages: [{ role: 'user', content: '#sim:hangup_after=1' }],
  });
  await rejectsWith(t, json, OpenAI.APIConnectionError);
});
