/**
 * A burst is served, not timed out: 300 concurrent calls from one client (Node's fetch in a process of its own, a
 * connection each, the Anthropic and OpenAI endpoints alternating) are all answered 200 and billed, also when the
 * gateway's event loop stalls past the headers timeout right after accepting them, as on a busy machine. Node's own
 * check ran before the stalled loop read the requests waiting in their sockets and answered them 408
 * (checkTimeoutsAfterReads in phases/client-errors.ts).
 */
import t, { type Test } from 'tap';
import { execFile } from 'node:child_process';
import { createAccount, createKey } from '../plugins/accounts/accounts.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { fundOnDevChain, type Server } from '../plugins/serve.js';
import { fromAnthropicUsage, fromOpenAIUsage, priceCall } from '../pricing/index.js';
import { serveFixture } from './helpers/serve-fixture.js';
import { until } from './helpers/wait.js';

const CALLS = 300;
const { redis, start } = await serveFixture(t, 'burst');

/**
 * The client, in a process of its own so that a stall of the gateway's loop is not the client's: CALLS fetches at
 * once (Node's fetch opens a connection for each call in flight), even calls to /v1/messages, odd to
 * /v1/chat/completions. Prints one [status, model, usage or error body] per call.
 */
const CLIENT = `
const { BURST_URL: url, BURST_KEY: key, BURST_CALLS: n } = process.env;
const calls = Array.from({ length: Number(n) }, async (_, i) => {
  const anthropic = i % 2 === 0;
  const model = anthropic ? 'alpha-haiku-4-5' : 'gamma-k3';
  const res = await fetch(url + (anthropic ? '/v1/messages' : '/v1/chat/completions'), {
    method: 'POST',
    headers: anthropic
      ? { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' }
      : { authorization: 'Bearer ' + key, 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 50, messages: [{ role: 'user', content: 'hi #' + i }] }),
  });
  const text = await res.text();
  return [res.status, model, res.status === 200 ? JSON.parse(text).usage : text];
});
process.stdout.write(JSON.stringify(await Promise.all(calls)));
`;

type Answer = [status: number, model: string, usage: unknown];

function burst(s: Server, key: string): Promise<Answer[]> {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      ['--input-type=module', '-e', CLIENT],
      { env: { ...process.env, BURST_URL: s.url, BURST_KEY: key, BURST_CALLS: String(CALLS) }, maxBuffer: 1 << 24 },
      (err, stdout) => (err ? reject(err) : resolve(JSON.parse(stdout) as Answer[])),
    ),
  );
}

/** Fund a fresh account, send the burst, and check every call was answered and the wallet paid exactly their sum. */
async function answeredInFull(t: Test, s: Server): Promise<void> {
  const account = (await createAccount(redis, {})).address;
  const { key } = await createKey(redis, account);
  const funded = 1_000_000_000n;
  await fundOnDevChain(redis, s.config.chains!, 'chain_a', account, funded);
  const answers = await burst(s, key);
  t.equal(answers.length, CALLS, 'one answer per call');
  const refused = answers.filter(([status]) => status !== 200);
  t.same(refused, [], 'every call answered 200');
  let sum = 0n;
  for (const [, model, usage] of answers) {
    sum += priceCall(
      s.config.prices,
      model,
      model.startsWith('alpha') ? fromAnthropicUsage(usage as never, 'none') : fromOpenAIUsage(usage as never),
    );
  }
  t.ok(sum > 0n, 'the calls cost something');
  const w = await until('every hold released', async () => {
    const x = await readWallet(redis, account, 'chain_a');
    return x.held === 0n ? x : null;
  });
  t.equal(funded - w.available, sum, 'the wallet paid exactly the sum of the calls');
}

t.test('a burst of 300 is answered in full with the default timeouts', async (t) => {
  await answeredInFull(t, await start({}));
});

t.test(
  'a burst of 300 is answered in full when the loop stalls past the headers timeout after accepting it',
  async (t) => {
    const s = await start({ headers_timeout_ms: 2_000 });
    const http = s.app.server;
    let accepted = 0;
    let stalled = false;
    http.on('connection', () => {
      if (++accepted < CALLS) return;
      // The last connection was accepted (Node's clock for it started) and its request is on its way: the loop stalls
      // past the headers timeout and a check interval, as a machine busy with other work or a burst's own work may stall it.
      const end = performance.now() + http.headersTimeout + 2 * 500;
      while (performance.now() < end);
      stalled = true;
    });
    await answeredInFull(t, s);
    t.ok(stalled, 'the loop stalled');
  },
);
