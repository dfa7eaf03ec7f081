import t from 'tap';
import {
  buildDecision,
  formatResetDuration,
  limitsConfigSchema,
  rateLimitHeaders,
  refusalMessage,
  resolveLimits,
  retryAfterSeconds,
  UNLIMITED,
  type Decision,
  type LimitsConfigInput,
} from '../../policies/limits.js';

t.test('an empty limits section -> generous request limits, unlimited tokens', async (t) => {
  const cfg = limitsConfigSchema.parse({});
  t.same(resolveLimits(cfg, 'alpha'), {
    key_requests: 3000,
    key_tokens: null,
    account_requests: 6000,
    account_tokens: null,
  });
});

t.test('resolveLimits: family entries override field by field, null = unlimited, absent = inherit', async (t) => {
  const input: LimitsConfigInput = {
    default: { key: { rpm: 100, tpm: 50_000 }, account: { rpm: 500, tpm: null } },
    families: {
      alpha: { key: { rpm: 10 } },
      beta: { key: { tpm: null }, account: { tpm: 1_000_000 } },
      vidA: { key: { rpm: null, tpm: null }, account: { rpm: null } },
    },
  };
  const cfg = limitsConfigSchema.parse(input);
  const cases: [string, object][] = [
    ['alpha', { key_requests: 10, key_tokens: 50_000, account_requests: 500, account_tokens: null }],
    ['beta', { key_requests: 100, key_tokens: null, account_requests: 500, account_tokens: 1_000_000 }],
    ['gamma', { key_requests: 100, key_tokens: 50_000, account_requests: 500, account_tokens: null }],
    ['vidA', { key_requests: null, key_tokens: null, account_requests: null, account_tokens: null }],
    ['no-such-family', { key_requests: 100, key_tokens: 50_000, account_requests: 500, account_tokens: null }],
  ];
  for (const [family, want] of cases) t.same(resolveLimits(cfg, family), want, family);
});

t.test(
  'video_polls: 6,000 polls a minute per key and 12,000 per account by default, any positive number or null (unlimited)',
  async (t) => {
    t.same(limitsConfigSchema.parse({}).video_polls, { key: { rpm: 6000 }, account: { rpm: 12000 } });
    t.same(limitsConfigSchema.parse({ video_polls: { key: { rpm: 30 } } }).video_polls, {
      key: { rpm: 30 },
      account: { rpm: 12000 },
    });
    t.same(limitsConfigSchema.parse({ video_polls: { key: { rpm: null }, account: { rpm: 50 } } }).video_polls, {
      key: { rpm: null },
      account: { rpm: 50 },
    });
    for (const bad of [
      { key: { rpm: 0 } },
      { key: { rpm: 1.5 } },
      { key: { tpm: 5 } },
      { account: { tpm: 5 } },
      { account: { rpm: -1 } },
      { team: {} },
    ]) {
      t.notOk(limitsConfigSchema.safeParse({ video_polls: bad }).success, JSON.stringify(bad));
    }
  },
);

t.test('limits section: invalid values and unknown names are refused', async (t) => {
  const bad: [string, unknown][] = [
    ['zero', { default: { key: { rpm: 0 } } }],
    ['negative', { families: { alpha: { account: { tpm: -5 } } } }],
    ['fraction', { default: { account: { rpm: 1.5 } } }],
    ['string', { default: { key: { rpm: '100' } } }],
    ['unknown family', { families: { delta: { key: { rpm: 1 } } } }],
    ['unknown scope', { default: { org: { rpm: 1 } } }],
    ['unknown field', { default: { key: { rph: 1 } } }],
    ['unknown top-level', { window: 60 }],
  ];
  for (const [name, input] of bad) t.notOk(limitsConfigSchema.safeParse(input).success, name);
});

t.test('buildDecision: refused -> the refusing limit, its retry-after, the tighter of each kind', async (t) => {
  const ids = ['key_requests', 'key_tokens', 'account_requests', 'account_tokens'] as const;
  const limits = [20, 1000, 30, 5000];
  // allowed, refusing index, retry ms, now, then remaining/reset per limit
  const d = buildDecision(ids, limits, [0, 2, 1500, 1_700_000_000_000, 3, 51000, 100, 60000, 0, 60000, 4000, 12000]);
  t.match(d, { allowed: false, which: 'key_tokens', limit: 1000, remaining: 100, resetMs: 60000, retryAfterMs: 1500 });
  t.same(d.requests, { limit: 30, remaining: 0, resetMs: 60000 }, 'account requests are tighter than key requests');
  t.same(d.tokens, { limit: 1000, remaining: 100, resetMs: 60000 }, 'the refusing limit is reported for its kind');
});

t.test('buildDecision: allowed -> which is the limit closest to refusing (by share), retryAfter 0', async (t) => {
  const cases: [number[], number[], string][] = [
    [[10, 1000], [1, 0, 0, 0, 5, 30000, 900, 6000], 'key_requests'],
    [[10, 1000], [1, 0, 0, 0, 9, 6000, 100, 54000], 'account_tokens'],
    [[10, 1000], [1, 0, 0, 0, 5, 30000, 500, 30000], 'key_requests'],
  ];
  for (const [limits, reply, which] of cases) {
    const d = buildDecision(['key_requests', 'account_tokens'], limits, reply);
    t.equal(d.allowed, true);
    t.equal(d.which, which, JSON.stringify(reply));
    t.equal(d.retryAfterMs, 0);
  }
});

t.test('retry-after: whole seconds, rounded up, at least 1', async (t) => {
  const cases: [number, number][] = [
    [0, 1],
    [1, 1],
    [999, 1],
    [1000, 1],
    [1001, 2],
    [2999, 3],
    [60_000, 60],
    [90_500, 91],
  ];
  for (const [ms, s] of cases) t.equal(retryAfterSeconds(ms), s, `${ms} ms`);
});

t.test('reset durations are written as OpenAI writes them', async (t) => {
  const cases: [number, string][] = [
    [0, '0s'],
    [-5, '0s'],
    [0.2, '1ms'],
    [12, '12ms'],
    [999, '999ms'],
    [1000, '1s'],
    [1500, '1.5s'],
    [17_310, '17.31s'],
    [60_000, '1m0s'],
    [360_000, '6m0s'],
    [90_250, '1m30.25s'],
    [3_600_000, '1h0m0s'],
  ];
  for (const [ms, s] of cases) t.equal(formatResetDuration(ms), s, `${ms} ms`);
});

const refused: Decision = {
  allowed: false,
  which: 'account_requests',
  limit: 20,
  remaining: 0,
  resetMs: 60_000,
  retryAfterMs: 2_500,
  requests: { limit: 20, remaining: 0, resetMs: 60_000 },
  tokens: { limit: 10_000, remaining: 4_000, resetMs: 36_000 },
};
const NOW = Date.UTC(2025, 0, 1, 12, 0, 0, 250);

t.test(
  'openai protocol: x-ratelimit-* for requests and tokens, retry-after and retry-after-ms on refusal',
  async (t) => {
    t.same(rateLimitHeaders(refused, 'openai', NOW), {
      'x-ratelimit-limit-requests': '20',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '1m0s',
      'x-ratelimit-limit-tokens': '10000',
      'x-ratelimit-remaining-tokens': '4000',
      'x-ratelimit-reset-tokens': '36s',
      'retry-after': '3',
      'retry-after-ms': '2500',
    });
  },
);

t.test('anthropic protocol: x-ratelimit-* plus anthropic-ratelimit-* with RFC 3339 resets', async (t) => {
  const h = rateLimitHeaders(refused, 'anthropic', NOW);
  t.match(h, {
    'x-ratelimit-limit-requests': '20',
    'anthropic-ratelimit-requests-limit': '20',
    'anthropic-ratelimit-requests-remaining': '0',
    'anthropic-ratelimit-requests-reset': '2025-01-01T12:01:01Z',
    'anthropic-ratelimit-tokens-limit': '10000',
    'anthropic-ratelimit-tokens-remaining': '4000',
    'anthropic-ratelimit-tokens-reset': '2025-01-01T12:00:37Z',
    'retry-after': '3',
  });
  t.notOk('anthropic-ratelimit-requests-limit' in rateLimitHeaders(refused, 'openai', NOW));
});

t.test('allowed -> no retry-after; a kind without a limit -> no headers of that kind; unlimited -> none', async (t) => {
  const ok: Decision = { ...refused, allowed: true, retryAfterMs: 0, tokens: null };
  const h = rateLimitHeaders(ok, 'anthropic', NOW);
  t.notOk('retry-after' in h);
  t.notOk('retry-after-ms' in h);
  t.notOk('x-ratelimit-limit-tokens' in h);
  t.notOk('anthropic-ratelimit-tokens-limit' in h);
  t.equal(h['x-ratelimit-remaining-requests'], '0');
  t.same(rateLimitHeaders(UNLIMITED, 'openai', NOW), {});
});

t.test('the refusal message names the limit, its value and the wait', async (t) => {
  t.equal(
    refusalMessage(refused),
    'Rate limit reached: requests per minute for this account (limit 20); retry after 3 s.',
  );
});
