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
