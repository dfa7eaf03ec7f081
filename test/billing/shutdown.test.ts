// A gateway told to stop (SIGTERM: app.close()) lets its calls run for server.shutdown_grace_ms, then closes the
// connections still open: a stream is debited for what it delivered, a call whose answer had not begun is free.
// Killed after the grace instead, their holds would be released as instance_died and every one of them would go free.
import t from 'tap';
import OpenAI from 'openai';
import { getCallRecord, listCallRecords, type CallRecord } from '../../plugins/billing/call-records.js';
import { closeDevChains, startHarness, type Harness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';

t.teardown(closeDevChains);

async function finished(g: Harness, requestId: string): Promise<CallRecord> {
  return until(`the record of ${requestId}`, async () => {
    const r = await getCallRecord(g.redis, requestId);
    return r && r.status !== 'held' ? r : null;
  });
}

t.test(
  'calls still running when the shutdown grace is over are cut: delivered output debited, the rest free',
  async (t) => {
    const h = await startHarness({
      chains: true,
      edit: (c) => void (c.server = { ...c.server, shutdown_grace_ms: 1_500 }),
    });
    // Closes the app again (a no-op), then the simulator and the Redis state.
    t.teardown(() => h.close());
    await h.fund('chain_a', 5_000_000n);
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });

    // A stream of 20 s (200 chunks 100 ms apart), and a call whose answer starts only after 20 s.
    const { data: stream, response } = await openai.chat.completions
      .create({
        model: 'gamma-k3',
        stream: true,
        messages: [{ role: 'user', content: '#sim:tokens=200 #sim:chunk_delay_ms=100' }],
      })
      .withResponse();
    const streamId = response.headers.get('x-request-id')!;
    const slow = openai.chat.completions
      .create({ model: 'gamma-k3', messages: [{ role: 'user', content: '#sim:delay_ms=20000' }] })
      .withResponse()
      .catch((err: unknown) => err);
    let received = 0;
    const read = (async () => {
      for await (const chunk of stream) if (chunk.choices[0]?.delta.content) received += 1;
    })().catch((err: unknown) => err);
    await until('some chunks received', async () => received >= 3);

    const stopping = Date.now();
    const close = h.app.close();
    const cut = await read;
    const tookMs = Date.now() - stopping;
    t.ok(cut instanceof Error, 'the stream is cut before its end');
    t.ok(
      tookMs >= 1_400 && tookMs < 8_000,
      `cut ${tookMs} ms after close began: at the grace, not at the stream's end`,
    );
    t.ok(
      (await slow) instanceof OpenAI.APIConnectionError,
      'the call whose answer had not begun: its connection closed (an SDK retries it elsewhere)',
    );
    await close;

    // close() waited for the debits: the records are final, read from the Redis the gateway used.
    const rec = await finished(h, streamId);
    t.equal(rec.status === 'pending' || rec.status === 'settled', true, `debited (${rec.status})`);
    t.ok(rec.released === null, 'not released by a sweeper');
    t.ok(
      rec.usage.output_tokens >= received && rec.usage.output_tokens < 200,
      `${rec.usage.output_tokens} output tokens billed for ${received} chunks`,
    );
    t.ok(rec.priceAtomic > 0n && rec.priceAtomic < rec.held, 'charged what it delivered, less than its hold');
    const records = await listCallRecords(h.redis, h.account);
    t.equal(records.length, 2);
    const slowRec = records.find((r) => r.call_id !== rec.call_id)!;
    t.same(
      [slowRec.status, slowRec.priceAtomic, slowRec.released],
      ['free', 0n, null],
      'the unanswered call is free, released by its own end',
    );
  },
);
