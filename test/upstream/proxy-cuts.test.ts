// An answer the gateway cuts (its upstream failed, ran past its time, or sent an event past the meter's bound) reaches
// the caller with everything the meter counted before the cut, and as a cut, never as a clean end: what a caller is
// charged is what it received. proxyCall is driven here on a plain HTTP server, with a real upstream and undici pool.
import t, { type Test } from 'tap';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import type { FastifyReply } from 'fastify';
import { SseMeter } from '../../plugins/upstream/metering.js';
import { Upstreams } from '../../plugins/upstream/pools.js';
import { proxyCall } from '../../plugins/upstream/proxy.js';

/** A delta of one character, padded (outside its delta) to `pad` bytes: a full socket in few events. */
const event = (content: string, pad = 0) =>
  `data: ${JSON.stringify({ id: `c${'x'.repeat(pad)}`, object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`;

/** A gateway of one route: each call proxied to `upstreamUrl` through an SseMeter of `maxEventBytes`. */
async function gateway(t: Test, upstreamUrl: string, opts: { maxDurationMs: number; maxEventBytes?: number }) {
  const upstreams = new Upstreams();
  const meters: SseMeter[] = [];
  const server = createServer((req, res) => {
    req.resume();
    const call: { ended: boolean; exchange?: { abort?: () => void } } = { ended: false };
    res.once('close', () => {
      call.ended = true;
      if (!res.writableFinished) call.exchange?.abort?.();
    });
    const reply = {
      raw: res,
      get sent() {
        return res.headersSent;
      },
      getHeaders: () => ({}),
      hijack() {},
      send(err: Error) {
        res.statusCode = 502;
        res.end(err.message);
      },
    } as unknown as FastifyReply;
    proxyCall(upstreams, reply, call, {
      url: upstreamUrl,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
      provider: 'test',
      timeoutMs: 30_000,
      maxDurationMs: opts.maxDurationMs,
      meter: () => {
        const m = new SseMeter('openai', false, undefined, opts.maxEventBytes);
        meters.push(m);
        return m;
      },
      keepLength: () => false,
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await upstreams.close();
  });
  const call = () =>
    new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, { method: 'POST' }, resolve);
      req.on('error', reject);
      req.end('{}');
    });
  return { call, meters };
}

/** The rest of an answer: its bytes, and whether it ended cleanly (false: cut). */
function readAll(res: IncomingMessage): Promise<{ body: Buffer; clean: boolean }> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    res.on('data', (c: Buffer) => parts.push(c));
    res.on('error', () => {});
    res.once('close', () => resolve({ body: Buffer.concat(parts), clean: res.complete }));
  });
}

const deltasIn = (body: Buffer) => body.toString('latin1').split('"content":"a"').length - 1;

t.test('a caller not reading when its call runs past its time receives what it is charged, then the cut', async (t) => {
  // The upstream streams until it is held back, and is closed by the gateway's deadline.
  let upstreamClosed!: () => void;
  const closed = new Promise<void>((r) => (upstreamClosed = r));
  const upstream = createServer((req, res: ServerResponse) => {
    req.resume();
    res.once('close', () => upstreamClosed());
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    void (async () => {
      const e = event('a', 4000);
      while (!res.destroyed) {
        if (!res.write(e)) await new Promise((r) => res.once('drain', r).once('close', r));
      }
    })();
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    upstream.closeAllConnections();
    return new Promise((r) => upstream.close(r));
  });
  const g = await gateway(t, `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/`, {
    maxDurationMs: 1_500,
  });
  const res = await g.call();
  t.equal(res.statusCode, 200);
  // Not read until the deadline has cut the upstream: the caller's socket is full, and so is Node's buffer of it.
  res.pause();
  await closed;
  const got = readAll(res);
  res.resume();
  const { body, clean } = await got;
  const m = g.meters[0]!;
  t.notOk(clean, 'the answer is cut, not ended');
  t.ok(m.reading.deltas > 100, `the upstream streamed (${m.reading.deltas} events metered)`);
  t.equal(body.length, m.reading.bytesOut, 'every byte metered reached the caller');
  t.equal(deltasIn(body), m.reading.deltas, 'every delta counted reached the caller');
});

/** An upstream that writes `answer` (an HTTP response, chunked) in one write: undici reads it in one go. */
async function rawUpstream(t: Test, answer: string): Promise<string> {
  const sockets: Socket[] = [];
  const upstream = createTcpServer((socket) => {
    sockets.push(socket);
    socket.once('data', () => socket.end(answer));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => upstream.close(r));
  });
  return `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/`;
}

const chunked = (...parts: string[]) =>
  'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n' +
  parts.map((p) => `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`).join('') +
  '0\r\n\r\n';

t.test('an event that passes the bound in the last chunks before the upstream ends cuts the answer', async (t) => {
  const first = event('a');
  const start = 'data: {"choices":[{"index":0,"delta":{"content":"';
  for (const [name, parts] of [
    // The first chunk goes out at once; the two after it wait in the write window, which the end then delivers.
    ['waiting in the window', [first, start + 'y'.repeat(400), 'y'.repeat(1000)]],
    // The chunk that passes the bound also ends the event before it, which goes out.
    ['after an event it ends', [first.slice(0, 20), first.slice(20) + start + 'y'.repeat(1200)]],
  ] as const) {
    const g = await gateway(t, await rawUpstream(t, chunked(...parts)), {
      maxDurationMs: 30_000,
      maxEventBytes: 1024,
    });
    const { body, clean } = await readAll(await g.call());
    const m = g.meters[0]!;
    t.ok(m.overflowed, `${name}: the meter overflowed`);
    t.notOk(clean, `${name}: the caller sees the answer cut, not a clean end`);
    t.equal(body.toString(), first, `${name}: the whole event before it reached the caller`);
    t.equal(m.reading.bytesOut, first.length, `${name}: and is what was metered`);
    t.equal(m.reading.deltas, 1);
  }
});
