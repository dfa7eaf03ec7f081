// The headers the installed official SDKs and Node's fetch really send, captured on a
// loopback server and classified: the live counterpart of the table in clients.test.ts.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { classifyClient } from '../../policies/clients.js';

let last: IncomingHttpHeaders = {};
const server = createServer((req, res) => {
  last = req.headers;
  req.resume();
  req.on('end', () => {
    // A 400 ends the call at once: the SDKs do not retry it.
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end('{"error":{"type":"invalid_request_error","message":"captured"}}');
  });
});

t.before(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
});
t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));

function base(): string {
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function capture(call: () => Promise<unknown>): Promise<IncomingHttpHeaders> {
  last = {};
  await call().catch(() => undefined);
  return last;
}

t.test('openai SDK chat completion -> direct (openai-js)', async (t) => {
  const client = new OpenAI({ apiKey: 'sk_test', baseURL: `${base()}/v1`, maxRetries: 0 });
  const h = await capture(() =>
    client.chat.completions.create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] }),
  );
  t.match(h['user-agent'], /^OpenAI\/JS \d/);
  t.equal(h['x-stainless-lang'], 'js');
  t.same(classifyClient(h), { class: 'direct', name: 'openai-js' });
});

t.test('openai SDK with a LangChain.js user-agent -> agent_framework (langchain)', async (t) => {
  // What @langchain/openai does: it hands the openai SDK its own User-Agent as a default header.
  const client = new OpenAI({
    apiKey: 'sk_test',
    baseURL: `${base()}/v1`,
    maxRetries: 0,
    defaultHeaders: {
      'User-Agent': `langchainjs-openai/1.0.0 ((node/${process.version}; ${process.platform}; ${process.arch}))`,
    },
  });
  const h = await capture(() =>
    client.chat.completions.create({ model: 'alpha-sonnet-4-6', messages: [{ role: 'user', content: 'hi' }] }),
  );
  t.equal(h['x-stainless-lang'], 'js', 'the SDK headers are still there');
  t.same(classifyClient(h), { class: 'agent_framework', name: 'langchain' });
});

t.test('Anthropic SDK message -> direct (anthropic-js)', async (t) => {
  const client = new Anthropic({ apiKey: 'sk_test', baseURL: base(), maxRetries: 0 });
  const h = await capture(() =>
    client.messages.create({ model: 'alpha-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
  );
  t.match(h['user-agent'], /^Anthropic\/JS \d/);
  t.same(classifyClient(h), { class: 'direct', name: 'anthropic-js' });
});

t.test("Node's global fetch -> direct (undici)", async (t) => {
  const h = await capture(() => fetch(`${base()}/v1/chat/completions`, { method: 'POST', body: '{}' }));
  t.equal(h['user-agent'], 'node');
  t.same(classifyClient(h), { class: 'direct', name: 'undici' });
});
