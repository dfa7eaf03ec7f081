/**
 * A JSON body's one pass (plugins/intake/json-body.ts, json-skeleton.ts) and its forward (routes/text.ts upstreamBody): the caller's
 * messages and system go upstream as the caller's bytes, every other member as the gateway read it, and what the
 * gateway priced is what the provider reads (duplicate keys, escapes, non-ASCII text).
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startSimulator } from '../../plugins/simulator/index.js';
import { startHarness } from '../helpers/harness.js';

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
/** Earlier turns that make a body large enough to be spliced (intake/json-body.ts SKELETON_FROM_BYTES). */
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
  // Two messages members, the second (the one JSON.parse keeps) behind an escaped key, in a body large enough for a
  // splice.
  const twice = await post(
    '/v1/messages',
    `{"model":"alpha-haiku-4-5","max_tokens":5,"messages":[${history},{"role":"user","content":"one #sim:tokens=2"}],"mess\\u0061ges":[{"role":"user","content":"two #sim:tokens=2"}]}`,
  );
  t.equal(twice.status, 200);
  const up = lastSent();
  t.equal(count(up, '"messages"'), 1, 'serialized whole: one messages member');
  t.same((JSON.parse(up) as { messages: unknown }).messages, [{ role: 'user', content: 'two #sim:tokens=2' }]);
});

t.test('a large body: escaped keys and values are read as the provider reads them', async (t) => {
  const n = sent.length;
  // input_audio as an escaped key and type, among earlier turns that make the body a skeleton's.
  const audio = `{"model":"gamma-k3","messages":[${history},{"role":"user","content":[{"type":"\\u0069nput_audio","\\u0069nput_audio":{"data":"AAAA","format":"wav"}}]}]}`;
  t.ok(audio.length > 8 * 1024);
  const r = await post('/v1/chat/completions', audio);
  t.equal(r.status, 400);
  t.match(await r.json(), { error: { code: 'unsupported_parameter', param: 'messages' } });
  t.equal(r.headers.get('x-gw-price'), '0.000000');
  t.equal(sent.length, n, 'never upstream');
});

t.test('a large body: what the gateway does not decode reaches the provider, which refuses it for free', async (t) => {
  const n = sent.length;
  // A long string with an escape JSON does not have: the gateway crosses it; the provider refuses the body.
  const bad = `{"model":"alpha-haiku-4-5","max_tokens":5,"messages":[${history},{"role":"user","content":"${'x'.repeat(200)}\\q"}]}`;
  const r = await post('/v1/messages', bad);
  t.equal(r.status, 400);
  t.match(await r.json(), { type: 'error', error: { type: 'invalid_request_error' } });
  t.ok(r.headers.get('x-request-id'));
  t.equal(r.headers.get('x-gw-price'), '0.000000', 'free: the harness checks it against the debit');
  t.equal(sent.length, n + 1, 'the provider refused it');
  // A short one the gateway reads: refused by the gateway, never sent.
  const short = `{"model":"alpha-haiku-4-5","max_tokens":5,"messages":[${history},{"role":"user","content":"a\\qb"}]}`;
  const r2 = await post('/v1/messages', short);
  t.equal(r2.status, 400);
  t.match(await r2.json(), { type: 'error', error: { type: 'invalid_request_error' } });
  t.equal(sent.length, n + 1, 'never upstream');
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

t.test(
  'through the OpenAI SDK: a large agent turn reaches the provider as its bytes, and costs its price',
  async (t) => {
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
    // Tool calls and results as an agent sends them: escaped JSON in arguments, quotes, newlines, non-ASCII, 64 KiB.
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'system', content: 'Be brief. ✓' }];
    for (let i = 0; messages.length < 40; i++) {
      const id = `call_${i}`;
      messages.push({
        role: 'assistant',
        content: null,
        tool_calls: [
          { id, type: 'function', function: { name: 'Read', arguments: JSON.stringify({ path: `/src/m${i}.ts` }) } },
        ],
      });
      messages.push({ role: 'tool', tool_call_id: id, content: `  const a = "x";\n\tlet é = '日本';\n`.repeat(120) });
    }
    messages.push({ role: 'user', content: 'Go on. #sim:tokens=3' });
    const { data, response } = await openai.chat.completions
      .create({ model: 'gamma-k3', max_tokens: 20, messages })
      .withResponse();
    t.equal(data.usage?.completion_tokens, 3);
    const up = lastSent();
    t.ok(up.length > 64 * 1024);
    t.ok(up.includes(`"messages":${JSON.stringify(messages)}`), "the caller's messages, byte for byte");
    t.same((JSON.parse(up) as { messages: unknown }).messages, messages);
  },
);
