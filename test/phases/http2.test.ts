// On a host app's HTTP/2 server, calls on one session are apart: each ends with its own stream, so a short answer's
// end does not end (and cut) a long one beside it on the same connection.
import t from 'tap';
import { connect } from 'node:http2';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { until } from '../helpers/wait.js';

const h = await startHarness({ chains: true, http2: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 5_000_000n);

/** A streamed chat call on `session`: its request id and its whole body. */
function stream(session: ReturnType<typeof connect>, content: string): Promise<{ id: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = session.request({
      ':method': 'POST',
      ':path': '/v1/chat/completions',
      authorization: `Bearer ${h.key}`,
      'content-type': 'application/json',
    });
    let id = '';
    let body = '';
    req.setEncoding('utf8');
    req.on('response', (headers) => (id = String(headers['x-request-id'])));
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => resolve({ id, body }));
    req.on('error', reject);
    // An answer that never ends fails the test, which then cleans up, rather than hanging it.
    req.setTimeout(10_000, () => {
      req.close();
      reject(new Error(`no end within 10 s: ${body.slice(0, 200)}`));
    });
    req.end(JSON.stringify({ model: 'gamma-k3', stream: true, messages: [{ role: 'user', content }] }));
  });
}

t.test(
  'a short answer ending beside a long one on the same session leaves the long one whole, billed whole',
  async (t) => {
    const session = connect(h.url);
    t.teardown(() => session.close());
    // The short one first: the first call on a session is the one whose end could be taken for the connection's.
    const shortOne = stream(session, 'short #sim:tokens=2');
    const long = stream(session, 'long #sim:tokens=20 #sim:chunk_delay_ms=40');
    t.match((await shortOne).body, /\[DONE\]/, 'the short answer whole');
    const whole = await long;
    t.match(whole.body, /\[DONE\]/, 'the long one whole');
    const record = await until('the long one debited', async () => {
      const r = await getCallRecord(h.redis, whole.id);
      return r && r.status !== 'held' ? r : null;
    });
    t.equal(record.usage.output_tokens, 20, 'billed its whole answer');
  },
);
