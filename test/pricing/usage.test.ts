import t from 'tap';
import { ZERO_USAGE, fromAnthropicUsage, fromOpenAIUsage, makeUsage } from '../../pricing/index.js';

const zero = { ...ZERO_USAGE };

t.test('makeUsage fills missing and null counts with 0 and freezes', async (t) => {
  const u = makeUsage({ input_tokens: 5, images: null });
  t.strictSame(u, { ...zero, input_tokens: 5 });
  t.ok(Object.isFrozen(u));
  t.ok(Object.isFrozen(ZERO_USAGE));
  t.strictSame(Object.keys(u), [
    'input_tokens',
    'output_tokens',
    'cache_read_tokens',
    'cache_write_5m_tokens',
    'cache_write_1h_tokens',
    'images',
    'video_seconds',
  ]);
});

t.test('makeUsage rejects negative, fractional, unsafe and non-number counts, naming the field', async (t) => {
  t.throws(() => makeUsage({ output_tokens: -1 }), /usage\.output_tokens must be a non-negative integer/);
  t.throws(() => makeUsage({ images: 1.5 }), /usage\.images/);
  t.throws(() => makeUsage({ input_tokens: Number.MAX_SAFE_INTEGER + 1 }), /usage\.input_tokens/);
  t.throws(() => makeUsage({ input_tokens: NaN }), /usage\.input_tokens/);
  t.throws(() => makeUsage({ input_tokens: Infinity }), /usage\.input_tokens/);
  t.throws(() => makeUsage({ input_tokens: '3' as unknown as number }), /usage\.input_tokens/);
  t.equal(makeUsage({ input_tokens: -0 }).input_tokens, 0);
  t.equal(Object.is(makeUsage({ input_tokens: -0 }).input_tokens, -0), false, '-0 normalised');
});

t.test('Anthropic usage: input, output, cache read and the TTL split map to disjoint buckets', async (t) => {
  const u = fromAnthropicUsage({
    input_tokens: 12,
    output_tokens: 340,
    cache_read_input_tokens: 5000,
    cache_creation_input_tokens: 3000,
    cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 2000 },
  });
  t.strictSame(u, {
    ...zero,
    input_tokens: 12,
    output_tokens: 340,
    cache_read_tokens: 5000,
    cache_write_5m_tokens: 1000,
    cache_write_1h_tokens: 2000,
  });
});

t.test(
  'Anthropic usage without the TTL split: creation billed at 1h by default, at 5m for a request that cannot write 1h',
  async (t) => {
    const raw = { input_tokens: 1, output_tokens: 2, cache_creation_input_tokens: 700 };
    t.strictSame(fromAnthropicUsage(raw), { ...zero, input_tokens: 1, output_tokens: 2, cache_write_1h_tokens: 700 });
    t.strictSame(fromAnthropicUsage(raw, '1h'), {
      ...zero,
      input_tokens: 1,
      output_tokens: 2,
      cache_write_1h_tokens: 700,
    });
    t.strictSame(fromAnthropicUsage(raw, '5m'), {
      ...zero,
      input_tokens: 1,
      output_tokens: 2,
      cache_write_5m_tokens: 700,
    });
    t.strictSame(fromAnthropicUsage(raw, 'none'), {
      ...zero,
      input_tokens: 1,
      output_tokens: 2,
      cache_write_5m_tokens: 700,
    });
    t.strictSame(fromAnthropicUsage({ ...raw, cache_creation: null }), {
      ...zero,
      input_tokens: 1,
      output_tokens: 2,
      cache_write_1h_tokens: 700,
    });
  },
);

t.test('Anthropic usage with a split short of the total: the remainder goes to the request tier', async (t) => {
  const raw = {
    cache_creation_input_tokens: 100,
    cache_creation: { ephemeral_5m_input_tokens: 30, ephemeral_1h_input_tokens: 50 },
  };
  t.strictSame(fromAnthropicUsage(raw, '1h'), { ...zero, cache_write_5m_tokens: 30, cache_write_1h_tokens: 70 });
  t.strictSame(fromAnthropicUsage(raw, '5m'), { ...zero, cache_write_5m_tokens: 50, cache_write_1h_tokens: 50 });
});

t.test('Anthropic usage with only the split present counts the split', async (t) => {
  t.strictSame(fromAnthropicUsage({ cache_creation: { ephemeral_5m_input_tokens: 4, ephemeral_1h_input_tokens: 6 } }), {
    ...zero,
    cache_write_5m_tokens: 4,
    cache_write_1h_tokens: 6,
  });
});

t.test('Anthropic usage: missing, null and partial objects are zeros', async (t) => {
  t.strictSame(fromAnthropicUsage(undefined), zero);
  t.strictSame(fromAnthropicUsage(null), zero);
  t.strictSame(fromAnthropicUsage({}), zero);
  t.strictSame(
    fromAnthropicUsage({
      input_tokens: 9,
      output_tokens: null,
      cache_read_input_tokens: null,
      cache_creation_input_tokens: null,
      cache_creation: null,
    }),
    { ...zero, input_tokens: 9 },
  );
});

t.test('Anthropic usage rejects negative and non-integer numbers, naming the provider field', async (t) => {
  t.throws(() => fromAnthropicUsage({ input_tokens: -1 }), /usage\.input_tokens/);
  t.throws(() => fromAnthropicUsage({ output_tokens: 2.5 }), /usage\.output_tokens/);
  t.throws(() => fromAnthropicUsage({ cache_read_input_tokens: -3 }), /usage\.cache_read_input_tokens/);
  t.throws(() => fromAnthropicUsage({ cache_creation_input_tokens: 0.1 }), /usage\.cache_creation_input_tokens/);
  t.throws(
    () => fromAnthropicUsage({ cache_creation: { ephemeral_1h_input_tokens: -1 } }),
    /ephemeral_1h_input_tokens/,
  );
  t.throws(() => fromAnthropicUsage({ input_tokens: '5' as unknown as number }), /usage\.input_tokens/);
});

t.test(
  'OpenAI usage: cached tokens leave the input bucket for cache read; reasoning is already in completion',
  async (t) => {
    const u = fromOpenAIUsage({
      prompt_tokens: 2006,
      completion_tokens: 300,
      prompt_tokens_details: { cached_tokens: 1920 },
      completion_tokens_details: { reasoning_tokens: 256 },
      total_tokens: 2306,
    } as Parameters<typeof fromOpenAIUsage>[0]);
    t.strictSame(u, { ...zero, input_tokens: 86, cache_read_tokens: 1920, output_tokens: 300 });
  },
);

t.test('OpenAI usage: missing or null details mean no cache read', async (t) => {
  t.strictSame(fromOpenAIUsage({ prompt_tokens: 10, completion_tokens: 3 }), {
    ...zero,
    input_tokens: 10,
    output_tokens: 3,
  });
  t.strictSame(fromOpenAIUsage({ prompt_tokens: 10, prompt_tokens_details: null }), { ...zero, input_tokens: 10 });
  t.strictSame(fromOpenAIUsage({ prompt_tokens: 10, prompt_tokens_details: { cached_tokens: null } }), {
    ...zero,
    input_tokens: 10,
  });
  t.strictSame(fromOpenAIUsage(null), zero);
  t.strictSame(fromOpenAIUsage(undefined), zero);
});

t.test('OpenAI usage: cached above prompt is capped so the input side never exceeds prompt_tokens', async (t) => {
  t.strictSame(fromOpenAIUsage({ prompt_tokens: 10, prompt_tokens_details: { cached_tokens: 50 } }), {
    ...zero,
    cache_read_tokens: 10,
  });
});

t.test('OpenAI usage rejects negative and non-integer numbers', async (t) => {
  t.throws(() => fromOpenAIUsage({ prompt_tokens: -1 }), /usage\.prompt_tokens/);
  t.throws(() => fromOpenAIUsage({ completion_tokens: 1.25 }), /usage\.completion_tokens/);
  t.throws(() => fromOpenAIUsage({ prompt_tokens: 5, prompt_tokens_details: { cached_tokens: -2 } }), /cached_tokens/);
});
