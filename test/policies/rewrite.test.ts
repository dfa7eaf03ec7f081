import t from 'tap';
import { buildConfig, embeddedDefault } from '../../plugins/config.js';
import { GatewayError } from '../../policies/errors.js';
import { ModelCatalog, type ModelRoute, type TextModel } from '../../policies/catalog.js';
import { mapReasoningEffort, rewriteChat, rewriteMessages } from '../../policies/rewrite.js';
import { chatBody, messagesBody, parseBody } from '../../policies/schemas.js';

const config = buildConfig(embeddedDefault('http://127.0.0.1:1'), { FAREBOX_SIM_KEY: 'k' });
const catalog = new ModelCatalog(config);
const user = [{ role: 'user', content: 'hi' }];

const chat = (body: object) => {
  const parsed = parseBody(chatBody, body);
  return rewriteChat(parsed, catalog.route('chat_completions', parsed.model) as ModelRoute<TextModel>);
};
const messages = (body: object) => {
  const parsed = parseBody(messagesBody, body);
  return rewriteMessages(parsed, catalog.route('messages', parsed.model) as ModelRoute<TextModel>);
};
const code = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    return (e as GatewayError).code;
  }
  return 'no error';
};

t.test('messages: max_tokens above the ceiling is clamped and reported', async (t) => {
  const r = messages({ model: 'alpha-sonnet-4-6', max_tokens: 1_000_000, messages: user });
  t.equal(r.body.max_tokens, 64_000);
  t.equal(r.clampedTo, 64_000);
  t.equal(r.maxOutputTokens, 64_000);
});

t.test('messages: max_tokens at or below the ceiling is untouched, not reported', async (t) => {
  for (const n of [1, 64_000]) {
    const r = messages({ model: 'alpha-sonnet-4-6', max_tokens: n, messages: user });
    t.equal(r.body.max_tokens, n);
    t.equal(r.clampedTo, undefined);
  }
});

t.test('messages: unknown fields pass through; temperature dropped only where refused', async (t) => {
  const body = {
    model: 'alpha-opus-4-7',
    max_tokens: 10,
    messages: user,
    temperature: 0.5,
    thinking: { type: 'adaptive' },
    context_management: { x: 1 },
  };
  const r = messages(body);
  t.same(r.body.thinking, { type: 'adaptive' });
  t.same(r.body.context_management, { x: 1 });
  t.notOk('temperature' in r.body, 'alpha-opus-4-7 no longer accepts temperature');
  t.equal(messages({ ...body, model: 'alpha-sonnet-4-6' }).body.temperature, 0.5);
});

t.test('messages: missing max_tokens or messages -> 400 invalid_request', async (t) => {
  t.equal(
    code(() => messages({ model: 'alpha-sonnet-4-6', messages: user })),
    'invalid_request',
  );
  t.equal(
    code(() => messages({ model: 'alpha-sonnet-4-6', max_tokens: 5 })),
    'invalid_request',
  );
});

t.test('routing: unknown model -> unknown_model; beta on messages -> wrong_endpoint', async (t) => {
  t.equal(
    code(() => catalog.route('chat_completions', 'alpha-sonnet-4.6')),
    'unknown_model',
  );
  t.equal(
    code(() => catalog.route('messages', 'beta-5.6-sol')),
    'wrong_endpoint',
  );
  t.equal(catalog.route('chat_completions', 'alpha-sonnet-4-6').provider.protocol, 'openai');
  t.equal(catalog.route('messages', 'alpha-sonnet-4-6').provider.protocol, 'anthropic');
});

t.test('chat: max_completion_tokens is an alias; the upstream always gets a bound', async (t) => {
  t.equal(chat({ model: 'beta-5.6-sol', messages: user, max_completion_tokens: 77 }).body.max_completion_tokens, 77);
  t.equal(chat({ model: 'beta-5.6-sol', messages: user, max_tokens: 77 }).body.max_completion_tokens, 77);
  const none = chat({ model: 'beta-5.6-sol', messages: user });
  t.equal(none.body.max_completion_tokens, 128_000);
  t.equal(none.clampedTo, undefined, 'no header when the caller set no limit');
  const gamma = chat({ model: 'gamma-k3', messages: user, max_completion_tokens: 99_999 });
  t.equal(gamma.body.max_tokens, 32_768, 'open-weight hosts read max_tokens');
  t.notOk('max_completion_tokens' in gamma.body);
  t.equal(gamma.clampedTo, 32_768);
});

t.test('chat: stop sequences: 4 pass, 5 -> too_many_stop_sequences', async (t) => {
  t.same(chat({ model: 'gamma-k3', messages: user, stop: ['a', 'b', 'c', 'd'] }).body.stop, ['a', 'b', 'c', 'd']);
  t.equal(
    code(() => chat({ model: 'gamma-k3', messages: user, stop: ['a', 'b', 'c', 'd', 'e'] })),
    'too_many_stop_sequences',
  );
});

t.test('chat: temperature removed for models that refuse it, kept otherwise', async (t) => {
  t.notOk('temperature' in chat({ model: 'beta-5.6-sol', messages: user, temperature: 0.2 }).body);
  t.equal(chat({ model: 'gamma-k3', messages: user, temperature: 0.2 }).body.temperature, 0.2);
});

t.test('chat: streams always ask for usage; caller choice remembered', async (t) => {
  const a = chat({ model: 'gamma-k3', messages: user, stream: true });
  t.same(a.body.stream_options, { include_usage: true });
  t.equal(a.callerWantsUsage, false);
  const b = chat({ model: 'gamma-k3', messages: user, stream: true, stream_options: { include_usage: true } });
  t.equal(b.callerWantsUsage, true);
  t.notOk(
    'stream_options' in chat({ model: 'gamma-k3', messages: user, stream_options: { include_usage: true } }).body,
  );
});

const effortCases: Array<[string, string, string | undefined | 'error']> = [
  // [model, requested, sent upstream]
  ['beta-5.6-sol', 'low', 'low'],
  ['beta-5.6-sol', 'max', 'max'],
  ['beta-5.6-sol', 'xhigh', 'xhigh'],
  ['beta-5.5', 'max', 'high'],
  ['beta-5.6-sol', 'none', 'error'],
  ['beta-5.6-sol', 'minimal', 'error'],
  ['alpha-sonnet-4-6', 'none', 'low'],
  ['alpha-sonnet-4-6', 'minimal', 'low'],
  ['alpha-sonnet-4-6', 'medium', 'medium'],
  ['alpha-sonnet-4-6', 'max', 'high'],
  ['alpha-opus-5', 'xhigh', 'xhigh'],
  ['alpha-opus-5', 'none', 'low'],
  ['gamma-k3', 'high', undefined],
  ['gamma-k3', 'bogus', undefined],
  ['alpha-sonnet-4-6', 'extreme', 'error'],
  ['beta-5.6-sol', 'HIGH', 'error'],
];
for (const [model, requested, sent] of effortCases) {
  t.test(`reasoning_effort ${requested} on ${model} -> ${sent ?? 'removed'}`, async (t) => {
    if (sent === 'error') {
      t.equal(
        code(() => chat({ model, messages: user, reasoning_effort: requested })),
        'invalid_reasoning_effort',
      );
      return;
    }
    const r = chat({ model, messages: user, reasoning_effort: requested });
    if (sent === undefined) t.notOk('reasoning_effort' in r.body);
    else t.equal(r.body.reasoning_effort, sent);
  });
}

t.test('nearest level: ties go to the lower level', async (t) => {
  t.equal(mapReasoningEffort('beta', ['low', 'high'], 'medium'), 'low');
  t.equal(mapReasoningEffort('alpha', ['medium', 'max'], 'none'), 'medium');
});

t.test('chat: bad shapes -> invalid_request naming the field', async (t) => {
  try {
    chat({ model: 'gamma-k3', messages: [{ role: 'robot', content: 'x' }] });
    t.fail('accepted');
  } catch (e) {
    t.equal((e as GatewayError).code, 'invalid_request');
    t.match((e as GatewayError).message, /messages\.0\.role/);
  }
  t.equal(
    code(() => chat({ model: 'gamma-k3', messages: [] })),
    'invalid_request',
  );
  t.equal(
    code(() => chat({ model: 'gamma-k3', messages: user, max_tokens: -1 })),
    'invalid_request',
  );
  t.equal(
    code(() => parseBody(chatBody, [1, 2])),
    'invalid_request',
  );
});
