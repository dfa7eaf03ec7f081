// Ways a call could go free or pay wrong, tried through the gateway: a model priced 0, a call that outlives its
// hold's first expiry, a call past its hard maximum, `n` on /v1/messages, a skewed local clock, and an answer killed
// before any content.
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Admission } from '../../plugins/billing/admission.js';
import { Billing } from '../../plugins/billing/billing.js';
import { RateLimiter } from '../../plugins/billing/rate-limit.js';
import { keys } from '../../plugins/store/keys.js';
import { limitsConfigSchema } from '../../policies/limits.js';
import { getCallRecord, listCallRecords, type CallRecord } from '../../plugins/billing/call-records.js';
import { redisNow } from '../../plugins/billing/wallets.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { request, type IncomingMessage } from 'node:http';
import sharp from 'sharp';
import { formatUsd, makeUsage, worstCaseText } from '../../pricing/index.js';
import { closeDevChains, startHarness, type Harness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { newRequestId } from '../../plugins/request-ids.js';

const h = await startHarness({
  chains: true,
  edit: (c) => {
    // Holds live 1 s past their last renewal; heartbeats every 500 ms renew them.
    c.billing = { ...c.billing, hold_grace_ms: 1_000, instance_timeout_ms: 1_500 };
    // A provider whose idle timeout is short and whose calls may run 2.5 s at most.
    c.providers['sim-open-weights'] = { ...c.providers['sim-open-weights']!, timeout_ms: 500, max_duration_ms: 2_500 };
    c.prices = { text: { 'gamma-q3': { input: '0', output: '0', cache_read: '0' } } };
  },
});
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 5_000_000n);
const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });

async function finished(g: Harness, requestId: string): Promise<CallRecord> {
  return until(`the record of ${requestId}`, async () => {
    const r = await getCallRecord(g.redis, requestId);
    return r && r.status !== 'held' ? r : null;
  });
}

/** Read a stream to its end (or its cut), returning the text received. */
async function drain(res: Response): Promise<string> {
  let body = '';
  const reader = res.body!.getReader();
  for (;;) {
    const r = await reader.read().catch(() => ({ done: true as const, value: undefined }));
    if (r.done) return body;
    body += new TextDecoder().decode(r.value);
  }
}

const post = (path: string, body: object, headers: Record<string, string> = {}) =>
  fetch(`${h.url}/v1${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

t.test('a model priced 0: the call runs, holds 0, is free, and the sweeper walks past its record', async (t) => {
  const { response } = await openai.chat.completions
    .create({ model: 'gamma-q3', messages: [{ role: 'user', content: 'hi #sim:tokens=3' }] })
    .withResponse();
  const rec = await finished(h, response.headers.get('x-request-id')!);
  t.match(rec, { held: 0n, priceAtomic: 0n, status: 'free' });
  // A hold of 0 left to expire, and a priced hold behind it: one sweep two minutes on releases both. Their TTL of a
  // minute keeps the harness gateway's own sweeper, on the clock of now, from releasing either first.
  const billing = new Billing(
    h.redis,
    { retentionMs: 600_000, holdTtlMs: 60_000, instanceTimeoutMs: 600_000 },
    createMetrics(),
    { error() {}, warn() {} },
  );
  const zero = await billing.hold({
    requestId: `req_zero_${Date.now()}`,
    account: h.account,
    keyId: h.keyId,
    chain: 'chain_a',
    quote: { model: 'gamma-q3', amount: 0n },
  });
  const priced = await billing.hold({
    requestId: `req_priced_${Date.now()}`,
    account: h.account,
    keyId: h.keyId,
    chain: 'chain_a',
    quote: { model: 'gamma-k3', amount: 1_000n },
  });
  t.ok(zero.result.placed && priced.result.placed);
  const at = (await redisNow(h.redis)) + 120_000;
  // A new instance releases nothing for its first instance timeout (a lapsed heartbeat may be a live instance's).
  await billing.sweep(at - 600_000);
  const released = await billing.sweep(at);
  t.ok(released >= 2, `${released} released, the zero hold among them`);
  t.match(await getCallRecord(h.redis, zero.hold.requestId), { status: 'free', released: 'expired' });
  t.match(await getCallRecord(h.redis, priced.hold.requestId), { status: 'free', released: 'expired' });
});

t.test("a stream that outlives its hold's first expiry is renewed and billed in full, never released", async (t) => {
  // 16 tokens 100 ms apart: 1.6 s at the least, past the 1 s grace a hold has without renewal, in 100 ms idle gaps
  // (under the 0.5 s idle timeout). A loaded machine only stretches it: 0.9 s are left before the 2.5 s maximum.
  const res = await post('/chat/completions', {
    model: 'gamma-k3',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: '#sim:tokens=16 #sim:chunk_delay_ms=100' }],
  });
  const id = res.headers.get('x-request-id')!;
  const body = await drain(res);
  t.match(body, /\[DONE\]/, 'the whole answer arrived');
  const rec = await finished(h, id);
  t.match(rec, { status: 'pending', released: null, late: false }, 'debited from its own hold');
  t.equal(rec.usage.output_tokens, 16, 'billed in full');
});

t.test("a call past its provider's max_duration_ms is cut and billed for what was delivered", async (t) => {
  const res = await post('/chat/completions', {
    model: 'gamma-k3',
    stream: true,
    messages: [{ role: 'user', content: '#sim:tokens=100 #sim:chunk_delay_ms=100' }],
  });
  const id = res.headers.get('x-request-id')!;
  const started = Date.now();
  const body = await drain(res);
  const took = Date.now() - started;
  t.notMatch(body, /\[DONE\]/, 'cut before its end');
  // The whole answer takes 10 s at the least (a loaded machine only stretches it): any bound under that tells a cut.
  t.ok(took < 8_000, `cut after ${took} ms, near the 2.5 s maximum, not the 10 s the answer takes`);
  const rec = await finished(h, id);
  t.ok(rec.usage.output_tokens > 5 && rec.usage.output_tokens < 100, `${rec.usage.output_tokens} output tokens billed`);
  t.ok(rec.priceAtomic > 0n && rec.priceAtomic < rec.held);
});

t.test('a caller that stops reading is cut at max_duration_ms too, and billed for what it was sent', async (t) => {
  // 32,000 tokens at once, of which the caller reads nothing: the sockets fill, the gateway pauses the upstream
  // (backpressure), and only the hard maximum ends the call.
  const body = JSON.stringify({
    model: 'gamma-k3',
    stream: true,
    max_tokens: 32_000,
    messages: [{ role: 'user', content: '#sim:tokens=32000' }],
  });
  const started = Date.now();
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(
      `${h.url}/v1/chat/completions`,
      {
        method: 'POST',
        headers: {
          authorization: `Bearer ${h.key}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      },
      (r) => {
        r.pause();
        resolve(r);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
  // The call ends, and is debited, while its caller still reads nothing.
  const rec = await finished(h, String(res.headers['x-request-id']));
  const endedAfter = Date.now() - started;
  t.ok(endedAfter >= 2_000 && endedAfter < 6_000, `debited ${endedAfter} ms in, at the 2.5 s maximum`);
  let text = '';
  res.on('data', (d: Buffer) => (text += d.toString()));
  await new Promise((resolve) => {
    res.on('error', resolve);
    res.on('close', resolve);
    res.resume();
  });
  t.notMatch(text, /\[DONE\]/, 'the answer was cut');
  t.ok(
    rec.usage.output_tokens > 0 && rec.usage.output_tokens < 32_000,
    `${rec.usage.output_tokens} output tokens billed: what was written before the stall`,
  );
  t.ok(rec.priceAtomic > 0n && rec.priceAtomic < rec.held);
  t.equal(rec.released, null, 'its own hold, renewed while it stalled');
});

t.test(
  'a JSON answer is written whole at its end, with its price: a caller that leaves while it arrives pays nothing, one that leaves partway through reading it pays its x-gw-price',
  async (t) => {
    // 32,000 tokens of JSON (about 130 KB), arriving in 16 KiB slices 150 ms apart: over a second.
    const body = JSON.stringify({
      model: 'gamma-k3',
      max_tokens: 32_000,
      messages: [{ role: 'user', content: '#sim:tokens=32000 #sim:chunk_delay_ms=150' }],
    });
    const send = () =>
      request(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${h.key}`,
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
        },
      });

    // Leaves once the provider is answering, long before the answer's end: nothing was written to it.
    const asked = h.sim.received.length;
    const early = send();
    let answered = false;
    early.on('response', () => {
      answered = true;
    });
    early.on('error', () => {});
    early.end(body);
    await until('the provider asked', async () => (h.sim.received.length > asked ? true : null));
    early.destroy();
    const left = await until('the call the caller left, debited', async () => {
      const [r] = await listCallRecords(h.redis, h.account, 1);
      return r && r.status !== 'held' ? r : null;
    });
    t.notOk(answered, 'no head before the answer is whole');
    t.same([left.status, left.priceAtomic], ['free', 0n], 'free: nothing was written to it');

    // Reads 40 KB of the answer, then leaves: the whole answer was written to its connection, at the price it was told.
    const { id, price, received } = await new Promise<{ id: string; price: string; received: number }>(
      (resolve, reject) => {
        const req = send();
        req.on('response', (res: IncomingMessage) => {
          let got = 0;
          res.on('data', (d: Buffer) => {
            got += d.length;
            if (got >= 40_000) {
              req.destroy();
              resolve({
                id: String(res.headers['x-request-id']),
                price: String(res.headers['x-gw-price']),
                received: got,
              });
            }
          });
          res.on('error', () => {});
        });
        req.on('error', () => {});
        req.on('close', () => reject(new Error('closed before 40 KB')));
        req.end(body);
      },
    );
    const rec = await finished(h, id);
    t.ok(received < 130_000, `it left after ${received} bytes`);
    t.equal(rec.usage.output_tokens, 32_000, 'billed the whole answer written to it');
    t.equal(price, formatUsd(rec.priceAtomic), 'the price its head said');
  },
);

t.test("n on /v1/messages is not the endpoint's: every value holds the whole of max_tokens", async (t) => {
  const ask = (extra: object) =>
    post(
      '/messages',
      { model: 'alpha-haiku-4-5', max_tokens: 2_000, messages: [{ role: 'user', content: 'hi' }], ...extra },
      { 'anthropic-version': '2023-06-01' },
    );
  const plain = await ask({});
  await plain.arrayBuffer();
  const reference = await finished(h, plain.headers.get('x-request-id')!);
  for (const n of [0, '0', [], false, 0.25, -3, 1e9]) {
    const res = await ask({ n });
    await res.arrayBuffer();
    const rec = await getCallRecord(h.redis, res.headers.get('x-request-id')!);
    if (!rec) {
      t.equal(res.status, 400, `n: ${JSON.stringify(n)} refused`);
      continue;
    }
    // The body differs by the few bytes of `n`: the hold is the same within those bytes' input tokens.
    const bytes = JSON.stringify({ n }).length;
    const perToken = worstCaseText(h.config.prices, 'alpha-haiku-4-5', {
      inputTokensBound: bytes,
      maxOutputTokens: 0,
      cacheWrite: 'none',
    });
    t.ok(
      rec.held >= reference.held - perToken,
      `n: ${JSON.stringify(n)} holds ${rec.held}, as without it (${reference.held})`,
    );
  }
});

t.test("a local clock hours off changes no expiry: holds and heartbeats are on Redis's clock", async (t) => {
  const realNow = Date.now;
  const skew = 3 * 3_600_000;
  Date.now = () => realNow() + skew;
  t.teardown(() => {
    Date.now = realNow;
  });
  // A stream of about 2 s: its hold is read while the call runs.
  const stream = anthropic.messages.stream({
    model: 'alpha-haiku-4-5',
    max_tokens: 100,
    messages: [{ role: 'user', content: '#sim:tokens=20 #sim:chunk_delay_ms=100' }],
  });
  const { response } = await stream.withResponse();
  const id = response.headers.get('x-request-id')!;
  const held = await until('the hold', async () => getCallRecord(h.redis, id));
  const redisTime = await redisNow(h.redis);
  t.equal(held.status, 'held', 'read while the call runs');
  t.ok(
    held.expires! > redisTime && held.expires! < redisTime + 60_000,
    `expires ${held.expires! - redisTime} ms after Redis's now, not hours`,
  );
  // Another instance whose clock runs three hours further ahead than the gateway's sweeps meanwhile: nothing of this
  // live call is released (were expiries on local clocks, its hold would look hours past its expiry to it).
  const ahead = new Billing(
    h.redis,
    { retentionMs: 60_000, holdTtlMs: 1_000, instanceTimeoutMs: 1_500 },
    createMetrics(),
    { error() {}, warn() {} },
  );
  Date.now = () => realNow() + 2 * skew;
  try {
    await ahead.sweep();
  } finally {
    Date.now = () => realNow() + skew;
  }
  t.match(await getCallRecord(h.redis, id), { status: 'held', released: null }, 'still held after the other sweep');
  await ahead.stop();
  await stream.finalMessage();
  const rec = await finished(h, id);
  t.match(rec, { status: 'pending', released: null, late: false }, 'debited from its own hold');
  t.equal(rec.usage.output_tokens, 20);
});

t.test('an answer the upstream kills before any content costs nothing', async (t) => {
  const res = await post(
    '/messages',
    {
      model: 'alpha-haiku-4-5',
      max_tokens: 100,
      stream: true,
      messages: [{ role: 'user', content: '#sim:tokens=20 #sim:hangup_after=0' }],
    },
    { 'anthropic-version': '2023-06-01' },
  );
  const body = await drain(res);
  t.match(body, /message_start/, 'message_start, with its input usage, reached the caller');
  t.notMatch(body, /content_block_delta/, 'no content did');
  const rec = await finished(h, res.headers.get('x-request-id')!);
  t.match(rec, { status: 'free', priceAtomic: 0n, released: null }, 'released by the call at 0, nothing debited');
});

t.test(
  'inline images are held by their pixels: 20 flat 1092x1092 PNGs of a few KB hold 20 x 1,590 input tokens',
  async (t) => {
    const png = (
      await sharp({ create: { width: 1092, height: 1092, channels: 3, background: '#fafafa' } })
        .png({ compressionLevel: 9 })
        .toBuffer()
    ).toString('base64');
    const image = {
      type: 'image' as const,
      source: { type: 'base64' as const, media_type: 'image/png' as const, data: png },
    };
    const { response } = await anthropic.messages
      .create({
        model: 'alpha-haiku-4-5',
        max_tokens: 10,
        messages: [
          {
            role: 'user',
            content: [...Array.from({ length: 20 }, () => image), { type: 'text', text: 'describe #sim:tokens=3' }],
          },
        ],
      })
      .withResponse();
    const rec = await finished(h, response.headers.get('x-request-id')!);
    const pixels = worstCaseText(h.config.prices, 'alpha-haiku-4-5', {
      inputTokensBound: 20 * Math.ceil((1092 * 1092) / 750),
      maxOutputTokens: 10,
      cacheWrite: 'none',
    });
    t.ok(
      rec.held >= pixels,
      `held ${rec.held} >= ${pixels}, the images' pixels priced (bytes alone: ${20 * png.length} characters)`,
    );
  },
);

t.test(
  'anthropic-beta flags outside the allow-list are dropped and named; priced-elsewhere parameters are refused',
  async (t) => {
    const before = h.sim.received.length;
    const res = await post(
      '/messages',
      { model: 'alpha-haiku-4-5', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] },
      {
        'anthropic-version': '2023-06-01',
        'anthropic-beta': 'interleaved-thinking-2025-05-14,context-1m-2025-08-07',
      },
    );
    t.equal(res.status, 200);
    await res.arrayBuffer();
    t.equal(res.headers.get('x-gw-dropped-beta'), 'context-1m-2025-08-07');
    const sent = h.sim.received.slice(before).find((r) => r.url.startsWith('/v1/messages'));
    t.equal(sent?.headers['anthropic-beta'], 'interleaved-thinking-2025-05-14', 'only the allowed flag went upstream');

    const e = await openai.chat.completions
      .create({ model: 'beta-5.6-sol', messages: [{ role: 'user', content: 'hi' }], web_search_options: {} } as never)
      .catch((err: unknown) => err);
    t.ok(e instanceof OpenAI.BadRequestError, 'a typed 400');
    t.match((e as InstanceType<typeof OpenAI.BadRequestError>).error, {
      code: 'unsupported_parameter',
      param: 'web_search_options',
    });
    const tool = await anthropic.messages
      .create({
        model: 'alpha-haiku-4-5',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      } as never)
      .catch((err: unknown) => err);
    t.ok(tool instanceof Anthropic.BadRequestError);
    t.match((tool as InstanceType<typeof Anthropic.BadRequestError>).error, { error: { code: 'unsupported_tool' } });
  },
);

t.test("a call whose worst case is above the escrow's per-charge cap is refused before any hold", async (t) => {
  // The watcher publishes each escrow's cap (the dev chains': 1,000 USD).
  const published = await until('the cap published', async () => h.redis.get(keys.escrowCap('chain_a')));
  t.equal(BigInt(published), 1_000_000_000n);
  const metrics = createMetrics();
  const log = { error() {}, warn() {} };
  const billing = new Billing(
    h.redis,
    { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 60_000 },
    metrics,
    log,
  );
  const admission = new Admission(new RateLimiter(h.redis, limitsConfigSchema.parse({})), billing, log, h.redis);
  await admission.refresh();
  const identity = {
    keyId: h.keyId,
    keyHash: 'x',
    account: h.account,
    status: 'active' as const,
    defaultChain: 'chain_a',
    models: null,
    expiresAt: null,
  };
  const ask = (amount: bigint) =>
    admission.admit({
      requestId: newRequestId(),
      protocol: 'openai',
      identity,
      family: 'gamma',
      tokens: 0,
      quote: { model: 'gamma-k3', amount },
    });
  const refused = await ask(1_000_000_001n).catch((e: unknown) => e);
  t.match(refused, { code: 'charge_cap_exceeded', status: 400, headers: { 'x-gw-billing-chain': 'chain_a' } });
  const at = await ask(1_000n);
  t.ok(at.hold, 'a call under the cap is held');
  await admission.finish(at);
});

t.test(
  'a price past what the debit script reads (10^30 atomic units) debits the hold, no more, and is counted as a cut',
  async (t) => {
    const metrics = createMetrics();
    const log = { error() {}, warn() {} };
    const billing = new Billing(
      h.redis,
      { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 60_000 },
      metrics,
      log,
    );
    const admission = new Admission(new RateLimiter(h.redis, limitsConfigSchema.parse({})), billing, log, h.redis);
    const identity = {
      keyId: h.keyId,
      keyHash: 'x',
      account: h.account,
      status: 'active' as const,
      defaultChain: 'chain_a',
      models: null,
      expiresAt: null,
    };
    const at = await admission.admit({
      requestId: newRequestId(),
      protocol: 'openai',
      identity,
      family: 'gamma',
      tokens: 0,
      quote: { model: 'gamma-k3', amount: 1_234n },
    });
    const done = await billing.debit(at.hold!, {
      usage: makeUsage({ output_tokens: Number.MAX_SAFE_INTEGER }),
      price: 10n ** 30n,
    });
    t.same(done, { debited: 1_234n, capped: true, late: false });
    t.match(await getCallRecord(h.redis, at.hold!.requestId), { priceAtomic: 1_234n, capped: true, status: 'pending' });
    t.equal((await metrics.priceAboveHold.get()).values[0]?.value, 1);
    t.equal((await metrics.debitsRefused.get()).values[0]?.value ?? 0, 0, 'nothing refused');
  },
);
