/**
 * `farebox serve` bounds how long a request may take to arrive (config server.*_timeout_ms): headers or a body that
 * stall or trickle are cut within their timeout, an idle keep-alive connection within its own; an answer that streams
 * longer than all of them is not cut; a hundred stalled connections do not slow the calls beside them.
 */
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { createAccount, createKey } from '../plugins/accounts/accounts.js';
import { buildConfig, ConfigError, embeddedDefault } from '../plugins/config.js';
import { fundOnDevChain } from '../plugins/serve.js';
import { serveFixture } from './helpers/serve-fixture.js';
import { until } from './helpers/wait.js';

const { redis, start } = await serveFixture(t, 'timeouts');

const quick = await start({ headers_timeout_ms: 1_500, request_timeout_ms: 2_000, keep_alive_timeout_ms: 1_000 });
const port = Number(new URL(quick.url).port);
const account = (await createAccount(redis, {})).address;
const { key } = await createKey(redis, account);
await fundOnDevChain(redis, quick.config.chains!, 'chain_a', account, 100_000_000n);

const CHAT_HEAD = (extra: string) =>
  `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n${extra}\r\n`;

/** A raw connection that sends `data` and then nothing (or `trickle` every `everyMs`); resolves when the server closes it. */
function stalled(
  to: number,
  data: string,
  trickle?: { data: string; everyMs: number },
): { socket: Socket; closed: Promise<{ ms: number; answer: string }> } {
  const socket = connect(to, '127.0.0.1');
  const started = performance.now();
  let answer = '';
  let timer: NodeJS.Timeout | undefined;
  socket.setEncoding('utf8');
  socket.on('data', (d) => (answer += d));
  socket.on('error', () => {});
  socket.on('connect', () => {
    socket.write(data);
    if (trickle) timer = setInterval(() => socket.write(trickle.data), trickle.everyMs);
  });
  const closed = new Promise<{ ms: number; answer: string }>((resolve) =>
    socket.on('close', () => {
      clearInterval(timer);
      resolve({ ms: performance.now() - started, answer });
    }),
  );
  return { socket, closed };
}

/**
 * How late past its timeout a cut may come: Node checks the header and request timeouts every quarter of the shortest
 * (serverTimeouts), and the server shares this process and a loaded machine with the test. A cut left to Node's own
 * 30 s check interval, or never made, is still far past it.
 */
const LATE_MS = 4_000;

/** Resolves with `p`, or rejects after `ms`: what a server that never cuts would make the test wait for. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p,
    new Promise<T>(
      (_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: still open after ${ms} ms`)), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}

/** Connections the server holds open now. */
function connections(server: { getConnections(cb: (err: Error | null, n: number) => void): void }): Promise<number> {
  return new Promise((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
}

function chat(url: string, content: string, stream = false): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'gamma-k3', stream, messages: [{ role: 'user', content }] }),
  });
}

t.test('server timeouts are validated: headers within the request', async (t) => {
  const input = {
    ...embeddedDefault('http://127.0.0.1:9'),
    server: { headers_timeout_ms: 5_000, request_timeout_ms: 4_000 },
  };
  t.throws(() => buildConfig(input, { FAREBOX_SIM_KEY: 'k' }), ConfigError);
  t.throws(
    () => buildConfig(input, { FAREBOX_SIM_KEY: 'k' }),
    /server\.headers_timeout_ms: must not be above server\.request_timeout_ms/,
  );
  const d = buildConfig(embeddedDefault('http://127.0.0.1:9'), { FAREBOX_SIM_KEY: 'k' }).server;
  t.match(
    d,
    { headers_timeout_ms: 10_000, request_timeout_ms: 60_000, keep_alive_timeout_ms: 72_000, max_connections: 0 },
    'defaults',
  );
});

t.test('headers that stall are cut within headers_timeout_ms', async (t) => {
  const { closed } = stalled(port, `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nauthoriz`);
  const { ms, answer } = await within(closed, 12_000, 'stalled headers');
  t.ok(ms >= 1_400 && ms < 1_500 + LATE_MS, `cut after ${Math.round(ms)} ms (headers_timeout_ms 1500)`);
  t.match(answer, /^(HTTP\/1\.1 408 |$)/, 'a 408, or just the close');
});

t.test('a connection that sends nothing is cut within headers_timeout_ms', async (t) => {
  const { ms } = await within(stalled(port, '').closed, 12_000, 'silent connection');
  t.ok(ms >= 1_400 && ms < 1_500 + LATE_MS, `cut after ${Math.round(ms)} ms`);
});

t.test('a body that stalls is cut within request_timeout_ms; nothing is held for it', async (t) => {
  const { closed } = stalled(port, `${CHAT_HEAD('content-length: 200\r\n')}{"model":"gamma-k3","mess`);
  const { ms, answer } = await within(closed, 12_000, 'stalled body');
  t.ok(ms >= 1_900 && ms < 2_000 + LATE_MS, `cut after ${Math.round(ms)} ms (request_timeout_ms 2000)`);
  t.match(answer, /^(HTTP\/1\.1 408 |$)/, 'a 408, or just the close');
  t.equal(await redis.zcard('holds'), 0, 'no hold waits on it');
});

t.test('a chunked upload that trickles forever is cut within request_timeout_ms', async (t) => {
  // One byte of JSON whitespace every 200 ms: never idle long enough for an idle timer, still cut.
  const { closed } = stalled(port, `${CHAT_HEAD('transfer-encoding: chunked\r\n')}1\r\n{\r\n`, {
    data: '1\r\n \r\n',
    everyMs: 200,
  });
  const { ms } = await within(closed, 12_000, 'trickled chunked body');
  t.ok(ms >= 1_900 && ms < 2_000 + LATE_MS, `cut after ${Math.round(ms)} ms (request_timeout_ms 2000)`);
});

t.test('an idle keep-alive connection closes after keep_alive_timeout_ms', async (t) => {
  const { socket, closed } = stalled(port, `GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n\r\n`);
  const { ms, answer } = await within(closed, 12_000, 'idle keep-alive connection');
  t.match(answer, /^HTTP\/1\.1 200 /, 'answered first');
  // Node closes it a second past the timeout it advertises in Keep-Alive.
  t.ok(ms >= 900 && ms < 2_000 + LATE_MS, `closed after ${Math.round(ms)} ms (keep_alive_timeout_ms 1000)`);
  socket.destroy();
});

t.test('answers that take longer than every timeout are not cut: a slow first byte, a long stream', async (t) => {
  const t0 = performance.now();
  const late = await chat(quick.url, 'hi #sim:delay_ms=2500');
  t.equal(late.status, 200);
  t.equal(((await late.json()) as { object: string }).object, 'chat.completion', 'a whole answer after 2.5 s');
  t.ok(performance.now() - t0 >= 2_500);

  const t1 = performance.now();
  const res = await chat(quick.url, 'hi #sim:tokens=10 #sim:chunk_delay_ms=300', true);
  t.equal(res.status, 200);
  const text = await res.text();
  const ms = performance.now() - t1;
  t.ok(ms > 2_500, `streamed for ${Math.round(ms)} ms, longer than request_timeout_ms`);
  t.equal(text.match(/"content":"[^"]+"/g)?.length, 10, 'every chunk');
  t.match(text, /data: \[DONE\]\n\n$/, 'to the end');
});

t.test(
  'the defaults reach the server; 100 stalled connections leave the latency of calls beside them as it was',
  async (t) => {
    const plain = await start({});
    const http = plain.app.server;
    t.match(
      { headers: http.headersTimeout, request: http.requestTimeout, keepAlive: http.keepAliveTimeout },
      { headers: 10_000, request: 60_000, keepAlive: 72_000 },
      'default timeouts',
    );
    const plainPort = Number(new URL(plain.url).port);

    /** Median latency of `n` calls in a row, billed and answered. */
    const median = async (n: number) => {
      const ms: number[] = [];
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        const res = await chat(plain.url, 'hi');
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`call answered ${res.status}`);
        ms.push(performance.now() - t0);
      }
      return ms.sort((a, b) => a - b)[Math.floor(n / 2)];
    };
    await median(10); // warm up: connections, JIT
    const before = await median(30);

    const sockets = Array.from({ length: 100 }, (_, i) =>
      stalled(
        plainPort,
        i % 2
          ? `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:${plainPort}\r\nauthoriz`
          : `${CHAT_HEAD('content-length: 200\r\n')}{"model":"gamma-k3","mess`,
      ),
    );
    let closedEarly = 0;
    for (const s of sockets) void s.closed.then(() => closedEarly++);
    await until('the 100 connections accepted', async () => (await connections(http)) >= 100);
    const during = await median(30);
    t.equal(closedEarly, 0, 'the 100 stalled connections were open throughout');
    t.comment(
      `median call latency: ${before.toFixed(1)} ms alone, ${during.toFixed(1)} ms beside 100 stalled connections`,
    );
    // A ratio, loose enough for a machine whose load changes between the two medians; connections that each cost the
    // event loop work (a timer per socket, a scan per check) multiply it far past this.
    t.ok(during <= before * 3 + 20, `${during.toFixed(1)} ms beside them vs ${before.toFixed(1)} ms alone`);
    for (const s of sockets) s.socket.destroy();
  },
);

t.test('server.max_connections: connections past the cap are closed as they come', async (t) => {
  const capped = await start({ max_connections: 5 });
  const cappedPort = Number(new URL(capped.url).port);
  t.equal(capped.app.server.maxConnections, 5);
  const held = Array.from({ length: 5 }, () => stalled(cappedPort, 'GET /v1/health HTTP/1.1\r\n'));
  await until('the 5 connections accepted', async () => (await connections(capped.app.server)) === 5);
  const { answer } = await within(
    stalled(cappedPort, `GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n`).closed,
    3_000,
    'a connection past the cap',
  );
  t.equal(answer, '', 'closed unanswered');
  for (const s of held) s.socket.destroy();
  await Promise.all(held.map((s) => s.closed));
  const ok = await fetch(`${capped.url}/v1/health`);
  t.equal(ok.status, 200, 'answered again once under the cap');
});
