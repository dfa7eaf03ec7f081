/**
 * The skeleton parse of a text body (plugins/intake/json-skeleton.ts): every value JSON.parse's, but a forwarded
 * member's long strings, which are stand-ins (the characters as written); the members as written; the depth bound;
 * and JSON's grammar refused where JSON.parse refuses it.
 */
import { isAscii } from 'node:buffer';
import sharp from 'sharp';
import t from 'tap';
import { nestsTooDeep } from '../../plugins/intake/json-body.js';
import { MAX_JSON_DEPTH, parseSkeleton, SHORT_STRING, TooDeep } from '../../plugins/intake/json-skeleton.js';
import { bodyFacts } from '../../policies/text-bounds.js';

const FORWARDED = new Set(['messages', 'system']);
const skeleton = (text: string) => {
  const bytes = Buffer.from(text, 'utf8');
  return parseSkeleton(bytes, bytes.toString('latin1'), isAscii(bytes), FORWARDED);
};

/** What `f` throws (undefined when it returns). */
function thrown(f: () => unknown): unknown {
  try {
    f();
  } catch (err) {
    return err;
  }
  return undefined;
}

t.test('short values are exactly what JSON.parse gives, everywhere', async (t) => {
  const body = {
    model: 'm',
    max_tokens: 5,
    temperature: -0.5e-3,
    stop: ['a', 'b'],
    tools: [{ name: 'x', description: 'y'.repeat(500), input_schema: { type: 'object', properties: {} } }],
    system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral', ttl: '1h' } }],
    messages: [
      { role: 'user', content: 'héllo ✓ 日本 "quoted" \\ back\nslash\t\u0001' },
      {
        role: 'assistant',
        content: [{ type: 'tool_use', id: 't', name: 'x', input: { n: 1.5e10, ok: true, no: null } }],
      },
      {
        role: 'user',
        content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'A'.repeat(1000) } }],
      },
    ],
    metadata: { user_id: 'u' },
  };
  const text = JSON.stringify(body, null, 1);
  const s = skeleton(text);
  t.ok(s);
  t.same(s!.value, JSON.parse(text), 'no string is long but data, which is kept exactly');
  t.equal(
    (s!.value.messages as { content: string }[])[0]!.content,
    body.messages[0]!.content,
    'escapes and UTF-8 decoded',
  );
  t.equal(JSON.stringify(s!.value), JSON.stringify(body), 'keys in order');
});

t.test('a forwarded long string is its characters as written; an exact member is JSON.parse whole', async (t) => {
  const long = `line "one"\n${'x'.repeat(SHORT_STRING)}`;
  const text = JSON.stringify({
    system: long,
    messages: [{ role: 'user', content: long, url: `data:image/png;base64,${'B'.repeat(300)}` }],
    tools: [{ description: long }],
  });
  const s = skeleton(text)!;
  const written = JSON.stringify(long).slice(1, -1);
  t.equal(s.value.system, written, 'stand-in');
  const m = (s.value.messages as Record<string, string>[])[0]!;
  t.equal(m.content, written);
  t.equal(m.role, 'user');
  t.equal(m.url, `data:image/png;base64,${'B'.repeat(300)}`, 'url is exact at any length');
  t.same(s.value.tools, [{ description: long }], 'members not forwarded are exact');
  // base64 as PHP writes it: its slashes escaped.
  const data = (skeleton(`{"messages":[{"data":"${'A'.repeat(200)}\\/B"}]}`)!.value.messages as { data: string }[])[0];
  t.equal(data!.data, `${'A'.repeat(200)}/B`, 'data is exact at any length, escapes decoded');
  // A string of SHORT_STRING characters as written is exact, escapes decoded.
  const edge = `\\u0069${'y'.repeat(SHORT_STRING - 6)}`;
  t.equal((skeleton(`{"messages":["${edge}"]}`)!.value.messages as string[])[0], `i${'y'.repeat(SHORT_STRING - 6)}`);
  t.equal((skeleton(`{"messages":["${edge}z"]}`)!.value.messages as string[])[0], `${edge}z`, 'one more: stand-in');
});

t.test('members as written, duplicates included; the last value taken, as JSON.parse', async (t) => {
  const text = ' { "model" : "a", "messages":[{"content":"x, \\"}\\" ]"},[1,{"b":2}]] ,"max_tokens":5,"model":"b"} ';
  const s = skeleton(text)!;
  t.same(
    s.members.map((m) => [m.key, text.slice(m.start, m.end)]),
    [
      ['model', '"model" : "a"'],
      ['messages', '"messages":[{"content":"x, \\"}\\" ]"},[1,{"b":2}]] '],
      ['max_tokens', '"max_tokens":5'],
      ['model', '"model":"b"'],
    ],
  );
  t.same(s.value, JSON.parse(text));
  t.same(skeleton('{}'), { value: {}, members: [] });
  t.same(
    skeleton('{"a":"\\\\"}')!.members,
    [{ key: 'a', start: 1, end: 9 }],
    'a string ending in an escaped backslash ends at its quote',
  );
});

t.test('member spans index the bytes, with non-ASCII text before them', async (t) => {
  const text = '{"model":"日本","messages":["é"],"system":"✓"}';
  const bytes = Buffer.from(text);
  const s = skeleton(text)!;
  t.same(
    s.members.map((m) => bytes.subarray(m.start, m.end).toString()),
    ['"model":"日本"', '"messages":["é"]', '"system":"✓"'],
  );
  t.same(s.value, JSON.parse(text));
});

t.test('not for the skeleton: a body that is not an object, or whose top-level key has an escape', async (t) => {
  t.equal(skeleton('[{"a":1}]'), null);
  t.equal(skeleton('"x"'), null);
  t.equal(skeleton('{"mess\\u0061ges":[]}'), null);
});

t.test('__proto__ is an own data property, as JSON.parse makes it', async (t) => {
  const text = '{"__proto__":{"x":1},"messages":[{"__proto__":{"type":"image"},"role":"user"}]}';
  const s = skeleton(text)!;
  const m = (s.value.messages as object[])[0] as Record<string, unknown>;
  t.equal(Object.getPrototypeOf(m), Object.prototype);
  t.equal(m.type, undefined, 'nothing inherited');
  t.same(Object.keys(m), ['__proto__', 'role']);
  t.equal(Object.getPrototypeOf(s.value), Object.prototype);
  t.same(Object.keys(s.value), Object.keys(JSON.parse(text)));
});

t.test('the depth bound, in forwarded and exact members', async (t) => {
  const nest = (key: string, n: number) => `{"${key}":${'['.repeat(n - 1)}${']'.repeat(n - 1)}}`;
  for (const key of ['messages', 'tools']) {
    t.ok(skeleton(nest(key, MAX_JSON_DEPTH)), `${key}: ${MAX_JSON_DEPTH} levels pass`);
    t.ok(thrown(() => skeleton(nest(key, MAX_JSON_DEPTH + 1))) instanceof TooDeep, `${key}: one more is refused`);
  }
  t.equal(nestsTooDeep(nest('a', MAX_JSON_DEPTH)), false);
  t.equal(nestsTooDeep(nest('a', MAX_JSON_DEPTH + 1)), true);
  t.equal(nestsTooDeep('{"a":"never closed'), false, 'an unclosed string ends the scan');
});

t.test("JSON's grammar: what JSON.parse refuses, the skeleton refuses", async (t) => {
  const bad = [
    '{',
    '{"messages":[1,]}',
    '{"messages":[1 2]}',
    '{"messages":{"a" 1}}',
    '{"messages":{"a":1,}}',
    '{"messages":{a:1}}',
    "{'messages':1}",
    '{"messages":01}',
    '{"messages":1.}',
    '{"messages":.5}',
    '{"messages":+1}',
    '{"messages":-}',
    '{"messages":1e}',
    '{"messages":tru}',
    '{"messages":NaN}',
    '{"messages":nulll}',
    '{"messages":"never closed}',
    '{"messages":["a\u0001b"]}',
    '{"messages":["\\x"]}',
    '{"messages":["\\u12"]}',
    '{"messages":{"k\u0002":1}}',
    '{"messages":1}x',
    '{"messages":1}}',
    '{"messages":1 "model":2}',
    '{"model":[1,]}',
    '{"model":1,}',
    '{"model" 1}',
    '{"messages":[1]',
  ];
  for (const text of bad) {
    t.ok(thrown(() => JSON.parse(text)) instanceof SyntaxError, `JSON.parse refuses ${JSON.stringify(text)}`);
    t.ok(thrown(() => skeleton(text)) instanceof SyntaxError, `the skeleton refuses ${JSON.stringify(text)}`);
  }
});

t.test('random bodies: the skeleton equals JSON.parse but for stand-ins', async (t) => {
  // Deterministic generator (LCG): nested values with escapes, non-ASCII, numbers of every form, long strings.
  let seed = 12345;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  const pieces = ['a', 'é', '日', '"', '\\', '\n', '\u0007', '/', '\u2028', ' ', 'z', '😀'];
  const str = (): string => {
    const len = rnd(4) === 0 ? 100 + rnd(100) : rnd(12);
    let s = '';
    for (let i = 0; i < len; i++) s += pieces[rnd(pieces.length)];
    return s;
  };
  const val = (d: number): unknown => {
    switch (d > 5 ? rnd(4) : rnd(7)) {
      case 0:
        return str();
      case 1:
        return [1, -0, 0.5, -1.25e-7, 12345678901234567890, 1e300][rnd(6)];
      case 2:
        return [true, false, null][rnd(3)];
      case 3:
        return rnd(2) === 0 ? str() : rnd(1000);
      case 4:
      case 5:
        return Array.from({ length: rnd(4) }, () => val(d + 1));
      default: {
        const o: Record<string, unknown> = {};
        for (let i = rnd(4); i > 0; i--) o[str()] = val(d + 1);
        return o;
      }
    }
  };
  let stand = 0;
  for (let round = 0; round < 300; round++) {
    const body = { model: str(), messages: val(0), system: val(0), tools: val(0) };
    const text = JSON.stringify(body, null, rnd(2) === 0 ? 2 : undefined);
    const s = skeleton(text)!;
    const parsed = JSON.parse(text) as Record<string, unknown>;
    t.same(s.value.tools, parsed.tools);
    t.equal(s.value.model, parsed.model);
    for (const key of ['messages', 'system']) {
      const check = (a: unknown, b: unknown): boolean => {
        if (typeof b === 'string') {
          const written = Buffer.from(JSON.stringify(b).slice(1, -1));
          if (written.length > SHORT_STRING) {
            stand++;
            return a === written.toString('latin1');
          }
          return a === b;
        }
        if (b === null || typeof b !== 'object') return Object.is(a, b);
        if (typeof a !== 'object' || a === null || Array.isArray(a) !== Array.isArray(b)) return false;
        const ka = Object.keys(a);
        const kb = Object.keys(b);
        return ka.length === kb.length && ka.every((k, i) => k === kb[i] && check((a as never)[k], (b as never)[k]));
      };
      if (!check(s.value[key], parsed[key])) t.fail(`round ${round}: ${key} differs`);
    }
  }
  t.ok(stand > 100, `stand-ins met: ${stand}`);
});

t.test("the body's facts from a skeleton are those from JSON.parse, every string written in escapes", async (t) => {
  const png = (
    await sharp({ create: { width: 900, height: 600, channels: 3, background: '#ffffff' } })
      .png()
      .toBuffer()
  ).toString('base64');
  const pad = { role: 'user', content: 'earlier turn '.repeat(700) };
  const cases: Record<string, unknown[]> = {
    plain: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }],
    cache: [{ role: 'user', content: [{ type: 'text', text: 'x', cache_control: { type: 'ephemeral', ttl: '1h' } }] }],
    image: [
      { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } }] },
    ],
    'data url': [
      { role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } }] },
    ],
    'image by url': [
      { role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://e.example/a.png' } }] },
    ],
    document: [{ role: 'user', content: [{ type: 'container_upload', file_id: 'f' }] }],
    audio: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }] }],
  };
  // JSON with every character of every string (keys too) written as \uXXXX.
  const escaped = (v: unknown): string => {
    if (typeof v === 'string')
      return `"${[...v].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"`;
    if (Array.isArray(v)) return `[${v.map(escaped).join(',')}]`;
    if (v !== null && typeof v === 'object') {
      return `{${Object.entries(v)
        .map(([k, x]) => `${escaped(k)}:${escaped(x)}`)
        .join(',')}}`;
    }
    return JSON.stringify(v);
  };
  for (const [name, turn] of Object.entries(cases)) {
    const messages = [pad, ...turn];
    for (const [how, text] of [
      ['plain', JSON.stringify({ model: 'm', messages, system: messages })],
      ['escaped', `{"model":"m","messages":${escaped(messages)},"system":${escaped(messages)}}`],
    ] as const) {
      const s = skeleton(text)!;
      const want = bodyFacts(JSON.parse(text), 'alpha', 1600);
      t.same(bodyFacts(s.value, 'alpha', 1600), want, `${name}, ${how}`);
    }
  }
  t.ok(
    bodyFacts(skeleton(JSON.stringify({ messages: cases.image }))!.value, 'alpha', 1600).imageTokens === 720,
    'the PNG read',
  );
});
