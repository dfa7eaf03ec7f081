// Every refusal of a request to /v1/messages, from the HTTP parser to the JSON body checks, reaches the Anthropic SDK
// in Anthropic's shape, with the request id it reads: its typed errors, its `error` body, its requestID.
import net from 'node:net';
import t, { type Test } from 'tap';
import Fastify from 'fastify';
import Anthropic from '@anthropic-ai/sdk';
import { embeddedDefault } from '../../plugins/config.js';
import farebox, { fareboxServerOptions } from '../../plugins/gateway.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { dropPrefix, testPrefix } from '../helpers/harness.js';

const BODY_LIMIT = 64 * 1024;
const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
const prefix = testPrefix();
const input = embeddedDefault(sim.url);
input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
input.server = { port: 0, host: '127.0.0.1', body_limit: BODY_LIMIT };
const app = Fastify({ logger: false, ...fareboxServerOptions });
await app.register(farebox, { config: input, env: { FAREBOX_SIM_KEY: 'sim-key' } });
await app.listen({ port: 0, host: '127.0.0.1' });
const url = `http://127.0.0.1:${(app.server.address() as net.AddressInfo).port}`;
const redis = connectRedis(input.redis as { url: string; prefix: string });
const account = await createAccount(redis, {});
const { key } = await createKey(redis, account.address);
t.teardown(async () => {
  await app.close();
  await sim.close();
  await dropPrefix(redis, prefix);
  await closeRedis(redis);
});

const MESSAGE = { model: 'alpha-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user' as const, content: 'hi' }] };

/** What the SDK raised for a call. */
async function refusal(call: () => Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof Anthropic.APIError)) throw new Error(`expected an APIError, got ${String(err)}`);
  return err;
}

const shaped = (t: Test, err: InstanceType<typeof Anthropic.APIError>, status: number, type: string, code: string) => {
  t.equal(err.status, status);
  t.match(err.error, { type: 'error', error: { type, message: String, code } }, 'the Anthropic shape');
  t.match(err.requestID, /^req_[0-9a-f]{32}$/, 'the request id, where the SDK reads it');
};

t.test(
  'a body that nests too deep, is over the body limit or not JSON: typed SDK errors in the Anthropic shape',
  async (t) => {
    const sdk = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });
    let deep: unknown = 1;
    for (let i = 0; i < 200; i++) deep = [deep];
    const nested = await refusal(() => sdk.messages.create({ ...MESSAGE, metadata: { user_id: 'u', deep } as never }));
    t.ok(nested instanceof Anthropic.BadRequestError, 'BadRequestError');
    shaped(t, nested, 400, 'invalid_request_error', 'invalid_request');

    const big = await refusal(() =>
      sdk.messages.create({ ...MESSAGE, messages: [{ role: 'user', content: 'x'.repeat(BODY_LIMIT) }] }),
    );
    shaped(t, big, 413, 'request_too_large', 'request_too_large');

    // A body broken on its way: what the SDK would have sent, cut short.
    const cut = new Anthropic({
      baseURL: url,
      apiKey: key,
      maxRetries: 0,
      fetch: (u, init) => fetch(u, { ...init, body: String(init?.body).slice(0, 20) }),
    });
    const broken = await refusal(() => cut.messages.create(MESSAGE));
    t.ok(broken instanceof Anthropic.BadRequestError, 'BadRequestError');
    shaped(t, broken, 400, 'invalid_request_error', 'invalid_json');
    const counted = await refusal(() => cut.messages.countTokens({ model: MESSAGE.model, messages: MESSAGE.messages }));
    shaped(t, counted, 400, 'invalid_request_error', 'invalid_json');
  },
);

t.test("headers over Node's limit, refused by its parser before any route: the Anthropic shape", async (t) => {
  const sdk = new Anthropic({
    baseURL: url,
    apiKey: key,
    maxRetries: 0,
    defaultHeaders: { 'x-big': 'a'.repeat(20_000) },
  });
  const err = await refusal(() => sdk.messages.create(MESSAGE));
  shaped(t, err, 431, 'invalid_request_error', 'headers_too_large');
});
