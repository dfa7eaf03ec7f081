// Video polls need no funds, so a per-key limit of their own bounds them (config limits.video_polls): polls and
// downloads count, unknown ids and other accounts' ids (404s) included; past it, 429 with the headers of any rate
// limit, which the official SDK reads as its RateLimitError. Submits keep their own limits.
import t from 'tap';
import OpenAI from 'openai';
import { createKey } from '../../plugins/accounts/accounts.js';
import { startHarness } from '../helpers/harness.js';
import { sdk } from './helpers.js';

const LIMIT = 4;
const h = await startHarness({
  edit: (c) => {
    c.limits = { video_polls: { key: { rpm: LIMIT } } };
  },
});
t.teardown(() => h.close());

const UNKNOWN = `video_${'0'.repeat(32)}`;

t.test(
  "polls of unknown ids count against the key's poll limit: 404 up to it, then 429 RateLimitError with Retry-After and x-ratelimit headers",
  async (t) => {
    const openai = sdk(h);
    for (let i = 0; i < LIMIT; i++) {
      const e = await openai.videos.retrieve(i % 2 ? UNKNOWN : 'not-an-id').catch((err: unknown) => err);
      t.ok(e instanceof OpenAI.NotFoundError, `poll ${i + 1}: 404`);
      t.equal(
        (e as InstanceType<typeof OpenAI.APIError>).headers?.get('x-ratelimit-remaining-requests'),
        String(LIMIT - i - 1),
        `poll ${i + 1}: remaining`,
      );
    }
    const e = await openai.videos.retrieve(UNKNOWN).catch((err: unknown) => err);
    t.ok(e instanceof OpenAI.RateLimitError, 'past the limit: RateLimitError');
    const err = e as InstanceType<typeof OpenAI.RateLimitError>;
    t.equal(err.status, 429);
    t.equal(err.code, 'rate_limited');
    t.match(err.message, /video polls per minute for this API key \(limit 4\)/);
    const headers = err.headers!;
    t.ok(Number(headers.get('retry-after')) >= 1, 'Retry-After in whole seconds');
    t.ok(Number(headers.get('retry-after-ms')) > 0, 'retry-after-ms, which the SDKs read first');
    t.equal(headers.get('x-ratelimit-limit-requests'), String(LIMIT));
    t.equal(headers.get('x-ratelimit-remaining-requests'), '0');
    t.match(headers.get('x-ratelimit-reset-requests'), /^(\d+m)?\d+(\.\d+)?m?s$/, 'reset as a duration');
    t.ok(headers.get('x-request-id'), 'a request id, as every answer under /v1');

    const content = await fetch(`${h.url}/v1/videos/${UNKNOWN}/content`, {
      headers: { authorization: `Bearer ${h.key}` },
    });
    t.equal(content.status, 429, 'downloads count in the same bucket, 404s included');
    await content.text();

    // Another key of the same account has its own bucket.
    const other = await createKey(h.redis, h.account);
    const e2 = await sdk(h, other.key)
      .videos.retrieve(UNKNOWN)
      .catch((x: unknown) => x);
    t.ok(e2 instanceof OpenAI.NotFoundError, 'another key: still 404');
  },
);

t.test("an account's keys share its poll limit: more keys do not poll more", async (t) => {
  const g = await startHarness({
    edit: (c) => {
      c.limits = { video_polls: { key: { rpm: 100 }, account: { rpm: 3 } } };
    },
  });
  t.teardown(() => g.close());
  const keys = await Promise.all([
    createKey(g.redis, g.account),
    createKey(g.redis, g.account),
    createKey(g.redis, g.account),
  ]);
  for (const k of keys)
    t.ok(
      (await sdk(g, k.key)
        .videos.retrieve(UNKNOWN)
        .catch((x: unknown) => x)) instanceof OpenAI.NotFoundError,
      'one poll a key: 404',
    );
  const fresh = await createKey(g.redis, g.account);
  const e = await sdk(g, fresh.key)
    .videos.retrieve(UNKNOWN)
    .catch((x: unknown) => x);
  t.ok(e instanceof OpenAI.RateLimitError, 'a fourth key of the account: 429');
  t.match(
    (e as InstanceType<typeof OpenAI.RateLimitError>).message,
    /video polls per minute for this account \(limit 3\)/,
  );
});

t.test(
  "the poll limit is its own: a key out of polls still submits, and its own job's poll carries the headers",
  async (t) => {
    const key = await createKey(h.redis, h.account);
    const openai = sdk(h, key.key);
    const job = await openai.videos.create({ model: 'vidA-v6', prompt: 'counted', seconds: '4' });
    const { data, response } = await openai.videos.retrieve(job.id).withResponse();
    t.equal(data.id, job.id);
    t.equal(response.headers.get('x-ratelimit-limit-requests'), String(LIMIT));
    t.equal(response.headers.get('x-ratelimit-remaining-requests'), String(LIMIT - 1));
    for (let i = 1; i < LIMIT; i++) await openai.videos.retrieve(job.id);
    t.ok(
      (await openai.videos.retrieve(job.id).catch((x: unknown) => x)) instanceof OpenAI.RateLimitError,
      'its own job too, past the limit',
    );
    const again = await openai.videos.create({ model: 'vidA-v6', prompt: 'still submits', seconds: '4' });
    t.equal(again.status, 'in_progress', "submits count against the family's limits, not the poll bucket");
  },
);
