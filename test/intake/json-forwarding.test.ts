/**
 * A JSON body's one pass (plugins/intake/json-body.ts) and its forward (routes/text.ts upstreamBody): the caller's
 * messages and system go upstream as the caller's bytes, every other member as the gateway read it, and what the
 * gateway priced is what the provider reads (duplicate keys, escapes, non-ASCII text).
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import { MAX_JSON_DEPTH, scanJson, TOO_DEEP } from '../../plugins/intake/json-body.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { startHarness } from '../helpers/harness.js';

t.test('scanJson: the top-level members as written, duplicates included; the depth bound', async (t) => {
  const text = '{ "model" : "a", "messages":[{"content":"x, \\"}\\" ]"},[1,{"b":2}]] ,"max_tokens":5,"model":"b"}';
  const members = scanJson(text);
  t.not(members, TOO_DEEP);
  const got = (members as { key: string; start: number; end: number }[]).map((m) => [
    m.key,
    text.slice(m.start, m.end),
  ]);
  t.same(got, [
    ['model', '"model" : "a"'],
    ['messages', '"messages":[{"content":"x, \\"}\\" ]"},[1,{"b":2}]] '],
    ['max_tokens', '"max_tokens":5'],
    ['model', '"model":"b"'],
  ]);
  t.same(scanJson('{}'), []);
  t.equal(scanJson('[{"a":1}]'), null, 'not an object');
  t.equal(scanJson('"x"'), null);
  t.same(
    scanJson('{"a":"\\\\"}'),
    [{ key: 'a', start: 1, end: 9 }],
    'a string ending in an escaped backslash ends at its quote',
  );
  const nest = (n: number) => `{"a":${'['.repeat(n - 1)}${']'.repeat(n - 1)}}`;
  t.not(scanJson(nest(MAX_JSON_DEPTH)), TOO_DEEP, `${MAX_JSON_DEPTH} levels pass`);
  t.equal(scanJson(nest(MAX_JSON_DEPTH + 1)), TOO_DEEP);
  t.doesNotThrow(() => scanJson('{"a":"never closed'), 'an unclosed string ends the scan');
});

// What the gateway sends upstream, byte for byte: a recording proxy in front of the simulator.
const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
const sent: string[] = [];
const proxy = createServer((req: IncomingMessage, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', async () => {
    const body = Buffer.concat(chunks);
    if (req.method === 'POST') sent.push(body.toString('utf8'));
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers))
      if (typeof v === 'string' && !['host', 'connection', 'content-length', 'keep-alive'].includes(k)) headers[k] = v;
    const up = await fetch(sim.url + req.url, {
      method: req.method,
      headers,
      body: req.method === 'POST' ? body : undefined,
    });
    const out: Record<string, string> = {};
    up.headers.forEach((v, k) => {
      if (k !== 'content-length' && k !== 'transfer-encoding' && k !== 'content-encoding') out[k] = v;
    });
    res.writeHead(up.status, out);
    res.end(Buffer.from(await up.arrayBuffer()));
  });
});
await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
const proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
const h = await startHarness({ sim: { ...sim, url: proxyUrl } });
t.teardown(async () => {
  await h.close();
  await new Promise((resolve) => proxy.close(resolve));
  await sim.close();
});

const post = (path: string, body: string) =>
  fetch(h.url + path, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${h.key}`,
      'content-type': 'application/json',
      'anthropic-version': '2023-06-01',
    },
    body,
  });
const lastSent = () => sent[sent.length - 1]!;
/** Earlier turns that make a body large enough to be spliced (routes/text.ts SPLICE_FROM_BYTES). */
const HISTORY = [
  { role: 'user', content: 'Earlier. '.repeat(1_200) },
  { role: 'assistant', content: 'Noted.' },
];
const history = JSON.stringify(HISTORY).slice(1, -1);
const count = (s: string, what: string) => s.split(what).length - 1;

t.test('the caller bytes of messages and system go upstream as written; the rest as the gateway read it', async (t) => {
  const messages = [
    ...HISTORY,
    { role: 'user', content: [{ type: 'text', text: 'Hello #sim:tokens=3', cache_control: { type: 'ephemeral' } }] },
  ];
  const system = [{ type: 'text', text: 'Be brief.' }];
  // Pretty-printed, with max_tokens past the model's ceiling.
  const body = JSON.stringify({ model: 'alpha-haiku-4-5', max_tokens: 10_000_000, system, messages }, null, 2);
  const r = await post('/v1/messages', body);
  t.equal(r.status, 200, await r.clone().text());
  const clamped = Number(r.headers.get('x-gw-clamped-max-tokens'));
  t.ok(clamped > 0, 'max_tokens clamped');
  const up = lastSent();
  const caller = (key: string) => {
    const i = body.indexOf(`"${key}": `);
    const open = body.indexOf('[', i);
    // The member's value as the caller wrote it: to the bracket closing it at the top level's indent.
    return body.slice(i, body.indexOf('\n  ]', open) + 4);
  };
  t.ok(up.includes(caller('messages')), 'messages exactly as the caller wrote them, whitespace and all');
  t.ok(up.includes(caller('system')), 'system too');
  const parsed = JSON.parse(up) as Record<string, unknown>;
  t.equal(parsed.max_tokens, clamped, 'max_tokens as the gateway set it');
  t.equal(count(up, '"model"'), 1, "one model, the route's");
  t.same(parsed.messages, messages);
});

t.test('duplicate keys: upstream gets the members JSON.parse took, once each', async (t) => {
  const a = `[${history},{"role":"user","content":"first #sim:tokens=2"}]`;
  const b = `[${history},{"role":"user","content":"second #sim:tokens=2"}]`;
  const body = `{"model":"alpha-haiku-4-5","max_tokens":5,"messages":${a},"stream":false,"messages":${b},"max_tokens":10000000}`;
  const r = await post('/v1/messages', body);
  t.equal(r.status, 200);
  const up = lastSent();
  t.equal(count(up, '"messages"'), 1);
  t.equal(count(up, '"max_tokens"'), 1);
  t.ok(up.includes(`"messages":${b}`), 'the last messages, as JSON.parse read them');
  t.equal((JSON.parse(up) as { max_tokens: number }).max_tokens, Number(r.headers.get('x-gw-clamped-max-tokens')));
});

t.test('escapes: the checks read the decoded body; an escaped top-level key serializes the body whole', async (t) => {
  const n = sent.length;
  // "input_audio" spelled with escapes: refused all the same, never sent.
  const audio =
    '{"model":"gamma-k3","messages":[{"role":"user","content":[{"type":"\\u0069nput_audio","\\u0069nput_audio":{"data":"AAAA","format":"wav"}}]}]}';
  const r = await post('/v1/chat/completions', audio);
  t.equal(r.status, 400);
  t.match(await r.json(), { error: { code: 'unsupported_parameter', param: 'messages' } });
  t.equal(sent.length, n, 'never upstream');
  const ok = await post(
    '/v1/chat/completions',
    `{"model":"gamma-k3","messages":[${history},{"role":"user","content":"caf\\u00e9 #sim:tokens=2"}]}`,
  );
  t.equal(ok.status, 200);
  t.ok(lastSent().includes('"caf\\u00e9 #sim:tokens=2"'), 'messages spliced with their escape');
  // Two messages members, the second (the one JSON.parse keeps) behind an escaped key.
  const twice = await post(
    '/v1/messages',
    '{"model":"alpha-haiku-4-5","max_tokens":5,"messages":[{"role":"user","content":"one #sim:tokens=2"}],"mess\\u0061ges":[{"role":"user","content":"two #sim:tokens=2"}]}',
  );
  t.equal(twice.status, 200);
  const up = lastSent();
  t.equal(count(up, '"messages"'), 1, 'serialized whole: one messages member');
  t.same((JSON.parse(up) as { messages: unknown }).messages, [{ role: 'user', content: 'two #sim:tokens=2' }]);
});

t.test('non-ASCII text is spliced as text: upstream reads the same characters', async (t) => {
  const body = JSON.stringify({
    model: 'alpha-haiku-4-5',
    max_tokens: 20,
    messages: [...HISTORY, { role: 'user', content: 'héllo ✓ 日本 #sim:tokens=2' }],
  });
  const r = await post('/v1/messages', body);
  t.equal(r.status, 200);
  t.ok(lastSent().includes('"content":"héllo ✓ 日本 #sim:tokens=2"'));
});

t.test('through the Anthropic SDK: its messages bytes reach the provider unchanged', async (t) => {
  const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
  const messages = [
    { role: 'user' as const, content: 'one '.repeat(3_000) },
    { role: 'assistant' as const, content: 'two' },
    { role: 'user' as const, content: 'three #sim:tokens=4' },
  ];
  const msg = await anthropic.messages.create({ model: 'alpha-haiku-4-5', max_tokens: 50, messages });
  t.equal(msg.usage.output_tokens, 4);
  t.ok(lastSent().includes(`"messages":${JSON.stringify(messages)}`));
});

t.test('a small body is serialized whole: the same members, compact', async (t) => {
  const body = JSON.stringify(
    { model: 'alpha-haiku-4-5', max_tokens: 9, messages: [{ role: 'user', content: 'hi #sim:tokens=2' }] },
    null,
    2,
  );
  const r = await post('/v1/messages', body);
  t.equal(r.status, 200);
  const up = lastSent();
  t.notOk(up.includes('\n'), 'no caller whitespace');
  t.same((JSON.parse(up) as { messages: unknown }).messages, [{ role: 'user', content: 'hi #sim:tokens=2' }]);
});
