// A seeded fuzz of malformed requests on a billed gateway (the short run of `npm run soak`'s): no answer is a 500
// or 503 of the gateway's own, every answer has an x-request-id, every error is in its protocol's shape, a refused
// call costs nothing, and no call, a prompt over the window included, is priced above its hold.
import t from 'tap';
import { checkAnswer, fuzzCases } from '../../bench/fuzz-cases.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';

const SEED = Number(process.env.FAREBOX_FUZZ_SEED ?? 20261125);
const N = Number(process.env.FAREBOX_FUZZ_N ?? 400);

const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 50_000_000n);

t.test(
  `${N} malformed requests (seed ${SEED}): no 500, every answer with x-request-id and its protocol's error shape`,
  async (t) => {
    const statuses = new Map<number, number>();
    const failures: string[] = [];
    const cases = fuzzCases(SEED, N, h.key);
    for (let i = 0; i < cases.length; i += 8) {
      await Promise.all(
        cases.slice(i, i + 8).map(async (c) => {
          const res = await fetch(`${h.url}${c.path}`, { method: 'POST', headers: c.headers, body: c.body });
          const text = await res.text().catch(() => '');
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          const wrong = checkAnswer(c, res.status, res.headers, text);
          if (wrong) failures.push(`${c.path} [${c.what}]: ${wrong}`);
        }),
      );
    }
    t.same(failures, [], 'no unexpected answer');
    t.comment(
      `statuses: ${[...statuses]
        .sort((a, b) => a[0] - b[0])
        .map(([s, n]) => `${s}x${n}`)
        .join(' ')}`,
    );
    t.ok((statuses.get(400) ?? 0) > N / 4, 'most are refused as bad input');
    // Every hold was debited or released: nothing left held.
    await until('nothing held', async () => (await readWallet(h.redis, h.account, 'chain_a')).held === 0n);
    const metrics = await (await fetch(h.metricsUrl)).text();
    t.notMatch(metrics, /farebox_price_above_hold_total\{[^}]*\} [1-9]/, 'no price was above its hold');
  },
);
