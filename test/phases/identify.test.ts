import t from 'tap';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import Fastify from 'fastify';
import { listKeys, revokeKey } from '../../plugins/accounts/accounts.js';
import { buildConfig, embeddedDefault } from '../../plugins/config.js';
import { ERROR_CODES } from '../../policies/errors.js';
import farebox from '../../plugins/gateway.js';
import { startHarness } from '../helpers/harness.js';
import { validator } from '../helpers/conformance.js';

const h = await startHarness();
t.teardown(() => h.close());
const errorSchema = validator('ErrorResponse');

const post = (path: string, headers: Record<string, string>, body: unknown) =>
  fetch(`${h.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = async (r: Response): Promise<any> => r.json();
const chatBody = { model: 'gamma-k3', messages: [{ role: 'user', content: 'hi' }] };
const msgBody = { model: 'alpha-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] };

t.test('x-api-key and Authorization: Bearer both authenticate', async (t) => {
  t.equal((await post('/v1/chat/completions', { 'x-api-key': h.key }, chatBody)).status, 200);
  t.equal((await post('/v1/chat/completions', { authorization: `Bearer ${h.key}` }, chatBody)).status, 200);
  t.equal((await post('/v1/messages', { 'x-api-key': h.key }, msgBody)).status, 200);
});

t.test(
  'missing key -> 401 missing_api_key, in each protocol, with x-request-id and x-should-retry: false',
  async (t) => {
    const o = await post('/v1/chat/completions', {}, chatBody);
    t.equal(o.status, 401);
    t.match(o.headers.get('x-request-id'), /^req_/);
    t.equal(o.headers.get('x-should-retry'), 'false');
    const ob = await json(o);
    t.same(errorSchema(ob), [], 'OpenAI error shape');
    t.equal(ob.error.code, 'missing_api_key');
    const a = await post('/v1/messages', {}, msgBody);
    t.equal(a.status, 401);
    t.match(await json(a), { type: 'error', error: { type: 'authentication_error', message: String } });
  },
);

t.test('unknown key and malformed key -> 401 invalid_api_key', async (t) => {
  for (const key of ['sk_' + 'x'.repeat(43), 'not-a-key', 'sk_']) {
    const r = await post('/v1/chat/completions', { authorization: `Bearer ${key}` }, chatBody);
    t.equal(r.status, 401, key);
    t.equal((await json(r)).error.code, 'invalid_api_key');
  }
});

t.test('a revoked key is refused at once on a gateway that has it cached', async (t) => {
  const { createKey } = await import('../../plugins/accounts/accounts.js');
  const k = await createKey(h.redis, h.account);
  t.equal((await post('/v1/chat/completions', { authorization: `Bearer ${k.key}` }, chatBody)).status, 200);
  await revokeKey(h.redis, k.id);
  let status = 0;
  for (let i = 0; i < 50 && status !== 401; i++) {
    status = (await post('/v1/chat/completions', { authorization: `Bearer ${k.key}` }, chatBody)).status;
    if (status !== 401) await new Promise((r) => setTimeout(r, 20));
  }
  t.equal(status, 401);
});

t.test('key last-used time is kept', async (t) => {
  const [info] = await listKeys(h.redis, h.account);
  t.ok(info!.last_used_at! > Date.now() - 60_000);
});

t.test('SDKs raise their own typed errors for our 400 and 401', async (t) => {
  const bad = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'sk_nope', maxRetries: 0 });
  t.ok((await bad.chat.completions.create(chatBody as never).catch((e) => e)) instanceof OpenAI.AuthenticationError);
  const good = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
  const e = await good.chat.completions.create({ ...chatBody, model: 'gamma-k9' } as never).catch((e) => e);
  t.ok(e instanceof OpenAI.BadRequestError);
  t.equal(e.error.code, 'unknown_model');
  t.equal(e.error.param, 'model');

  const abad = new Anthropic({ baseURL: h.url, apiKey: 'sk_nope', maxRetries: 0 });
  t.ok((await abad.messages.create(msgBody as never).catch((e) => e)) instanceof Anthropic.AuthenticationError);
  const agood = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
  const ae = await agood.messages.create({ ...msgBody, model: 'alpha-sonnet-9' } as never).catch((e) => e);
  t.ok(ae instanceof Anthropic.BadRequestError);
  t.equal(ae.error.error.type, 'invalid_request_error');
  t.match(ae.requestID ?? ae.headers?.get('x-request-id'), /req_/);
});

t.test(
  'bad input: invalid JSON, wrong content type, too many stops, huge body -> clear 4xx, nothing upstream',
  async (t) => {
    const before = h.sim.received.length;
    const badJson = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: '{"model":',
    });
    t.equal(badJson.status, 400);
    t.equal((await json(badJson)).error.code, 'invalid_json');
    const text = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'text/plain' },
      body: 'hi',
    });
    t.equal(text.status, 400);
    t.equal((await json(text)).error.code, 'invalid_request');
    const stops = await post(
      '/v1/chat/completions',
      { authorization: `Bearer ${h.key}` },
      { ...chatBody, stop: ['1', '2', '3', '4', '5'] },
    );
    t.equal(stops.status, 400);
    t.equal((await json(stops)).error.code, 'too_many_stop_sequences');
    const effort = await post(
      '/v1/chat/completions',
      { authorization: `Bearer ${h.key}` },
      { ...chatBody, model: 'beta-5.5', reasoning_effort: 'ultra' },
    );
    t.equal((await json(effort)).error.code, 'invalid_reasoning_effort');
    const wrong = await post('/v1/messages', { authorization: `Bearer ${h.key}` }, { ...msgBody, model: 'beta-5.5' });
    t.equal(wrong.status, 400);
    t.equal((await json(wrong)).error.type, 'invalid_request_error');
    t.equal(h.sim.received.length, before, 'the upstream saw none of them');
  },
);

t.test('bodies up to 32 MB are accepted; larger -> 413 request_too_large', async (t) => {
  const big = { ...msgBody, messages: [{ role: 'user', content: 'a'.repeat(31 * 1024 * 1024) }] };
  const ok = await post('/v1/messages/count_tokens', { authorization: `Bearer ${h.key}` }, big);
  t.equal(ok.status, 200);
  const huge = { ...msgBody, messages: [{ role: 'user', content: 'a'.repeat(33 * 1024 * 1024) }] };
  const r = await post('/v1/messages', { authorization: `Bearer ${h.key}` }, huge);
  t.equal(r.status, 413);
  t.match(await json(r), { error: { type: 'request_too_large' } });
});

t.test('404 under /v1 carries x-request-id and the protocol shape', async (t) => {
  const r = await fetch(`${h.url}/v1/nothing-here`, { headers: { authorization: `Bearer ${h.key}` } });
  t.equal(r.status, 404);
  t.match(r.headers.get('x-request-id'), /^req_/);
  t.equal((await json(r)).error.code, 'not_found');
  const m = await fetch(`${h.url}/v1/messages/batches`, { method: 'POST' });
  t.equal(m.status, 404);
  t.match(await json(m), { type: 'error', error: { type: 'not_found_error' } });
});

t.test('GET /v1/health needs no key and says whether Redis answers', async (t) => {
  const r = await fetch(`${h.url}/v1/health`);
  t.equal(r.status, 200);
  t.match(await json(r), { status: 'ok', redis: 'ok' });
  t.match(r.headers.get('x-request-id'), /^req_/);

  const config = buildConfig(
    { ...embeddedDefault(h.sim.url), redis: { url: 'redis://127.0.0.1:1', prefix: 'x:' }, metrics: { port: 0 } },
    { FAREBOX_SIM_KEY: 'k' },
  );
  const app = Fastify();
  await app.register(farebox, { config });
  const down = await app.inject({ method: 'GET', url: '/v1/health' });
  t.equal(down.statusCode, 503);
  t.match(down.json(), { status: 'unavailable', redis: 'unreachable' });
  const call = await app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { authorization: 'Bearer sk_x' },
    payload: chatBody,
  });
  t.equal(call.statusCode, 503, 'calls get a 503 while Redis is down, not a hang or a 500');
  t.equal(call.json().error.code, 'service_unavailable');
  await app.close();
});

t.test('the error table in the README lists exactly the codes of ERROR_CODES', async (t) => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.slice(readme.indexOf('## Errors'));
  const rows = [...section.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm)].map((m) => [m[1], Number(m[2])]);
  t.same(
    rows,
    Object.entries(ERROR_CODES).map(([code, v]) => [code, v.status]),
  );
});
