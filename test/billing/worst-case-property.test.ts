import t from 'tap';
import { getCallRecord, listUsage } from '../../plugins/billing/call-records.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { makeUsage, parseUsd, priceCall } from '../../pricing/index.js';

// Property: for many random requests through the simulator, no call's actual price exceeds its hold.
const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 1_000_000_000n);

let seed = 0x5eed;
const rand = (n: number) => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed % n;
};
const pick = <T>(xs: readonly T[]): T => xs[rand(xs.length)];
const words = (n: number) =>
  Array.from({ length: n }, (_, i) => ['alpha', 'β', 'data', '数据', 'x', 'long-word-here'][(i + n) % 6]).join(' ');

const ALPHA = [
  'alpha-fable-5',
  'alpha-haiku-4-5',
  'alpha-opus-4-6',
  'alpha-opus-5',
  'alpha-sonnet-4-6',
  'alpha-sonnet-5',
];
const CHAT = [...ALPHA, 'beta-5.6-sol', 'beta-5.6-mini', 'beta-5.5', 'gamma-k3', 'gamma-q3'];

function randomRequest(i: number): { path: string; body: object } {
  const tokens = rand(400);
  const directives = [`#sim:tokens=${tokens}`];
  if (rand(8) === 0) directives.push(`#sim:hangup_after=${rand(tokens + 1)}`);
  if (rand(12) === 0) directives.push(`#sim:status=${pick([400, 429, 500, 529])}`);
  const text = `${words(rand(300))} q${i} ${directives.join(' ')}`;
  const stream = rand(2) === 0;
  const maxTokens = pick([1, 5, 50, 300, 1000, 10_000_000]);
  if (rand(2) === 0) {
    const ttl = pick([undefined, '5m', '1h'] as const);
    const system =
      rand(2) === 0
        ? [
            {
              type: 'text',
              text: words(400 + rand(2000)),
              ...(ttl
                ? { cache_control: { type: 'ephemeral', ttl } }
                : rand(2)
                  ? { cache_control: { type: 'ephemeral' } }
                  : {}),
            },
          ]
        : undefined;
    return {
      path: '/v1/messages',
      body: {
        model: pick(ALPHA),
        max_tokens: maxTokens,
        stream,
        ...(system ? { system } : {}),
        messages: [{ role: 'user', content: text }],
      },
    };
  }
  const stop = rand(4) === 0 ? ['data', 'x'] : undefined;
  return {
    path: '/v1/chat/completions',
    body: {
      model: pick(CHAT),
      stream,
      ...(rand(2) ? { max_tokens: maxTokens } : {}),
      ...(stop ? { stop } : {}),
      ...(stream && rand(2) ? { stream_options: { include_usage: true } } : {}),
      messages: [
        { role: 'system', content: words(rand(200)) },
        { role: 'user', content: text },
      ],
    },
  };
}

t.test('no actual price exceeds its hold, over 160 random requests', async (t) => {
  const N = 160;
  for (let i = 0; i < N; i += 8) {
    await Promise.all(
      Array.from({ length: 8 }, async (_, j) => {
        const { path, body } = randomRequest(i + j);
        const res = await fetch(`${h.url}${path}`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${h.key}`,
            'content-type': 'application/json',
            'anthropic-version': '2023-06-01',
          },
          body: JSON.stringify(body),
        });
        await res.text().catch(() => '');
      }),
    );
  }
  let records = await listUsage(h.redis, h.account, 1000);
  for (let i = 0; i < 100 && records.some((r) => r.status === 'held'); i++) {
    await new Promise((r) => setTimeout(r, 50));
    records = await listUsage(h.redis, h.account, 1000);
  }
  t.ok(records.length >= N * 0.95, `${records.length} calls billed`);
  let charged = 0;
  for (const r of records) {
    const held = (await getCallRecord(h.redis, r.call_id))?.held ?? 0n;
    const price = parseUsd(r.price);
    if (price > held) t.fail(`${r.call_id}: price ${price} above hold ${held}`);
    t.equal(priceCall(h.config.prices, r.model, makeUsage(r.usage)), price, 'price = the usage priced');
    if (price > 0n) charged++;
  }
  t.ok(charged > N / 2, `${charged} calls charged`);
  const metrics = await (await fetch(h.metricsUrl)).text();
  t.notMatch(metrics, /farebox_price_above_hold_total\{[^}]*\} [1-9]/, 'no price was ever capped at its hold');
});
