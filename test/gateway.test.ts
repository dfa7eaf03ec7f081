import t from 'tap';
import OpenAI from 'openai';
import { startHarness } from './helpers/harness.js';

t.test('registered into an app with its own routes and onRequest hook: both keep working', async (t) => {
  let hostHookRuns = 0;
  const h = await startHarness({
    configure: (app) => {
      app.addHook('onRequest', async (_req, reply) => {
        hostHookRuns++;
        reply.header('x-host-hook', 'yes');
      });
      app.get('/internal/hello', async () => ({ hello: 'world' }));
      app.post('/internal/echo', async (req) => ({ got: req.body }));
    },
  });
  t.teardown(() => h.close());

  const hello = await fetch(`${h.url}/internal/hello`);
  t.same(await hello.json(), { hello: 'world' });
  t.equal(hello.headers.get('x-host-hook'), 'yes');
  t.equal(hello.headers.get('x-request-id'), null, "the gateway's hooks stay out of the host's routes");

  const echo = await fetch(`${h.url}/internal/echo`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
  t.same(await echo.json(), { got: { a: 1 } }, "the host's JSON parser is untouched");

  const notFound = await fetch(`${h.url}/elsewhere`);
  t.equal(notFound.status, 404);
  t.equal(notFound.headers.get('x-request-id'), null, "the host's 404 stays the host's");

  const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
  const { data, response } = await openai.chat.completions
    .create({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  t.equal(data.object, 'chat.completion');
  t.equal(response.headers.get('x-host-hook'), 'yes', "the host's hook runs on gateway routes too");
  t.match(response.headers.get('x-request-id'), /^req_/);
  t.ok(hostHookRuns >= 4);
});

t.test('a caller that leaves while its hold is placed: the call is settled at once, no upstream is called', async (t) => {
  let releaseGate: () => void = () => {};
  let gated = 0;
  let settled = 0;
  const h = await startHarness({
    observer: {
      async gate() {
        gated++;
        await new Promise<void>((r) => (releaseGate = r));
      },
      async settle() {
        settled++;
      },
    },
  });
  t.teardown(() => h.close());
  const before = h.sim.received.length;
  const controller = new AbortController();
  const call = fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', signal: controller.signal,
    headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] }),
  }).catch(() => 'aborted');
  while (gated === 0) await new Promise((r) => setTimeout(r, 10));
  controller.abort();
  t.equal(await call, 'aborted');
  await new Promise((r) => setTimeout(r, 200));
  t.equal(settled, 0, 'nothing to settle before the hold exists');
  releaseGate();
  for (let i = 0; i < 500 && settled === 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(settled, 1, 'settled once, right after the hold');
  await new Promise((r) => setTimeout(r, 200));
  t.equal(h.sim.received.length, before, 'the upstream was never called');
  t.equal(settled, 1);
});
