import t from 'tap';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { limitsConfigSchema, UNLIMITED, type Decision, type LimitsConfigInput } from '../../policies/limits.js';
import { RateLimiter, rateLimitedError, type RateLimitInput } from '../../plugins/billing/rate-limit.js';
import { connectRedis } from '../../plugins/store/redis.js';
import { renderError } from '../../policies/errors.js';
import { debitHold, placeHold } from '../../plugins/billing/wallets.js';
import { setSyncedBalance } from '../helpers/money.js';
import { callIdOf, newRequestId } from '../../plugins/request-ids.js';

const URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `farebox-test-rl-${randomBytes(4).toString('hex')}:`;
// Two connections, as two gateway instances; a third without prefix to inspect and clean up.
const r1 = connectRedis({ url: URL, prefix });
const r2 = connectRedis({ url: URL, prefix });
const raw = new Redis(URL);

async function keysUnderPrefix(): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await raw.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    out.push(...batch);
  } while (cursor !== '0');
  return out;
}

t.teardown(async () => {
  const keys = await keysUnderPrefix();
  if (keys.length) await raw.del(...keys);
  await Promise.all([r1.quit(), r2.quit(), raw.quit()]);
});

/** The level (units used) a counter holds, as of its last charge. */
const level = async (key: string) => Number(((await raw.get(`${prefix}${key}`)) ?? 'NaN').split(' ')[0]);
const limiter = (cfg: LimitsConfigInput, redis = r1) => new RateLimiter(redis, limitsConfigSchema.parse(cfg));
const account = () => `0x${randomBytes(20).toString('hex')}`;
const T = 1_700_000_000_000;
const input = (acct: string, over: Partial<RateLimitInput> = {}): RateLimitInput => ({
  keyId: 'key1',
  account: acct,
  family: 'gamma',
  tokens: 0,
  now: T,
  ...over,
});
const NO_ACCOUNT = { rpm: null, tpm: null };

async function admitted(l: RateLimiter, inputs: RateLimitInput[]): Promise<number> {
  let n = 0;
  for (const i of inputs) if ((await l.check(i)).allowed) n++;
  return n;
}

t.test('limit reached -> refused as key_requests, retry-after = one refill interval, then admitted', async (t) => {
  const l = limiter({ default: { key: { rpm: 20 }, account: NO_ACCOUNT } });
  const a = account();
  for (let i = 0; i < 20; i++) {
    const d = await l.check(input(a));
    t.equal(d.allowed, true);
    t.equal(d.remaining, 19 - i);
  }
  const refused = await l.check(input(a));
  t.match(refused, {
    allowed: false,
    which: 'key_requests',
    limit: 20,
    remaining: 0,
    retryAfterMs: 3000,
    resetMs: 60_000,
  });
  t.match(await l.check(input(a, { now: T + 2999 })), { allowed: false, retryAfterMs: 1 });
  t.match(await l.check(input(a, { now: T + 3000 })), { allowed: true, remaining: 0 });
});

t.test('a refused call consumes nothing, in any of its limits', async (t) => {
  const l = limiter({ default: { key: { rpm: 5, tpm: 1000 }, account: { rpm: 100, tpm: null } } });
  const a = account();
  for (let i = 0; i < 4; i++) t.equal((await l.check(input(a, { tokens: 100 }))).allowed, true);
  const before = await keysUnderPrefix().then((ks) => raw.mget(...ks.filter((k) => k.includes(a))));
  const d = await l.check(input(a, { tokens: 700 }));
  t.match(d, { allowed: false, which: 'key_tokens', retryAfterMs: 6000 });
  t.match(d.requests, { limit: 5, remaining: 1 }, 'the refused call took no request');
  const after = await keysUnderPrefix().then((ks) => raw.mget(...ks.filter((k) => k.includes(a))));
  t.same(after, before, 'no counter moved');
  const ok = await l.check(input(a, { tokens: 600 }));
  t.match(ok, { allowed: true });
  t.match(ok.requests, { remaining: 0 });
  t.match(ok.tokens, { remaining: 0 });
});

t.test('a call refused by the account limit charges neither the account nor the key', async (t) => {
  const l = limiter({ default: { key: { rpm: 10 }, account: { rpm: 3 } } });
  const a = account();
  t.equal(await admitted(l, [input(a), input(a), input(a)]), 3);
  t.match(await l.check(input(a)), { allowed: false, which: 'account_requests', retryAfterMs: 20_000 });
  t.equal(await level(`rl:{${a}}:gamma:k:key1:r`), 3, 'the key counted 3 calls, not 4');
  // 20 s later one account request is back.
  t.match(await l.check(input(a, { now: T + 20_000 })), { allowed: true, which: 'account_requests', remaining: 0 });
});

t.test('windows slide: half a minute refills half the limit, a full idle minute all of it', async (t) => {
  const l = limiter({ default: { key: { rpm: 20 }, account: NO_ACCOUNT } });
  const a = account();
  const at = (now: number, n: number) => Array.from({ length: n }, () => input(a, { now }));
  t.equal(await admitted(l, at(T, 25)), 20);
  t.equal(await admitted(l, at(T + 30_000, 15)), 10);
  t.equal(await admitted(l, at(T + 90_000, 25)), 20);
});

t.test('keys live under the keyPrefix with an {account} hash tag and expire when full again', async (t) => {
  // Each key lives one interval of its limit after the call: 3 s, 1.5 s, 2.7 s and 1.5 s here, long enough to be
  // listed on a loaded machine (a 10-token call under a 5,000 tpm lived 120 ms and was sometimes gone).
  const l = limiter({ default: { key: { rpm: 20, tpm: 1000 }, account: { rpm: 40, tpm: 1800 } } });
  const a = account();
  await l.check(input(a, { family: 'alpha', keyId: 'kA', tokens: 45, now: undefined }));
  const keys = (await keysUnderPrefix()).filter((k) => k.includes(a)).sort();
  t.same(keys, [
    `${prefix}rl:{${a}}:alpha:a:r`,
    `${prefix}rl:{${a}}:alpha:a:t`,
    `${prefix}rl:{${a}}:alpha:k:kA:r`,
    `${prefix}rl:{${a}}:alpha:k:kA:t`,
  ]);
  for (const k of keys) {
    const ttl = await raw.pttl(k);
    t.ok(ttl > 0 && ttl <= 3000, `${k} expires within one interval (${ttl} ms)`);
  }
});

t.test('two keys of one account share the account limit; another account is apart', async (t) => {
  const l = limiter({ default: { key: { rpm: 100 }, account: { rpm: 5 } } });
  const a = account();
  t.equal(
    await admitted(
      l,
      [1, 2, 3].map(() => input(a, { keyId: 'kA' })),
    ),
    3,
  );
  t.equal(
    await admitted(
      l,
      [1, 2].map(() => input(a, { keyId: 'kB' })),
    ),
    2,
  );
  t.match(await l.check(input(a, { keyId: 'kB' })), { allowed: false, which: 'account_requests' });
  t.match(await l.check(input(a, { keyId: 'kC' })), { allowed: false, which: 'account_requests' });
  t.match(await l.check(input(account(), { keyId: 'kA' })), { allowed: true });
});

t.test(
  'per-family overrides apply to their family only; each family counts apart; unlimited skips Redis',
  async (t) => {
    const l = limiter({
      default: { key: { rpm: 2 }, account: NO_ACCOUNT },
      families: { alpha: { key: { rpm: 5 } }, vidA: { key: { rpm: null } } },
    });
    const a = account();
    const n = (family: string, count: number) => Array.from({ length: count }, () => input(a, { family }));
    t.equal(await admitted(l, n('alpha', 8)), 5);
    t.equal(await admitted(l, n('beta', 4)), 2);
    t.equal(await admitted(l, n('gamma', 4)), 2);
    t.equal(await l.check(input(a, { family: 'vidA' })), UNLIMITED);
    t.notOk(
      (await keysUnderPrefix()).some((k) => k.includes(`{${a}}:vidA`)),
      'no key written for an unlimited family',
    );
  },
);

t.test('two limiters on two Redis connections (two gateway instances) share the counts', async (t) => {
  const cfg = { default: { key: { rpm: 10 }, account: NO_ACCOUNT } };
  const l1 = limiter(cfg, r1);
  const l2 = limiter(cfg, r2);
  const a = account();
  let ok = 0;
  for (let i = 0; i < 10; i++) if ((await (i % 2 ? l2 : l1).check(input(a))).allowed) ok++;
  t.equal(ok, 10);
  t.match(await l1.check(input(a)), { allowed: false, which: 'key_requests' });
  t.match(await l2.check(input(a)), { allowed: false, which: 'key_requests' });
});

t.test('200 concurrent checks on two instances against a limit of 20 admit exactly 20', async (t) => {
  // Account limits just above what the 21 calls use: a key's expiry runs on real time (its level's drain time,
  // here ~50 s), so a loose limit would let the keys expire before they are read on a slow machine.
  const cfg = { default: { key: { rpm: 20 }, account: { rpm: 25, tpm: 1100 } } };
  const l1 = limiter(cfg, r1);
  const l2 = limiter(cfg, r2);
  const a = account();
  const decisions: Decision[] = await Promise.all(
    Array.from({ length: 200 }, (_, i) => (i % 2 ? l1 : l2).check(input(a, { tokens: 50 }))),
  );
  t.equal(decisions.filter((d) => d.allowed).length, 20);
  t.ok(decisions.filter((d) => !d.allowed).every((d) => d.which === 'key_requests'));
  // The account counted only the 20 admitted calls.
  const acct = await l1.check(input(a, { keyId: 'other', tokens: 50 }));
  t.match(acct.requests, { limit: 25, remaining: 4 }, 'the account is now the tighter request limit: 21 of 25 used');
  t.equal(await level(`rl:{${a}}:gamma:a:r`), 21, 'account: 20 admitted requests + this one');
  t.equal(await level(`rl:{${a}}:gamma:a:t`), 21 * 50, 'account: 21 x 50 tokens');
});

t.test('a token estimate above the whole limit is charged the limit: passes on a full bucket only', async (t) => {
  const l = limiter({ default: { key: { rpm: null, tpm: 1000 }, account: NO_ACCOUNT } });
  const a = account();
  t.match(await l.check(input(a, { tokens: 5000 })), { allowed: true, which: 'key_tokens', remaining: 0 });
  t.match(await l.check(input(a, { tokens: 1 })), { allowed: false, which: 'key_tokens', retryAfterMs: 60 });
  t.match(await l.check(input(a, { tokens: 5000, now: T + 59_999 })), { allowed: false, retryAfterMs: 1 });
  t.match(await l.check(input(a, { tokens: 5000, now: T + 60_000 })), { allowed: true });
});

t.test('adjust: a call that used fewer tokens than estimated is refunded, one that used more is charged', async (t) => {
  const l = limiter({ default: { key: { rpm: null, tpm: 1000 }, account: { rpm: null, tpm: 2000 } } });
  const a = account();
  const call = input(a, { tokens: 800 });
  t.match(await l.check(call), { allowed: true });
  t.match(await l.check(input(a, { tokens: 700 })), { allowed: false, which: 'key_tokens' });
  await l.adjust(call, 300);
  const d = await l.check(input(a, { tokens: 700 }));
  t.match(d, { allowed: true, remaining: 0 });
  t.match(d.tokens, { limit: 1000, remaining: 0 });

  const b = account();
  const big = input(b, { tokens: 800 });
  await l.check(big);
  await l.adjust(big, 1300); // 500 more tokens of 60 ms: 78 s of debt on a 60 s bucket
  t.match(await l.check(input(b, { tokens: 0 })), { allowed: false, which: 'key_tokens', retryAfterMs: 18_000 });
  t.match(await l.check(input(b, { tokens: 0, now: T + 18_000 })), { allowed: true });
});

t.test('the debit script corrects the token limits with the debit, once however often it runs', async (t) => {
  const l = limiter({ default: { key: { rpm: null, tpm: 1000 }, account: { rpm: null, tpm: 2000 } } });
  const a = account();
  await setSyncedBalance(r1, a, 'chain_a', 1_000_000n);
  const call = input(a, { tokens: 800 });
  const requestId = newRequestId();
  const h = {
    requestId,
    callId: callIdOf(requestId),
    account: a,
    chain: 'chain_a' as const,
    amount: 5000n,
    owner: 'rl-test',
    ttlMs: 60_000,
    model: 'gamma-k3',
    keyId: 'key1',
    now: T,
    retentionMs: 60_000,
  };
  t.ok((await placeHold(r1, h, l.prepare(call)!)).placed, 'held, and 800 tokens charged to both limits');
  t.equal(await level(`rl:{${a}}:gamma:k:key1:t`), 800);

  t.equal(l.prepareAdjust(call, 800), null, 'nothing to correct when the estimate was right');
  const debit = () => debitHold(r1, { ...h, price: 1000n, usageJson: '{}', limits: l.prepareAdjust(call, 300) });
  t.same(await debit(), { debited: 1000n, capped: false, late: false });
  t.equal(await level(`rl:{${a}}:gamma:k:key1:t`), 300, 'the key limit holds the 300 used');
  t.equal(await level(`rl:{${a}}:gamma:a:t`), 300, 'and so does the account limit');
  t.same(await debit(), { debited: 1000n, capped: false, late: false }, 'run again (a resend): the same answer');
  t.equal(await level(`rl:{${a}}:gamma:k:key1:t`), 300, 'and no second refund');
});

t.test('adjust never credits more than the bucket holds', async (t) => {
  const l = limiter({ default: { key: { rpm: null, tpm: 1000 }, account: NO_ACCOUNT } });
  const a = account();
  const call = input(a, { tokens: 500 });
  await l.check(call);
  await l.adjust(call, 0);
  t.equal(await raw.exists(`${prefix}rl:{${a}}:gamma:k:key1:t`), 0, 'a full bucket leaves no key');
  t.equal(await admitted(l, [input(a, { tokens: 1000 }), input(a, { tokens: 1 })]), 1, 'no more than the limit');
});

t.test('without an injected now, Redis TIME decides (one clock for all instances)', async (t) => {
  const l = limiter({ default: { key: { rpm: 2 }, account: NO_ACCOUNT } });
  const a = account();
  const live = (): RateLimitInput => ({ keyId: 'k', account: a, family: 'beta', tokens: 0 });
  t.equal(await admitted(l, [live(), live()]), 2);
  const d = await limiter({ default: { key: { rpm: 2 }, account: NO_ACCOUNT } }, r2).check(live());
  t.equal(d.allowed, false);
  t.ok(d.retryAfterMs > 0 && d.retryAfterMs <= 30_000, `retry after ${d.retryAfterMs} ms`);
});

t.test('a refusal renders as 429 rate_limited in each protocol with its headers', async (t) => {
  const l = limiter({ default: { key: { rpm: 1 }, account: NO_ACCOUNT } });
  const a = account();
  await l.check(input(a));
  const d = await l.check(input(a));
  const openai = rateLimitedError(d, 'openai', T);
  t.equal(openai.status, 429);
  t.match(openai.headers, {
    'retry-after': '60',
    'x-ratelimit-limit-requests': '1',
    'x-ratelimit-remaining-requests': '0',
  });
  t.match(JSON.parse(renderError(openai, 'openai')), { error: { type: 'rate_limit_error', code: 'rate_limited' } });
  const anthropic = rateLimitedError(d, 'anthropic', T);
  t.match(anthropic.headers, { 'anthropic-ratelimit-requests-remaining': '0', 'retry-after': '60' });
  t.match(JSON.parse(renderError(anthropic, 'anthropic')), { type: 'error', error: { type: 'rate_limit_error' } });
});
