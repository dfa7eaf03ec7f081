// What image calls cost (README "Images"): held at one image of the requested model and size, debited at exactly
// that listed price once the image's delivery began, nothing otherwise; the wallet is read after each call.
import t, { type Test } from 'tap';
import { createServer } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo, Socket } from 'node:net';
import OpenAI, { toFile } from 'openai';
import { getCallRecord, listCallRecords, type CallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { formatUsd, publishPrices, parseUsd } from '../../pricing/index.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { referencePng } from '../helpers/media.js';
import { until } from '../helpers/wait.js';
import { CALLER_STALL_MS } from '../../plugins/upstream/exchange.js';

// A provider that sends its answer slowly, in pieces: the caller can leave in the middle of the image. Its first
// piece ends FIRST_IMAGE_CHARS into the image's base64, a pause follows, then 2,000 characters every 20 ms for the
// next 10,000, and the rest (some 170,000) in pieces of 32,000: a caller reading it whole waits a tenth of a second
// for them, not two.
const png = await referencePng(256, 256);
const FIRST_IMAGE_CHARS = 600;
const slow = createServer((req, res) => {
  req.resume();
  const gemini = req.url!.includes(':generateContent');
  const b64 = png.toString('base64');
  const body = gemini
    ? JSON.stringify({
        candidates: [
          {
            content: { role: 'model', parts: [{ inlineData: { mimeType: 'image/png', data: b64 } }] },
            finishReason: 'STOP',
          },
        ],
      })
    : JSON.stringify({ created: 1, data: [{ b64_json: b64 }] });
  res.writeHead(200, { 'content-type': 'application/json' });
  let at = body.indexOf(b64.slice(0, 40)) + FIRST_IMAGE_CHARS;
  res.write(body.slice(0, at));
  const start = at;
  const next = () => {
    const timer = setInterval(() => {
      if (res.destroyed) return clearInterval(timer);
      const piece = at < start + 10_000 ? 2_000 : 32_000;
      res.write(body.slice(at, at + piece));
      at += piece;
      if (at >= body.length) {
        clearInterval(timer);
        res.end();
      }
    }, 20);
  };
  setTimeout(next, 400);
});
await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve));
const slowUrl = `http://127.0.0.1:${(slow.address() as AddressInfo).port}`;

// A provider that sends the whole image's string, then breaks off before the rest of its answer (the usage, the
// closing brackets).
const breaks = createServer((req, res) => {
  req.resume();
  const b64 = png.toString('base64');
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write(
    req.url!.includes(':generateContent')
      ? `{"candidates":[{"content":{"role":"model","parts":[{"inlineData":{"mimeType":"image/png","data":"${b64}"}}`
      : `{"created":1,"data":[{"b64_json":"${b64}"}`,
    () => setTimeout(() => res.destroy(), 50),
  );
});
await new Promise<void>((resolve) => breaks.listen(0, '127.0.0.1', resolve));
const breaksUrl = `http://127.0.0.1:${(breaks.address() as AddressInfo).port}`;

// A provider whose answer runs on, 64 KiB of a field every 5 ms until the gateway hangs up: without reaching its
// image, or (prompt `unsized`) after a whole image whose header does not tell its size (a PNG whose IHDR checksum
// is wrong).
const unsized = Buffer.from(await referencePng(64, 64));
unsized[29]! ^= 0xff;
let runsOnClosed: Promise<number> = Promise.resolve(0);
const runsOn = createServer(async (req, res) => {
  let body = '';
  for await (const chunk of req) body += chunk;
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write(
    JSON.parse(body).prompt === 'unsized'
      ? `{"created":1,"data":[{"b64_json":"${unsized.toString('base64')}"}],"note":"`
      : '{"created":1,"revised_prompt":"',
  );
  const filler = 'x'.repeat(64 * 1024);
  let sent = 0;
  const timer = setInterval(() => {
    res.write(filler);
    sent += filler.length;
  }, 5);
  runsOnClosed = new Promise((resolve) =>
    res.on('close', () => {
      clearInterval(timer);
      resolve(sent);
    }),
  );
});
await new Promise<void>((resolve) => runsOn.listen(0, '127.0.0.1', resolve));
const runsOnUrl = `http://127.0.0.1:${(runsOn.address() as AddressInfo).port}`;

// A provider that gives up on a connection it cannot write to: an image answer of some 40 MB of base64 (a PNG's
// signature and header, then filler) sent as fast as it is read, dropped once a write has waited 1 s for room.
let gaveUp: Promise<void> = new Promise(() => {});
const givesUp = createServer((req, res) => {
  req.resume();
  let dropped: () => void;
  gaveUp = new Promise((resolve) => (dropped = resolve));
  res.writeHead(200, { 'content-type': 'application/json' });
  res.write(`{"created":1,"data":[{"b64_json":"${png.subarray(0, 36).toString('base64')}`);
  const filler = 'A'.repeat(64 * 1024);
  let left = 640;
  const pump = () => {
    for (; left > 0; left--) {
      if (!res.write(filler)) {
        left--;
        const timer = setTimeout(() => {
          res.destroy();
          dropped();
        }, 1_000);
        res.once('drain', () => {
          clearTimeout(timer);
          pump();
        });
        return;
      }
    }
    res.end('"}]}');
  };
  pump();
});
await new Promise<void>((resolve) => givesUp.listen(0, '127.0.0.1', resolve));
const givesUpUrl = `http://127.0.0.1:${(givesUp.address() as AddressInfo).port}`;

const h = await startHarness({
  chains: true,
  edit: (c) => {
    c.providers['slow-gemini'] = { protocol: 'gemini', base_url: `${slowUrl}/v1beta`, key_env: 'FAREBOX_SIM_KEY' };
    c.providers['slow-openai'] = { protocol: 'openai', base_url: `${slowUrl}/v1`, key_env: 'FAREBOX_SIM_KEY' };
    // The same slow provider, cut by the gateway at 550 ms: in the middle of its image.
    c.providers['short-gemini'] = { ...c.providers['slow-gemini'], max_duration_ms: 550 };
    c.providers['short-openai'] = { ...c.providers['slow-openai'], max_duration_ms: 550 };
    c.providers['breaks-gemini'] = { protocol: 'gemini', base_url: `${breaksUrl}/v1beta`, key_env: 'FAREBOX_SIM_KEY' };
    c.providers['breaks-openai'] = { protocol: 'openai', base_url: `${breaksUrl}/v1`, key_env: 'FAREBOX_SIM_KEY' };
    // Cut at 3 s: the gateway hangs up on the first at 1 MiB, well before; the second's head goes out at once.
    c.providers['runs-on-openai'] = {
      protocol: 'openai',
      base_url: `${runsOnUrl}/v1`,
      key_env: 'FAREBOX_SIM_KEY',
      max_duration_ms: 3_000,
    };
    c.providers['gives-up-openai'] = { protocol: 'openai', base_url: `${givesUpUrl}/v1`, key_env: 'FAREBOX_SIM_KEY' };
    // The simulator, cut by the gateway at 6 s (its 35 MB image starts well before).
    c.providers['sim-openai-short'] = { ...c.providers['sim-openai']!, max_duration_ms: 6_000 };
    // The operator declares every class for both; the provider answers a 256x256 image whatever is asked.
    const all = { sizes: ['1K', '2K', '4K'], aspect_ratios: ['1:1', '16:9'] };
    const classes = { '1K': '0.10', '2K': '0.20', '4K': '0.30' };
    const image: Record<string, typeof classes> = {};
    for (const [id, provider] of [
      ['img-slow-g', 'slow-gemini'],
      ['img-slow-o', 'slow-openai'],
      ['img-short-g', 'short-gemini'],
      ['img-short-o', 'short-openai'],
      ['img-breaks-g', 'breaks-gemini'],
      ['img-breaks-o', 'breaks-openai'],
      ['img-runs-on-o', 'runs-on-openai'],
      ['img-gives-up-o', 'gives-up-openai'],
    ]) {
      c.models.push({ id, family: 'img', provider, ...all } as never);
      image[id] = classes;
    }
    c.models.push({
      ...(c.models as { id: string }[]).find((m) => m.id === 'img-2')!,
      id: 'img-2-short',
      provider: 'sim-openai-short',
    } as never);
    image['img-2-short'] = classes;
    c.prices = { image };
    c.limits = { families: { img: { key: { rpm: 1000, tpm: 1 } } } };
  },
});
t.teardown(async () => {
  await h.close();
  slow.close();
  breaks.close();
  runsOn.close();
  givesUp.close();
  await closeDevChains();
});
await h.fund('chain_a', 20_000_000n);

const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const listed = publishPrices(h.config.prices).image;
const price = (model: string, size: string) => parseUsd(listed[model]![size as '1K']);
const available = async () => (await readWallet(h.redis, h.account, 'chain_a')).available;

/** The call's record once its hold is debited (or released). */
function settled(requestId: string): Promise<CallRecord> {
  return until(`record of ${requestId}`, async () => {
    const r = await getCallRecord(h.redis, requestId);
    return r && r.status !== 'held' ? r : null;
  });
}

/** The newest record once debited: for calls whose request id the caller never saw. */
async function newest(after: number): Promise<CallRecord> {
  return until('a new record', async () => {
    const [r] = await listCallRecords(h.redis, h.account, 1);
    return r && Date.parse(r.time) >= after && r.status !== 'held' ? r : null;
  });
}

t.test('a delivered image costs exactly its listed price; the record says images 1, the size, the model', async (t) => {
  for (const [model, size, rf] of [
    ['img-pro', '1K', 'b64_json'],
    ['img-pro', '4K', 'url'],
    ['img-2', '2K', 'b64_json'],
    ['img-2', '4K', 'url'],
  ] as const) {
    const before = await available();
    const { response } = await openai.images
      .generate({ model, prompt: 'a quay', size, response_format: rf } as never)
      .withResponse();
    t.equal(response.headers.get('x-gw-billing-chain'), 'chain_a', 'the billed chain is named');
    const rec = await settled(response.headers.get('x-request-id')!);
    t.equal(rec.priceAtomic, price(model, size), `${model} ${size} ${rf}: ${listed[model]![size]} USD`);
    t.equal(response.headers.get('x-gw-price'), formatUsd(rec.priceAtomic), 'x-gw-price says it');
    t.equal(rec.held, price(model, size), 'held at one image of that size');
    t.match(rec, { model, size, status: /^(pending|settled)$/ });
    t.same(rec.usage, {
      input_tokens: 0,
      output_tokens: 0,
      cache_read_tokens: 0,
      cache_write_5m_tokens: 0,
      cache_write_1h_tokens: 0,
      images: 1,
      video_seconds: 0,
    });
    t.equal(before - (await available()), price(model, size), 'the wallet paid exactly that');
  }
});

t.test('an edit costs one image of its size', async (t) => {
  const before = await available();
  const image = await toFile(await referencePng(80, 80), 'a.png', { type: 'image/png' });
  const { response } = await openai.images
    .edit({ model: 'img-pro', prompt: 'dusk', image, size: '2K' } as never)
    .withResponse();
  const rec = await settled(response.headers.get('x-request-id')!);
  t.equal(rec.priceAtomic, price('img-pro', '2K'));
  t.equal(response.headers.get('x-gw-price'), formatUsd(rec.priceAtomic), 'x-gw-price says it');
  t.equal(before - (await available()), price('img-pro', '2K'));
});

t.test('refusals and provider failures cost nothing', async (t) => {
  for (const [model, prompt, status] of [
    ['img-pro', 'x #sim:image=refuse', 400],
    ['img-pro', 'x #sim:image=refuse_output', 400],
    ['img-2', 'x #sim:image=refuse', 400],
    ['img-pro', 'x #sim:status=500', 502],
    ['img-2', 'x #sim:status=502', 502],
    ['img-pro', 'x #sim:hangup_after=40', 502],
  ] as const) {
    for (const rf of ['b64_json', 'url']) {
      const before = await available();
      const e = (await openai.images
        .generate({ model, prompt, size: '4K', response_format: rf } as never)
        .catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
      t.equal(e.status, status, `${model} ${prompt} ${rf}`);
      const rec = await settled(e.headers!.get('x-request-id')!);
      t.match(rec, { status: 'free', priceAtomic: 0n, held: price(model, '4K') }, 'held, then released');
      t.equal(e.headers!.get('x-gw-price'), '0.000000', 'and the error says it costs nothing');
      t.equal(await available(), before, 'the wallet is whole');
    }
  }
});

t.test('bad input, through the SDK, is refused before any hold: 400, no record, the wallet untouched', async (t) => {
  const w0 = await readWallet(h.redis, h.account, 'chain_a');
  const records0 = (await listCallRecords(h.redis, h.account, 1000)).length;
  const generations: [Record<string, unknown>, string][] = [
    [{ model: 'img-9', prompt: 'p' }, 'model'],
    [{ model: 'gamma-k3', prompt: 'p' }, 'model'],
    [{ model: 'img-pro', prompt: ' ' }, 'prompt'],
    [{ model: 'img-pro', prompt: 'p', size: '8K' }, 'size'],
    [{ model: 'img-2', prompt: 'p', aspect_ratio: '2:1' }, 'aspect_ratio'],
    [{ model: 'img-2', prompt: 'p', n: 2 }, 'n'],
    [{ model: 'img-pro', prompt: 'p', response_format: 'png' }, 'response_format'],
    [{ model: 'img-pro', prompt: 'p', tools: [{ google_search: {} }] }, 'tools'],
  ];
  for (const [body, param] of generations) {
    const e = await openai.images.generate(body as never).catch((x: unknown) => x);
    t.ok(
      e instanceof OpenAI.BadRequestError && e.param === param,
      `generate ${JSON.stringify(body)}: 400 naming ${param}`,
    );
  }
  const ref = await toFile(await referencePng(64, 48), 'ref.png', { type: 'image/png' });
  const gif = await toFile(Buffer.from('GIF89a' + 'x'.repeat(64), 'latin1'), 'ref.png', { type: 'image/png' });
  // Cut inside its header: refused from the header, before the hold (data cut after a whole header is found by the
  // decode after the hold: test/billing/reference-decodes.test.ts).
  const cut = await toFile((await referencePng(64, 48)).subarray(0, 30), 'ref.png', { type: 'image/png' });
  const fifteen = await Promise.all(
    Array.from({ length: 15 }, (_, i) => toFile(png, `r${i}.png`, { type: 'image/png' })),
  );
  const edits: [Record<string, unknown>, string][] = [
    [{ model: 'img-pro', prompt: 'p', image: gif }, 'a GIF'],
    [{ model: 'img-pro', prompt: 'p', image: cut }, 'a PNG cut inside its header'],
    [{ model: 'img-2', prompt: 'p', image: fifteen }, '15 images'],
    [{ model: 'img-2', image: ref }, 'no prompt'],
    [{ model: 'img-2', prompt: 'p', image: ref, size: '3K' }, 'a bad size'],
  ];
  for (const [body, what] of edits) {
    const e = await openai.images.edit(body as never).catch((x: unknown) => x);
    t.ok(e instanceof OpenAI.BadRequestError, `edit with ${what}: 400`);
    t.ok((e as InstanceType<typeof OpenAI.APIError>).headers?.get('x-request-id'), 'with its request id');
  }
  const w1 = await readWallet(h.redis, h.account, 'chain_a');
  t.same([w1.held, w1.pending, w1.available], [w0.held, w0.pending, w0.available], 'nothing held, nothing owed');
  t.equal((await listCallRecords(h.redis, h.account, 1000)).length, records0, 'no call record made');
});

t.test("a provider that hangs up inside the image: the caller's answer is cut, and free", async (t) => {
  for (const model of ['img-pro', 'img-2']) {
    const before = await available();
    const res = await fetch(`${h.url}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'x #sim:hangup_after=5000', size: '4K' }),
    });
    t.equal(res.status, 200, 'the image had begun');
    await t.rejects(res.text());
    t.match(await settled(res.headers.get('x-request-id')!), { status: 'free', priceAtomic: 0n });
    t.equal(await available(), before);
  }
});

t.test('a caller who leaves before the image began pays nothing; once it began, the image is paid for', async (t) => {
  for (const model of ['img-pro', 'img-2']) {
    // Gone while the provider renders.
    for (const rf of ['b64_json', 'url']) {
      const before = await available();
      const started = Date.now();
      const ac = new AbortController();
      const call = fetch(`${h.url}/v1/images/generations`, {
        method: 'POST',
        signal: ac.signal,
        headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'x #sim:delay_ms=800', response_format: rf }),
      });
      setTimeout(() => ac.abort(), 300);
      await t.rejects(call);
      t.match(
        await newest(started),
        { model, status: 'free', priceAtomic: 0n },
        `${model} ${rf}: gone before the answer`,
      );
      t.equal(await available(), before);
    }
  }
  for (const model of ['img-slow-g', 'img-slow-o']) {
    // Gone with FIRST_IMAGE_CHARS (600) of the image's base64 handed over: under the 1,024 that are free.
    let before = await available();
    let ac = new AbortController();
    let res = await fetch(`${h.url}/v1/images/generations`, {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'x' }),
    });
    t.equal(res.status, 200);
    const first = await res.body!.getReader().read();
    t.ok(first.value!.length < 1024 + 100, "the answer's head and 600 characters of the image");
    ac.abort();
    t.match(
      await settled(res.headers.get('x-request-id')!),
      { status: 'free', priceAtomic: 0n },
      `${model}: gone with 600 characters of the image`,
    );
    t.equal(await available(), before);
    // Gone after the next piece: 2,600 characters of the image had gone out.
    before = await available();
    ac = new AbortController();
    res = await fetch(`${h.url}/v1/images/generations`, {
      method: 'POST',
      signal: ac.signal,
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'x' }),
    });
    const reader = res.body!.getReader();
    let got = 0;
    while (got < 2_000) got += (await reader.read()).value!.length;
    ac.abort();
    t.match(
      await settled(res.headers.get('x-request-id')!),
      { status: /^(pending|settled)$/, priceAtomic: 100_000n },
      `${model}: gone mid-image, charged its 1K price`,
    );
    t.equal(before - (await available()), 100_000n, 'the wallet paid it');
  }
});

/** Over a raw socket: send a generation, read the answer's head and `readBytes` of its body, then hang up unread. */
function stallAndLeave(body: Record<string, unknown>, readBytes: number): Promise<{ head: string; read: number }> {
  return new Promise((resolve, reject) => {
    const json = JSON.stringify(body);
    const socket = connect(Number(new URL(h.url).port), '127.0.0.1');
    let head = '';
    let read = 0;
    let buffered = Buffer.alloc(0);
    socket.on('error', reject);
    socket.on('data', (chunk: Buffer) => {
      if (head === '') {
        buffered = Buffer.concat([buffered, chunk]);
        const end = buffered.indexOf('\r\n\r\n');
        if (end < 0) return;
        head = buffered.toString('latin1', 0, end);
        read = buffered.length - end - 4;
      } else {
        read += chunk.length;
      }
      if (read >= readBytes) {
        // Stops reading with the rest of the answer in the sockets' buffers and beyond, and leaves.
        socket.pause();
        socket.destroy();
        resolve({ head, read });
      }
    });
    socket.write(
      `POST /v1/images/generations HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${h.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(json)}\r\n\r\n${json}`,
    );
  });
}

t.test(
  'a reader that stalls and hangs up on an answer larger than the socket buffers pays for the image it was given',
  async (t) => {
    for (const [model, size] of [
      ['img-2', '4K'],
      ['img-pro', '2K'],
    ] as const) {
      const before = await available();
      // The simulator's grainy image: a PNG the size of a photograph's (2880x2880: about 26 MB, 35 MB of base64).
      const { head, read } = await stallAndLeave({ model, prompt: 'a quay #sim:image=detailed', size }, 256 * 1024);
      t.match(head, /^HTTP\/1\.1 200 /);
      const length = /content-length: (\d+)/i.exec(head);
      if (model === 'img-2')
        t.ok(Number(length![1]) > 16 * 1024 * 1024, 'the answer is far larger than what the sockets buffer');
      t.ok(read < 1024 * 1024, 'the caller read a sliver of it');
      const id = /x-request-id: (\S+)/i.exec(head)![1]!;
      t.match(
        await settled(id),
        { model, size, status: /^(pending|settled)$/, priceAtomic: price(model, size) },
        `${model} ${size}: charged its listed price`,
      );
      t.equal(before - (await available()), price(model, size), 'the wallet paid for the image');
    }
  },
);

t.test('a wallet that cannot cover one image of that size: 402, the provider never called', async (t) => {
  const poor = await startHarness({ chains: true });
  t.teardown(() => poor.close());
  await poor.fund('chain_a', price('img-pro', '4K') - 1n);
  const o = new OpenAI({ baseURL: `${poor.url}/v1`, apiKey: poor.key, maxRetries: 0 });
  const calls = poor.sim.received.length;
  const e = (await o.images
    .generate({ model: 'img-pro', prompt: 'x', size: '4K' } as never)
    .catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
  t.equal(e.status, 402);
  t.match(e.error, { code: 'insufficient_funds', message: /needs up to 0\.240000 USD/ });
  t.equal(poor.sim.received.length, calls);
  const ok = await o.images.generate({ model: 'img-pro', prompt: 'x', size: '2K' } as never).withResponse();
  t.equal(ok.response.status, 200, 'a 2K image fits the same wallet');
});

t.test('the slow provider, read whole: charged, so the mid-image cases above were the caller leaving', async (t) => {
  for (const model of ['img-slow-g', 'img-slow-o']) {
    const { response } = await openai.images.generate({ model, prompt: 'x' } as never).withResponse();
    t.equal((await settled(response.headers.get('x-request-id')!)).priceAtomic, 100_000n, 'its 1K price');
  }
});

t.test(
  'a provider that renders a smaller image than asked: billed at the class of the pixels delivered, never the one asked',
  async (t) => {
    for (const model of ['img-slow-g', 'img-slow-o']) {
      const before = await available();
      const { response } = await openai.images
        .generate({ model, prompt: 'x', size: '4K', aspect_ratio: '16:9' } as never)
        .withResponse();
      const rec = await settled(response.headers.get('x-request-id')!);
      t.match(
        rec,
        { size: '1K', priceAtomic: 100_000n, held: 300_000n },
        `${model}: held at 4K, its 256x256 image billed at 1K`,
      );
      t.equal(response.headers.get('x-gw-price'), '0.100000', 'x-gw-price names the class billed, not the one asked');
      t.equal(before - (await available()), 100_000n);
    }
  },
);

t.test(
  'an image call counts one request against the rate limits and no tokens (the img family allows 1 token a minute)',
  async (t) => {
    const g = await startHarness({
      chains: true,
      edit: (c) => {
        c.limits = { families: { img: { key: { rpm: 2, tpm: 1 } } } };
      },
    });
    t.teardown(() => g.close());
    await g.fund('chain_a', 1_000_000n);
    const o = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: g.key, maxRetries: 0 });
    const first = await o.images.generate({ model: 'img-2', prompt: 'x' } as never).withResponse();
    t.equal(first.response.headers.get('x-ratelimit-limit-requests'), '2');
    t.equal(first.response.headers.get('x-ratelimit-remaining-requests'), '1');
    await o.images.generate({ model: 'img-2', prompt: 'x' } as never);
    const third = (await o.images
      .generate({ model: 'img-2', prompt: 'x' } as never)
      .catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
    t.equal(third.status, 429);
    t.equal(third.error && (third.error as { code: string }).code, 'rate_limited');
  },
);

t.test(
  'a provider that breaks off after the whole image string: the caller holds the image, and pays for it',
  async (t) => {
    for (const model of ['img-breaks-g', 'img-breaks-o']) {
      const before = await available();
      const res = await fetch(`${h.url}/v1/images/generations`, {
        method: 'POST',
        headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'x' }),
      });
      t.equal(res.status, 200);
      const text = await res.text().catch(() => null);
      const b64 = png.toString('base64');
      if (model === 'img-breaks-g') t.equal(JSON.parse(text!).data[0].b64_json, b64, 'Gemini: the answer is closed');
      else t.equal(text, null, 'OpenAI: the answer is cut after the image');
      t.match(
        await settled(res.headers.get('x-request-id')!),
        { status: /^(pending|settled)$/, priceAtomic: 100_000n },
        `${model}: charged its 1K price`,
      );
      t.equal(before - (await available()), 100_000n);
    }
  },
);

t.test(
  'a provider whose answer runs on without its image: a 502 past 1 MiB, free, the provider hung up on',
  async (t) => {
    const before = await available();
    const err = (await openai.images
      .generate({ model: 'img-runs-on-o', prompt: 'x' })
      .catch((x: unknown) => x)) as InstanceType<typeof OpenAI.APIError>;
    t.equal(err.status, 502);
    t.equal((err.error as { code?: string } | undefined)?.code, 'upstream_error');
    t.ok(err.headers?.get('x-request-id'), 'with its request id');
    const sent = await runsOnClosed;
    t.ok(sent >= 1024 * 1024 && sent < 8 * 1024 * 1024, `the provider's connection closed after ${sent} bytes`);
    t.match(await settled(err.headers!.get('x-request-id')!), { status: 'free', priceAtomic: 0n });
    t.equal(await available(), before);
  },
);

t.test(
  'a whole image its header does not size, then an answer that runs on: the head goes out, not held',
  async (t) => {
    t.ok(unsized.toString('base64').length > 1024, 'more of an image than is free');
    const before = await available();
    const res = await fetch(`${h.url}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'img-runs-on-o', prompt: 'unsized' }),
    });
    t.equal(res.status, 200, 'answered once the string closed, not at the 3 s cut');
    t.equal(res.headers.get('x-gw-price'), '0.100000', 'priced at the class asked for');
    await t.rejects(res.text(), "cut at the call's time");
    t.match(
      await settled(res.headers.get('x-request-id')!),
      { status: /^(pending|settled)$/, priceAtomic: 100_000n },
      'the caller holds the whole image: charged, as after any image whose string closed',
    );
    t.equal(before - (await available()), 100_000n);
  },
);

t.test("the call's time running out while its caller reads: a cut image, free", async (t) => {
  for (const model of ['img-short-g', 'img-short-o']) {
    const before = await available();
    const res = await fetch(`${h.url}/v1/images/generations`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'x' }),
    });
    t.equal(res.status, 200, 'the image had begun');
    await t.rejects(res.text(), 'the answer is cut');
    t.match(await settled(res.headers.get('x-request-id')!), { status: 'free', priceAtomic: 0n }, model);
    t.equal(await available(), before);
  }
});

/**
 * Over a raw socket: send a generation, read its answer's head and 256 KiB of its body, then stop reading with the
 * connection open (closed at the test's end). Resolves with the head.
 */
const stalledSockets: Socket[] = [];

async function stallOpen(t: Test, body: Record<string, unknown>): Promise<string> {
  const json = JSON.stringify(body);
  const socket = connect(Number(new URL(h.url).port), '127.0.0.1');
  t.teardown(() => socket.destroy());
  stalledSockets.push(socket);
  return new Promise<string>((resolve, reject) => {
    let buffered = Buffer.alloc(0);
    socket.on('error', reject);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end >= 0 && buffered.length - end > 256 * 1024) {
        socket.off('data', onData);
        socket.pause();
        resolve(buffered.toString('latin1', 0, end));
      }
    };
    socket.on('data', onData);
    // An answer that ends first (a refusal, a cut before the image) fails the test now, not at its timeout.
    socket.once('end', () => reject(new Error(`the answer ended first: ${buffered.toString('latin1', 0, 300)}`)));
    socket.write(
      `POST /v1/images/generations HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${h.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(json)}\r\n\r\n${json}`,
    );
  });
}

t.test("the call's time running out while its caller does not read: what it was handed is paid for", async (t) => {
  const before = await available();
  const charged = price('img-2-short', '4K');
  // The 35 MB answer: its caller reads 256 KiB and stops, connection open, until the gateway cuts the call at 6 s.
  const head = await stallOpen(t, { model: 'img-2-short', prompt: 'a quay #sim:image=detailed', size: '4K' });
  t.match(head, /^HTTP\/1\.1 200 /);
  const id = /x-request-id: (\S+)/i.exec(head)![1]!;
  t.match(
    await settled(id),
    { status: /^(pending|settled)$/, priceAtomic: charged },
    'cut at its time with the caller holding the provider back: charged',
  );
  t.equal(before - (await available()), charged);
});

t.test(
  'a caller that stops reading mid-image until the provider gives up on it pays for what it was handed, though it reads the rest',
  async (t) => {
    const before = await available();
    const charged = price('img-gives-up-o', '1K');
    const head = await stallOpen(t, { model: 'img-gives-up-o', prompt: 'x', response_format: 'b64_json' });
    const stalled = Date.now();
    t.match(head, /^HTTP\/1\.1 200 /);
    const id = /x-request-id: (\S+)/i.exec(head)![1]!;
    await gaveUp;
    // The stall's length is what is tested: no event can stand for it.
    await new Promise((r) => setTimeout(r, Math.max(0, CALLER_STALL_MS + 500 - (Date.now() - stalled))));
    // The caller reads again, and keeps up: it gets what the buffers held, then the cut.
    const socket = stalledSockets.at(-1)!;
    const closed = new Promise((resolve) => socket.once('close', resolve));
    socket.on('data', () => {});
    socket.resume();
    await closed;
    t.match(await settled(id), { status: /^(pending|settled)$/, priceAtomic: charged }, 'charged');
    t.equal(before - (await available()), charged);
  },
);
