import t from 'tap';
import { lastUserText, parseDirectives } from '../../plugins/simulator/directives.js';
import { planText, planTool } from '../../plugins/simulator/output.js';
import { anthropicPrompt, openaiPrompt } from '../../plugins/simulator/prompt.js';
import { hashSeed, outputPieces, textTokens } from '../../plugins/simulator/tokens.js';

t.test('parseDirectives reads every directive, several at once, ignoring unknown and invalid ones', async (t) => {
  t.same(parseDirectives('plain text'), {});
  t.same(parseDirectives('hi #sim:tokens=20 #sim:chunk_delay_ms=5 #sim:delay_ms=7 there #sim:hangup_after=3'), {
    tokens: 20,
    chunkDelayMs: 5,
    delayMs: 7,
    hangupAfter: 3,
  });
  t.same(parseDirectives('#sim:status=529'), { status: 529 });
  t.same(parseDirectives('#sim:video=fail'), { videoFail: true });
  t.same(parseDirectives('#sim:render_ms=6000 #sim:video=fail'), { renderMs: 6000, videoFail: true });
  t.same(
    parseDirectives('#sim:video=ok #sim:colour=red #sim:tokens=-1 #sim:tokens=x #sim:status=200 #sim:status=600'),
    {},
  );
  t.same(parseDirectives('#sim:tokens=0'), { tokens: 0 });
});

t.test('lastUserText takes the last user message only: string content or its text parts', async (t) => {
  t.equal(
    lastUserText([
      { role: 'user', content: 'first #sim:tokens=1' },
      { role: 'assistant', content: 'x' },
      { role: 'user', content: 'second' },
    ]),
    'second',
  );
  t.equal(
    lastUserText([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'image', source: {} },
          { type: 'text', text: '#sim:tokens=2' },
        ],
      },
      { role: 'assistant', content: 'done' },
    ]),
    'a\n#sim:tokens=2',
  );
  t.equal(
    lastUserText([{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: '#sim:tokens=3' }] }]),
    '',
  );
  t.equal(lastUserText([{ role: 'system', content: 'sys' }]), '');
  t.equal(lastUserText(undefined), '');
});

const bodies: Array<Record<string, unknown>> = [
  { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'a' }] },
  {
    model: 'm',
    max_tokens: 1,
    messages: [
      { role: 'user', content: '' },
      { role: 'assistant', content: [] },
    ],
  },
  { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'é日本語🙂 "quoted" \\ back\nslash\u0001' }] },
  { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: '\ud800 lone surrogate' }] },
  {
    model: 'm',
    max_tokens: 1,
    system: [{ type: 'text', text: 'sys', cache_control: { type: 'ephemeral', ttl: '1h' } }],
    tools: [{ name: 't', input_schema: { type: 'object' }, cache_control: { type: 'ephemeral' } }],
    messages: [
      { role: 'system', content: 'inline system' },
      {
        role: 'user',
        content: [
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
          { type: 'text', text: 'x' },
        ],
      },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 't', input: {} }] },
      {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'ok', cache_control: { type: 'ephemeral' } }],
      },
    ],
  },
  {
    model: 'm',
    messages: [
      { role: 'developer', content: 'd' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 't' },
          { type: 'image_url', image_url: { url: 'data:x' } },
        ],
      },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'c', content: 'r', name: 'f' },
    ],
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }],
  },
];

function randomText(rand: () => number): string {
  const alphabet = ['a', 'Z', ' ', '\n', '"', '\\', 'é', '日', '🙂', '\u0007', '{', '}'];
  let s = '';
  const n = Math.floor(rand() * 60);
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(rand() * alphabet.length)];
  return s;
}

t.test('input tokens never exceed the UTF-8 byte length of the JSON request body (both protocols)', async (t) => {
  let seed = 7;
  const rand = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const all = [...bodies];
  for (let i = 0; i < 300; i++) {
    const messages = Array.from({ length: 1 + Math.floor(rand() * 4) }, (_, j) => ({
      role: j % 2 === 0 ? 'user' : 'assistant',
      content:
        rand() < 0.5
          ? randomText(rand)
          : [
              { type: 'text', text: randomText(rand) },
              { type: 'document', source: { data: randomText(rand) } },
            ],
    }));
    all.push({ model: 'm', max_tokens: 1, system: randomText(rand), messages });
  }
  const over: string[] = [];
  for (const body of all) {
    const bytes = Buffer.byteLength(JSON.stringify(body), 'utf8');
    const a = body.max_tokens !== undefined ? anthropicPrompt(body).total : 0;
    const o = openaiPrompt(body).total;
    if (a > bytes || o > bytes) over.push(`${JSON.stringify(body)}: ${a}/${o} > ${bytes}`);
  }
  t.same(over, [], `${all.length} bodies`);
});

t.test('token counts are deterministic and grow with the text', async (t) => {
  t.equal(textTokens(''), 0);
  t.equal(textTokens('abcd'), 1);
  t.equal(textTokens('abcde'), 2);
  t.equal(textTokens('🙂'), 1);
  const body = { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hello world' }] };
  t.equal(anthropicPrompt(body).total, anthropicPrompt(structuredClone(body)).total);
});

t.test('output pieces: deterministic words, one token each, the first without a leading space', async (t) => {
  const a = outputPieces(hashSeed('prompt'), 20, true);
  t.same(a, outputPieces(hashSeed('prompt'), 20, true));
  t.equal(a.length, 20);
  t.match(a[0], /^[A-Z][a-z]*$/);
  for (const p of a.slice(1, -1)) t.match(p, /^ [a-z]+$/);
  t.match(a[19], /^ [a-z]+\.$/);
  t.equal(a.join('').split(' ').length, 20, 'one word per token');
});

t.test('planText: #sim:tokens exact, capped by max_tokens, cut at the first stop sequence', async (t) => {
  const seed = hashSeed('x');
  t.equal(planText(seed, 30, 100, []).pieces.length, 30);
  t.equal(planText(seed, 0, 100, []).pieces.length, 0);
  const d = planText(seed, undefined, 100, []);
  t.ok(d.pieces.length >= 4 && d.pieces.length <= 8, 'a handful of words by default');
  t.equal(d.ending, 'end');
  const capped = planText(seed, 30, 7, []);
  t.equal(capped.pieces.length, 7);
  t.equal(capped.ending, 'max_tokens');
  t.equal(
    capped.pieces.join(''),
    planText(seed, 30, 100, []).pieces.slice(0, 7).join(''),
    'the cut text is a prefix of the full one',
  );
  const full = planText(seed, 10, 100, []).pieces;
  const stop = full[4]!.trim();
  const cut = planText(seed, 10, 100, ['zzz', stop]);
  t.equal(cut.ending, 'stop_sequence');
  t.equal(cut.stopSequence, stop);
  t.notOk(cut.pieces.join('').includes(stop));
  t.ok(full.join('').startsWith(cut.pieces.join('') + stop), 'the text stops right before the sequence');
});

t.test('planTool: input sampled from the schema, JSON split in one-token pieces, cut by max_tokens', async (t) => {
  const schema = {
    type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer' }, unit: { enum: ['c', 'f'] } },
  };
  const p = planTool('weather', schema, 1, 1000);
  t.same(Object.keys(p.input as object), ['city', 'days', 'unit']);
  t.equal(p.pieces.join(''), JSON.stringify(p.input));
  t.equal(p.pieces.length, textTokens(JSON.stringify(p.input)));
  const cut = planTool('weather', schema, 1, 2);
  t.equal(cut.pieces.length, 2);
  t.equal(cut.ending, 'max_tokens');
});
