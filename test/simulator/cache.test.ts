import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t from 'tap';
import { startSimulator } from '../../plugins/simulator/index.js';
import { PromptCache } from '../../plugins/simulator/prompt-cache.js';
import { anthropicPrompt } from '../../plugins/simulator/prompt.js';
import { textTokens } from '../../plugins/simulator/tokens.js';

const sim = await startSimulator();
t.teardown(() => sim.close());
const anthropic = new Anthropic({ baseURL: sim.url, apiKey: 'x', maxRetries: 0 });
const openai = new OpenAI({ baseURL: sim.url + '/v1', apiKey: 'x', maxRetries: 0 });

/** A text of about 2,000 tokens, distinct per tag. */
const big = (tag: string) => Array.from({ length: 1000 }, (_, i) => `${tag}${i}`).join(' ');
const ephemeral = { type: 'ephemeral' as const };
const user = (content: string) => ({ role: 'user' as const, content });

function split(u: Anthropic.Usage) {
  return {
    input: u.input_tokens,
    read: u.cache_read_input_tokens,
    write: u.cache_creation_input_tokens,
    w5m: u.cache_creation?.ephemeral_5m_input_tokens,
    w1h: u.cache_creation?.ephemeral_1h_input_tokens,
  };
}

t.test(
  'anthropic system breakpoint: first call writes the prefix (5m), the next reads it; counts stay disjoint',
  async (t) => {
    const text = big('sys-a');
    const sysTokens = textTokens(text);
    const params = (q: string) => ({
      model: 'alpha-opus-4-7',
      system: [{ type: 'text' as const, text, cache_control: ephemeral }],
      messages: [user(q)],
    });
    const total1 = (await anthropic.messages.countTokens(params('first question'))).input_tokens;
    const r1 = await anthropic.messages.create({ ...params('first question'), max_tokens: 50 });
    t.same(split(r1.usage), { input: total1 - sysTokens, read: 0, write: sysTokens, w5m: sysTokens, w1h: 0 });
    const total2 = (await anthropic.messages.countTokens(params('second, longer question'))).input_tokens;
    const r2 = await anthropic.messages.create({ ...params('second, longer question'), max_tokens: 50 });
    t.same(split(r2.usage), { input: total2 - sysTokens, read: sysTokens, write: 0, w5m: 0, w1h: 0 });
    t.equal(
      r2.usage.input_tokens + r2.usage.cache_read_input_tokens! + r2.usage.cache_creation_input_tokens!,
      total2,
      'disjoint and complete',
    );

    const other = await anthropic.messages.create({
      ...params('first question'),
      model: 'alpha-sonnet-5',
      max_tokens: 50,
    });
    t.equal(other.usage.cache_read_input_tokens, 0, 'caches are per model');
    t.equal(other.usage.cache_creation_input_tokens, sysTokens);
  },
);

t.test(
  'anthropic 1h and 5m breakpoints: writes split by TTL; a changed system still reads the tools prefix',
  async (t) => {
    const tool = {
      name: 'lookup',
      description: big('tool-b'),
      input_schema: { type: 'object' as const },
      cache_control: { type: 'ephemeral' as const, ttl: '1h' as const },
    };
    const toolTokens = textTokens(
      JSON.stringify({ name: tool.name, description: tool.description, input_schema: tool.input_schema }),
    );
    const params = (sys: string) => ({
      model: 'alpha-opus-4-7',
      max_tokens: 50,
      tools: [tool],
      system: [{ type: 'text' as const, text: sys, cache_control: ephemeral }],
      messages: [user('q')],
    });
    const sysA = big('sys-b');
    const r1 = await anthropic.messages.create(params(sysA));
    t.same(split(r1.usage), {
      input: r1.usage.input_tokens,
      read: 0,
      write: toolTokens + textTokens(sysA),
      w5m: textTokens(sysA),
      w1h: toolTokens,
    });
    const r2 = await anthropic.messages.create(params(sysA));
    t.same(split(r2.usage), {
      input: r1.usage.input_tokens,
      read: toolTokens + textTokens(sysA),
      write: 0,
      w5m: 0,
      w1h: 0,
    });
    const sysB = big('sys-c');
    const r3 = await anthropic.messages.create(params(sysB));
    t.same(split(r3.usage), {
      input: r3.usage.input_tokens,
      read: toolTokens,
      write: textTokens(sysB),
      w5m: textTokens(sysB),
      w1h: 0,
    });
  },
);

t.test('anthropic prefix under the minimum cacheable length -> not cached', async (t) => {
  const params = {
    model: 'alpha-opus-4-7',
    max_tokens: 50,
    system: [{ type: 'text' as const, text: 'short system', cache_control: ephemeral }],
    messages: [user('q')],
  };
  for (let i = 0; i < 2; i++) {
    const r = await anthropic.messages.create(params);
    t.equal(r.usage.cache_creation_input_tokens, 0);
    t.equal(r.usage.cache_read_input_tokens, 0);
  }
});

t.test(
  'anthropic top-level cache_control caches the whole prompt; the next turn reads it through the lookback',
  async (t) => {
    const system = big('sys-d');
    const turn1 = [user('first #sim:tokens=5')];
    const r1 = await anthropic.messages.create({
      model: 'alpha-opus-4-7',
      max_tokens: 50,
      system,
      messages: turn1,
      cache_control: ephemeral,
    });
    const total1 = (await anthropic.messages.countTokens({ model: 'alpha-opus-4-7', system, messages: turn1 }))
      .input_tokens;
    t.equal(r1.usage.cache_creation_input_tokens, total1);
    t.equal(r1.usage.input_tokens, 0);
    const turn2 = [
      ...turn1,
      { role: 'assistant' as const, content: r1.content as Anthropic.TextBlockParam[] },
      user('second'),
    ];
    const stream = anthropic.messages.stream({
      model: 'alpha-opus-4-7',
      max_tokens: 50,
      system,
      messages: turn2,
      cache_control: ephemeral,
    });
    let start: Anthropic.Usage | undefined;
    stream.on('streamEvent', (e) => {
      if (e.type === 'message_start') start = e.message.usage;
    });
    const r2 = await stream.finalMessage();
    const total2 = (await anthropic.messages.countTokens({ model: 'alpha-opus-4-7', system, messages: turn2 }))
      .input_tokens;
    t.equal(r2.usage.cache_read_input_tokens, total1, 'the first turn is read');
    t.equal(r2.usage.cache_creation_input_tokens, total2 - total1, 'the new turns are written');
    t.same(split(start!), split(r2.usage), 'message_start carries the same split');
  },
);

t.test('anthropic breakpoint rules: more than 4 -> 400; a bad ttl -> 400', async (t) => {
  const blocks = Array.from({ length: 5 }, (_, i) => ({
    type: 'text' as const,
    text: `b${i}`,
    cache_control: ephemeral,
  }));
  const err = await anthropic.messages
    .create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: blocks }] })
    .catch((e: unknown) => e);
  t.type(err, Anthropic.BadRequestError);
  const bad = {
    type: 'text',
    text: 'x',
    cache_control: { type: 'ephemeral', ttl: '2h' },
  } as unknown as Anthropic.TextBlockParam;
  const err2 = await anthropic.messages
    .create({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: [bad] }] })
    .catch((e: unknown) => e);
  t.type(err2, Anthropic.BadRequestError);
});

t.test('PromptCache TTLs: 5m expires, 1h outlives it, a hit refreshes the lifetime', async (t) => {
  const cache = new PromptCache();
  const body = (ttl: '5m' | '1h') => ({
    model: 'm',
    max_tokens: 1,
    system: [{ type: 'text', text: big(`ttl-${ttl}`), cache_control: { type: 'ephemeral', ttl } }],
    messages: [user('q')],
  });
  const five = anthropicPrompt(body('5m'));
  const hour = anthropicPrompt(body('1h'));
  const t0 = 1_000_000;
  const min = 60_000;
  t.ok(cache.anthropic('m', five, t0).write5m > 0);
  t.ok(cache.anthropic('m', hour, t0).write1h > 0);
  t.ok(cache.anthropic('m', five, t0 + 4 * min).read > 0, '5m: hit after 4 min');
  t.ok(cache.anthropic('m', five, t0 + 8 * min).read > 0, '5m: the hit at 4 min refreshed it');
  t.equal(cache.anthropic('m', five, t0 + 13.1 * min).read, 0, '5m: expired 5 min after the last hit');
  t.ok(cache.anthropic('m', hour, t0 + 50 * min).read > 0, '1h: still there after 50 min');
  t.equal(cache.anthropic('m', hour, t0 + 111 * min).read, 0, '1h: expired');
});

t.test('openai automatic caching: from 1024 tokens, the repeated prefix in steps of 128', async (t) => {
  const short = [user('short prompt')];
  for (let i = 0; i < 2; i++) {
    const c = await openai.chat.completions.create({ model: 'beta-5.5', messages: short });
    t.equal(c.usage!.prompt_tokens_details!.cached_tokens, 0, 'under 1024 tokens: never cached');
  }
  const system = { role: 'system' as const, content: big('oa-sys') };
  const turn1 = [system, user('question one')];
  const c1 = await openai.chat.completions.create({ model: 'beta-5.5', messages: turn1 });
  t.equal(c1.usage!.prompt_tokens_details!.cached_tokens, 0, 'first time: nothing cached');
  const c2 = await openai.chat.completions.create({ model: 'beta-5.5', messages: turn1 });
  const cached = c2.usage!.prompt_tokens_details!.cached_tokens!;
  const prefix = c2.usage!.prompt_tokens - 3; // all messages; the 3 reply-priming tokens are not a prefix
  t.equal(cached, 1024 + Math.floor((prefix - 1024) / 128) * 128);
  t.ok(cached <= c2.usage!.prompt_tokens);

  const turn2 = [
    ...turn1,
    { role: 'assistant' as const, content: c1.choices[0]!.message.content! },
    user('question two'),
  ];
  const s = await openai.chat.completions.create({
    model: 'beta-5.5',
    messages: turn2,
    stream: true,
    stream_options: { include_usage: true },
  });
  let usage: OpenAI.CompletionUsage | null | undefined;
  for await (const ch of s) usage = ch.usage ?? usage;
  t.equal(
    usage!.prompt_tokens_details!.cached_tokens,
    cached,
    'the next turn reuses the first turn as prefix (streamed usage too)',
  );
  const other = await openai.chat.completions.create({ model: 'gamma-q3', messages: turn1 });
  t.equal(other.usage!.prompt_tokens_details!.cached_tokens, 0, 'caches are per model');
});
