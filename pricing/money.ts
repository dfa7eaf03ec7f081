// Money is bigint atomic units of the USD stablecoin (6 decimals), never floats (DESIGN.md "Money").

/** Atomic units in one USD: the stablecoin has 6 decimals. */
export const ATOMIC_PER_USD = 1_000_000n;

/** Decimals of the atomic unit. */
export const USD_DECIMALS = 6;

const USD_DECIMAL = /^(-)?(\d+)(?:\.(\d+))?$/;

/** Parses a signed USD decimal string ("2.5", "0.000123", "-1") into atomic units, exactly; throws RangeError on anything else or on more than 6 decimals. */
export function parseUsd(s: string): bigint {
  const m = typeof s === 'string' ? USD_DECIMAL.exec(s) : null;
  if (m === null) throw new RangeError(`not a USD decimal: ${JSON.stringify(s)}`);
  const frac = m[3] ?? '';
  // Truncating would silently change a price; the atomic unit is the finest amount that exists.
  if (frac.length > USD_DECIMALS) throw new RangeError(`more than ${USD_DECIMALS} decimals: ${s}`);
  const atomic = BigInt(m[2]!) * ATOMIC_PER_USD + BigInt(frac.padEnd(USD_DECIMALS, '0'));
  return m[1] === '-' ? -atomic : atomic;
}

/** Formats atomic units as a USD decimal string with exactly 6 decimals ("0.000123", "-1.500000"). */
export function formatUsd(atomic: bigint): string {
  const negative = atomic < 0n;
  const abs = negative ? -atomic : atomic;
  const whole = abs / ATOMIC_PER_USD;
  const frac = (abs % ATOMIC_PER_USD).toString().padStart(USD_DECIMALS, '0');
  return `${negative ? '-' : ''}${whole}.${frac}`;
}

/** Formats atomic units as a published rate: at least 2 decimals, no trailing zeros beyond them ("3.00", "0.075"). */
export function formatUsdRate(atomic: bigint): string {
  return formatUsdExact(atomic, 1n, 2);
}

/**
 * Formats `numerator / denominator` atomic units exactly, with at least `minDecimals` decimals and only the further
 * ones the value needs (a 5-minute cache write, 1.25x a rate of 6 decimals, can need 8). `denominator` must be
 * positive and divide a power of ten, so that the decimal ends.
 */
export function formatUsdExact(numerator: bigint, denominator: bigint, minDecimals: number): string {
  if (denominator <= 0n) throw new RangeError(`formatUsdExact: denominator must be positive, got ${denominator}`);
  const negative = numerator < 0n;
  const abs = negative ? -numerator : numerator;
  let scale = 0;
  let pow = 1n;
  while ((abs * pow) % denominator !== 0n) {
    scale += 1;
    pow *= 10n;
    if (scale > 12) throw new RangeError(`formatUsdExact: ${denominator} does not divide a power of ten`);
  }
  const digits = USD_DECIMALS + scale;
  const s = ((abs * pow) / denominator).toString().padStart(digits + 1, '0');
  const frac = s.slice(-digits).replace(/0+$/, '').padEnd(minDecimals, '0');
  return `${negative ? '-' : ''}${s.slice(0, -digits)}${frac === '' ? '' : `.${frac}`}`;
}

/** Integer division rounded toward positive infinity; the divisor must be positive. */
export function ceilDiv(n: bigint, d: bigint): bigint {
  if (d <= 0n) throw new RangeError(`ceilDiv: divisor must be positive, got ${d}`);
  // bigint division truncates toward zero, which is already the ceiling for n <= 0.
  const q = n / d;
  return n % d > 0n ? q + 1n : q;
}
