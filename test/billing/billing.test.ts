import t, { type Test } from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { createEvmChain } from '../../plugins/chains/evm.js';
import { getCallRecord, listUsage } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { fromAnthropicUsage, fromOpenAIUsage, priceCall, worstCaseText } from '../../pricing/index.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { callIdOf } from '../../plugins/request-ids.js';

const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});

const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
const chainA = createEvmChain('chain_a', h.config.chains!.chain_a);

async function record(requestId: string) {
  return until(`usage record of ${requestId}`, async () => {
    const r = await getCallRecord(h.redis, requestId);
    return r && r.status !== 'held' ? r : null;
  });
}

await h.fund('chain_a', 5_000_000n);

t.test('a funded call runs, names its chain, and is charged exactly its usage price', async (t) => {
  const { data, response } = await openai.chat.completions
    .create({ model: 'beta-5.6-sol', max_tokens: 100, messages: [{ role: 'user', content: 'hi #sim:tokens=9' }] })
    .withResponse();
  t.equal(response.headers.get('x-gw-billing-chain'), 'chain_a');
  const id = response.headers.get('x-request-id')!;
  const rec = await record(id);
  const expected = priceCall(h.config.prices, 'beta-5.6-sol', fromOpenAIUsage(data.usage as never));
  t.equal(rec.priceAtomic, expected);
  t.ok(expected > 0n);
  t.ok(rec.held >= expected, 'the hold covered it');
  t.same(rec.usage.output_tokens, 9);
});

t.test('streaming calls are charged from the upstream usage, cache tiers priced', async (t) => {
  const system = [
    {
      type: 'text' as const,
      text: 'policy '.repeat(1500),
      cache_control: { type: 'ephemeral' as const, ttl: '1h' as const },
    },
  ];
  const first = anthropic.messages.stream({
    model: 'alpha-sonnet-4-6',
    max_tokens: 50,
    system,
    messages: [{ role: 'user', content: 'hi #sim:tokens=4' }],
  });
  const m1 = await first.finalMessage();
  const id1 = (await first.withResponse()).response.headers.get('x-request-id')!;
  t.ok((m1.usage.cache_creation?.ephemeral_1h_input_tokens ?? 0) > 0, 'first call writes the 1h cache');
  const r1 = await record(id1);
  t.equal(r1.priceAtomic, priceCall(h.config.prices, 'alpha-sonnet-4-6', fromAnthropicUsage(m1.usage as never, '1h')));
  t.ok(r1.usage.cache_write_1h_tokens > 0);

  const second = anthropic.messages.stream({
    model: 'alpha-sonnet-4-6',
    max_tokens: 50,
    system,
    messages: [{ role: 'user', content: 'hi #sim:tokens=4' }],
  });
  const m2 = await second.finalMessage();
  const r2 = await record((await second.withResponse()).response.headers.get('x-request-id')!);
  t.ok((m2.usage.cache_read_input_tokens ?? 0) > 0, 'the repeat reads the cache');
  t.ok(r2.priceAtomic < r1.priceAtomic, 'a cache read costs less than the write');
});

t.test(
  'x-gw-billing-chain: auto and absent use the default; invalid -> 400; explicit underfunded -> 402, no re-routing',
  async (t) => {
    const call = (chain?: string) =>
      fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${h.key}`,
          'content-type': 'application/json',
          ...(chain ? { 'x-gw-billing-chain': chain } : {}),
        },
        body: JSON.stringify({ model: 'gamma-k3', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }),
      });
    const auto = await call('auto');
    t.equal(auto.status, 200);
    t.equal(auto.headers.get('x-gw-billing-chain'), 'chain_a');
    const bad = await call('chain_z');
    t.equal(bad.status, 400);
    t.equal(((await bad.json()) as { error: { code: string } }).error.code, 'invalid_billing_chain');
    const before = h.sim.received.length;
    const b = await call('chain_b');
    t.equal(b.status, 402, 'chain_b holds nothing although chain_a does');
    t.equal(b.headers.get('x-gw-billing-chain'), 'chain_b');
    const body = (await b.json()) as { error: { code: string; message: string } };
    t.equal(body.error.code, 'insufficient_funds');
    t.match(body.error.message, /chain_b.*needs up to \d+\.\d{6} USD.*0\.000000 USD is available/);
    t.equal(h.sim.received.length, before, 'the upstream was never called');
  },
);

t.test('the SDKs see the 402 as their typed error, in each protocol', async (t) => {
  const poor = await startHarness({ chains: true });
  t.teardown(() => poor.close());
  const o = new OpenAI({ baseURL: `${poor.url}/v1`, apiKey: poor.key, maxRetries: 0 });
  const e = await o.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
    .catch((x) => x);
  t.ok(e instanceof OpenAI.APIError);
  t.equal(e.status, 402);
  t.equal(e.error.code, 'insufficient_funds');
  const a = new Anthropic({ baseURL: poor.url, apiKey: poor.key, maxRetries: 0 });
  const ae = await a.messages
    .create({ model: 'alpha-haiku-4-5', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
    .catch((x) => x);
  t.ok(ae instanceof Anthropic.APIError);
  t.equal(ae.status, 402);
  t.equal(ae.error.error.type, 'billing_error');
});

/** A 402's message, as each SDK shows it: the chain, the remedy, and the dashboard when `dashboard` is given. */
function saysHowToFund(t: Test, message: string, chain: string, dashboard: string | undefined) {
  t.match(message, `The wallet on ${chain} does not cover this call`, 'what is missing');
  t.match(message, `Deposit USD to the escrow on ${chain}`, 'the chain to fund');
  t.match(message, 'or bill a funded chain with x-gw-billing-chain', 'or another chain');
  t.match(message, 'A lower max_tokens lowers what the call holds.', 'or hold less');
  if (dashboard) t.match(message, `on ${chain} (at ${dashboard})`, 'where: the dashboard');
  else t.notMatch(message, '(at ', 'no dashboard named when none is configured');
}

t.test('a 402 says how to fund: the chain, the dashboard when configured, a lower max_tokens', async (t) => {
  const dashboard = 'https://pay.example.com/dashboard/';
  const configured = await startHarness({
    chains: true,
    edit: (c) => {
      c.dashboard = { ...c.dashboard, origins: ['https://pay.example.com'] };
    },
  });
  t.teardown(() => configured.close());
  // h's wallet is funded on chain_a only: its 402s are chain_b's, with no dashboard configured.
  for (const [gw, chain, url] of [
    [configured, 'chain_a', dashboard],
    [h, 'chain_b', undefined],
  ] as const) {
    const headers = { 'x-gw-billing-chain': chain };
    const o = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0, defaultHeaders: headers });
    const e = await o.chat.completions
      .create({ model: 'gamma-k3', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] })
      .catch((x) => x);
    t.ok(e instanceof OpenAI.APIError);
    t.equal(e.status, 402);
    t.match(e.error, { code: 'insufficient_funds', type: 'billing_error', param: null });
    saysHowToFund(t, e.error.message, chain, url);
    const a = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0, defaultHeaders: headers });
    const ae = await a.messages
      .create({ model: 'alpha-haiku-4-5', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .catch((x) => x);
    t.ok(ae instanceof Anthropic.APIError);
    t.equal(ae.status, 402);
    t.match(ae.error, { type: 'error', error: { type: 'billing_error', code: 'insufficient_funds' } });
    saysHowToFund(t, ae.error.error.message, chain, url);
  }
});

t.test(
  '200 concurrent calls on a wallet funded for 20: at most 20 run, the rest get 402, never below zero',
  async (t) => {
    const g = await startHarness({ chains: true });
    t.teardown(() => g.close());
    const body = {
      model: 'gamma-q3',
      max_tokens: 200,
      messages: [{ role: 'user', content: 'race #sim:tokens=3 #sim:delay_ms=4000' }],
    };
    // The hold of one call: the gate's formula (bytes of the upstream body + framing; 200 output tokens). The upstream
    // body is the caller's with max_tokens moved last, the same length.
    const hold = worstCaseText(g.config.prices, 'gamma-q3', {
      inputTokensBound: Buffer.byteLength(JSON.stringify(body)) + 1024,
      maxOutputTokens: 200,
      cacheWrite: 'none',
    });
    await g.fund('chain_a', hold * 20n);
    const results = await Promise.all(
      Array.from({ length: 200 }, () =>
        fetch(`${g.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${g.key}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        }).then(async (r) => {
          await r.arrayBuffer();
          return r.status;
        }),
      ),
    );
    const ok = results.filter((s) => s === 200).length;
    const refused = results.filter((s) => s === 402).length;
    t.ok(ok <= 20, `${ok} ran`);
    t.ok(ok >= 1);
    t.equal(ok + refused, 200, 'every other call got 402');
    const w = await until('holds released', async () => {
      const x = await readWallet(g.redis, g.account, 'chain_a');
      return x.held === 0n ? x : null;
    });
    t.ok(w.available >= 0n, 'available never below zero');
    const onchain = await until('all debits onchain', async () => {
      const x = await readWallet(g.redis, g.account, 'chain_a');
      return x.pending === 0n ? x : null;
    });
    t.ok(onchain.synced >= 0n);
    t.equal(
      await createEvmChain('chain_a', g.config.chains!.chain_a).balanceOf(g.account as `0x${string}`),
      onchain.synced,
      'synced = balanceOf',
    );
  },
);

t.test('upstream failures cost nothing and release the hold', async (t) => {
  for (const content of ['#sim:status=500', '#sim:status=429', '#sim:status=400']) {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'beta-5.5', messages: [{ role: 'user', content }] }),
    });
    t.ok(res.status >= 400);
    const rec = await record(res.headers.get('x-request-id')!);
    t.equal(rec.status, 'free', content);
    t.equal(rec.priceAtomic, 0n);
    const after = await readWallet(h.redis, h.account, 'chain_a');
    t.equal(after.held, 0n);
    t.ok(after.available >= before.available - 0n, 'nothing debited');
  }
});

t.test('a caller that hangs up mid-stream pays only for what reached it, and the upstream is stopped', async (t) => {
  const controller = new AbortController();
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    signal: controller.signal,
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'beta-5.6-sol',
      stream: true,
      max_tokens: 500,
      messages: [{ role: 'user', content: 'long #sim:tokens=400 #sim:chunk_delay_ms=20' }],
    }),
  });
  const id = res.headers.get('x-request-id')!;
  const reader = res.body!.getReader();
  let text = '';
  while ((text.match(/"content":"/g) ?? []).length < 6) text += new TextDecoder().decode((await reader.read()).value);
  controller.abort();
  const rec = await record(id);
  const usage = rec.usage;
  t.ok(usage.output_tokens >= 5 && usage.output_tokens < 100, `charged ${usage.output_tokens} output tokens, not 400`);
  const full = priceCall(
    h.config.prices,
    'beta-5.6-sol',
    fromOpenAIUsage({ prompt_tokens: usage.input_tokens, completion_tokens: 400 }),
  );
  t.ok(rec.priceAtomic < full, 'less than the full answer');
  // The upstream stopped: the simulator's stream would take 8 s; the gateway's pool has no request in flight.
  await new Promise((r) => setTimeout(r, 300));
  const again = await openai.chat.completions.create({
    model: 'gamma-k3',
    messages: [{ role: 'user', content: 'next' }],
  });
  t.equal(again.object, 'chat.completion');
});

t.test('a stream that ends without usage is charged from the metered output, not the hold', async (t) => {
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'gamma-k3',
      stream: true,
      max_tokens: 1000,
      messages: [{ role: 'user', content: '#sim:tokens=50 #sim:hangup_after=7' }],
    }),
  });
  let body = '';
  const reader = res.body!.getReader();
  for (;;) {
    const r = await reader.read().catch(() => ({ done: true, value: undefined }));
    if (r.done) break;
    body += new TextDecoder().decode(r.value);
  }
  const deltas = [...body.matchAll(/^data: (\{.*\})$/gm)]
    .map((m) => (JSON.parse(m[1]!) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')
    .filter((c) => c.length > 0);
  t.equal(deltas.length, 7, '7 content deltas went out');
  const chars = deltas.join('').length;
  const rec = await record(res.headers.get('x-request-id')!);
  t.equal(
    rec.usage.output_tokens,
    Math.max(7, Math.ceil(chars / 4)),
    `the larger of 7 deltas and ${chars} characters / 4, rounded up`,
  );
  t.ok(rec.priceAtomic < rec.held);
  t.ok(rec.priceAtomic > 0n);
});

t.test(
  'debits settle onchain: one Charged event per call id, usage records settled with the tx, synced = balanceOf',
  async (t) => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await openai.chat.completions
        .create({ model: 'gamma-k3', messages: [{ role: 'user', content: `n${i}` }] })
        .withResponse();
      ids.push(r.response.headers.get('x-request-id')!);
    }
    // The gateway numbers its calls: consecutive call ids, which the escrow keeps in shared status words.
    const numbers = ids.map((id) => BigInt(callIdOf(id)));
    t.same(
      numbers.map((n) => n - numbers[0]!),
      [0n, 1n, 2n, 3n, 4n],
      'consecutive calls, consecutive call ids',
    );
    for (const id of ids) {
      const rec = await until(`settled ${id}`, async () => {
        const x = await getCallRecord(h.redis, id);
        return x?.status === 'settled' ? x : null;
      });
      t.match(rec.tx ?? '', /^0x[0-9a-f]{64}$/);
      t.equal(await chainA.callStatus(callIdOf(id)), 'charged');
    }
    const w = await until('no pending', async () => {
      const x = await readWallet(h.redis, h.account, 'chain_a');
      return x.pending === 0n && x.held === 0n ? x : null;
    });
    t.equal(await chainA.balanceOf(h.account as `0x${string}`), w.synced);
    const head = await chainA.latestBlock();
    const events = await chainA.readEvents(0n, head);
    for (const id of ids) {
      t.equal(events.filter((e) => e.kind === 'charged' && e.callId === callIdOf(id)).length, 1, 'charged once');
    }
  },
);

t.test('usage records list every call with time, key, model, tokens, price, chain, state and tx', async (t) => {
  const records = await listUsage(h.redis, h.account, 1000);
  t.ok(records.length >= 10);
  for (const r of records) {
    t.match(r, {
      call_id: /^req_/,
      key_id: h.keyId,
      chain: /^chain_[abcd]$/,
      price: /^\d+\.\d{6}$/,
      status: /^(held|pending|settled|failed|free)$/,
    });
    t.ok(!Number.isNaN(Date.parse(r.time)));
  }
  t.ok(
    records.every((r) => Date.parse(r.time) > Date.now() - 30 * 86_400_000),
    'records within the retention',
  );
});

t.test('metrics count charges, holds, refusals and settlement', async (t) => {
  const text = await (await fetch(h.metricsUrl)).text();
  for (const name of [
    'farebox_charged_usd_total',
    'farebox_holds_placed_total',
    'farebox_rejections_total',
    'farebox_settlement_batches_total',
    'farebox_settlement_duration_seconds',
    'farebox_chain_events_total',
    'farebox_requests_total',
    'farebox_gateway_overhead_seconds',
  ]) {
    t.match(text, new RegExp(`^${name}`, 'm'), name);
  }
  t.match(text, /farebox_rejections_total\{code="insufficient_funds"\} [1-9]/);
  t.match(text, /farebox_settlement_batches_total\{chain="chain_a",result="mined"\} [1-9]/);
});
