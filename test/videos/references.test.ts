// The reference table through the official SDK (input_reference as one file or a list, last_reference), and the
// pixels the simulated provider received: transparency flattened, a single vidB frame cover-cropped to the video
// size, vidA and vidC frames contained (aspect ratio kept, nothing cropped), subject references untouched;
// formats by their bytes; the size limits; more references than a model takes refused, never dropped.
import t from 'tap';
import OpenAI from 'openai';
import sharp from 'sharp';
import type { ReceivedImage } from '../../plugins/simulator/index.js';
import { referencePng } from '../helpers/media.js';
import { sdk, videoHarness } from './helpers.js';

const h = await videoHarness();
t.teardown(() => h.close());
const openai = sdk(h);
/** Every job here fails at once in the simulator (no render); the simulator records its images first. */
const FAIL = '#sim:video=fail';

const file = (bytes: Buffer, name = 'ref.png', type = 'image/png') => OpenAI.toFile(bytes, name, { type });

/** Submit through the SDK; the images the simulator received for it. */
async function submit(params: Record<string, unknown>): Promise<ReceivedImage[]> {
  const before = h.sim.images.received.length;
  const v = await openai.videos.create({ prompt: `Reference test ${FAIL}`, ...params } as never);
  t.equal(v.status, 'in_progress');
  return h.sim.images.received.slice(before).flatMap((r) => r.images);
}

async function refusal(
  params: Record<string, unknown>,
): Promise<{ status: number; code: string | null | undefined; message: string }> {
  const e = await openai.videos.create({ prompt: `Refused ${FAIL}`, ...params } as never).catch((err: unknown) => err);
  if (!(e instanceof OpenAI.APIError)) throw new Error(`expected a refusal, got ${JSON.stringify(e)}`);
  return { status: e.status!, code: e.code, message: (e.error as { message: string }).message };
}

/**
 * A `width` x `height` image: a red border 1/40 of its longer side around a gradient (whose blue is never red's),
 * and a transparent top-left quarter when `alpha`.
 */
async function framed(width: number, height: number, alpha = false): Promise<Buffer> {
  const b = Math.round(Math.max(width, height) / 40);
  const ch = alpha ? 4 : 3;
  const raw = Buffer.alloc(width * height * ch);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * ch;
      const border = x < b || y < b || x >= width - b || y >= height - b;
      raw.set(border ? [220, 0, 0] : [Math.floor((255 * x) / width), Math.floor((255 * y) / height), 128], i);
      if (alpha) raw[i + 3] = x < width / 2 && y < height / 2 ? 0 : 255;
    }
  }
  return sharp(raw, { raw: { width, height, channels: ch } })
    .png()
    .toBuffer();
}

/** The RGB of pixel (x, y) of an encoded image. */
async function pixel(bytes: Buffer, x: number, y: number): Promise<[number, number, number]> {
  const { data, info } = await sharp(bytes).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const i = (y * info.width + x) * 3;
  return [data[i]!, data[i + 1]!, data[i + 2]!];
}
const isRed = ([r, g, b]: number[]) => r! > 170 && g! < 70 && b! < 70;
const isBlack = ([r, g, b]: number[]) => r! < 20 && g! < 20 && b! < 20;
const isWhite = ([r, g, b]: number[]) => r! > 235 && g! > 235 && b! > 235;

t.test(
  'vidA: one input_reference is a starting frame, contained: aspect ratio kept, nothing cropped, transparency flattened',
  async (t) => {
    const [img] = await submit({
      model: 'vidA-v6',
      seconds: '4',
      size: '1280x720',
      input_reference: await file(await framed(400, 400, true)),
    });
    t.same(
      [img!.field, img!.width, img!.height, img!.hasAlpha],
      ['input_reference', 1280, 720, false],
      'the video size, no alpha',
    );
    // 400x400 scaled to 720x720, centred: columns 280-999 hold it, the rest is padding.
    t.ok(
      isBlack(await pixel(img!.bytes, 100, 360)) && isBlack(await pixel(img!.bytes, 1180, 360)),
      'padded left and right',
    );
    t.ok(isWhite(await pixel(img!.bytes, 300, 20)), 'its transparent top-left quarter flattened to white');
    t.ok(isRed(await pixel(img!.bytes, 990, 710)), 'its bottom-right border is there: nothing cropped');
    t.ok(isRed(await pixel(img!.bytes, 990, 10)) && isRed(await pixel(img!.bytes, 290, 710)), 'and its other corners');
  },
);

t.test('vidC: the required frame is contained too (a wide frame on a 4:3 video: bands above and below)', async (t) => {
  const [img] = await submit({
    model: 'vidC-3',
    seconds: '5',
    size: '640x480',
    input_reference: await file(await framed(800, 200)),
  });
  t.same([img!.width, img!.height, img!.format], [640, 480, 'png']);
  // 800x200 scaled to 640x160, rows 160-319.
  t.ok(
    isBlack(await pixel(img!.bytes, 320, 40)) && isBlack(await pixel(img!.bytes, 320, 440)),
    'padded above and below',
  );
  t.ok(
    isRed(await pixel(img!.bytes, 2, 240)) && isRed(await pixel(img!.bytes, 637, 240)),
    'its left and right borders are there',
  );
  t.ok(
    isRed(await pixel(img!.bytes, 320, 162)) && isRed(await pixel(img!.bytes, 320, 317)),
    'its top and bottom borders are there',
  );
});

t.test('vidB: a single frame is cover-cropped to the video size', async (t) => {
  const [img] = await submit({
    model: 'vidB-2.1',
    seconds: '5',
    size: '854x480',
    input_reference: await file(await framed(400, 400)),
  });
  t.same([img!.width, img!.height], [854, 480], 'exactly the video size');
  // 400x400 scaled to 854x854 and cut to its middle 480 rows: the left and right borders stay, top and bottom go.
  t.ok(
    isRed(await pixel(img!.bytes, 5, 240)) && isRed(await pixel(img!.bytes, 848, 240)),
    'left and right borders kept',
  );
  t.notOk(isRed(await pixel(img!.bytes, 427, 1)), 'the top border cropped away');
  t.notOk(isRed(await pixel(img!.bytes, 427, 478)), 'the bottom border cropped away');
});

t.test('vidB-2.5: input_reference and last_reference are first and last frames, both cover-cropped', async (t) => {
  const images = await submit({
    model: 'vidB-2.5',
    seconds: '8',
    size: '480x854',
    input_reference: await file(await framed(300, 300)),
    last_reference: await file(
      await sharp(await framed(600, 300))
        .jpeg()
        .toBuffer(),
      'last.jpg',
      'image/jpeg',
    ),
  });
  t.same(
    images.map((i) => [i.field, i.width, i.height]),
    [
      ['input_reference', 480, 854],
      ['last_reference', 480, 854],
    ],
  );
  t.equal(images[1]!.format, 'jpeg', 'a JPEG stays a JPEG');
});

t.test('vidB-2.5: two or more references are subject references, in order, never cropped or resized', async (t) => {
  const refs = [
    await framed(300, 200),
    await framed(64, 48),
    await framed(500, 500, true),
    await sharp(await framed(120, 90))
      .webp()
      .toBuffer(),
  ];
  const images = await submit({
    model: 'vidB-2.5',
    seconds: '5',
    size: '854x480',
    input_reference: await Promise.all(refs.map((b, i) => file(b, `ref${i}.bin`))),
  });
  t.same(
    images.map((i) => [i.field, i.width, i.height]),
    [
      ['input_reference', 300, 200],
      ['input_reference', 64, 48],
      ['input_reference', 500, 500],
      ['input_reference', 120, 90],
    ],
    'as uploaded, in the order @image1.. cite them',
  );
  t.equal(images[0]!.bytes.length, refs[0]!.length, 'an opaque reference goes byte for byte');
  t.equal(images[3]!.format, 'webp');
  t.same(
    [images[2]!.hasAlpha, isWhite(await pixel(images[2]!.bytes, 10, 10))],
    [false, true],
    'a transparent one is flattened, not cropped',
  );
  const thirty = await submit({
    model: 'vidB-2.5',
    seconds: '5',
    size: '854x480',
    input_reference: await Promise.all(Array.from({ length: 30 }, () => file(refs[1]!))),
  });
  t.equal(thirty.length, 30, 'thirty are taken');
});

t.test('more references than a model takes are refused, never dropped', async (t) => {
  const small = await framed(64, 48);
  const many = (n: number) => Promise.all(Array.from({ length: n }, () => file(small)));
  const over = await refusal({ model: 'vidB-2.5', seconds: '5', size: '854x480', input_reference: await many(31) });
  t.same([over.status, over.code], [400, 'too_many_references']);
  t.equal(over.message, 'vidB-2.5 takes up to 30 input_reference images; got 31.');
  for (const [model, seconds] of [
    ['vidB-2.1', '5'],
    ['vidA-v6', '4'],
    ['vidC-3', '5'],
  ]) {
    const r = await refusal({ model, seconds, input_reference: await many(2) });
    t.same([r.status, r.code], [400, 'too_many_references'], model);
    t.match(r.message, /takes one input_reference \(a starting frame\); got 2/);
  }
});

t.test('last_reference: only on vidB-2.5, only beside exactly one input_reference', async (t) => {
  const f = await framed(64, 48);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ model: 'vidB-2.5', seconds: '5', last_reference: await file(f) }, /exactly one input_reference.*got 0/],
    [
      {
        model: 'vidB-2.5',
        seconds: '5',
        input_reference: [await file(f), await file(f)],
        last_reference: await file(f),
      },
      /exactly one input_reference.*got 2/,
    ],
    [
      { model: 'vidB-2.1', seconds: '5', input_reference: await file(f), last_reference: await file(f) },
      /vidB-2\.1 does not take last_reference/,
    ],
    [
      { model: 'vidA-v6', seconds: '4', input_reference: await file(f), last_reference: await file(f) },
      /vidA-v6 does not take last_reference/,
    ],
    [
      { model: 'vidC-3', seconds: '5', input_reference: await file(f), last_reference: await file(f) },
      /vidC-3 does not take last_reference/,
    ],
  ];
  for (const [params, why] of cases) {
    const r = await refusal(params);
    t.same([r.status, r.code], [400, 'invalid_last_reference'], String(why));
    t.match(r.message, why);
  }
});

t.test('PNG, JPEG or WebP decided by the bytes, whatever the part says', async (t) => {
  const png = await framed(64, 48);
  const [asJpeg] = await submit({
    model: 'vidA-v6',
    seconds: '4',
    input_reference: await file(png, 'photo.jpg', 'image/jpeg'),
  });
  t.equal(asJpeg!.format, 'png', 'PNG bytes named and typed as JPEG are a PNG');
  for (const [bytes, type] of [
    [await sharp(png).gif().toBuffer(), 'image/gif'],
    [Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"/>'), 'image/png'],
    [png.subarray(0, 60), 'image/png'],
  ] as const) {
    const r = await refusal({ model: 'vidA-v6', seconds: '4', input_reference: await file(bytes, 'x.png', type) });
    t.same([r.status, r.code], [400, 'invalid_reference_image'], type);
  }
});

t.test('3.5 MB each and 4 MB in total (413)', async (t) => {
  const png = await framed(64, 48);
  const padded = (n: number) => Buffer.concat([png, Buffer.alloc(n - png.length)]);
  const one = await refusal({
    model: 'vidA-v6',
    seconds: '4',
    input_reference: await file(padded(3.5 * 1024 * 1024 + 1)),
  });
  t.same([one.status, one.code], [413, 'reference_too_large']);
  t.match(one.message, /over 3\.5 MB \(3,670,016 bytes\)/);
  const total = await refusal({
    model: 'vidB-2.5',
    seconds: '5',
    input_reference: [await file(padded(2_100_000)), await file(padded(2_100_000))],
  });
  t.same([total.status, total.code], [413, 'reference_too_large']);
  t.match(total.message, /over 4 MB \(4,194,304 bytes\) in total/);
});
