// The price of every call, in its answer (README "The price of a call"): x-gw-price on answers written whole (text
// JSON, images, errors at 0.000000), usage.cost in a stream's usage event (chat completions' usage chunk, the
// final message_delta of /v1/messages), read through the official SDKs and checked against the call's record
// (GET /v1/calls/{request_id}) and the wallet's change, to the atomic unit. A stream whose caller stops before its
// usage event showed no cost; one that saw it pays it. A price above the hold is shown as the debit takes it.
import t, { type Test } from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { readWallet, type WalletState } from '../../plugins/billing/wallets.js';
import { formatUsd } from '../../pricing/index.js';
import { callIdOf } from '../../plugins/request-ids.js';
import { keys } from '../../plugins/store/keys.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { rejection, until } from '../helpers/wait.js';

// A provider that reports more output than the call's max_tokens allows: its price passes the hold, which the debit
// cuts it to, and so does the price shown.
const overReporting = createServer((req, res) => {
  let text = '';
  req.on('data', (d: Buffer) => {
    text += d.toString('utf8');
  });
  req.on('end', () => {
    const usage = { prompt_tokens: 5, completion_tokens: 1_000_000, total_tokens: 1_000_005 };
    const base = { id: 'chatcmpl-1', created: 1, model: 'over' };
    if (text.includes('endless')) {
      // A JSON answer that never ends: 1 MiB slices until the gateway gives up on it.
      res.writeHead(200, { 'content-type': 'application/json' });
      const slice = Buffer.alloc(1024 * 1024, 'a');
      res.write('{"choices":[{"message":{"content":"');
      const more = () => {
        while (!res.destroyed && res.write(slice));
        if (!res.destroyed) res.once('drain', more);
      };
      res.on('close', () => res.removeAllListeners('drain'));
      more();
      return;
    }
    if ((JSON.parse(text) as { stream?: boolean }).stream !== true) {
      res.writeHead(200, { 'content-type': 'application/json' });
      const message = { role: 'assistant', content: 'hi' };
      res.end(
        JSON.stringify({
          ...base,
          object: 'chat.completion',
          choices: [{ index: 0, message, finish_reason: 'stop' }],
          usage,
        }),
      );
      return;
    }
    const chunk = (o: object) => `data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', ...o })}\n\n`;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(
      chunk({ choices: [{ index: 0, delta: { role: 'assistant', content: 'hi' }, finish_reason: null }] }) +
        chunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
        chunk({ choices: [], usage }) +
        'data: [DONE]\n\n',
    );
  });
});
await new Promise<void>((resolve) => overReporting.listen(0, '127.0.0.1', resolve));

const h = await startHarness({
  chains: true,
  edit: (c) => {
    const port = (overReporting.address() as AddressInfo).port;
    c.providers.over = { protocol: 'openai', base_url: `http://127.0.0.1:${port}/v1`, key_env: 'FAREBOX_SIM_KEY' };
    c.models.push({
      id: 'gamma-over',
      family: 'gamma',
      provider: 'over',
      max_tokens: 1_024,
      temperature: true,
      reasoning_levels: [],
      context_window: 32_768,
    } as never);
    c.prices = { text: { 'gamma-over': { input: '1', output: '2', cache_read: '0.1' } } };
  },
});
t.teardown(async () => {
  await h.close();
  overReporting.close();
  await closeDevChains();
});
await h.fund('chain_a', 5_000_000n);

const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
const USD = /^\d+\.\d{6}$/;

const wallet = () => readWallet(h.redis, h.account, 'chain_a');

/** The wallet once no hold is open: what a test starts from. */
const quiet = () => until('no hold open', async () => ((await wallet()).held === 0n ? wallet() : null));

/** What the wallet lost since `before`, held or settled (a settlement moves pending into the synced balance). */
function spent(before: WalletState, after: WalletState): bigint {
  return before.synced - after.synced + (after.pending - before.pending);
}

/** The call's record once debited, as GET /v1/calls/{id} shows it, and the wallet's change by then. */
async function debited(t: Test, id: string, before: WalletState) {
  const record = await until(`${id} debited`, async () => {
    const r = await getCallRecord(h.redis, id);
    return r && r.status !== 'held' ? r : null;
  });
  const after = await quiet();
  const res = await fetch(`${h.url}/v1/calls/${id}`, { headers: { authorization: `Bearer ${h.key}` } });
  t.equal(res.status, 200, `GET /v1/calls/${id}`);
  const view = (await res.json()) as { price: string; price_atomic: string };
  t.equal(view.price_atomic, record.priceAtomic.toString(), "the view is the record's price");
  return { record, view, spent: spent(before, after) };
}

/** `shown` (a USD string) is the call's debit: the record's price and the wallet's change, to the atomic unit. */
async function shownIsDebit(t: Test, id: string, shown: string | null | undefined, before: WalletState) {
  t.match(shown, USD, 'USD with exactly 6 decimals');
  const { record, view, spent: s } = await debited(t, id, before);
  t.equal(shown, view.price, 'the price shown is the price GET /v1/calls/{id} shows');
  t.equal(shown, formatUsd(record.priceAtomic), "the record's price");
  t.equal(shown, formatUsd(s), "the wallet's change");
  return record;
}

t.test('chat completion (JSON): x-gw-price is the debit', async (t) => {
  const before = await quiet();
  const { data, response } = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hello #sim:tokens=9' }] })
    .withResponse();
  t.equal(data.usage?.completion_tokens, 9);
  const record = await shownIsDebit(
    t,
    response.headers.get('x-request-id')!,
    response.headers.get('x-gw-price'),
    before,
  );
  t.ok(record.priceAtomic > 0n, 'a billed call');
  t.equal(response.headers.get('content-length'), String(JSON.stringify(data).length), 'the length of the body');
});

t.test('chat completion stream with include_usage: usage.cost in the usage chunk is the debit', async (t) => {
  const before = await quiet();
  const { data: stream, response } = await openai.chat.completions
    .create({
      model: 'beta-5.6-sol',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'count #sim:tokens=12' }],
    })
    .withResponse();
  t.equal(response.headers.get('x-gw-price'), null, 'a stream has no price in its headers');
  let cost: unknown;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) {
      t.same(chunk.choices, [], 'the usage chunk');
      t.equal(chunk.usage.completion_tokens, 12);
      cost = (chunk.usage as unknown as { cost: unknown }).cost;
    } else {
      t.notOk('cost' in (chunk as object), 'no other chunk is priced');
    }
  }
  t.ok(chunks > 12);
  await shownIsDebit(t, response.headers.get('x-request-id')!, cost as string, before);
});

t.test('chat completion stream without include_usage: no usage chunk, billed as before', async (t) => {
  const before = await quiet();
  const { data: stream, response } = await openai.chat.completions
    .create({ model: 'gamma-k3', stream: true, messages: [{ role: 'user', content: 'count #sim:tokens=4' }] })
    .withResponse();
  for await (const chunk of stream) t.notOk(chunk.usage, 'no usage chunk');
  const { record, spent: s } = await debited(t, response.headers.get('x-request-id')!, before);
  t.ok(record.priceAtomic > 0n);
  t.equal(s, record.priceAtomic);
});

t.test('message (JSON): x-gw-price is the debit', async (t) => {
  const before = await quiet();
  const { data, response } = await anthropic.messages
    .create({ model: 'alpha-haiku-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hi #sim:tokens=5' }] })
    .withResponse();
  t.equal(data.usage.output_tokens, 5);
  await shownIsDebit(t, response.headers.get('request-id')!, response.headers.get('x-gw-price'), before);
});

t.test(
  'message stream: usage.cost in the final message_delta is the price of the merged usage (input from message_start)',
  async (t) => {
    const before = await quiet();
    const { data: stream, response } = await anthropic.messages
      .create({
        model: 'alpha-sonnet-4-6',
        max_tokens: 64,
        stream: true,
        messages: [{ role: 'user', content: 'a longer prompt for the input count #sim:tokens=7' }],
      })
      .withResponse();
    let cost: unknown;
    let input = 0;
    let deltas = 0;
    for await (const event of stream) {
      if (event.type === 'message_start') input = event.message.usage.input_tokens;
      if (event.type === 'message_delta') {
        deltas++;
        t.equal(event.usage.output_tokens, 7);
        cost = (event.usage as unknown as { cost: unknown }).cost;
      }
    }
    t.equal(deltas, 1, 'one message_delta');
    t.ok(input > 0, 'message_start reported input');
    const record = await shownIsDebit(t, response.headers.get('request-id')!, cost as string, before);
    t.equal(record.usage.input_tokens, input, 'billed the input message_start reported');
    t.equal(record.usage.output_tokens, 7);
  },
);

t.test('streams whose caller stops early: a cost seen is the debit; none seen, none shown', async (t) => {
  // Stops at the first content chunk: far from the usage chunk of a slow 200-token answer.
  let before = await quiet();
  const { data: early, response: r1 } = await openai.chat.completions
    .create({
      model: 'gamma-k3',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'long #sim:tokens=200 #sim:chunk_delay_ms=5' }],
    })
    .withResponse();
  let seen: unknown;
  for await (const chunk of early) {
    if (chunk.usage) seen = (chunk.usage as unknown as { cost?: unknown }).cost;
    if (chunk.choices[0]?.delta.content) break;
  }
  t.equal(seen, undefined, 'the usage event never reached the caller: no cost shown');
  const cut = await debited(t, r1.headers.get('x-request-id')!, before);
  t.ok(cut.record.usage.output_tokens < 200, 'billed what was delivered');
  t.equal(cut.spent, cut.record.priceAtomic, 'the wallet paid the record');

  // Stops at the usage event, before the end: what it saw is what it pays.
  before = await quiet();
  const { data: late, response: r2 } = await anthropic.messages
    .create({
      model: 'alpha-haiku-4-5',
      max_tokens: 64,
      stream: true,
      messages: [{ role: 'user', content: 'hi #sim:tokens=6' }],
    })
    .withResponse();
  let cost: unknown;
  for await (const event of late) {
    if (event.type === 'message_delta') {
      cost = (event.usage as unknown as { cost: unknown }).cost;
      break;
    }
  }
  await shownIsDebit(t, r2.headers.get('request-id')!, cost as string, before);
});

t.test('images: x-gw-price on b64_json (passed and converted) and url answers is the debit', async (t) => {
  for (const [model, format] of [
    ['img-2', 'b64_json'],
    ['img-pro', 'b64_json'],
    ['img-2', 'url'],
  ] as const) {
    const before = await quiet();
    const { data, response } = await openai.images
      .generate({ model, prompt: 'a kite', response_format: format } as never)
      .withResponse();
    t.ok(format === 'url' ? data.data?.[0]?.url : data.data?.[0]?.b64_json, `${model} ${format}: an image`);
    const record = await shownIsDebit(
      t,
      response.headers.get('x-request-id')!,
      response.headers.get('x-gw-price'),
      before,
    );
    t.ok(record.priceAtomic > 0n, `${model} ${format}: billed`);
  }
});

t.test('a price above the hold is shown cut to the hold, as the debit cuts it', async (t) => {
  let before = await quiet();
  const { response } = await openai.chat.completions
    .create({ model: 'gamma-over', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  let record = await shownIsDebit(t, response.headers.get('x-request-id')!, response.headers.get('x-gw-price'), before);
  t.ok(record.capped, 'the debit cut the price');
  t.equal(record.priceAtomic, record.held, 'to the hold');

  before = await quiet();
  const { data: stream, response: streamed } = await openai.chat.completions
    .create({
      model: 'gamma-over',
      max_tokens: 16,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    })
    .withResponse();
  let cost: unknown;
  for await (const chunk of stream) if (chunk.usage) cost = (chunk.usage as unknown as { cost: unknown }).cost;
  record = await shownIsDebit(t, streamed.headers.get('x-request-id')!, cost as string, before);
  t.ok(record.capped);
  t.equal(record.priceAtomic, record.held);
});

t.test('a JSON answer past 64 MiB is not held on: a 502, x-gw-price 0.000000, free', async (t) => {
  const before = await quiet();
  const err = await rejection(
    openai.chat.completions.create({
      model: 'gamma-over',
      max_tokens: 16,
      messages: [{ role: 'user', content: 'endless' }],
    }),
  );
  t.match(err, { status: 502, error: { code: 'upstream_error' } });
  t.equal(err.headers.get('x-gw-price'), '0.000000');
  const record = await until('released', async () => {
    const r = await getCallRecord(h.redis, err.headers.get('x-request-id'));
    return r && r.status !== 'held' ? r : null;
  });
  t.match(record, { status: 'free', priceAtomic: 0n });
  t.equal(spent(before, await quiet()), 0n, 'the wallet paid nothing');
});

t.test('errors cost nothing and say so: x-gw-price 0.000000', async (t) => {
  const before = await quiet();
  // Refused before any hold: no record, nothing spent.
  const bad = await openai.chat.completions.create({ model: 'gamma-k3', messages: 'no' as never }).catch((e) => e);
  t.ok(bad instanceof OpenAI.BadRequestError, '400');
  t.equal(bad.headers.get('x-gw-price'), '0.000000');
  const badMessage = await anthropic.messages
    .create({ model: 'alpha-haiku-4-5', messages: [{ role: 'user', content: 'hi' }] } as never)
    .catch((e) => e);
  t.ok(badMessage instanceof Anthropic.BadRequestError, '400 in the Anthropic shape');
  t.equal(badMessage.headers.get('x-gw-price'), '0.000000');
  t.equal(spent(before, await quiet()), 0n);

  // Held, then the provider failed: the record is free, the price shown 0.
  for (const [name, call] of [
    [
      'chat upstream 500',
      () =>
        openai.chat.completions.create({
          model: 'gamma-k3',
          messages: [{ role: 'user', content: 'x #sim:status=500' }],
        }),
    ],
    [
      'messages upstream 429',
      () =>
        anthropic.messages.create({
          model: 'alpha-haiku-4-5',
          max_tokens: 16,
          messages: [{ role: 'user', content: 'x #sim:status=429' }],
        }),
    ],
    ['image upstream 500', () => openai.images.generate({ model: 'img-2', prompt: 'a kite #sim:status=500' } as never)],
  ] as const) {
    const start = await quiet();
    const err = await (call as () => Promise<unknown>)().catch((e: unknown) => e);
    t.ok(err instanceof OpenAI.APIError || err instanceof Anthropic.APIError, `${name}: an APIError`);
    const headers = (err as { headers: Headers }).headers;
    const id = headers.get('x-request-id')!;
    t.equal(headers.get('x-gw-price'), '0.000000', `${name}: x-gw-price 0.000000`);
    const record = await shownIsDebit(t, id, headers.get('x-gw-price'), start);
    t.equal(record.status, 'free', `${name}: free`);
  }

  // count_tokens is never billed: its answers name no price.
  const res = await fetch(`${h.url}/v1/messages/count_tokens`, {
    method: 'POST',
    headers: { 'x-api-key': h.key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'alpha-haiku-4-5', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 200);
  t.equal(res.headers.get('x-gw-price'), null, 'count_tokens: no x-gw-price');
});

t.test(
  "every harness with chains checks at close that each x-gw-price its callers saw is the call's debit",
  async (t) => {
    const g = await startHarness({ chains: true });
    let closed = false;
    t.teardown(() => (closed ? undefined : g.close().catch(() => {})));
    await g.fund('chain_a', 1_000_000n);
    const { response } = await new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 }).chat.completions
      .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi #sim:tokens=5' }] })
      .withResponse();
    const id = response.headers.get('x-request-id')!;
    const record = await until('debited', async () => {
      const r = await getCallRecord(g.redis, id);
      return r && r.status !== 'held' ? r : null;
    });
    t.equal(record.price, response.headers.get('x-gw-price'));
    // A debit that differed from what the caller saw: the close says so.
    await g.redis.hincrby(keys.call(callIdOf(id)), 'p', 1);
    closed = true;
    await t.rejects(g.close(), /prices shown are not the debits:\n.*x-gw-price \d+\.\d{6}, debited/);
  },
);
