import t from 'tap';
import {
  DEFAULT_PRICES,
  DEFAULT_PRICE_TABLE,
  PriceTableError,
  VIDEO_DURATIONS,
  buildPriceTable,
  lookupRates,
  pricesConfigSchema,
  publishPrices,
} from '../../pricing/index.js';

const CATALOG = {
  text: [
    'alpha-fable-5',
    'alpha-haiku-4-5',
    'alpha-opus-4-6',
    'alpha-opus-4-7',
    'alpha-opus-4-8',
    'alpha-opus-5',
    'alpha-sonnet-4-6',
    'alpha-sonnet-5',
    'beta-5.6-sol',
    'beta-5.6-mini',
    'beta-5.5',
    'gamma-k3',
    'gamma-q3',
  ],
  image: ['img-pro', 'img-2'],
  video: ['vidA-v6', 'vidB-2.5', 'vidB-2.1', 'vidC-3'],
} as const;

/** Runs buildPriceTable and returns the PriceTableError it throws. */
function buildError(overrides: unknown): PriceTableError {
  try {
    buildPriceTable(overrides);
  } catch (err) {
    if (err instanceof PriceTableError) return err;
    throw err;
  }
  throw new Error('buildPriceTable did not throw');
}

t.test('default table prices every catalog model with its kind, and nothing else', async (t) => {
  for (const kind of ['text', 'image', 'video'] as const) {
    for (const id of CATALOG[kind]) t.equal(lookupRates(DEFAULT_PRICE_TABLE, id).kind, kind, id);
  }
  t.equal(Object.keys(DEFAULT_PRICE_TABLE).length, CATALOG.text.length + CATALOG.image.length + CATALOG.video.length);
});

t.test('default alpha rates follow the tiers, cache read 0.1x input', async (t) => {
  const rate = (id: string) => lookupRates(DEFAULT_PRICE_TABLE, id);
  t.strictSame(rate('alpha-haiku-4-5'), { kind: 'text', input: 1_000_000n, output: 5_000_000n, cacheRead: 100_000n });
  t.strictSame(rate('alpha-sonnet-4-6'), { kind: 'text', input: 3_000_000n, output: 15_000_000n, cacheRead: 300_000n });
  t.strictSame(rate('alpha-opus-4-6'), { kind: 'text', input: 5_000_000n, output: 25_000_000n, cacheRead: 500_000n });
  t.strictSame(rate('alpha-fable-5'), { kind: 'text', input: 15_000_000n, output: 75_000_000n, cacheRead: 1_500_000n });
  for (const id of CATALOG.text.filter((m) => m.startsWith('alpha-'))) {
    const r = rate(id);
    if (r.kind !== 'text') throw new Error('not text');
    t.equal(r.cacheRead * 10n, r.input, `${id} cache read is 0.1x input`);
  }
});

t.test('default video prices cover exactly the durations of each family', async (t) => {
  for (const id of CATALOG.video) {
    const r = lookupRates(DEFAULT_PRICE_TABLE, id);
    if (r.kind !== 'video') throw new Error('not video');
    t.strictSame(Object.keys(r.perClip).map(Number), [...VIDEO_DURATIONS[r.family]], id);
  }
  t.equal((lookupRates(DEFAULT_PRICE_TABLE, 'vidB-2.5') as { family: string }).family, 'vidB');
});

t.test('lookupRates throws on an unknown model, including prototype names', async (t) => {
  t.throws(() => lookupRates(DEFAULT_PRICE_TABLE, 'alpha-nope'), /no price for model "alpha-nope"/);
  t.throws(() => lookupRates(DEFAULT_PRICE_TABLE, 'constructor'), /no price for model/);
  t.throws(() => lookupRates(DEFAULT_PRICE_TABLE, '__proto__'), /no price for model/);
});

t.test('tables and the default document are frozen', async (t) => {
  t.ok(Object.isFrozen(DEFAULT_PRICE_TABLE));
  const img = lookupRates(DEFAULT_PRICE_TABLE, 'img-pro');
  t.ok(Object.isFrozen(img));
  if (img.kind === 'image') t.ok(Object.isFrozen(img.perImage));
  t.throws(() => {
    (DEFAULT_PRICE_TABLE as Record<string, unknown>)['x'] = 1;
  }, TypeError);
  t.throws(() => {
    (DEFAULT_PRICES.text['alpha-haiku-4-5'] as { input: string }).input = '0';
  }, TypeError);
});

t.test('publishPrices returns the `farebox prices --json` document', async (t) => {
  const doc = publishPrices(DEFAULT_PRICE_TABLE);
  t.strictSame(Object.keys(doc), ['text', 'image', 'video']);
  t.strictSame(doc.text['alpha-sonnet-4-6'], { input: '3.00', output: '15.00', cache_read: '0.30' });
  t.strictSame(doc.text['gamma-q3'], { input: '0.30', output: '1.20', cache_read: '0.075' });
  t.strictSame(Object.keys(doc.text), [...CATALOG.text]);
  t.strictSame(Object.keys(doc.image), [...CATALOG.image]);
  t.strictSame(Object.keys(doc.video), [...CATALOG.video]);
  t.strictSame(Object.keys(doc.image['img-pro']!), ['1K', '2K', '4K']);
  t.strictSame(doc.video['vidA-v6'], { '4': '0.40', '8': '0.80', '12': '1.20' });
  t.strictSame(Object.keys(doc.video['vidB-2.5']!), ['5', '8', '12', '16', '20', '24', '30']);
  const strings = JSON.stringify(doc).match(/"[^"]*":"[^"]*"/g) ?? [];
  t.ok(strings.length > 50);
  for (const kv of strings) t.match(kv, /:"\d+\.\d\d(\d{0,3}[1-9])?"$/, `${kv}: >= 2 decimals, no needless zeros`);
  t.strictSame(JSON.parse(JSON.stringify(doc)), doc, 'plain JSON, no bigint');
  t.strictSame(doc, DEFAULT_PRICES, 'the defaults publish as written');
});

t.test('the published document is a valid config that rebuilds the same table', async (t) => {
  const table = buildPriceTable({ text: { 'alpha-haiku-4-5': { input: '1.1' } } });
  const doc = publishPrices(table);
  t.ok(pricesConfigSchema.safeParse(doc).success);
  t.strictSame(buildPriceTable(doc), table);
});

t.test('overrides replace only the fields they name', async (t) => {
  const table = buildPriceTable({
    text: { 'alpha-sonnet-4-6': { input: '2.5' } },
    image: { 'img-2': { '4K': '0.2000' } },
    video: { 'vidC-3': { '8': '1' } },
  });
  t.strictSame(lookupRates(table, 'alpha-sonnet-4-6'), {
    kind: 'text',
    input: 2_500_000n,
    output: 15_000_000n,
    cacheRead: 300_000n,
  });
  const doc = publishPrices(table);
  t.strictSame(doc.image['img-2'], { '1K': '0.039', '2K': '0.067', '4K': '0.20' });
  t.strictSame(doc.video['vidC-3'], { '5': '0.60', '8': '1.00' });
  t.strictSame(doc.text['alpha-haiku-4-5'], DEFAULT_PRICES.text['alpha-haiku-4-5'], 'others untouched');
  t.strictSame(
    lookupRates(DEFAULT_PRICE_TABLE, 'alpha-sonnet-4-6'),
    { kind: 'text', input: 3_000_000n, output: 15_000_000n, cacheRead: 300_000n },
    'default unchanged',
  );
});

t.test('a complete new model of each kind is added after the defaults', async (t) => {
  const table = buildPriceTable({
    text: { 'beta-6': { input: '2', output: '16', cache_read: '0.2' } },
    image: { 'img-3': { '1K': '0.05', '2K': '0.06', '4K': '0.07' } },
    video: { 'vidB-3.0': { '5': '1', '8': '1', '12': '1', '16': '1', '20': '1', '24': '1', '30': '1.000001' } },
  });
  t.strictSame(lookupRates(table, 'beta-6'), {
    kind: 'text',
    input: 2_000_000n,
    output: 16_000_000n,
    cacheRead: 200_000n,
  });
  const doc = publishPrices(table);
  t.equal(Object.keys(doc.text).at(-1), 'beta-6');
  t.equal(doc.video['vidB-3.0']!['30'], '1.000001');
  t.equal(Object.keys(table).length, Object.keys(DEFAULT_PRICE_TABLE).length + 3);
});

t.test('a video model takes its durations from the family its config gives it, not from its id', async (t) => {
  const clips = { '5': '0.3', '8': '0.5', '12': '0.7', '16': '0.9', '20': '1.1', '24': '1.3', '30': '1.5' };
  const table = buildPriceTable({ video: { 'studio-clip-1': clips } }, 'prices', { 'studio-clip-1': 'vidB' });
  const rates = lookupRates(table, 'studio-clip-1');
  t.equal(rates.kind === 'video' && rates.family, 'vidB');
  // The config's family wins over a prefix that names another one.
  const renamed = buildPriceTable({ video: { 'vidA-x': { '5': '1', '8': '2' } } }, 'prices', { 'vidA-x': 'vidC' });
  t.strictSame(publishPrices(renamed).video['vidA-x'], { '5': '1.00', '8': '2.00' });
  t.throws(
    () => buildPriceTable({ video: { 'studio-clip-1': clips } }),
    /prices\.video\.studio-clip-1: unknown video family; give the model a family/,
  );
});

t.test('no overrides (undefined, null, {}) gives the default table', async (t) => {
  t.strictSame(buildPriceTable(), DEFAULT_PRICE_TABLE);
  t.strictSame(buildPriceTable(null), DEFAULT_PRICE_TABLE);
  t.strictSame(buildPriceTable({ text: {}, image: {}, video: {} }), DEFAULT_PRICE_TABLE);
});

t.test('override errors name the offending field', async (t) => {
  const cases: [unknown, string, RegExp][] = [
    [
      { text: { 'alpha-haiku-4-5': { input: '1.1234567' } } },
      'prices.text.alpha-haiku-4-5.input',
      /at most 6 decimals/,
    ],
    [
      { text: { 'alpha-haiku-4-5': { output: '-1' } } },
      'prices.text.alpha-haiku-4-5.output',
      /non-negative USD decimal/,
    ],
    [{ text: { 'alpha-haiku-4-5': { output: 1 } } }, 'prices.text.alpha-haiku-4-5.output', /expected string/],
    [{ text: { 'alpha-haiku-4-5': { output: '1e3' } } }, 'prices.text.alpha-haiku-4-5.output', /USD decimal/],
    [
      { text: { 'alpha-haiku-4-5': { cache_write: '1' } } },
      'prices.text.alpha-haiku-4-5',
      /Unrecognized key.*cache_write/,
    ],
    [{ audio: {} }, 'prices', /Unrecognized key.*audio/],
    ['cheap', 'prices', /expected object/],
    [{ text: { 'img-pro': { input: '1' } } }, 'prices.text.img-pro', /img-pro is priced as image, not text/],
    [{ video: { 'alpha-opus-5': { '5': '1' } } }, 'prices.video.alpha-opus-5', /priced as text, not video/],
    [{ image: { 'img-2': { '8K': '1' } } }, 'prices.image.img-2', /Unrecognized key.*8K/],
    [{ video: { 'vidA-v6': { '6': '1' } } }, 'prices.video.vidA-v6.6', /vidA clips last 4, 8, 12 seconds only/],
    [{ video: { 'vidC-3': { '12': '1' } } }, 'prices.video.vidC-3.12', /vidC clips last 5, 8 seconds only/],
    [{ video: { 'vidA-v6': { '4.5': '1' } } }, 'prices.video.vidA-v6.4.5', /invalid key: expected whole seconds/],
    [{ video: { 'vidX-1': { '4': '1' } } }, 'prices.video.vidX-1', /unknown video family/],
    [{ video: { 'vidC-4': { '5': '1' } } }, 'prices.video.vidC-4.8', /missing/],
    [{ image: { 'img-3': { '1K': '1', '2K': '2' } } }, 'prices.image.img-3.4K', /missing/],
    [{ text: { 'gamma-z': { input: '1', output: '2' } } }, 'prices.text.gamma-z.cache_read', /missing/],
    [
      {
        text: { 'm-1': { input: '1', output: '1', cache_read: '1' } },
        image: { 'm-1': { '1K': '1', '2K': '1', '4K': '1' } },
      },
      'prices.image.m-1',
      /m-1 is also listed under text/,
    ],
    [{ text: { '': { input: '1' } } }, 'prices.text.', /model id must not be empty/],
  ];
  for (const [overrides, path, reason] of cases) {
    const err = buildError(overrides);
    t.equal(err.path, path, JSON.stringify(overrides));
    t.match(err.message, reason, JSON.stringify(overrides));
    t.ok(err.message.startsWith(`${path}: `), 'message leads with the path');
  }
});

t.test('pricesConfigSchema accepts partial overrides and rejects unknown fields', async (t) => {
  t.ok(pricesConfigSchema.safeParse({}).success);
  t.ok(pricesConfigSchema.safeParse({ text: { 'alpha-opus-5': { output: '20' } } }).success);
  t.notOk(pricesConfigSchema.safeParse({ text: { 'alpha-opus-5': { outptu: '20' } } }).success);
  t.notOk(pricesConfigSchema.safeParse({ text: { 'alpha-opus-5': { output: '20.0000001' } } }).success);
});
