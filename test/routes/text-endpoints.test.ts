import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startHarness } from '../helpers/harness.js';
import { validator } from '../helpers/conformance.js';

const h = await startHarness();
t.teardown(() => h.close());

const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const lastReceived = () => h.sim.received[h.sim.received.length - 1];
const chatSchema = validator('CreateChatCompletionResponse');
const chunkSchema = validator('CreateChatCompletionStreamResponse');

t.test('messages: plain call through the Anthropic SDK', async (t) => {
  const { data, response } = await anthropic.messages
    .create({
      model: 'alpha-sonnet-4-6',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'Hello #sim:tokens=7' }],
    })
    .withResponse();
  t.equal(data.type, 'message');
  t.equal(data.model, 'alpha-sonnet-4-6');
  t.equal(data.usage.output_tokens, 7);
  const text = data.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
  t.equal(text.trim().split(/\s+/).length, 7, 'seven words for seven tokens');
  t.match(response.headers.get('x-request-id'), /^req_[0-9a-f]{32}$/);
  t.equal(
    (data as { _request_id?: string | null })._request_id,
    response.headers.get('x-request-id'),
    'the SDK sees our request id',
  );
  t.equal(lastReceived().headers['x-api-key'], 'sim-key', 'the operator key goes upstream');
  t.notOk(JSON.stringify(lastReceived().headers).includes(h.key), 'the caller key never goes upstream');
});

t.test('messages: streaming through the Anthropic SDK, usage in message_start and message_delta', async (t) => {
  const stream = anthropic.messages.stream({
    model: 'alpha-haiku-4-5',
    max_tokens: 50,
    messages: [{ role: 'user', content: 'Stream #sim:tokens=12' }],
  });
  const events: string[] = [];
  stream.on('streamEvent', (e) => events.push(e.type));
  const msg = await stream.finalMessage();
  t.equal(msg.usage.output_tokens, 12);
  t.ok(msg.usage.input_tokens > 0);
  t.same(
    [...new Set(events)],
    [
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ],
  );
  const { response } = await anthropic.messages
    .create({ model: 'alpha-haiku-4-5', max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] })
    .withResponse();
  t.match(response.headers.get('x-request-id'), /^req_/, 'streams carry x-request-id');
  t.match(response.headers.get('content-type'), /text\/event-stream/);
});

t.test('count_tokens through the Anthropic SDK', async (t) => {
  const r = await anthropic.messages.countTokens({
    model: 'alpha-opus-4-6',
    messages: [{ role: 'user', content: 'count these words please' }],
  });
  t.ok(r.input_tokens > 0);
  t.match(lastReceived().url, /^\/v1\/messages\/count_tokens/);
});

t.test('chat completions: plain call through the OpenAI SDK conforms to the published schema', async (t) => {
  const { data, response } = await openai.chat.completions
    .create({ model: 'beta-5.6-sol', messages: [{ role: 'user', content: 'Hi #sim:tokens=5' }] })
    .withResponse();
  t.same(chatSchema(data), []);
  t.equal(data.object, 'chat.completion');
  t.equal(data.usage?.completion_tokens, 5);
  t.equal(data.usage?.total_tokens, (data.usage?.prompt_tokens ?? 0) + 5);
  t.match(response.headers.get('x-request-id'), /^req_/);
  t.equal(lastReceived().headers.authorization, 'Bearer sim-key');
});

t.test('chat completions: stream with include_usage ends with a usage-only chunk', async (t) => {
  const stream = await openai.chat.completions.create({
    model: 'gamma-k3',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Go #sim:tokens=20' }],
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  for (const c of chunks) t.same(chunkSchema(c), [], 'chunk conforms');
  const last = chunks[chunks.length - 1];
  t.same(last.choices, []);
  t.equal(last.usage?.completion_tokens, 20);
  t.equal(chunks.filter((c) => c.choices[0]?.delta?.content).length, 20);
});

t.test(
  'chat completions: stream without include_usage gets no usage chunk, though usage was asked upstream',
  async (t) => {
    const stream = await openai.chat.completions.create({
      model: 'beta-5.5',
      stream: true,
      messages: [{ role: 'user', content: 'Go #sim:tokens=3' }],
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    t.ok(
      chunks.every((c) => c.choices.length > 0),
      'no choices: [] chunk',
    );
    t.same((lastReceived().body as { stream_options: unknown }).stream_options, { include_usage: true });
  },
);

t.test('alpha models are served on chat completions too', async (t) => {
  const r = await openai.chat.completions.create({
    model: 'alpha-sonnet-4-6',
    messages: [{ role: 'user', content: 'hi' }],
  });
  t.equal(r.object, 'chat.completion');
  t.match(lastReceived().url, /^\/v1\/chat\/completions/);
});

t.test('unknown request fields pass through to the upstream', async (t) => {
  await openai.chat.completions.create({
    model: 'gamma-k3',
    messages: [{ role: 'user', content: 'hi' }],
    // @ts-expect-error a field the SDK does not know
    x_custom: { deep: [1, 2] },
    metadata: { team: 'a' },
  });
  const body = lastReceived().body as Record<string, unknown>;
  t.same(body.x_custom, { deep: [1, 2] });
  t.same(body.metadata, { team: 'a' });
  await anthropic.messages.create({
    model: 'alpha-sonnet-4-6',
    max_tokens: 10,
    messages: [{ role: 'user', content: 'hi' }],
    // @ts-expect-error a field the SDK does not know
    some_future_field: 'kept',
  });
  t.equal((lastReceived().body as Record<string, unknown>).some_future_field, 'kept');
});

t.test('max_tokens clamping: header only when clamped, on both endpoints; upstream gets the ceiling', async (t) => {
  const clamped = await anthropic.messages
    .create(
      { model: 'alpha-opus-4-6', max_tokens: 500_000, messages: [{ role: 'user', content: 'hi' }] },
      { timeout: 60_000 },
    )
    .withResponse();
  t.equal(clamped.response.headers.get('x-gw-clamped-max-tokens'), '32000');
  t.equal((lastReceived().body as { max_tokens: number }).max_tokens, 32_000);
  const fine = await anthropic.messages
    .create({ model: 'alpha-opus-4-6', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  t.equal(fine.response.headers.get('x-gw-clamped-max-tokens'), null);

  const chat = await openai.chat.completions
    .create({ model: 'gamma-q3', max_completion_tokens: 1_000_000, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  t.equal(chat.response.headers.get('x-gw-clamped-max-tokens'), '32768');
  t.equal((lastReceived().body as { max_tokens: number }).max_tokens, 32_768);
  const stream = await openai.chat.completions
    .create({ model: 'gamma-q3', stream: true, max_tokens: 1_000_000, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  for await (const _ of stream.data);
  t.equal(stream.response.headers.get('x-gw-clamped-max-tokens'), '32768', 'streams carry it too');
});

t.test('rewrites reach the upstream: temperature dropped, reasoning_effort mapped, gamma effort removed', async (t) => {
  await openai.chat.completions.create({
    model: 'beta-5.6-sol',
    temperature: 0.3,
    reasoning_effort: 'high',
    messages: [{ role: 'user', content: 'hi' }],
  });
  let body = lastReceived().body as Record<string, unknown>;
  t.notOk('temperature' in body);
  t.equal(body.reasoning_effort, 'high');
  await openai.chat.completions.create({
    model: 'alpha-sonnet-4-6',
    messages: [{ role: 'user', content: 'hi' }],
    reasoning_effort: 'none' as never,
  });
  t.equal((lastReceived().body as Record<string, unknown>).reasoning_effort, 'low');
  await openai.chat.completions.create({
    model: 'gamma-k3',
    temperature: 0.3,
    reasoning_effort: 'high',
    messages: [{ role: 'user', content: 'hi' }],
  });
  body = lastReceived().body as Record<string, unknown>;
  t.notOk('reasoning_effort' in body);
  t.equal(body.temperature, 0.3);
});

t.test(
  'Claude Code shape: ?beta=true, anthropic-beta and version forwarded unchanged, big bodies, system role inside messages',
  async (t) => {
    const big = 'lorem ipsum '.repeat(10_000);
    const res = await fetch(`${h.url}/v1/messages?beta=true`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${h.key}`,
        'content-type': 'application/json',
        'anthropic-version': '2026-10-21',
        'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14',
        'user-agent': 'claude-cli/2.1.300 (external, sdk-cli)',
        'x-app': 'cli',
      },
      body: JSON.stringify({
        model: 'alpha-sonnet-4-6',
        max_tokens: 32_000,
        stream: true,
        messages: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: [{ type: 'text', text: big }] },
        ],
        thinking: { type: 'enabled', budget_tokens: 1024 },
        output_config: { effort: 'high' },
        context_management: { edits: [] },
        metadata: { user_id: 'u' },
      }),
    });
    t.equal(res.status, 200);
    const text = await res.text();
    t.match(text, /event: message_stop/);
    const got = lastReceived();
    t.equal(got.headers['anthropic-version'], '2026-10-21');
    t.equal(got.headers['anthropic-beta'], 'claude-code-20250219,interleaved-thinking-2025-05-14');
    t.ok(JSON.stringify(got.body).length > 80_000);
    t.same((got.body as { output_config: unknown }).output_config, { effort: 'high' });
  },
);

t.test('upstream failures reach the caller in its protocol, as the SDKs typed errors', async (t) => {
  const chat = (content: string) =>
    openai.chat.completions.create({ model: 'gamma-k3', messages: [{ role: 'user', content }] });
  const e500 = await chat('#sim:status=500').catch((e) => e);
  t.ok(e500 instanceof OpenAI.InternalServerError, 'OpenAI InternalServerError');
  t.equal(e500.status, 502);
  t.equal(e500.error?.code, 'upstream_error');
  t.match(e500.headers?.get('x-request-id'), /^req_/);

  const e429 = await chat('#sim:status=429').catch((e) => e);
  t.ok(e429 instanceof OpenAI.RateLimitError);
  t.equal(e429.error?.code, 'upstream_rate_limited');
  t.ok(e429.headers?.get('retry-after'), 'the upstream Retry-After is passed on');

  const e400 = await chat('#sim:status=400').catch((e) => e);
  t.ok(e400 instanceof OpenAI.BadRequestError);
  t.equal(e400.error?.code, 'upstream_invalid_request');

  const a529 = await anthropic.messages
    .create({ model: 'alpha-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: '#sim:status=529' }] })
    .catch((e) => e);
  t.ok(a529 instanceof Anthropic.APIError);
  t.equal(a529.status, 503);
  t.equal(a529.error?.type, 'error');
  t.equal(a529.error?.error?.type, 'overloaded_error');

  const a401 = await anthropic.messages
    .create({ model: 'alpha-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: '#sim:status=401' }] })
    .catch((e) => e);
  t.equal(a401.status, 502, "the provider refusing the operator's key is not the caller's 401");
});

t.test('an upstream that hangs up mid-stream ends the caller stream without crashing the gateway', async (t) => {
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'gamma-k3',
      stream: true,
      messages: [{ role: 'user', content: '#sim:tokens=50 #sim:hangup_after=5' }],
    }),
  });
  t.equal(res.status, 200);
  const text = await res.text().catch(() => 'aborted');
  t.notMatch(text, /\[DONE\]/);
  const ok = await openai.chat.completions.create({
    model: 'gamma-k3',
    messages: [{ role: 'user', content: 'still up?' }],
  });
  t.equal(ok.object, 'chat.completion');
});
