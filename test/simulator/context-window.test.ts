// The simulator refuses what the providers refuse about a model's limits, in their words: a prompt over the context
// window, an output limit over the model's most; it serves what they serve. Prompts are sized with the simulator's
// own count (a text of 4k ASCII characters is k tokens), which count_tokens and the usage report alike.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { embeddedDefault } from '../../plugins/config.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { modelLimits } from '../../plugins/simulator/models.js';
import { CHAT, MESSAGE, refusal, text } from '../helpers/prompts.js';

const sim = await startSimulator();
t.teardown(() => sim.close());
const anthropic = new Anthropic({ baseURL: sim.url, apiKey: 'x', maxRetries: 0 });
const openai = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'x', maxRetries: 0 });

t.test(
  'Messages: one token over a 200,000-token window is refused as Anthropic words it; the window itself is served',
  async (t) => {
    const over = {
      model: 'alpha-haiku-4-5',
      max_tokens: 16,
      messages: [{ role: 'user' as const, content: text(200_001 - MESSAGE) }],
    };
    t.equal(
      (await anthropic.messages.countTokens({ model: over.model, messages: over.messages })).input_tokens,
      200_001,
      'count_tokens counts a prompt over the window',
    );
    const err = await refusal(t, anthropic.messages.create(over), Anthropic.BadRequestError);
    t.equal(err.status, 400);
    t.match(err.error, {
      type: 'error',
      error: { type: 'invalid_request_error', message: 'prompt is too long: 200001 tokens > 200000 maximum' },
    });
    const streamed = await refusal(t, anthropic.messages.stream(over).finalMessage(), Anthropic.BadRequestError);
    t.equal(streamed.status, 400, 'a stream is refused before it starts');

    // The whole window with max_tokens beyond it: served, as Anthropic serves it.
    const m = await anthropic.messages.create({
      ...over,
      max_tokens: 1_000,
      messages: [{ role: 'user', content: text(200_000 - MESSAGE) }],
    });
    t.equal(m.usage.input_tokens, 200_000, 'usage reports the count the window was checked with');
  },
);

t.test("Messages: max_tokens over the model's most output is refused as Anthropic words it", async (t) => {
  // A timeout set: the SDK refuses to wait unstreamed for so many tokens unless told how long.
  const long = { timeout: 60_000 };
  const err = await refusal(
    t,
    anthropic.messages.create(
      { model: 'alpha-haiku-4-5', max_tokens: 64_001, messages: [{ role: 'user', content: 'hi' }] },
      long,
    ),
    Anthropic.BadRequestError,
  );
  t.match(err.error, {
    error: {
      type: 'invalid_request_error',
      message: 'max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for alpha-haiku-4-5',
    },
  });
  const opus = await anthropic.messages.create(
    { model: 'claude-opus-4-6', max_tokens: 128_000, messages: [{ role: 'user', content: 'hi' }] },
    long,
  );
  t.equal(opus.type, 'message', "a provider id is known too: 128,000 is claude-opus-4-6's most");
});

t.test(
  'Chat Completions on OpenAI: input over the window less the most output is refused as context_length_exceeded',
  async (t) => {
    const err = await refusal(
      t,
      openai.chat.completions.create({
        model: 'beta-5.5',
        max_completion_tokens: 16,
        messages: [{ role: 'user', content: text(922_001 - CHAT) }],
      }),
      OpenAI.BadRequestError,
    );
    t.equal(err.status, 400);
    t.same(err.error, {
      message:
        'Input tokens exceed the configured limit of 922000 tokens. Your messages resulted in 922001 tokens. Please reduce the length of the messages.',
      type: 'invalid_request_error',
      param: 'messages',
      code: 'context_length_exceeded',
    });
    const big = await refusal(
      t,
      openai.chat.completions.create({
        model: 'beta-5.6-mini',
        max_completion_tokens: 128_001,
        messages: [{ role: 'user', content: 'hi' }],
      }),
      OpenAI.BadRequestError,
    );
    t.same(big.error, {
      message:
        'max_tokens is too large: 128001. This model supports at most 128000 completion tokens, whereas you provided 128001.',
      type: 'invalid_request_error',
      param: 'max_tokens',
      code: 'invalid_value',
    });
  },
);

t.test(
  'Chat Completions on an open-weight host: input over the window, then input plus the output limit, are refused',
  async (t) => {
    const window = 262_144;
    const over = await refusal(
      t,
      openai.chat.completions.create({
        model: 'gamma-q3',
        max_tokens: 16,
        stream: true,
        messages: [{ role: 'user', content: text(window + 1 - CHAT) }],
      }),
      OpenAI.BadRequestError,
    );
    t.same(
      over.error,
      {
        message:
          "This model's maximum context length is 262144 tokens. However, your messages resulted in 262145 tokens. Please reduce the length of the messages.",
        type: 'invalid_request_error',
        param: 'messages',
        code: 'context_length_exceeded',
      },
      'streamed, refused before the stream',
    );
    const input = window - 1_000;
    const both = await refusal(
      t,
      openai.chat.completions.create({
        model: 'gamma-q3',
        max_tokens: 1_001,
        messages: [{ role: 'user', content: text(input - CHAT) }],
      }),
      OpenAI.BadRequestError,
    );
    t.same(both.error, {
      message:
        "This model's maximum context length is 262144 tokens. However, you requested 262145 tokens (261144 in the messages, 1001 in the completion). Please reduce the length of the messages or completion.",
      type: 'invalid_request_error',
      param: 'messages',
      code: 'context_length_exceeded',
    });
    const fits = await openai.chat.completions.create({
      model: 'gamma-q3',
      max_tokens: 1_000,
      messages: [{ role: 'user', content: text(input - CHAT) }],
    });
    t.equal(fits.usage?.prompt_tokens, input, 'the window filled exactly is served');
  },
);

t.test(
  "Chat Completions on Claude (Anthropic's OpenAI-compatible endpoint): Anthropic's words in OpenAI's error shape",
  async (t) => {
    const err = await refusal(
      t,
      openai.chat.completions.create({
        model: 'alpha-haiku-4-5',
        max_tokens: 16,
        messages: [{ role: 'user', content: text(200_001 - CHAT) }],
      }),
      OpenAI.BadRequestError,
    );
    t.same(err.error, {
      message: 'prompt is too long: 200001 tokens > 200000 maximum',
      type: 'invalid_request_error',
      param: null,
      code: null,
    });
  },
);

t.test('a model the simulator does not know has no limits', async (t) => {
  const m = await anthropic.messages.create(
    { model: 'some-model', max_tokens: 10_000_000, messages: [{ role: 'user', content: 'hi' }] },
    { timeout: 60_000 },
  );
  t.equal(m.type, 'message');
});

t.test('the embedded default gives each text model the window of the provider model it stands for', async (t) => {
  // The hold bounds input by the configured window: a provider serving a larger one could bill above the hold.
  type TextModel = { id: string; family: string; context_window: number; max_tokens: number };
  const models = (embeddedDefault(sim.url).models as TextModel[]).filter((m) =>
    ['alpha', 'beta', 'gamma'].includes(m.family),
  );
  t.equal(models.length, 13, 'every text model of the spec');
  for (const m of models) {
    const limits = modelLimits(m.id);
    t.equal(m.context_window, limits?.contextWindow, `${m.id}: context_window`);
    t.ok(m.max_tokens <= (limits?.maxOutput ?? 0), `${m.id}: its max_tokens ceiling is within the model's most output`);
  }
});
