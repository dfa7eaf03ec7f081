import t from 'tap';
import { ceilDiv, formatUsd, formatUsdRate, parseUsd } from '../../pricing/index.js';

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
