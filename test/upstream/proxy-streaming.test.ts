// The proxy path streams (DESIGN "Hot path", README "How a call moves"): each upstream chunk reaches the caller
// as it arrives, never after the whole answer, and a caller that stops reading holds the upstream back instead of
// the gateway buffering the answer. The upstream here is a plain HTTP server the test drives chunk by chunk.
import t from 'tap';
import OpenAI from 'openai';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';

const event = (content: string) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;
const USAGE = `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } })}\n\n`;

/** What the upstream does with one streaming call. */
type Script = (res: ServerResponse) => Promise<void>;

let script: Script = async () => {};
const upstream = createServer((req: IncomingMessage, res: ServerResponse) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    void script(res).catch(() => res.destroy());
  });
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;

// gamma-k3 goes to the open-weights provider: point it at this upstream. Billed on dev chains, so that a caller can
// read what its call cost.
const h = await startHarness({
  chains: true,
  edit: (c) => void (c.providers!['sim-open-weights']!.base_url = `${upstreamUrl}/v1`),
});
await h.fund('chain_a', 5_000_000n);
t.teardown(async () => {
  await h.close();
  await closeDevChains();
  upstream.closeAllConnections();
  await new Promise((r) => upstream.close(r));
});

const body = JSON.stringify({ model: 'gamma-k3', stream: true, messages: [{ role: 'user', content: 'hi' }] });
const headers = { 'content-type': 'application/json', authorization: `Bearer ${h.key}` };

t.test('the first event reaches the caller while the upstream is still answering', async (t) => {
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  let finished = false;
  script = async (res) => {
    res.write(event('first'));
    await released;
    res.write(event('second'));
    res.write(USAGE);
    res.end('data: [DONE]\n\n');
    finished = true;
  };
  const res = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers, body });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  const first = new TextDecoder().decode((await reader.read()).value);
  t.match(first, /"content":"first"/, 'the first event arrived');
  t.notOk(finished, 'before the upstream sent the rest');
  release();
  let rest = '';
  for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
  t.match(rest, /"content":"second"/);
  t.match(rest, /data: \[DONE\]\n\n$/);
  t.notMatch(rest, /"usage"/, 'the usage chunk the caller did not ask for is removed');
});

t.test('a caller that stops reading holds the upstream back; nothing is lost when it reads again', async (t) => {
  const CHUNK = event('x'.repeat(16 * 1024));
  const TOTAL = 4096; // events: 64 MiB in all
  let written = 0;
  let done = false;
  script = async (res) => {
    for (let i = 0; i < TOTAL; i++) {
      written += CHUNK.length;
      // The upstream honours its own backpressure: it waits while its socket is full.
      if (!res.write(CHUNK)) await new Promise((r) => res.once('drain', r));
    }
    res.write(USAGE);
    res.end('data: [DONE]\n\n');
    done = true;
  };
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(`${h.url}/v1/chat/completions`, { method: 'POST', headers }, resolve);
    req.on('error', reject);
    req.end(body);
  });
  t.equal(res.statusCode, 200);
  res.pause();
  // Let the upstream write as much as the path will take, then check it is held back.
  let last = -1;
  await until('the upstream is held back', async () => {
    const now = written;
    const still = now === last;
    last = now;
    await new Promise((r) => setTimeout(r, 300));
    return still && now > 0 ? true : null;
  });
  const held = written;
  const all = CHUNK.length * TOTAL;
  t.notOk(done, 'the upstream has not finished');
  t.ok(
    held < all / 2,
    `held back after ${(held / 2 ** 20).toFixed(1)} MiB of ${all / 2 ** 20} MiB (socket buffers only)`,
  );
  let received = 0;
  let tail = '';
  res.on('data', (c: Buffer) => {
    received += c.length;
    tail = (tail + c.toString('latin1')).slice(-64);
  });
  res.resume();
  await new Promise((r) => res.on('end', r));
  t.ok(done, 'the upstream finished once the caller read again');
  t.equal(received, all + 'data: [DONE]\n\n'.length, 'every byte arrived, the unrequested usage chunk removed');
  t.match(tail, /data: \[DONE\]\n\n$/);
});

t.test('an upstream event past 64 MiB without its end cuts the answer after what went out whole', async (t) => {
  let aborted = false;
  script = async (res) => {
    res.write(event('first'));
    res.write('data: {"choices":[{"index":0,"delta":{"content":"');
    const piece = 'y'.repeat(1024 * 1024);
    res.on('close', () => (aborted = true));
    for (let i = 0; i < 80 && !res.destroyed; i++) {
      if (!res.write(piece)) await new Promise((r) => res.once('drain', r).once('close', r));
    }
    if (!res.destroyed) res.end('"}}]}\n\ndata: [DONE]\n\n');
  };
  const res = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers, body });
  t.equal(res.status, 200);
  let text = '';
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  const failed = await (async () => {
    try {
      for (let r = await reader.read(); !r.done; r = await reader.read()) text += decoder.decode(r.value);
      return false;
    } catch {
      return true;
    }
  })();
  t.ok(failed, 'the caller sees the answer cut, not a clean end');
  t.equal(text, event('first'), 'only the whole event before it reached the caller');
  await until('the upstream connection is closed', async () => (aborted ? true : null));
  // The gateway goes on serving.
  script = async (res) => {
    res.write(event('again'));
    res.end('data: [DONE]\n\n');
  };
  const next = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers, body });
  t.match(await next.text(), /"content":"again"/);
});

/** Generated text in three deltas: 17 UTF-16 units (8 + 4 surrogate pairs + 1), 13 code points, 42 UTF-8 bytes. */
const TEXTS = ['日本語のテキスト', '🙂🙂🙂🙂', 'é'];

/** Write `s` two bytes per write, each write its own chunk: UTF-8 sequences cut across the chunks. */
async function trickle(res: ServerResponse, s: string): Promise<void> {
  const bytes = Buffer.from(s);
  for (let i = 0; i < bytes.length && !res.destroyed; i += 2) {
    res.write(bytes.subarray(i, i + 2));
    await new Promise((r) => setImmediate(r));
  }
}

/** The caller's view of its call (GET /v1/calls/{id}) once it is billed. */
function billedView(id: string) {
  return until(`${id} billed`, async () => {
    const res = await fetch(`${h.url}/v1/calls/${id}`, { headers: { authorization: `Bearer ${h.key}` } });
    if (res.status !== 200) {
      await res.text();
      return null;
    }
    const view = (await res.json()) as { price: string | null; usage: { output_tokens: number } };
    return view.price === null ? null : view;
  });
}

t.test(
  'through the openai SDK, a non-ASCII stream cut inside its UTF-8 sequences arrives as it was written',
  async (t) => {
    script = async (res) => {
      for (const text of TEXTS) await trickle(res, event(text));
      await trickle(res, USAGE);
      res.end('data: [DONE]\n\n');
    };
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
    const { data: stream, response } = await openai.chat.completions
      .create({
        model: 'gamma-k3',
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: 'user', content: 'hi' }],
      })
      .withResponse();
    let text = '';
    let cost: string | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      if (chunk.usage) cost = (chunk.usage as { cost?: string }).cost;
    }
    t.equal(text, TEXTS.join(''));
    const view = await billedView(response.headers.get('x-request-id')!);
    t.equal(cost, view.price, 'the price in the stream is the price billed');
    t.equal(view.usage.output_tokens, 2, "the provider's usage, the answer being whole");
  },
);

t.test(
  'through the openai SDK, a non-ASCII stream its upstream cuts is billed its generated characters as JavaScript counts them',
  async (t) => {
    script = async (res) => {
      for (const text of TEXTS) await trickle(res, event(text));
      res.destroy();
    };
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
    const { data: stream, response } = await openai.chat.completions
      .create({ model: 'gamma-k3', stream: true, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    let text = '';
    const cut = await (async () => {
      try {
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
        return false;
      } catch {
        return true;
      }
    })();
    t.ok(cut, 'the caller sees the answer cut');
    t.equal(text, TEXTS.join(''), 'every delta sent before the cut arrived whole');
    const view = await billedView(response.headers.get('x-request-id')!);
    // The larger of the deltas (3) and 17 characters / 4, rounded up: 5 (bytes would make it 11, code points 4).
    t.equal(view.usage.output_tokens, 5);
  },
);
