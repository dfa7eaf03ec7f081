// A key's spend limit in the hold and debit scripts (billing/wallets.ts, accounts/key-limits.ts), on a real Redis and
// at chosen times: the window's start in Lua is the one in TypeScript; what a key holds counts against its limit; a
// debit moves the hold to the window it lands in; a window's start empties what it spent; a release frees the hold;
// the parsers refuse what a limit, an allow-list or an expiry cannot be.
import t from 'tap';
import {
  keyWindow,
  modelAllowed,
  parseExpiry,
  parseLimit,
  parseModels,
  parseReset,
  readKeySpend,
  RESETS,
  spendOf,
  SPEND_FIELDS,
  windowStartLua,
} from '../../plugins/accounts/key-limits.js';
import { debitHold, placeHold, readWallet, type HoldInput } from '../../plugins/billing/wallets.js';
import { keys } from '../../plugins/store/keys.js';
import { holdFor, setSyncedBalance } from '../helpers/money.js';
import { testRedis } from '../helpers/harness.js';

const { redis } = await testRedis(t);
const account = '0x00000000000000000000000000000000000000aa';
await setSyncedBalance(redis, account, 'chain_a', 1_000_000_000n);

const DAY = 86_400_000;
const at = (iso: string) => Date.parse(iso);

t.test("the window's start in Lua is keyWindow's, across days, weeks, months and leap years", async (t) => {
  const times = [
    '1970-01-01T00:00:00Z',
    '2024-02-28T23:59:59.999Z',
    '2024-02-29T12:00:00Z',
    '2024-03-01T00:00:00Z',
    '2025-12-31T23:59:59.999Z',
    '2026-01-01T00:00:00Z',
    '2026-11-30T00:00:00Z',
    '2026-11-29T23:59:59.999Z',
    '2100-03-01T00:00:00Z',
  ].map(at);
  // And a day's worth of steps across four years, at odd hours.
  for (let ms = at('2026-01-01T00:00:00Z'); ms < at('2030-01-01T00:00:00Z'); ms += 13 * DAY + 3_600_007) times.push(ms);
  const lua = `${windowStartLua}\nlocal out = {}\nfor i = 2, #ARGV do out[#out + 1] = tostring(windowStart(ARGV[1], tonumber(ARGV[i]))) end\nreturn out`;
  for (const reset of RESETS) {
    const got = (await redis.eval(lua, 0, reset, ...times.map(String))) as string[];
    t.same(
      got.map(Number),
      times.map((ms) => keyWindow(reset, ms).start),
      reset,
    );
  }
  t.same(keyWindow('weekly', at('2026-11-28T10:00:00Z')), {
    start: at('2026-11-23T00:00:00Z'),
    end: at('2026-11-30T00:00:00Z'),
  });
  t.same(keyWindow('monthly', at('2026-12-31T23:59:59Z')), {
    start: at('2026-12-01T00:00:00Z'),
    end: at('2027-01-01T00:00:00Z'),
  });
  t.same(keyWindow('never', 5), { start: 0, end: null });
});

let seq = 0;
const hold = (keyId: string, amount: bigint, now: number): HoldInput => {
  seq++;
  return holdFor(account, amount, { owner: 'key-limits-test', keyId, now });
};
const debit = (h: HoldInput, price: bigint, now = h.now, release?: 'expired') =>
  debitHold(redis, {
    ...h,
    price,
    usageJson: '{}',
    now,
    ...(release ? { release: { reason: release, instanceTimeoutMs: 1, now } } : {}),
  });
const spend = async (keyId: string, now: number) =>
  spendOf(await redis.hmget(keys.keySpend(keyId), ...SPEND_FIELDS), now);

t.test('holds count against the limit until debited; a refusal holds nothing and says what is left', async (t) => {
  const keyId = `key_${seq}a`;
  await redis.hset(keys.keySpend(keyId), { l: '1000', r: 'daily' });
  const now = at('2026-11-28T10:00:00Z');
  const a = hold(keyId, 600n, now);
  t.match(await placeHold(redis, a), { placed: true });
  const before = await readWallet(redis, account, 'chain_a');
  const b = hold(keyId, 401n, now);
  const refused = await placeHold(redis, b);
  t.match(refused, { placed: false, duplicate: false, rateLimited: false });
  t.same(refused.placed === false && refused.keyLimit, {
    left: 400n,
    windowStart: at('2026-11-28T00:00:00Z'),
    reset: 'daily',
    limit: 1000n,
  });
  t.equal(await redis.exists(keys.call(b.callId)), 0, 'no record');
  t.same(await readWallet(redis, account, 'chain_a'), before, 'the wallet untouched');
  t.match(await placeHold(redis, hold(keyId, 400n, now)), { placed: true }, 'exactly what is left fits');
  t.match(await spend(keyId, now), { window: 0n, held: 1000n, left: 0n });
  // The first call debits less than it held: the difference is free again.
  t.same(await debit(a, 250n), { debited: 250n, capped: false, late: false });
  t.match(await spend(keyId, now), { window: 250n, held: 400n, total: 250n, left: 350n });
  t.match(await placeHold(redis, hold(keyId, 351n, now)), { placed: false });
  t.match(await placeHold(redis, hold(keyId, 350n, now)), { placed: true });
});

t.test('a window that starts empties what it spent; holds carry over; a debit counts where it lands', async (t) => {
  const keyId = `key_${seq}b`;
  await redis.hset(keys.keySpend(keyId), { l: '1000', r: 'daily' });
  const late = at('2026-11-28T23:59:59.000Z');
  const next = at('2026-11-29T00:00:00.000Z');
  const a = hold(keyId, 500n, late);
  t.match(await placeHold(redis, a), { placed: true });
  const b = hold(keyId, 300n, late);
  t.match(await placeHold(redis, b), { placed: true });
  t.match(await debit(b, 300n), { debited: 300n });
  t.match(await spend(keyId, late), { window: 300n, held: 500n, left: 200n });
  t.match(await placeHold(redis, hold(keyId, 201n, late)), { placed: false }, 'full before midnight');
  // At midnight the day's spend is gone, a's hold is not.
  t.match(await spend(keyId, next), { window: 0n, held: 500n, left: 500n, total: 300n, resetsAt: next + DAY });
  const c = hold(keyId, 500n, next);
  t.match(await placeHold(redis, c), { placed: true }, 'the new day takes what the old one spent');
  t.match(await placeHold(redis, hold(keyId, 1n, next)), { placed: false });
  // a ends in the new day: its price counts there.
  t.match(await debit(a, 120n, next + 5_000), { debited: 120n });
  t.match(await spend(keyId, next), { window: 120n, held: 500n, total: 420n, left: 380n });
  // A day later still, on Redis's clock (readKeySpend), nothing of the 29th's spend is in today's window.
  const s = await readKeySpend(redis, keyId);
  t.equal(s.window, 0n);
  t.equal(s.windowStart, keyWindow('daily', Date.now()).start);
});

t.test(
  'a release frees the hold; a late debit after it is counted; a key without a limit keeps its spend',
  async (t) => {
    const keyId = `key_${seq}c`;
    await redis.hset(keys.keySpend(keyId), { l: '1000', r: 'never' });
    const now = Date.now();
    const a = hold(keyId, 700n, now - 120_000);
    t.match(await placeHold(redis, { ...a, ttlMs: 1_000 }), { placed: true });
    // The sweeper releases the expired hold.
    t.same(await debit(a, 0n, now, 'expired'), { debited: 0n, capped: false, late: false });
    t.match(await spend(keyId, now), { held: 0n, window: 0n, left: 1000n });
    // The call delivered after all: charged late, counted in the key's spend.
    t.same(await debit(a, 650n, now), { debited: 650n, capped: false, late: true });
    t.match(await spend(keyId, now), { held: 0n, window: 650n, total: 650n, left: 350n, resetsAt: null });
    // A repeated debit changes nothing.
    await debit(a, 650n, now);
    t.match(await spend(keyId, now), { window: 650n, total: 650n });

    const free = `key_${seq}d`;
    const b = hold(free, 5_000n, now);
    t.match(await placeHold(redis, b), { placed: true });
    t.match(await spend(free, now), { limit: null, held: 5_000n, left: null });
    await debit(b, 4_321n, now);
    t.match(await spend(free, now), { limit: null, held: 0n, window: 4_321n, total: 4_321n });
    // A limit set later counts what its window already spent (never: all of it).
    await redis.hset(keys.keySpend(free), 'l', '5000');
    t.match(await placeHold(redis, hold(free, 680n, now)), { placed: false });
    t.match(await placeHold(redis, hold(free, 679n, now)), { placed: true });
  },
);

t.test('a key holds at most its limit whatever the number of holds at once', async (t) => {
  const keyId = `key_${seq}e`;
  await redis.hset(keys.keySpend(keyId), { l: '10000', r: 'monthly' });
  const now = Date.now();
  const results = await Promise.all(Array.from({ length: 200 }, () => placeHold(redis, hold(keyId, 333n, now))));
  const placed = results.filter((r) => r.placed).length;
  t.equal(placed, 30, 'floor(10000 / 333)');
  t.match(await spend(keyId, now), { held: 9_990n, left: 10n });
});

t.test('a limit, spend or hold that is not a number refuses, never lets the key spend unbounded', async (t) => {
  const now = Date.now();
  for (const [i, fields] of [
    { l: 'abc' },
    { l: '', r: 'daily' },
    { l: '1000', s: 'x', w: String(keyWindow('never', now).start) },
    { l: '1000', h: '1e400' },
  ].entries()) {
    const keyId = `key_${seq}f${i}`;
    await redis.hset(keys.keySpend(keyId), fields);
    const r = await placeHold(redis, hold(keyId, 1n, now));
    t.equal(r.placed, false, JSON.stringify(fields));
  }
});

t.test('parsers: limits, resets, allow-lists and expiries', async (t) => {
  t.equal(parseLimit('25'), 25_000_000n);
  t.equal(parseLimit('0.000001'), 1n);
  t.equal(parseLimit('none'), null);
  for (const bad of ['0', '-1', '1.0000001', 'abc', '', '1e3', '9007199255', ' 1'])
    t.throws(() => parseLimit(bad), JSON.stringify(bad));
  t.equal(parseReset('weekly'), 'weekly');
  t.throws(() => parseReset('hourly'));
  t.same(parseModels('gamma-k3, alpha-*,gamma-k3'), ['gamma-k3', 'alpha-*']);
  t.same(parseModels(['img-2']), ['img-2']);
  t.equal(parseModels('none'), null);
  for (const bad of [
    '',
    ',',
    '*',
    'a b',
    'al*pha',
    'x'.repeat(101),
    Array(65)
      .fill('m')
      .map((m, i) => m + i)
      .join(','),
  ])
    t.throws(() => parseModels(bad), bad.slice(0, 20));
  const now = at('2026-11-28T10:00:00Z');
  t.equal(parseExpiry('2027-01-01', now), at('2027-01-01T00:00:00Z'));
  t.equal(parseExpiry('2026-11-28T12:00:00+01:00', now), at('2026-11-28T11:00:00Z'));
  t.equal(parseExpiry('never', now), null);
  for (const bad of ['2026-11-28T09:00:00Z', '2027-01-01T00:00:00', 'tomorrow', '2027-02-30', '2027-13-01'])
    t.throws(() => parseExpiry(bad, now), bad);
  t.ok(modelAllowed(null, 'gamma-k3'));
  t.ok(modelAllowed(['alpha-*', 'img-2'], 'alpha-s4'));
  t.ok(modelAllowed(['alpha-*', 'img-2'], 'img-2'));
  t.notOk(modelAllowed(['alpha-*', 'img-2'], 'img-2x'));
  t.notOk(modelAllowed(['alpha-*'], 'beta-1'));
  t.notOk(modelAllowed([], 'beta-1'));
});
