// A chain whose settlement stalls takes no new calls once its oldest unsettled debit nears the escrow's withdrawal
// delay (a caller could otherwise withdraw money its calls already spent): 503 chain_settlement_behind naming the
// chain, no re-routing, other chains unaffected, and calls again once its debits are charged.
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { Admission } from '../../plugins/billing/admission.js';
import { Billing } from '../../plugins/billing/billing.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { RateLimiter } from '../../plugins/billing/rate-limit.js';
import { readWallet, redisNow } from '../../plugins/billing/wallets.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV, startDevChains } from '../../plugins/chains/dev-chains.js';
import { createMetrics } from '../../plugins/metrics/metrics.js';
import { devChainsConfig } from '../../plugins/serve.js';
import { startSettleProcess } from '../../plugins/settlement/settlement.js';
import { keys } from '../../plugins/store/keys.js';
import { limitsConfigSchema } from '../../policies/limits.js';
import { startHarness, testRedis } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';
import { newRequestId } from '../../plugins/request-ids.js';

// Escrows with a 4 s withdrawal delay: the default stop ratio (0.5) stops a chain whose oldest debit is 2 s old.
const dc = await startDevChains({ host: '127.0.0.1', basePort: 0, withdrawalDelay: 4n });
// chain_a's settler key is read from a variable nobody sets: its debits wait, as on a stalled chain.
const STALLED_KEY_ENV = 'FAREBOX_TEST_STALLED_SETTLER_KEY';
const h = await startHarness({
  edit: (c) => {
    const chains = devChainsConfig(dc);
    c.chains = { ...chains, chain_a: { ...chains.chain_a, settler_key_env: STALLED_KEY_ENV } };
    c.billing = { batch_wait_ms: 0, reconcile_interval_ms: 500, instance_timeout_ms: 2_000 };
  },
});
t.teardown(async () => {
  await h.close();
  await dc.close();
});
await h.fund('chain_a', 2_000_000n);
await h.fund('chain_b', 2_000_000n);
const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
const on = (chain?: string) => (chain ? { headers: { 'x-gw-billing-chain': chain } } : {});
const ask = (chain?: string) =>
  openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi #sim:tokens=5' }] }, on(chain))
    .withResponse();

/** The gateway's own reading of one series on /metrics. */
async function scraped(series: string): Promise<number | undefined> {
  const text = await (await fetch(h.metricsUrl)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

t.test(
  'a stalled chain: 503 naming it once its oldest debit is half the withdrawal delay old; other chains run; calls resume once it is charged',
  async (t) => {
    const first = await ask('chain_a');
    t.equal(first.response.headers.get('x-gw-billing-chain'), 'chain_a');
    // Calls go on (each adds a debit nobody charges) until chain_a refuses one.
    const refused = await until(
      'chain_a refuses a call',
      async () => {
        const e = await ask('chain_a').then(
          () => null,
          (err: unknown) => err,
        );
        return e instanceof OpenAI.APIError ? e : null;
      },
      20_000,
      200,
    );
    t.equal(refused.status, 503);
    t.match(refused.error, {
      code: 'chain_settlement_behind',
      message:
        /^Settlement on chain_a is behind: its oldest unsettled debit is \d+ s old, and its escrow pays a withdrawal 4 s after it is asked/,
    });
    t.equal(refused.headers?.get('x-gw-billing-chain'), 'chain_a');
    const refusedId = refused.headers?.get('x-request-id') ?? '';
    t.match(refusedId, /^req_[0-9a-f]{32}$/);
    t.equal(await getCallRecord(h.redis, refusedId), null, 'nothing held for it');
    const oldest = (
      (await h.redis.xrange(keys.debits('chain_a'), '-', '+', 'COUNT', 1)) as [string, string[]][]
    )[0]![0];
    const age = (await redisNow(h.redis)) - Number(oldest.split('-')[0]);
    t.ok(age >= 2_000, `the oldest debit is ${age} ms old (the stop is at 2,000, checked every second)`);
    t.equal(await scraped('farebox_chain_admission_stopped{chain="chain_a"}'), 1);
    t.equal(
      await scraped('farebox_escrow_withdrawal_delay_seconds{chain="chain_a"}'),
      4,
      'the delay as the watcher read it',
    );

    // The Anthropic protocol, and the account's default chain (chain_a): refused the same, never moved to chain_b.
    const viaMessages = await anthropic.messages
      .create({ model: 'alpha-haiku-4-5', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }, on('chain_a'))
      .catch((e: unknown) => e);
    t.ok(viaMessages instanceof Anthropic.APIError && viaMessages.status === 503);
    t.match((viaMessages as InstanceType<typeof Anthropic.APIError>).error, {
      type: 'error',
      error: { type: 'overloaded_error', code: 'chain_settlement_behind', message: /chain_a/ },
    });
    const byDefault = await ask().catch((e: unknown) => e);
    t.ok(
      byDefault instanceof OpenAI.APIError &&
        byDefault.status === 503 &&
        byDefault.headers?.get('x-gw-billing-chain') === 'chain_a',
      'the default chain refused, not re-routed',
    );
    const heldA = (await readWallet(h.redis, h.account, 'chain_a')).held;
    t.equal(heldA, 0n, 'no hold placed on chain_a');

    // chain_b settles as ever and takes calls.
    const b = await ask('chain_b');
    t.equal(b.response.headers.get('x-gw-billing-chain'), 'chain_b');
    const bId = b.response.headers.get('x-request-id')!;
    await until('the chain_b call settled', async () => (await getCallRecord(h.redis, bId))?.status === 'settled');
    t.equal(await scraped('farebox_chain_admission_stopped{chain="chain_b"}'), 0);

    // A settler with chain_a's key catches up: the queue drains and chain_a takes calls again.
    const settle = await startSettleProcess(
      h.config,
      { [STALLED_KEY_ENV]: DEV_KEYS.settler.privateKey, [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey },
      { log: { error() {}, warn() {} } },
    );
    t.teardown(() => settle.close());
    await until(
      'chain_a admits again',
      async () => (await scraped('farebox_chain_admission_stopped{chain="chain_a"}')) === 0,
    );
    t.equal(await h.redis.xlen(keys.debits('chain_a')), 0, 'its debits charged');
    const again = await ask('chain_a');
    t.equal(again.response.headers.get('x-gw-billing-chain'), 'chain_a');
    t.equal(
      (
        await openai.chat.completions
          .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
          .withResponse()
      ).response.status,
      200,
      'the default chain too',
    );
  },
);

t.test('the stop follows the configured ratio of the published delay and resumes only under half of it', async (t) => {
  const { redis } = await testRedis(t);
  const log = { error() {}, warn() {} };
  const metrics = createMetrics({ defaults: false });
  const billing = new Billing(
    redis,
    { retentionMs: 60_000, holdTtlMs: 60_000, instanceTimeoutMs: 60_000 },
    metrics,
    log,
  );
  const admission = new Admission(
    new RateLimiter(redis, limitsConfigSchema.parse({})),
    billing,
    log,
    redis,
    { stopRatio: 0.25 },
    metrics,
  );
  const identity = {
    keyId: 'k',
    keyHash: 'x',
    account: '0x' + 'ab'.repeat(20),
    status: 'active' as const,
    defaultChain: 'chain_c',
    models: null,
    expiresAt: null,
  };
  const admit = () =>
    admission.admit({
      requestId: newRequestId(),
      protocol: 'openai',
      identity,
      family: 'gamma',
      tokens: 0,
      quote: { model: 'gamma-k3', amount: 1n },
    });
  await redis.hset(keys.wallet(identity.account, 'chain_c'), 'synced', '1000000');
  /** One debit in chain_c's queue, `ageMs` old by Redis's clock. */
  const oldest = async (ageMs: number) => {
    await redis.del(keys.debits('chain_c'));
    await redis.xadd(
      keys.debits('chain_c'),
      `${(await redisNow(redis)) - ageMs}-0`,
      'call_id',
      '0x',
      'account',
      identity.account,
      'amount',
      '1',
    );
    await admission.refresh();
  };
  const stopped = async () =>
    (await metrics.chainAdmissionStopped.get()).values.find((v) => v.labels.chain === 'chain_c')?.value;

  await oldest(3_000_000);
  t.equal(await stopped(), 0, 'no delay published yet: never stopped');
  await redis.set(keys.escrowDelay('chain_c'), '3600');
  await oldest(850_000);
  t.equal(await stopped(), 0, 'under a quarter of an hour: admitted');
  const held = await admit();
  await admission.finish(held);
  await oldest(900_000);
  t.equal(await stopped(), 1, 'a quarter of the delay: stopped');
  await t.rejects(admit(), {
    code: 'chain_settlement_behind',
    status: 503,
    message:
      /chain_c is behind: its oldest unsettled debit is 900 s old, and its escrow pays a withdrawal 3600 s after/,
  });
  await oldest(500_000);
  t.equal(await stopped(), 1, 'still stopped above half the stop point');
  await oldest(449_000);
  t.equal(await stopped(), 0, 'under half of it: admitted again');
  await admission.finish(await admit());
  await redis.del(keys.debits('chain_c'));
  await admission.refresh();
  t.equal(await stopped(), 0, 'an empty queue stops nothing');
});
