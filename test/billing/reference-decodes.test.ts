// Reference images cost the gateway a full decode only once the call's hold is placed (README "Images", "Videos",
// "How a call moves"): before the gate only headers are read, so an account without funds cannot make the gateway
// decode anything; a corrupt image found by the decode is a 400 that releases the hold. Through the official SDK;
// the decodes are read from farebox_image_decode_seconds, the money from the wallet and the call records.
import t from 'tap';
import { crc32, deflateSync } from 'node:zlib';
import OpenAI, { toFile } from 'openai';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { getCallRecord, listCallRecords, type CallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { publishPrices, parseUsd } from '../../pricing/index.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { referencePng } from '../helpers/media.js';
import { until } from '../helpers/wait.js';

const h = await startHarness({ chains: true });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 20_000_000n);
const poor = await createAccount(h.redis, {});
const poorKey = (await createKey(h.redis, poor.address)).key;

const sdk = (key: string) => new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
const funded = sdk(h.key);
const unfunded = sdk(poorKey);
const listed = publishPrices(h.config.prices);
const wallet = () => readWallet(h.redis, h.account, 'chain_a');
/** Requests that reached a provider, polls of video jobs aside. */
const posts = () => h.sim.received.filter((r) => r.method === 'POST').length;

/** Full decodes the gateway ran for `endpoint` so far. */
async function decodes(endpoint: 'image_edits' | 'videos'): Promise<number> {
  const m = await h.metrics.imageDecode.get();
  return (
    m.values.find((v) => v.metricName === 'farebox_image_decode_seconds_count' && v.labels.endpoint === endpoint)
      ?.value ?? 0
  );
}

function chunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length);
  head.write(type, 4, 'latin1');
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])));
  return Buffer.concat([head, data, crc]);
}

/**
 * A whole black PNG of `width` x `height`, 1 bit a pixel: rows of zeros deflate to almost nothing, so 8192 x 8192
 * (the edit limit, 64 megapixels) is about 8 KB on the wire and hundreds of milliseconds to decode.
 */
function blackPng(width: number, height: number): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([1, 0, 0, 0, 0], 8);
  const rows = Buffer.alloc((Math.ceil(width / 8) + 1) * height);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(rows, { level: 9 })),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

const huge = blackPng(8192, 8192);
// Under the video references' 40 megapixels.
const large = blackPng(6000, 6000);
const files = (bytes: Buffer, n: number) =>
  Promise.all(Array.from({ length: n }, (_, i) => toFile(bytes, `ref-${i}.png`, { type: 'image/png' })));

async function refusal(call: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const e = await call.then(
    () => null,
    (err: unknown) => err,
  );
  if (!(e instanceof OpenAI.APIError)) throw new Error(`expected a refusal, got ${String(e)}`);
  return e;
}

/** The record of a call once its hold is closed. */
function closed(requestId: string): Promise<CallRecord> {
  return until(`record of ${requestId}`, async () => {
    const r = await getCallRecord(h.redis, requestId);
    return r && r.status !== 'held' ? r : null;
  });
}

t.test(
  'an account with no funds sends 14 images of 64 megapixels: 402, and the gateway decoded none of them',
  async (t) => {
    t.ok(huge.length < 20_000, `the image is ${huge.length} bytes`);
    const calls = posts();
    const cpu = process.cpuUsage();
    const edit = await refusal(
      unfunded.images.edit({ model: 'img-pro', prompt: 'dusk', image: await files(huge, 14) } as never),
    );
    t.same([edit.status, edit.code], [402, 'insufficient_funds'], 'images.edit');
    const video = await refusal(
      unfunded.videos.create({
        model: 'vidB-2.5',
        prompt: 'a quay',
        seconds: '5',
        input_reference: await files(large, 14),
      } as never),
    );
    t.same([video.status, video.code], [402, 'insufficient_funds'], 'videos.create');
    const used = process.cpuUsage(cpu);
    t.equal(await decodes('image_edits'), 0, 'no edit image decoded');
    t.equal(await decodes('videos'), 0, 'no video reference decoded');
    // The refusals cost reading the uploads and their headers: decoding 28 images this size takes seconds of CPU.
    t.ok(
      used.user + used.system < 1_000_000,
      `the two refusals took ${((used.user + used.system) / 1000).toFixed(0)} ms of CPU`,
    );
    t.equal(posts(), calls, 'no provider was called');
  },
);

t.test('what the headers refuse is refused before the hold, naming the image, with nothing decoded', async (t) => {
  const w0 = await wallet();
  const records = (await listCallRecords(h.redis, h.account, 1000)).length;
  const small = await referencePng(64, 48);
  const badCrc = Buffer.from(small);
  badCrc[29] ^= 0xff;
  const edits: [Buffer[], RegExp][] = [
    [[small, blackPng(8193, 8192)], /^image 2: 8193x8192 is over 8192 x 8192 pixels\.$/],
    [[badCrc], /^image 1: its PNG header cannot be read\.$/],
    [[small.subarray(0, 30)], /^image 1: its PNG header cannot be read\.$/],
  ];
  for (const [images, message] of edits) {
    const e = await refusal(
      funded.images.edit({
        model: 'img-2',
        prompt: 'p',
        image: await Promise.all(images.map((b) => toFile(b, 'a.png', { type: 'image/png' }))),
      } as never),
    );
    t.same([e.status, e.code, e.param], [400, 'invalid_reference_image', 'image'], String(message));
    t.match((e.error as { message: string }).message, message);
  }
  const videos: [Buffer, RegExp][] = [
    [huge, /^input_reference 1: 8192x8192 is over 40 megapixels\.$/],
    [badCrc, /^input_reference 1: its PNG header cannot be read\.$/],
  ];
  for (const [image, message] of videos) {
    const e = await refusal(
      funded.videos.create({
        model: 'vidA-v6',
        prompt: 'p',
        seconds: '4',
        input_reference: await toFile(image, 'a.png', { type: 'image/png' }),
      } as never),
    );
    t.same([e.status, e.code], [400, 'invalid_reference_image'], String(message));
    t.match((e.error as { message: string }).message, message);
  }
  t.equal((await decodes('image_edits')) + (await decodes('videos')), 0, 'nothing decoded');
  const w1 = await wallet();
  t.same([w1.held, w1.pending, w1.available], [w0.held, w0.pending, w0.available], 'nothing held, nothing owed');
  t.equal((await listCallRecords(h.redis, h.account, 1000)).length, records, 'no call record');
});

t.test(
  'a corrupt image (a whole header, its data cut) from a funded account: 400 after the hold, the hold released',
  async (t) => {
    const png = await referencePng(64, 48);
    const cut = png.subarray(0, png.length - 40);
    const calls = posts();
    const before = await wallet();

    const editDecodes = await decodes('image_edits');
    const edit = await refusal(
      funded.images.edit({
        model: 'img-pro',
        prompt: 'p',
        size: '2K',
        image: [await toFile(png, 'a.png', { type: 'image/png' }), await toFile(cut, 'b.png', { type: 'image/png' })],
      } as never),
    );
    t.same([edit.status, edit.code, edit.param], [400, 'invalid_reference_image', 'image']);
    t.match(
      (edit.error as { message: string }).message,
      /^image 2 is not a whole PNG image: it is truncated or cannot be decoded\.$/,
    );
    t.equal(edit.headers!.get('x-gw-billing-chain'), 'chain_a', 'the hold had been placed');
    t.equal(await decodes('image_edits'), editDecodes + 2, 'both images decoded, after the hold');
    t.match(
      await closed(edit.headers!.get('x-request-id')!),
      { status: 'free', priceAtomic: 0n, held: parseUsd(listed.image['img-pro']!['2K']) },
      'held, then released',
    );
    // The corrupt one first: its refusal ends the call's decodes, so the whole ones after it cost nothing.
    const first = await decodes('image_edits');
    const early = await refusal(
      funded.images.edit({
        model: 'img-pro',
        prompt: 'p',
        image: [await toFile(cut, 'a.png', { type: 'image/png' }), ...(await files(png, 5))],
      } as never),
    );
    t.match((early.error as { message: string }).message, /^image 1 is not a whole PNG image/);
    t.equal(await decodes('image_edits'), first + 1, 'decoding stopped at the first bad image');

    const videoDecodes = await decodes('videos');
    const video = await refusal(
      funded.videos.create({
        model: 'vidA-v6',
        prompt: 'p',
        seconds: '8',
        input_reference: await toFile(cut, 'a.png', { type: 'image/png' }),
      } as never),
    );
    t.same([video.status, video.code, video.param], [400, 'invalid_reference_image', 'input_reference']);
    t.match((video.error as { message: string }).message, /^input_reference 1: /);
    t.equal(video.headers!.get('x-gw-billing-chain'), 'chain_a', 'the hold had been placed');
    t.equal(await decodes('videos'), videoDecodes + 1, 'decoded after the hold');
    t.match(
      await closed(video.headers!.get('x-request-id')!),
      { status: 'free', priceAtomic: 0n, held: parseUsd(listed.video['vidA-v6']!['8']!) },
      'held, then released',
    );

    t.equal(posts(), calls, 'no provider was called');
    const after = await wallet();
    t.same(
      [after.held, after.pending, after.available],
      [before.held, before.pending, before.available],
      'the wallet is whole',
    );
  },
);

t.test(
  'a caller who leaves while its references are decoded: the call is finished free and never forwarded',
  async (t) => {
    const calls = posts();
    const before = await wallet();
    const started = Date.now();
    const decoded = await decodes('videos');
    const ac = new AbortController();
    const submit = funded.videos.create(
      { model: 'vidB-2.5', prompt: 'p', seconds: '5', input_reference: await files(large, 6) } as never,
      { signal: ac.signal },
    );
    const gone = submit.then(
      () => null,
      (err: unknown) => err,
    );
    // Held, and decoding: the first of the six decodes has ended; they run one at a time.
    await until('a first decode', async () => (await decodes('videos')) > decoded);
    ac.abort();
    t.ok((await gone) instanceof OpenAI.APIUserAbortError, 'the caller left');
    const rec = await until('the record released', async () => {
      const [r] = await listCallRecords(h.redis, h.account, 1);
      return r && Date.parse(r.time) >= started - 1000 && r.status !== 'held' ? r : null;
    });
    t.match(rec, {
      model: 'vidB-2.5',
      status: 'free',
      priceAtomic: 0n,
      held: parseUsd(listed.video['vidB-2.5']!['5']!),
    });
    // The decode running when the caller left ends; none starts after it.
    t.ok((await decodes('videos')) < decoded + 6, 'the decodes stopped with their caller: fewer than its six ran');
    t.equal(posts(), calls, 'the provider never saw the job');
    const after = await wallet();
    t.same(
      [after.held, after.pending, after.available],
      [before.held, before.pending, before.available],
      'the wallet is whole',
    );
  },
);

t.test('a funded call with whole images: each decoded once after the hold, then forwarded and charged', async (t) => {
  const editDecodes = await decodes('image_edits');
  const { response } = await funded.images
    .edit({ model: 'img-2', prompt: 'p', image: await files(await referencePng(64, 48), 3) } as never)
    .withResponse();
  t.equal(await decodes('image_edits'), editDecodes + 3);
  t.match(await closed(response.headers.get('x-request-id')!), { priceAtomic: parseUsd(listed.image['img-2']!['1K']) });
  const videoDecodes = await decodes('videos');
  const v = await funded.videos.create({
    model: 'vidA-v6',
    prompt: 'p #sim:video=fail',
    seconds: '4',
    input_reference: await toFile(await referencePng(64, 48), 'a.png', { type: 'image/png' }),
  } as never);
  t.equal(v.status, 'in_progress');
  t.equal(await decodes('videos'), videoDecodes + 1);
  const text = await funded.videos.create({ model: 'vidA-v6', prompt: 'p #sim:video=fail', seconds: '4' });
  t.equal(text.status, 'in_progress', 'a submit without references has nothing to decode');
  t.equal(await decodes('videos'), videoDecodes + 1);
});
