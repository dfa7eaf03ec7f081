// What a text call is billed once it ends (plugins/routes/text.ts billedUsage): the upstream's usage for a whole
// answer; for a cut one, what reached the caller, rounded up; nothing for an answer cut before any content.
import t from 'tap';
import { buildConfig, embeddedDefault } from '../../plugins/config.js';
import { billedUsage, textPoliced } from '../../plugins/routes/text.js';
import { JsonMeter, SseMeter } from '../../plugins/upstream/metering.js';
import { ModelCatalog, type ModelRoute, type TextModel } from '../../policies/catalog.js';
import { rewriteChat } from '../../policies/rewrite.js';
import { chatBody, parseBody } from '../../policies/schemas.js';

const catalog = new ModelCatalog(buildConfig(embeddedDefault('http://127.0.0.1:1'), { FAREBOX_SIM_KEY: 'k' }));
const policed = (stream: boolean) => {
  const body = { model: 'beta-5.6-mini', max_tokens: 100_000, stream, messages: [{ role: 'user', content: 'hi' }] };
  const route = catalog.route('chat_completions', body.model) as ModelRoute<TextModel>;
  return textPoliced(
    route,
    rewriteChat(parseBody(chatBody, body), route),
    {},
    { bodyBytes: JSON.stringify(body).length },
  );
};

t.test('a JSON answer cut after 210,000 bytes written: billed its bytes / 4 of output, not 0', async (t) => {
  const meter = new JsonMeter();
  meter.feed(Buffer.alloc(210_000, 0x61));
  const u = billedUsage(policed(false), { status: 200, meter }, true);
  t.equal(u.output_tokens, 52_500);
  t.ok(u.input_tokens > 0, 'input estimated from the request');
});

t.test('the same JSON answer written whole: its usage as reported', async (t) => {
  const meter = new JsonMeter();
  meter.feed(Buffer.from(JSON.stringify({ id: 'x', usage: { prompt_tokens: 7, completion_tokens: 9 } })));
  meter.end();
  t.match(billedUsage(policed(false), { status: 200, meter }, false), { input_tokens: 7, output_tokens: 9 });
});

t.test(
  'a stream cut before any content delta: nothing; after two deltas: their characters / 4, rounded up',
  async (t) => {
    const sse = (content: string) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
    const none = new SseMeter('openai');
    none.feed(
      Buffer.from(
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { role: 'assistant' }, finish_reason: null }] })}\n\n`,
      ),
    );
    t.match(billedUsage(policed(true), { status: 200, meter: none }, true), { input_tokens: 0, output_tokens: 0 });
    const two = new SseMeter('openai');
    two.feed(Buffer.from(sse('a'.repeat(25)) + sse('b'.repeat(10))));
    t.match(billedUsage(policed(true), { status: 200, meter: two }, true), { output_tokens: 9 });
    const upstreamFailed = new SseMeter('openai');
    upstreamFailed.feed(Buffer.from(sse('abc')));
    t.match(
      billedUsage(policed(true), { status: 500, meter: upstreamFailed }, false),
      { input_tokens: 0, output_tokens: 0 },
      'an upstream error costs nothing',
    );
  },
);

t.test(
  'a whole answer whose usage is nonsense (negative, fractional, a string): billed by what was metered, not 0',
  async (t) => {
    for (const usage of [
      { prompt_tokens: -5, completion_tokens: 9 },
      { prompt_tokens: 7, completion_tokens: 2.5 },
      { prompt_tokens: '7', completion_tokens: '9' },
    ]) {
      const text = 'x'.repeat(400);
      const meter = new JsonMeter();
      meter.feed(
        Buffer.from(
          JSON.stringify({ id: 'x', choices: [{ index: 0, message: { role: 'assistant', content: text } }], usage }),
        ),
      );
      meter.end();
      const u = billedUsage(policed(false), { status: 200, meter }, false);
      t.ok(u.output_tokens >= 100, `output from the bytes written (${JSON.stringify(usage)})`);
      t.ok(u.input_tokens > 0, 'input estimated from the request');
    }
  },
);
