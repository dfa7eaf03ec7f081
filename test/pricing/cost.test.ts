import t from 'tap';
import { DEFAULT_PRICE_TABLE as T, ZERO_USAGE, buildPriceTable, makeUsage, priceCall } from '../../pricing/index.js';

// A table with the smallest possible rate (1 atomic unit per 1,000,000 tokens) to probe rounding boundaries.
const TINY = buildPriceTable({ text: { 'tiny-1': { input: '0.000001', output: '0.000001', cache_read: '0.000001' } } });

t.test('zero usage costs 0 for every model', async (t) => {
  for (const id of Object.keys(T)) t.equal(priceCall(T, id, ZERO_USAGE), 0n, id);
});

t.test('each text rate kind is priced at its own rate', async (t) => {
  // alpha-sonnet-4-6: 3.00 in, 15.00 out, 0.30 cache read per Mtok = 3, 15, 0.3 atomic per token.
  const m = 'alpha-sonnet-4-6';
  t.equal(priceCall(T, m, makeUsage({ input_tokens: 1000 })), 3000n, 'input');
  t.equal(priceCall(T, m, makeUsage({ output_tokens: 1000 })), 15000n, 'output');
  t.equal(priceCall(T, m, makeUsage({ cache_read_tokens: 1000 })), 300n, 'cache read');
  t.equal(priceCall(T, m, makeUsage({ cache_write_5m_tokens: 1000 })), 3750n, 'cache write 5m = 1.25x input');
  t.equal(priceCall(T, m, makeUsage({ cache_write_1h_tokens: 1000 })), 6000n, 'cache write 1h = 2x input');
  t.equal(
    priceCall(
      T,
      m,
      makeUsage({
        input_tokens: 1000,
        output_tokens: 1000,
        cache_read_tokens: 1000,
        cache_write_5m_tokens: 1000,
        cache_write_1h_tokens: 1000,
      }),
    ),
    3000n + 15000n + 300n + 3750n + 6000n,
    'all together',
  );
});

t.test('one rounding per call: fractions of terms add up before the single ceiling', async (t) => {
  // gamma-q3 input 0.30/Mtok = 0.3 atomic per token: each token alone would round to 1, ten tokens cost 3.
  t.equal(priceCall(T, 'gamma-q3', makeUsage({ input_tokens: 10 })), 3n);
  // 1 input (0.3) + 1 output (1.2) + 1 cache read (0.075) + 1 write 5m (0.375) + 1 write 1h (0.6) = 2.55 -> 3,
  // where rounding each term would give 1 + 2 + 1 + 1 + 1 = 6.
  t.equal(
    priceCall(
      T,
      'gamma-q3',
      makeUsage({
        input_tokens: 1,
        output_tokens: 1,
        cache_read_tokens: 1,
        cache_write_5m_tokens: 1,
        cache_write_1h_tokens: 1,
      }),
    ),
    3n,
  );
});

t.test('rounding boundaries: exact, one unit over, sub-atomic', async (t) => {
  t.equal(priceCall(TINY, 'tiny-1', makeUsage({ input_tokens: 1_000_000 })), 1n, 'exactly divisible');
  t.equal(priceCall(TINY, 'tiny-1', makeUsage({ input_tokens: 1_000_001 })), 2n, 'one token over rounds up');
  t.equal(
    priceCall(TINY, 'tiny-1', makeUsage({ cache_read_tokens: 1 })),
    1n,
    'smallest possible numerator rounds up to 1',
  );
  t.equal(priceCall(TINY, 'tiny-1', makeUsage({ cache_write_5m_tokens: 800_000 })), 1n, '800k x 1.25 = exactly 1');
  t.equal(
    priceCall(TINY, 'tiny-1', makeUsage({ cache_write_5m_tokens: 800_001 })),
    2n,
    'a quarter-unit over rounds up',
  );
  t.equal(priceCall(TINY, 'tiny-1', makeUsage({ cache_write_1h_tokens: 500_000 })), 1n, '500k x 2 = exactly 1');
  // gamma-q3 cache read 0.075/Mtok: 40 tokens = exactly 3 atomic, 41 tokens = 3.075 -> 4.
  t.equal(priceCall(T, 'gamma-q3', makeUsage({ cache_read_tokens: 40 })), 3n);
  t.equal(priceCall(T, 'gamma-q3', makeUsage({ cache_read_tokens: 41 })), 4n);
  t.equal(priceCall(T, 'gamma-q3', makeUsage({ input_tokens: 1 })), 1n, 'one token at 0.3 atomic costs 1');
});

t.test('very large counts are exact (no overflow, no float)', async (t) => {
  t.equal(
    priceCall(T, 'alpha-fable-5', makeUsage({ output_tokens: 1e12 })),
    75n * 10n ** 12n,
    '1e12 output tokens at 75.00 = 75,000,000 USD',
  );
  t.equal(priceCall(T, 'alpha-fable-5', makeUsage({ input_tokens: 1e12 + 1 })), 15n * 10n ** 12n + 15n);
  const max = Number.MAX_SAFE_INTEGER;
  const n = BigInt(max);
  const all = makeUsage({
    input_tokens: max,
    output_tokens: max,
    cache_read_tokens: max,
    cache_write_5m_tokens: max,
    cache_write_1h_tokens: max,
  });
  // gamma-q3 per token, in atomic: 0.3 + 1.2 + 0.075 + 0.375 + 0.6 = 2.55 = 51/20.
  t.equal(priceCall(T, 'gamma-q3', all), (n * 51n + 19n) / 20n);
});

t.test('images: count x per-image price of the delivered size', async (t) => {
  t.equal(priceCall(T, 'img-pro', makeUsage({ images: 1 }), { imageSize: '1K' }), 134_000n);
  t.equal(priceCall(T, 'img-pro', makeUsage({ images: 1 }), { imageSize: '4K' }), 240_000n);
  t.equal(priceCall(T, 'img-2', makeUsage({ images: 3 }), { imageSize: '2K' }), 201_000n);
  t.equal(priceCall(T, 'img-2', ZERO_USAGE), 0n, 'no image delivered: free, size not needed');
  t.throws(() => priceCall(T, 'img-2', makeUsage({ images: 1 })), /without a valid imageSize/);
  t.throws(
    () => priceCall(T, 'img-2', makeUsage({ images: 1 }), { imageSize: '8K' as '1K' }),
    /without a valid imageSize/,
  );
});

t.test('video: the price of one clip of the delivered duration; a failed job is free', async (t) => {
  t.equal(priceCall(T, 'vidA-v6', makeUsage({ video_seconds: 8 })), 800_000n);
  t.equal(priceCall(T, 'vidB-2.5', makeUsage({ video_seconds: 30 })), 2_100_000n);
  t.equal(priceCall(T, 'vidC-3', makeUsage({ video_seconds: 5 })), 600_000n);
  t.equal(priceCall(T, 'vidB-2.1', makeUsage({ video_seconds: 0 })), 0n, 'nothing delivered');
  t.throws(() => priceCall(T, 'vidA-v6', makeUsage({ video_seconds: 5 })), /no price for a 5s clip of vidA-v6/);
});

t.test('usage a model kind does not bill is a bug and throws', async (t) => {
  t.throws(() => priceCall(T, 'alpha-haiku-4-5', makeUsage({ images: 1 })), /alpha-haiku-4-5 has images=1/);
  t.throws(() => priceCall(T, 'beta-5.5', makeUsage({ video_seconds: 4 })), /video_seconds=4/);
  t.throws(
    () => priceCall(T, 'img-pro', makeUsage({ input_tokens: 10, images: 1 }), { imageSize: '1K' }),
    /input_tokens=10/,
  );
  t.throws(() => priceCall(T, 'vidA-v6', makeUsage({ images: 1, video_seconds: 4 })), /images=1/);
});

t.test('unknown model and malformed usage throw', async (t) => {
  t.throws(() => priceCall(T, 'alpha-unknown', ZERO_USAGE), /no price for model "alpha-unknown"/);
  t.throws(() => priceCall(T, 'alpha-haiku-4-5', { ...ZERO_USAGE, input_tokens: -5 }), /usage\.input_tokens/);
  t.throws(() => priceCall(T, 'alpha-haiku-4-5', { ...ZERO_USAGE, output_tokens: 0.5 }), /usage\.output_tokens/);
});
