// What Node's HTTP parser and Fastify's router refuse before any route runs still answers with a request id and the
// caller's protocol's error shape, once the app passes fareboxServerOptions (farebox serve does).
import net from 'node:net';
import t, { type Test } from 'tap';
import Fastify from 'fastify';
import { embeddedDefault } from '../../plugins/config.js';
import farebox, { fareboxServerOptions } from '../../plugins/gateway.js';
import { startSimulator } from '../../plugins/simulator/index.js';
import { closeRedis, connectRedis } from '../../plugins/store/redis.js';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { dropPrefix, testPrefix } from '../helpers/harness.js';

const sim = await startSimulator({ host: '127.0.0.1', port: 0 });
const prefix = testPrefix();
const input = embeddedDefault(sim.url);
input.redis = { url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', prefix };
// The app listens on an ephemeral port; its metrics server too, never on 9464.
input.metrics = { port: 0 };
const app = Fastify({ logger: false, ...fareboxServerOptions });
await app.register(farebox, { config: input, env: { FAREBOX_SIM_KEY: 'sim-key' } });
await app.listen({ port: 0, host: '127.0.0.1' });
const port = (app.server.address() as net.AddressInfo).port;
const redis = connectRedis(input.redis as { url: string; prefix: string });
const account = await createAccount(redis, {});
const { key } = await createKey(redis, account.address);
t.teardown(async () => {
  await app.close();
  await sim.close();
  await dropPrefix(redis, prefix);
  await closeRedis(redis);
});

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

/** Send raw bytes (each string of an array in a packet of its own) and read the answer until the server closes. */
function raw(bytes: string | string[]): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', async () => {
      for (const [i, packet] of [bytes].flat().entries()) {
        // Written apart, after the server has parsed the one before.
        if (i > 0) await new Promise((r) => setTimeout(r, 50));
        s.write(packet);
      }
    });
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('error', () => {});
    // A server that keeps the connection open is ended from here after 3 s; the timer must not keep the process up.
    const timer = setTimeout(() => s.end(), 3_000);
    s.on('close', () => {
      clearTimeout(timer);
      const [head, ...rest] = out.split('\r\n\r\n');
      const lines = head!.split('\r\n');
      const status = Number(lines[0]!.split(' ')[1]);
      const headers = Object.fromEntries(
        lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      );
      try {
        resolve({ status, headers, body: JSON.parse(rest.join('\r\n\r\n')) });
      } catch (err) {
        reject(new Error(`not JSON: ${out.slice(0, 300)} (${(err as Error).message})`));
      }
    });
  });
}

const openaiShape = (t: Test, a: Answer, status: number, code: string) => {
  t.equal(a.status, status);
  t.match(a.headers['x-request-id'], /^req_[0-9a-f]{32}$/, 'a request id');
  t.match(a.body, { error: { code, type: String, message: String } }, 'the OpenAI shape');
};

t.test('oversized headers: 431 headers_too_large, in the protocol of the path', async (t) => {
  const big = `x-big: ${'a'.repeat(20_000)}\r\n`;
  openaiShape(t, await raw(`GET /v1/health HTTP/1.1\r\nhost: x\r\n${big}\r\n`), 431, 'headers_too_large');
  const a = await raw(`POST /v1/messages HTTP/1.1\r\nhost: x\r\n${big}\r\n`);
  t.equal(a.status, 431);
  t.match(
    a.body,
    { type: 'error', error: { type: 'invalid_request_error', code: 'headers_too_large' } },
    'the Anthropic shape on /v1/messages',
  );
  t.match(a.headers['x-request-id'], /^req_/);
});

t.test('a bare CR in a header, a broken chunked body, an undecodable URL: 400 malformed_request', async (t) => {
  openaiShape(t, await raw('GET /v1/health HTTP/1.1\r\nhost: x\r\nx-a: b\rc\r\n\r\n'), 400, 'malformed_request');
  openaiShape(
    t,
    await raw(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n`,
    ),
    400,
    'malformed_request',
  );
  openaiShape(
    t,
    await raw('GET /v1/%E0%A4%A HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'),
    400,
    'malformed_request',
  );
});

t.test('a body nested deeper than 128 levels: 400 invalid_request before it is parsed; 128 levels pass', async (t) => {
  const post = (x: string) => {
    const body = `{"model":"gamma-k3","max_tokens":5,"messages":[{"role":"user","content":"x"}],"x":${x}}`;
    return raw(
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
  };
  for (const x of ['['.repeat(20_000) + ']'.repeat(20_000), '[{"a":'.repeat(64) + '1' + '}]'.repeat(64)]) {
    const a = await post(x);
    openaiShape(t, a, 400, 'invalid_request');
    t.match(a.body, { error: { message: 'The request body nests deeper than 128 levels.' } });
  }
  // The body's own object is one level: x may take 127 more. Brackets inside strings do not count.
  const ok = await post('['.repeat(127) + ']'.repeat(127) + `,"y":"${'[{'.repeat(500)}"`);
  t.equal(ok.status, 200, 'at the bound, with brackets in a string: served');
});

t.test(
  'an Expect other than 100-continue: 417 expectation_failed; HTTP/1.1 without Host: 400 malformed_request',
  async (t) => {
    openaiShape(
      t,
      await raw('GET /v1/health HTTP/1.1\r\nhost: x\r\nexpect: bogus\r\nconnection: close\r\n\r\n'),
      417,
      'expectation_failed',
    );
    const a = await raw('POST /v1/messages HTTP/1.1\r\nhost: x\r\nexpect: bogus\r\nconnection: close\r\n\r\n');
    t.match(
      a.body,
      { type: 'error', error: { type: 'invalid_request_error', code: 'expectation_failed' } },
      'the Anthropic shape on /v1/messages',
    );
    t.match(a.headers['x-request-id'], /^req_/);
    const noHost = await raw('GET /v1/health HTTP/1.1\r\nconnection: close\r\n\r\n');
    openaiShape(t, noHost, 400, 'malformed_request');
    t.match(noHost.body, { error: { message: 'An HTTP/1.1 request needs a Host header.' } });
    const old = await raw('GET /v1/health HTTP/1.0\r\n\r\n');
    t.equal(old.status, 200, 'HTTP/1.0 needs none');
  },
);

const anthropicShape = (t: Test, a: Answer, status: number, code: string) => {
  t.equal(a.status, status);
  t.match(a.headers['x-request-id'], /^req_[0-9a-f]{32}$/, 'a request id');
  t.equal(a.headers['request-id'], a.headers['x-request-id'], 'the request id where the Anthropic SDK reads it');
  t.match(a.body, { type: 'error', error: { type: String, message: String, code } }, 'the Anthropic shape');
  t.notOk((a.body as { error: { param?: unknown } }).error.param, 'no OpenAI param');
};

t.test('a refused request to /v1/messages is answered in the Anthropic shape, however the parser met it', async (t) => {
  const bad = 'x-a: b\rc\r\n\r\n';
  anthropicShape(
    t,
    await raw(`${'\r\n'.repeat(200)}POST /v1/messages HTTP/1.1\r\nhost: x\r\n${bad}`),
    400,
    'malformed_request',
  );
  anthropicShape(t, await raw(`POST /v1/messages\r\r\n\r\n HTTP/1.1\r\nhost: x\r\n\r\n`), 400, 'malformed_request');
  anthropicShape(
    t,
    await raw(`POST /v1/messages?${'a'.repeat(400)} HTTP/1.1\r\nhost: x\r\n${bad}`),
    400,
    'malformed_request',
  );
  // Pipelined behind a request to another endpoint: the refused request's own path decides.
  anthropicShape(
    t,
    await raw(`GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\nPOST /v1/messages HTTP/1.1\r\nhost: x\r\n${bad}`),
    400,
    'malformed_request',
  );
  // The request line in an earlier packet: the anthropic-version header every Anthropic SDK sends decides.
  anthropicShape(
    t,
    await raw(['POST /v1/messages HTTP/1.1\r\nhost: x\r\n', `anthropic-version: 2023-06-01\r\n${bad}`]),
    400,
    'malformed_request',
  );
  // Headers read, the chunked body broken in a later packet: the pending request's path decides.
  anthropicShape(
    t,
    await raw([
      `POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`,
      'zz\r\n',
    ]),
    400,
    'malformed_request',
  );
  openaiShape(
    t,
    await raw([
      `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n`,
      'zz\r\n',
    ]),
    400,
    'malformed_request',
  );
  anthropicShape(
    t,
    await raw('POST /v1/messages/%E0%A4%A HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n'),
    400,
    'malformed_request',
  );
});

t.test('a body that is not JSON, nests too deep or is sent as text: the Anthropic shape on /v1/messages', async (t) => {
  const post = (path: string, type: string, body: string) =>
    raw(
      `POST ${path} HTTP/1.1\r\nhost: x\r\nx-api-key: ${key}\r\ncontent-type: ${type}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
    );
  anthropicShape(t, await post('/v1/messages', 'application/json', '{not json'), 400, 'invalid_json');
  anthropicShape(t, await post('/v1/messages/count_tokens', 'application/json', ''), 400, 'invalid_json');
  anthropicShape(
    t,
    await post('/v1/messages', 'application/json', '['.repeat(200) + ']'.repeat(200)),
    400,
    'invalid_request',
  );
  anthropicShape(t, await post('/v1/messages', 'text/plain', 'hello'), 400, 'invalid_request');
  openaiShape(t, await post('/v1/chat/completions', 'application/json', '{not json'), 400, 'invalid_json');
});
