import t from 'tap';
import {
  ceilDiv,
  formatUsd,
  formatUsdExact,
  formatUsdRate,
  parseUsd,
  publishedRates,
  type TextRates,
} from '../../pricing/index.js';

t.test('parseUsd reads decimal strings exactly into 6-decimal atomic units', async (t) => {
  t.equal(parseUsd('0'), 0n);
  t.equal(parseUsd('2.5'), 2_500_000n);
  t.equal(parseUsd('3.00'), 3_000_000n);
  t.equal(parseUsd('0.075'), 75_000n);
  t.equal(parseUsd('0.000001'), 1n);
  t.equal(parseUsd('0.000123'), 123n);
  t.equal(parseUsd('007.10'), 7_100_000n);
  t.equal(parseUsd('-1.5'), -1_500_000n);
  t.equal(parseUsd('-0'), 0n);
  t.equal(parseUsd('123456789012345678901234567890'), 123456789012345678901234567890_000000n, 'no precision loss');
});

t.test('parseUsd rejects more than 6 decimals instead of truncating', async (t) => {
  t.throws(() => parseUsd('0.0000001'), /more than 6 decimals/);
  t.throws(() => parseUsd('1.1234567'), /more than 6 decimals/);
});

t.test('parseUsd rejects anything that is not a plain decimal', async (t) => {
  for (const bad of ['', ' 1', '1 ', '1.', '.5', '+1', '1e3', '0x10', '1,5', 'NaN', 'Infinity', '--1', '1.2.3']) {
    t.throws(() => parseUsd(bad), /not a USD decimal/, JSON.stringify(bad));
  }
  t.throws(() => parseUsd(1 as unknown as string), /not a USD decimal/, 'a number is not a string');
});

t.test('formatUsd always prints 6 decimals, sign included', async (t) => {
  t.equal(formatUsd(0n), '0.000000');
  t.equal(formatUsd(123n), '0.000123');
  t.equal(formatUsd(2_500_000n), '2.500000');
  t.equal(formatUsd(-1n), '-0.000001');
  t.equal(formatUsd(-1_500_000n), '-1.500000');
  t.equal(formatUsd(10n ** 30n + 7n), '1000000000000000000000000.000007');
});

t.test('formatUsd and parseUsd round-trip', async (t) => {
  for (const a of [0n, 1n, -1n, 999_999n, 1_000_000n, 1_000_001n, -123_456_789n, 10n ** 25n + 3n]) {
    t.equal(parseUsd(formatUsd(a)), a, String(a));
  }
});

t.test('formatUsdRate keeps at least 2 decimals and drops needless trailing zeros', async (t) => {
  t.equal(formatUsdRate(3_000_000n), '3.00');
  t.equal(formatUsdRate(300_000n), '0.30');
  t.equal(formatUsdRate(75_000n), '0.075');
  t.equal(formatUsdRate(175_000n), '0.175');
  t.equal(formatUsdRate(1n), '0.000001');
  t.equal(formatUsdRate(0n), '0.00');
  t.equal(formatUsdRate(15_100_000n), '15.10');
  t.equal(formatUsdRate(-50_000n), '-0.05');
});

t.test('formatUsdExact: at least the decimals asked, more only where the exact value needs them', async (t) => {
  t.equal(formatUsdExact(3_000_000n, 1n, 6), '3.000000');
  t.equal(formatUsdExact(3_000_000n, 1n, 2), '3.00');
  t.equal(formatUsdExact(0n, 1n, 6), '0.000000');
  t.equal(formatUsdExact(0n, 1n, 0), '0');
  t.equal(formatUsdExact(5n, 4n, 6), '0.00000125', '1.25 atomic units: 8 decimals, not rounded');
  t.equal(formatUsdExact(1_750_000n * 5n, 4n, 6), '2.187500');
  t.equal(formatUsdExact(-5n, 4n, 2), '-0.00000125');
  // 1.25x a rate as the dashboard shows it (at least 2 decimals).
  t.equal(formatUsdExact(3_000_000n * 5n, 4n, 2), '3.75');
  t.equal(formatUsdExact(175_000n * 5n, 4n, 2), '0.21875');
  t.equal(formatUsdExact(4_000_000n * 5n, 4n, 2), '5.00');
  t.equal(formatUsdExact(0n, 4n, 2), '0.00');
  t.throws(() => formatUsdExact(1n, 3n, 6), /does not divide a power of ten/);
  t.throws(() => formatUsdExact(1n, 0n, 6), /must be positive/);
});

t.test('publishedRates: text with its cache writes (1.25x and 2x input), images and clips, exact', async (t) => {
  const text: TextRates = { kind: 'text', input: 1_750_000n, output: 14_000_000n, cacheRead: 175_000n };
  t.same(publishedRates(text, 6), {
    input: '1.750000',
    output: '14.000000',
    cache_read: '0.175000',
    cache_write_5m: '2.187500',
    cache_write_1h: '3.500000',
  });
  t.same(publishedRates(text, 2), {
    input: '1.75',
    output: '14.00',
    cache_read: '0.175',
    cache_write_5m: '2.1875',
    cache_write_1h: '3.50',
  });
  t.equal(publishedRates({ ...text, input: 1n }, 6).cache_write_5m, '0.00000125');
  t.same(publishedRates({ kind: 'image', perImage: { '1K': 39_000n, '2K': 67_000n, '4K': 120_000n } }, 6), {
    '1K': '0.039000',
    '2K': '0.067000',
    '4K': '0.120000',
  });
  t.same(publishedRates({ kind: 'video', family: 'vidC', perClip: { '5': 600_000n, '8': 960_000n } }, 6), {
    '5': '0.600000',
    '8': '0.960000',
  });
});

t.test('ceilDiv rounds toward positive infinity', async (t) => {
  t.equal(ceilDiv(0n, 4n), 0n);
  t.equal(ceilDiv(8n, 4n), 2n, 'exactly divisible');
  t.equal(ceilDiv(9n, 4n), 3n, 'one over');
  t.equal(ceilDiv(1n, 4_000_000n), 1n, 'sub-unit rounds up to 1');
  t.equal(ceilDiv(-9n, 4n), -2n, 'negative numerator: ceiling, not floor');
  t.equal(ceilDiv(-8n, 4n), -2n);
  t.equal(ceilDiv(10n ** 30n + 1n, 10n ** 30n), 2n);
  t.throws(() => ceilDiv(1n, 0n), /divisor must be positive/);
  t.throws(() => ceilDiv(1n, -1n), /divisor must be positive/);
});
