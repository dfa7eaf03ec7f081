import t from 'tap';
import {
  DEFAULT_PRICE_TABLE as T,
  IMAGE_SIZES,
  VIDEO_DURATIONS,
  buildPriceTable,
  type Usage,
  makeUsage,
  priceCall,
  worstCaseImage,
  worstCaseText,
  worstCaseVideo,
} from '../../pricing/index.js';

t.test('text worst case prices the input bound at the highest rate the request can trigger', async (t) => {
  // alpha-sonnet-4-6: 3 atomic/token in, 15 out; 5m write 3.75, 1h write 6.
  const b = { inputTokensBound: 1000, maxOutputTokens: 100 };
  t.equal(worstCaseText(T, 'alpha-sonnet-4-6', { ...b, cacheWrite: 'none' }), 3000n + 1500n);
  t.equal(worstCaseText(T, 'alpha-sonnet-4-6', { ...b, cacheWrite: '5m' }), 3750n + 1500n);
  t.equal(worstCaseText(T, 'alpha-sonnet-4-6', { ...b, cacheWrite: '1h' }), 6000n + 1500n);
});

t.test('text worst case rounds up once', async (t) => {
  // gamma-q3: 0.3 atomic/token in, 1.2 out. 1 in + 1 out = 1.5 -> 2 (rounding each would give 1 + 2 = 3).
  t.equal(worstCaseText(T, 'gamma-q3', { inputTokensBound: 1, maxOutputTokens: 1, cacheWrite: 'none' }), 2n);
  t.equal(worstCaseText(T, 'gamma-q3', { inputTokensBound: 0, maxOutputTokens: 0, cacheWrite: '1h' }), 0n);
  t.equal(worstCaseText(T, 'gamma-q3', { inputTokensBound: 10, maxOutputTokens: 0, cacheWrite: 'none' }), 3n, 'exact');
});

t.test('text worst case covers a cache-read rate above the input rate', async (t) => {
  const odd = buildPriceTable({ text: { 'odd-1': { input: '1', output: '2', cache_read: '4' } } });
  const bounds = { inputTokensBound: 1000, maxOutputTokens: 0, cacheWrite: '5m' } as const;
  t.equal(worstCaseText(odd, 'odd-1', bounds), 4000n);
  t.equal(priceCall(odd, 'odd-1', makeUsage({ cache_read_tokens: 1000 })), 4000n, 'attained');
});

t.test('text worst case with huge bounds is exact', async (t) => {
  t.equal(
    worstCaseText(T, 'alpha-fable-5', { inputTokensBound: 1e12, maxOutputTokens: 1e12, cacheWrite: '1h' }),
    30n * 10n ** 12n + 75n * 10n ** 12n,
  );
});

t.test('text worst case rejects bad bounds, other kinds and unknown models', async (t) => {
  t.throws(
    () => worstCaseText(T, 'alpha-opus-5', { inputTokensBound: -1, maxOutputTokens: 1, cacheWrite: 'none' }),
    /inputTokensBound/,
  );
  t.throws(
    () => worstCaseText(T, 'alpha-opus-5', { inputTokensBound: 1, maxOutputTokens: 1.5, cacheWrite: 'none' }),
    /maxOutputTokens/,
  );
  t.throws(
    () => worstCaseText(T, 'alpha-opus-5', { inputTokensBound: 1, maxOutputTokens: 1, cacheWrite: '24h' as 'none' }),
    /unknown cacheWrite/,
  );
  t.throws(
    () => worstCaseText(T, 'img-pro', { inputTokensBound: 1, maxOutputTokens: 1, cacheWrite: 'none' }),
    /img-pro is priced as image/,
  );
  t.throws(
    () => worstCaseText(T, 'nope', { inputTokensBound: 1, maxOutputTokens: 1, cacheWrite: 'none' }),
    /no price for model/,
  );
});

t.test('image worst case: n images at the requested size', async (t) => {
  t.equal(worstCaseImage(T, 'img-pro', '4K', 1), 240_000n);
  t.equal(worstCaseImage(T, 'img-2', '2K', 4), 268_000n);
  t.equal(worstCaseImage(T, 'img-2', '1K', 0), 0n);
  t.throws(() => worstCaseImage(T, 'img-2', '1K', -1), /n must be/);
  t.throws(() => worstCaseImage(T, 'img-2', '3K' as '1K', 1), /unknown size/);
  t.throws(() => worstCaseImage(T, 'vidA-v6', '1K', 1), /priced as video/);
});

t.test('video worst case: the clip of the requested duration', async (t) => {
  t.equal(worstCaseVideo(T, 'vidA-v6', 12), 1_200_000n);
  t.equal(worstCaseVideo(T, 'vidB-2.1', 16), 800_000n);
  t.throws(() => worstCaseVideo(T, 'vidC-3', 12), /no price for a 12s clip of vidC-3/);
  t.throws(() => worstCaseVideo(T, 'alpha-opus-5', 5), /priced as text/);
});

// ---- property test: priceCall <= worst case, and both equal a reference computed with rational arithmetic ----

/** mulberry32: a small seeded PRNG, so a failure reproduces. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

/** Exact fraction n/d (d > 0), reduced. A different formula from the code under test: per-term fractions summed. */
class Frac {
  constructor(
    readonly n: bigint,
    readonly d: bigint,
  ) {}
  static of(n: bigint, d = 1n): Frac {
    const g = gcd(n < 0n ? -n : n, d);
    return g === 0n ? new Frac(0n, 1n) : new Frac(n / g, d / g);
  }
  /** Parses a decimal string ("0.075") as an exact fraction, by hand. */
  static decimal(s: string): Frac {
    const [whole, frac = ''] = s.split('.');
    return Frac.of(BigInt(whole! + frac), 10n ** BigInt(frac.length));
  }
  add(o: Frac): Frac {
    return Frac.of(this.n * o.d + o.n * this.d, this.d * o.d);
  }
  mul(o: Frac): Frac {
    return Frac.of(this.n * o.n, this.d * o.d);
  }
  gt(o: Frac): boolean {
    return this.n * o.d > o.n * this.d;
  }
  ceil(): bigint {
    return this.n % this.d === 0n ? this.n / this.d : this.n / this.d + (this.n > 0n ? 1n : 0n);
  }
}
function gcd(a: bigint, b: bigint): bigint {
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

// A rate quoted in USD per 1,000,000 tokens is, numerically, atomic units per token (1e6 atomic per USD).
interface RefRates {
  input: Frac;
  output: Frac;
  cacheRead: Frac;
}
const W5M = Frac.of(5n, 4n);
const W1H = Frac.of(2n);

function refPrice(r: RefRates, u: Usage): bigint {
  const tok = (n: number) => Frac.of(BigInt(n));
  return tok(u.input_tokens)
    .mul(r.input)
    .add(tok(u.output_tokens).mul(r.output))
    .add(tok(u.cache_read_tokens).mul(r.cacheRead))
    .add(tok(u.cache_write_5m_tokens).mul(r.input).mul(W5M))
    .add(tok(u.cache_write_1h_tokens).mul(r.input).mul(W1H))
    .ceil();
}

function randomRate(rnd: () => number): string {
  const whole = Math.floor(rnd() * (rnd() < 0.5 ? 2 : 100));
  const decimals = Math.floor(rnd() * 7);
  const frac = decimals === 0 ? '' : '.' + String(Math.floor(rnd() * 10 ** decimals)).padStart(decimals, '0');
  return `${whole}${frac}`;
}

/** A random non-negative integer up to `max`, spread over orders of magnitude. */
function randomCount(rnd: () => number, max: number): number {
  if (max === 0) return 0;
  const pick = rnd();
  if (pick < 0.1) return 0;
  if (pick < 0.2) return max;
  const scale = Math.min(max, 10 ** Math.floor(rnd() * 13));
  return Math.floor(rnd() * (scale + 1));
}

/** Splits `total` into `parts` random non-negative integers. */
function split(rnd: () => number, total: number, parts: number): number[] {
  const cuts = Array.from({ length: parts - 1 }, () => Math.floor(rnd() * (total + 1))).sort((a, b) => a - b);
  return [...cuts, total].map((c, i) => c - (i === 0 ? 0 : cuts[i - 1]!));
}

t.test('property: for random tables, bounds and consistent usages, actual <= worst case, both exact', async (t) => {
  const rnd = prng(0x5eed_f00d);
  const TIERS = ['none', '5m', '1h'] as const;
  const failures: string[] = [];
  let samples = 0;
  let attained = 0;
  for (let round = 0; round < 60; round++) {
    const doc: Record<string, { input: string; output: string; cache_read: string }> = {};
    for (let m = 0; m < 5; m++)
      doc[`rand-${m}`] = { input: randomRate(rnd), output: randomRate(rnd), cache_read: randomRate(rnd) };
    const table = buildPriceTable({ text: doc });
    const ids = [...Object.keys(doc), 'alpha-sonnet-4-6', 'gamma-q3', 'beta-5.6-sol'];
    for (let i = 0; i < 60; i++) {
      const id = ids[Math.floor(rnd() * ids.length)]!;
      const q =
        doc[id] ??
        {
          'alpha-sonnet-4-6': { input: '3', output: '15', cache_read: '0.3' },
          'gamma-q3': { input: '0.3', output: '1.2', cache_read: '0.075' },
          'beta-5.6-sol': { input: '1.75', output: '14', cache_read: '0.175' },
        }[id]!;
      const ref: RefRates = {
        input: Frac.decimal(q.input),
        output: Frac.decimal(q.output),
        cacheRead: Frac.decimal(q.cache_read),
      };
      const bounds = {
        inputTokensBound: randomCount(rnd, 2e12),
        maxOutputTokens: randomCount(rnd, 1e9),
        cacheWrite: TIERS[Math.floor(rnd() * 3)]!,
      };
      // A usage consistent with the bounds: the input side within the bound, only the writes the tier allows.
      const [input, read, w5m, w1h] = split(rnd, randomCount(rnd, bounds.inputTokensBound), 4) as [
        number,
        number,
        number,
        number,
      ];
      const usage = makeUsage({
        input_tokens:
          bounds.cacheWrite === 'none' ? input + w5m + w1h : bounds.cacheWrite === '5m' ? input + w1h : input,
        cache_read_tokens: read,
        cache_write_5m_tokens: bounds.cacheWrite === 'none' ? 0 : w5m,
        cache_write_1h_tokens: bounds.cacheWrite === '1h' ? w1h : 0,
        output_tokens: randomCount(rnd, bounds.maxOutputTokens),
      });
      const actual = priceCall(table, id, usage);
      const worst = worstCaseText(table, id, bounds);
      const expected = refPrice(ref, usage);
      // Reference worst case: the most expensive bucket for every input token, by comparing fractions.
      const buckets = [ref.input, ref.cacheRead];
      if (bounds.cacheWrite === '5m') buckets.push(ref.input.mul(W5M));
      if (bounds.cacheWrite === '1h') buckets.push(ref.input.mul(W1H));
      const top = buckets.reduce((a, b) => (b.gt(a) ? b : a));
      const expectedWorst = Frac.of(BigInt(bounds.inputTokensBound))
        .mul(top)
        .add(Frac.of(BigInt(bounds.maxOutputTokens)).mul(ref.output))
        .ceil();
      // The bound is attained: every input token in the top bucket and max output.
      const topBucket =
        top === ref.cacheRead
          ? 'cache_read_tokens'
          : top === ref.input
            ? 'input_tokens'
            : bounds.cacheWrite === '5m'
              ? 'cache_write_5m_tokens'
              : 'cache_write_1h_tokens';
      const full = priceCall(
        table,
        id,
        makeUsage({ [topBucket]: bounds.inputTokensBound, output_tokens: bounds.maxOutputTokens }),
      );
      samples++;
      if (full === worst) attained++;
      if (actual > worst || actual !== expected || worst !== expectedWorst || full !== worst) {
        if (failures.length < 5)
          failures.push(
            JSON.stringify({
              id,
              q,
              bounds,
              usage,
              actual: `${actual}`,
              expected: `${expected}`,
              worst: `${worst}`,
              expectedWorst: `${expectedWorst}`,
              full: `${full}`,
            }),
          );
      }
    }
  }
  t.strictSame(failures, [], `${samples} samples`);
  t.equal(attained, samples, 'the worst case is tight: a saturating usage costs exactly the worst case');
});

t.test('property: images and video never exceed their worst case', async (t) => {
  const rnd = prng(42);
  const failures: string[] = [];
  for (let i = 0; i < 2000; i++) {
    const img = rnd() < 0.5 ? 'img-pro' : 'img-2';
    const size = IMAGE_SIZES[Math.floor(rnd() * 3)]!;
    const n = Math.floor(rnd() * 5);
    const delivered = Math.floor(rnd() * (n + 1));
    const a = priceCall(T, img, makeUsage({ images: delivered }), { imageSize: size });
    if (a > worstCaseImage(T, img, size, n)) failures.push(`${img} ${size} ${delivered}/${n}`);

    const vid = (['vidA-v6', 'vidB-2.5', 'vidB-2.1', 'vidC-3'] as const)[Math.floor(rnd() * 4)]!;
    const durations: readonly number[] = VIDEO_DURATIONS[vid.slice(0, 4) as keyof typeof VIDEO_DURATIONS];
    const seconds = durations[Math.floor(rnd() * durations.length)]!;
    const failed = rnd() < 0.2;
    const v = priceCall(T, vid, makeUsage({ video_seconds: failed ? 0 : seconds }));
    const w = worstCaseVideo(T, vid, seconds);
    if (v > w || (failed ? v !== 0n : v !== w)) failures.push(`${vid} ${seconds}s failed=${failed}`);
  }
  t.strictSame(failures.slice(0, 5), []);
});
