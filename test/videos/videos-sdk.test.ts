// Video jobs end to end through the official openai SDK (videos.create, videos.retrieve, videos.downloadContent) on
// the embedded default's models, billed on dev chains: jobs that complete (an MP4 of the right size and length,
// charged the listed price once), fail (free), are refused by the provider (free), every validation row, visibility.
import t from 'tap';
import OpenAI from 'openai';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { getCallRecord } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import { DEFAULT_PRICES, formatUsd } from '../../pricing/index.js';
import { closeDevChains } from '../helpers/harness.js';
import { probe, referencePng } from '../helpers/media.js';
import { until } from '../helpers/wait.js';
import { createAndPoll, sdk, submitForm, videoHarness, videoSchemaErrors } from './helpers.js';

const h = await videoHarness({ chains: true, renderMs: 400 });
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 20_000_000n);
const openai = sdk(h);
const usd = (s: string) => BigInt(Math.round(Number(s) * 1e6));
/** Submits the simulator received (the poller's GETs go on beside the tests). */
const submits = () => h.sim.received.filter((r) => r.method === 'POST').length;

/** What a call record says once its debit is done (not held). */
async function settledRecord(requestId: string) {
  return until(`record of ${requestId} out of held`, async () => {
    const r = await getCallRecord(h.redis, requestId);
    return r && r.status !== 'held' ? r : null;
  });
}

t.test(
  'a clip completes: in_progress at once, then completed; the MP4 has the size and length asked; charged the listed price',
  async (t) => {
    const before = await readWallet(h.redis, h.account, 'chain_a');
    const { seen, requestId, chain } = await createAndPoll(openai, {
      model: 'vidA-v6',
      prompt: 'A lighthouse at dusk',
      seconds: '8',
      size: '720x1280',
    });
    const [submitted, ...polls] = seen;
    t.equal(chain, 'chain_a', 'x-gw-billing-chain on the submit');
    t.equal(submitted!.status, 'in_progress', 'the submit answers at once, in progress');
    t.match(submitted!.id, /^video_[0-9a-f]{32}$/);
    t.same(new Set(seen.map((v) => v.status)), new Set(['in_progress', 'completed']));
    for (const v of seen) t.same(videoSchemaErrors(v), [], `${v.status}: conforms to OpenAI's VideoResource`);
    const done = polls.at(-1)!;
    t.same(
      [done.status, done.progress, done.model, done.seconds, done.size, done.prompt],
      ['completed', 100, 'vidA-v6', '8', '720x1280', 'A lighthouse at dusk'],
    );
    t.ok(
      done.completed_at! >= done.created_at && done.expires_at! > done.completed_at!,
      'completed_at, then expires_at',
    );
    t.notOk(
      seen.some((v) => (v.status as string) === 'queued'),
      'states are exactly in_progress, completed, failed',
    );

    const { response: polled } = await openai.videos.retrieve(done.id).withResponse();
    t.equal(polled.headers.get('x-gw-billing-chain'), 'chain_a', "polls name the job's chain");
    const res = await openai.videos.downloadContent(done.id);
    t.equal(res.headers.get('content-type'), 'video/mp4');
    t.equal(res.headers.get('x-gw-billing-chain'), 'chain_a');
    const clip = await probe(Buffer.from(await res.arrayBuffer()));
    t.same([clip.codec, clip.width, clip.height], ['h264', 720, 1280]);
    t.ok(Math.abs(clip.duration - 8) < 0.1, `8 s long (${clip.duration})`);

    const record = await settledRecord(requestId);
    t.equal(record.priceAtomic, usd(DEFAULT_PRICES.video['vidA-v6']!['8']!), 'the listed price of an 8 s vidA-v6 clip');
    t.equal(record.usage.video_seconds, 8);
    t.equal(record.model, 'vidA-v6');
    t.equal(record.owner, `job:${done.id}`, 'the hold belonged to the job');
    t.equal(record.late, false);
    const after = await readWallet(h.redis, h.account, 'chain_a');
    t.equal(after.held, before.held, 'nothing left held');
    // The price in the job object is the debit, to the atomic unit: the record's and the wallet's change.
    const priced = (v: unknown) => v as { price: string | null; price_atomic: string | null };
    t.same([priced(submitted).price, priced(submitted).price_atomic], [null, null], 'no price while it renders');
    t.equal(priced(done).price, formatUsd(record.priceAtomic), "the completed job's price is the record's");
    t.equal(priced(done).price_atomic, record.priceAtomic.toString());
    t.equal(
      priced(done).price,
      formatUsd(before.synced - after.synced + after.pending - before.pending),
      'the wallet paid it',
    );
  },
);

t.test('byte ranges: 206 with Content-Range, 416 outside the clip', async (t) => {
  const { seen } = await createAndPoll(openai, { model: 'vidA-v6', prompt: 'ranges', seconds: '4', size: '1280x720' });
  const id = seen.at(-1)!.id;
  const whole = Buffer.from(await (await openai.videos.downloadContent(id)).arrayBuffer());
  const part = await fetch(`${h.url}/v1/videos/${id}/content`, {
    headers: { authorization: `Bearer ${h.key}`, range: 'bytes=100-1099' },
  });
  t.equal(part.status, 206);
  t.equal(part.headers.get('content-range'), `bytes 100-1099/${whole.length}`);
  t.equal(part.headers.get('content-type'), 'video/mp4');
  t.same(Buffer.from(await part.arrayBuffer()), whole.subarray(100, 1100));
  const past = await fetch(`${h.url}/v1/videos/${id}/content`, {
    headers: { authorization: `Bearer ${h.key}`, range: `bytes=${whole.length + 10}-` },
  });
  t.equal(past.status, 416);
  t.equal(((await past.json()) as { error: { code: string } }).error.code, 'invalid_range');
});

t.test('vidC through the Gemini long-running protocol, with its required starting frame', async (t) => {
  const frame = await referencePng(320, 240);
  const { seen, requestId } = await createAndPoll(openai, {
    model: 'vidC-3',
    prompt: 'The camera slowly pulls back',
    seconds: '5' as never,
    size: '640x480' as never,
    input_reference: await OpenAI.toFile(frame, 'frame.png', { type: 'image/png' }),
  });
  const done = seen.at(-1)!;
  t.equal(done.status, 'completed');
  const op = h.sim.received.find((r) => r.url.includes(':predictLongRunning'));
  t.ok(op, 'submitted as predictLongRunning');
  t.equal(op!.headers['x-goog-api-key'], 'sim-key', 'with the operator key');
  const clip = await probe(Buffer.from(await (await openai.videos.downloadContent(done.id)).arrayBuffer()));
  t.same([clip.width, clip.height], [640, 480]);
  t.ok(Math.abs(clip.duration - 5) < 0.1);
  t.equal((await settledRecord(requestId)).priceAtomic, usd(DEFAULT_PRICES.video['vidC-3']!['5']!));
});

t.test('a failed job is free: its hold released, its content a 409 in the OpenAI shape', async (t) => {
  const { seen, requestId } = await createAndPoll(openai, {
    model: 'vidB-2.1',
    prompt: 'A storm #sim:video=fail',
    seconds: '12' as never,
    size: '854x480' as never,
  });
  const failed = seen.at(-1)!;
  t.equal(failed.status, 'failed');
  t.same(videoSchemaErrors(failed), []);
  t.equal(failed.error?.code, 'video_generation_failed');
  t.ok(failed.error?.message);
  const record = await settledRecord(requestId);
  t.same([record.status, record.priceAtomic], ['free', 0n], 'charged nothing');
  const priced = failed as unknown as { price: string | null; price_atomic: string | null };
  t.same([priced.price, priced.price_atomic], ['0.000000', '0'], 'and its job object says so');
  const e = await openai.videos.downloadContent(failed.id).catch((err: unknown) => err);
  t.ok(e instanceof OpenAI.APIError && e.status === 409);
  t.equal((e as InstanceType<typeof OpenAI.APIError>).code, 'video_failed');
});

t.test(
  'content before completion is a clear 409, not retried; polls of another account or unknown ids are 404',
  async (t) => {
    const v = await openai.videos.create({ model: 'vidA-v6', prompt: 'slow #sim:video=fail', seconds: '4' });
    const early = await fetch(`${h.url}/v1/videos/${v.id}/content`, { headers: { authorization: `Bearer ${h.key}` } });
    t.equal(early.status, 409);
    t.equal(early.headers.get('x-should-retry'), 'false');
    const body = (await early.json()) as { error: { code: string; message: string; type: string } };
    t.same([body.error.code, body.error.type], ['video_not_ready', 'invalid_request_error']);
    t.match(body.error.message, /poll GET \/v1\/videos\//);

    const other = await createAccount(h.redis, {});
    const { key } = await createKey(h.redis, other.address);
    const stranger = sdk(h, key);
    for (const call of [
      () => stranger.videos.retrieve(v.id),
      () => stranger.videos.downloadContent(v.id),
      () => openai.videos.retrieve('video_' + '0'.repeat(32)),
      () => openai.videos.retrieve('nope'),
    ]) {
      const e = await call().catch((err: unknown) => err);
      t.ok(e instanceof OpenAI.NotFoundError, "another account's job, and unknown ids, are 404");
      t.equal((e as InstanceType<typeof OpenAI.APIError>).code, 'video_not_found');
    }
    const anon = await fetch(`${h.url}/v1/videos/${v.id}`);
    t.equal(anon.status, 401, 'polls need a key');
    // Its hold is released when the render fails: wait for it, so later tests read a wallet nothing changes under.
    await until('the job failed', async () => ((await openai.videos.retrieve(v.id)).status === 'failed' ? true : null));
  },
);

t.test('a provider refusal at submit is a 400, and free', async (t) => {
  const e = await openai.videos
    .create({ model: 'vidA-v6', prompt: 'no #sim:status=400', seconds: '4' })
    .withResponse()
    .catch((err: unknown) => err);
  t.ok(e instanceof OpenAI.BadRequestError);
  t.equal((e as InstanceType<typeof OpenAI.APIError>).code, 'upstream_invalid_request');
  const requestId = (e as InstanceType<typeof OpenAI.APIError>).requestID!;
  const record = await settledRecord(requestId);
  t.same([record.status, record.priceAtomic, record.released], ['free', 0n, null], 'released by the submit itself');
  const down = await openai.videos
    .create({ model: 'vidA-v6', prompt: 'down #sim:status=503', seconds: '4' })
    .catch((err: unknown) => err);
  t.ok(down instanceof OpenAI.APIError && down.status === 503, 'a provider failure at submit is its 5xx');
  t.equal((await settledRecord((down as InstanceType<typeof OpenAI.APIError>).requestID!)).priceAtomic, 0n);
});

t.test('an underfunded wallet is a 402 before the provider is called', async (t) => {
  const poor = await createAccount(h.redis, {});
  const { key } = await createKey(h.redis, poor.address);
  const before = submits();
  const e = await sdk(h, key)
    .videos.create({ model: 'vidA-v6', prompt: 'x', seconds: '4' })
    .catch((err: unknown) => err);
  t.ok(e instanceof OpenAI.APIError && e.status === 402);
  t.equal(submits(), before, 'the provider never saw it');
});

t.test(
  'every row of the validation table through the SDK: refused before any hold, naming what the model takes',
  async (t) => {
    const rows = {
      'vidA-v6': { sizes: ['1280x720', '720x1280'], seconds: [4, 8, 12] },
      'vidB-2.5': { sizes: ['854x480', '480x854', '1280x720', '720x1280'], seconds: [5, 8, 12, 16, 20, 24, 30] },
      'vidB-2.1': { sizes: ['854x480', '480x854', '1280x720', '720x1280'], seconds: [5, 8, 12, 16, 20, 24, 30] },
      'vidC-3': { sizes: ['640x480', '1280x720', '1920x1080'], seconds: [5, 8] },
    } as const;
    const sizes = ['1280x720', '720x1280', '854x480', '480x854', '640x480', '1920x1080'];
    const seconds = [4, 5, 8, 12, 16, 20, 24, 30];
    const frame = await referencePng(64, 48);
    const sim0 = submits();
    const wallet0 = await readWallet(h.redis, h.account, 'chain_a');
    for (const [model, row] of Object.entries(rows)) {
      const ref = model === 'vidC-3' ? [{ name: 'input_reference', bytes: frame }] : [];
      for (const size of sizes.filter((s) => !(row.sizes as readonly string[]).includes(s))) {
        const r = await submitForm(h, { model, prompt: 'p', size, seconds: String(row.seconds[0]) }, ref);
        t.same(
          [r.status, r.json.error.code, r.json.error.param],
          [400, 'unsupported_video_size', 'size'],
          `${model} ${size}`,
        );
        t.match(r.json.error.message, new RegExp(`takes size ${row.sizes.slice(0, -1).join(', ')}`));
      }
      for (const s of seconds.filter((x) => !(row.seconds as readonly number[]).includes(x))) {
        const r = await submitForm(h, { model, prompt: 'p', size: row.sizes[0], seconds: String(s) }, ref);
        t.same(
          [r.status, r.json.error.code, r.json.error.param],
          [400, 'unsupported_video_seconds', 'seconds'],
          `${model} ${s}s`,
        );
      }
    }
    // Defaults (1280x720, 4 s) are checked like any value: vidB and vidC without seconds say which values they take.
    for (const model of ['vidB-2.5', 'vidB-2.1']) {
      const e = await openai.videos.create({ model, prompt: 'p' }).catch((err: unknown) => err);
      t.ok(e instanceof OpenAI.BadRequestError, `${model} without seconds`);
      t.equal(
        (e as Error).message,
        `400 ${model} (vidB) takes seconds 5, 8, 12, 16, 20, 24 or 30; got 4 (the default).`,
      );
    }
    const c = await submitForm(h, { model: 'vidC-3', prompt: 'p' }, [{ name: 'input_reference', bytes: frame }]);
    t.same([c.status, c.json.error.message], [400, 'vidC-3 (vidC) takes seconds 5 or 8; got 4 (the default).']);
    const noFrame = await openai.videos
      .create({ model: 'vidC-3', prompt: 'p', seconds: '8' as never })
      .catch((err: unknown) => err);
    t.equal(
      (noFrame as InstanceType<typeof OpenAI.APIError>).code,
      'missing_input_reference',
      'vidC without input_reference',
    );
    // The prompt: required, at most 8,000 characters.
    const missing = await submitForm(h, { model: 'vidA-v6' }, []);
    t.same([missing.status, missing.json.error.param], [400, 'prompt']);
    const long = await openai.videos
      .create({ model: 'vidA-v6', prompt: 'x'.repeat(8001) })
      .catch((err: unknown) => err);
    t.ok(long instanceof OpenAI.BadRequestError);
    t.match((long as Error).message, /at most 8,000 characters/);
    const json = await fetch(`${h.url}/v1/videos`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'vidA-v6',
        prompt: 'p',
        input_reference: { image_url: 'data:image/png;base64,AAAA' },
      }),
    });
    t.equal(json.status, 400, 'input_reference in JSON: files go as multipart');
    const unknown = await openai.videos.create({ model: 'vidZ-1', prompt: 'p' }).catch((err: unknown) => err);
    t.equal((unknown as InstanceType<typeof OpenAI.APIError>).code, 'unknown_model');
    const text = await openai.videos.create({ model: 'gamma-k3', prompt: 'p' }).catch((err: unknown) => err);
    t.equal((text as InstanceType<typeof OpenAI.APIError>).code, 'wrong_endpoint');
    t.equal(submits(), sim0, 'no refusal reached the provider');
    t.same(await readWallet(h.redis, h.account, 'chain_a'), wallet0, 'and none held anything');
  },
);

t.test(
  'every accepted cell of the table is taken (JSON and multipart; the jobs fail at once in the simulator, free)',
  async (t) => {
    const frame = await referencePng(64, 48);
    const cells: [string, string, number][] = [
      ['vidA-v6', '1280x720', 4],
      ['vidA-v6', '720x1280', 12],
      ['vidB-2.5', '854x480', 5],
      ['vidB-2.5', '480x854', 30],
      ['vidB-2.1', '720x1280', 16],
      ['vidB-2.1', '1280x720', 24],
      ['vidC-3', '1920x1080', 8],
      ['vidC-3', '640x480', 5],
    ];
    for (const [model, size, seconds] of cells) {
      const prompt = 'accepted #sim:video=fail';
      const r =
        model === 'vidC-3'
          ? await submitForm(h, { model, prompt, size, seconds: String(seconds) }, [
              { name: 'input_reference', bytes: frame },
            ])
          : await fetch(`${h.url}/v1/videos`, {
              method: 'POST',
              headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
              body: JSON.stringify({ model, prompt, size, seconds }),
            }).then(async (res) => ({ status: res.status, json: await res.json() }));
      t.equal(r.status, 200, `${model} ${size} ${seconds}s`);
      t.same([r.json.status, r.json.size, r.json.seconds], ['in_progress', size, String(seconds)]);
    }
    const vidA = await openai.videos.create({ model: 'vidA-v6', prompt: 'defaults #sim:video=fail' });
    t.same([vidA.size, vidA.seconds], ['1280x720', '4'], 'vidA takes both defaults');
  },
);

t.test('metrics: jobs submitted and ended by model, upstream polls by provider, job durations', async (t) => {
  const text = await (await fetch(h.metricsUrl!)).text();
  const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  t.ok(value(/^farebox_video_jobs_total\{model="vidA-v6",status="submitted"\} (\d+)/m) >= 3);
  t.ok(value(/^farebox_video_jobs_total\{model="vidA-v6",status="completed"\} (\d+)/m) >= 2);
  t.ok(value(/^farebox_video_jobs_total\{model="vidB-2\.1",status="failed"\} (\d+)/m) >= 1);
  t.ok(value(/^farebox_video_upstream_polls_total\{provider="sim-gemini",result="completed"\} (\d+)/m) >= 1);
  t.ok(value(/^farebox_video_job_duration_seconds_count\{model="vidA-v6",status="completed"\} (\d+)/m) >= 2);
  t.match(text, /^farebox_video_jobs_open \d+/m);
});
