// Uploads (plugins/intake/): the one multipart reader's limits enforced while the upload is read, the format and pixel
// size decided by the header (policies/image-size.ts), decoding with sharp, and what goes upstream
// (plugins/upstream/reference-images.ts: flattened, fitted, or untouched).
import t from 'tap';
import { crc32 } from 'node:zlib';
import Fastify from 'fastify';
import sharp from 'sharp';
import { GatewayError, renderError } from '../../policies/errors.js';
import { decodeImage } from '../../plugins/intake/images.js';
import {
  readUpload,
  registerMultipart,
  type UploadLimits,
  type UploadedImage,
} from '../../plugins/intake/multipart.js';
import { FLATTEN_BACKGROUND, PAD_BACKGROUND, prepareImage } from '../../plugins/upstream/reference-images.js';
import { imageFormat, probeHeader } from '../../policies/image-size.js';
import { referencePng } from '../helpers/media.js';

const LIMITS: UploadLimits = {
  files: {
    input_reference: 'input_reference',
    'input_reference[]': 'input_reference',
    last_reference: 'last_reference',
  },
  maxFiles: 3,
  maxFileBytes: 100_000,
  maxTotalBytes: 150_000,
  maxFields: 4,
  maxFieldBytes: 1000,
  maxPixels: 40_000_000,
};

// forceCloseConnections: the stalled upload below keeps its socket open after its answer.
const app = Fastify({ logger: false, forceCloseConnections: true });
await registerMultipart(app);
await registerMultipart(app); // a second endpoint family registering it again changes nothing
app.setErrorHandler((err, _req, reply) => {
  const ge = err instanceof GatewayError ? err : new GatewayError('internal_error', { cause: err });
  void reply.code(ge.status).type('application/json').send(renderError(ge, 'openai'));
});
app.post('/form', async (req) => {
  const form = await readUpload(req, LIMITS);
  return {
    fields: form.fields,
    files: form.files.map((f) => ({ field: f.field, index: f.index, format: f.format, size: f.bytes.length })),
  };
});
await app.listen({ port: 0, host: '127.0.0.1' });
const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/form`;
t.teardown(() => app.close());

const png = await referencePng(64, 48);
const jpeg = await sharp(png).jpeg().toBuffer();
const webp = await sharp(png).webp().toBuffer();
const gif = await sharp(png).gif().toBuffer();

function form(parts: [string, string | { bytes: Buffer; type: string }][]): FormData {
  const f = new FormData();
  for (const [name, v] of parts) {
    if (typeof v === 'string') f.append(name, v);
    else f.append(name, new Blob([v.bytes], { type: v.type }), `${name}.bin`);
  }
  return f;
}

async function post(body: FormData): Promise<{ status: number; json: any }> {
  const res = await fetch(url, { method: 'POST', body });
  return { status: res.status, json: await res.json() };
}

t.test('formats by their signatures, whatever the name or declared type', async (t) => {
  t.equal(imageFormat(png), 'png');
  t.equal(imageFormat(jpeg), 'jpeg');
  t.equal(imageFormat(webp), 'webp');
  t.equal(imageFormat(gif), null);
  t.equal(imageFormat(Buffer.from('<svg xmlns="http://www.w3.org/2000/svg"/>')), null);
  t.equal(imageFormat(Buffer.alloc(0)), null);
  const r = await post(
    form([
      ['prompt', 'hi'],
      ['input_reference', { bytes: png, type: 'image/jpeg' }],
      ['input_reference[]', { bytes: webp, type: 'text/plain' }],
      ['last_reference', { bytes: jpeg, type: 'application/octet-stream' }],
    ]),
  );
  t.equal(r.status, 200);
  t.same(r.json.fields, { prompt: 'hi' });
  t.same(
    r.json.files.map((f: { field: string; index: number; format: string }) => [f.field, f.index, f.format]),
    [
      ['input_reference', 1, 'png'],
      ['input_reference', 2, 'webp'],
      ['last_reference', 1, 'jpeg'],
    ],
    "input_reference[] (the SDK's name for a list) counts as input_reference",
  );
});

t.test('refusals: not PNG/JPEG/WebP by the bytes, an unexpected file field, too many files or fields', async (t) => {
  for (const [bytes, type] of [
    [gif, 'image/gif'],
    [Buffer.from('not an image at all'), 'image/png'],
  ] as const) {
    const r = await post(form([['input_reference', { bytes, type }]]));
    t.equal(r.status, 400);
    t.equal(r.json.error.code, 'invalid_reference_image');
    t.match(r.json.error.message, /not a PNG, JPEG or WebP image \(by its bytes\)/);
  }
  const other = await post(form([['image', { bytes: png, type: 'image/png' }]]));
  t.same([other.status, other.json.error.code], [400, 'invalid_request']);
  const many = await post(
    form(
      [1, 2, 3, 4].map(
        () => ['input_reference', { bytes: png, type: 'image/png' }] as [string, { bytes: Buffer; type: string }],
      ),
    ),
  );
  t.same([many.status, many.json.error.code], [400, 'too_many_references']);
  const fields = await post(
    form([
      ['a', '1'],
      ['b', '2'],
      ['c', '3'],
      ['d', '4'],
      ['e', '5'],
    ]),
  );
  t.same([fields.status, fields.json.error.code], [400, 'invalid_request']);
  const long = await post(form([['prompt', 'x'.repeat(1001)]]));
  t.same([long.status, long.json.error.code, long.json.error.param], [400, 'invalid_request', 'prompt']);
});

t.test('size limits: one file over its limit, or files over the total, are refused (413)', async (t) => {
  const pad = (n: number) => Buffer.concat([png, Buffer.alloc(n - png.length)]);
  t.equal(
    (await post(form([['input_reference', { bytes: pad(100_000), type: 'image/png' }]]))).status,
    200,
    'exactly the limit passes',
  );
  const one = await post(form([['input_reference', { bytes: pad(100_001), type: 'image/png' }]]));
  t.same([one.status, one.json.error.code], [413, 'reference_too_large']);
  t.match(one.json.error.message, /input_reference 1 is over 0\.1 MB \(100,000 bytes\)/);
  const total = await post(
    form([
      ['input_reference', { bytes: pad(80_000), type: 'image/png' }],
      ['input_reference', { bytes: pad(80_000), type: 'image/png' }],
    ]),
  );
  t.same([total.status, total.json.error.code], [413, 'reference_too_large']);
  t.match(total.json.error.message, /over 0\.14 MB \(150,000 bytes\) in total/);
});

t.test('limits are enforced while the upload is read: the refusal comes before the body ends', async (t) => {
  const boundary = 'xyzzy';
  const head = Buffer.from(
    `--${boundary}\r\ncontent-disposition: form-data; name="input_reference"; filename="a.png"\r\ncontent-type: image/png\r\n\r\n`,
  );
  let sent = 0;
  let cancel!: () => void;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(head);
      c.enqueue(png);
      // Past the limit, then the upload stalls: a server that waited for the whole body would never answer.
      c.enqueue(new Uint8Array(200_000));
      sent = head.length + png.length + 200_000;
      cancel = () => c.close();
    },
  });
  let timer: NodeJS.Timeout | undefined;
  const answered = await Promise.race([
    fetch(url, {
      method: 'POST',
      body,
      duplex: 'half',
      headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
    } as RequestInit),
    new Promise<null>((r) => (timer = setTimeout(() => r(null), 5000))),
  ]).finally(() => clearTimeout(timer));
  t.ok(answered, `answered while the upload was still open (${sent} bytes sent)`);
  t.equal(answered?.status, 413);
  t.equal(((await answered?.json()) as { error: { code: string } }).error.code, 'reference_too_large');
  cancel();
});

const upload = (bytes: Buffer, format: 'png' | 'jpeg' | 'webp', field = 'input_reference'): UploadedImage => ({
  field,
  index: 1,
  filename: 'x',
  format,
  bytes,
});

/** A PNG whose header claims `width` x `height` and whose pixels are absent. */
function pngHeader(width: number, height: number): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

t.test(
  'headers, read before anything is decoded: the format and pixel size of each kind, refusals naming the file',
  async (t) => {
    const lossless = await sharp(png).webp({ lossless: true }).toBuffer();
    const alpha = await sharp(await referencePng(64, 48, true))
      .webp()
      .toBuffer();
    for (const [bytes, format] of [
      [png, 'png'],
      [jpeg, 'jpeg'],
      [webp, 'webp'],
      [lossless, 'webp'],
      [alpha, 'webp'],
    ] as const) {
      t.same(
        probeHeader(bytes, 64 * 48),
        { ok: true, format, width: 64, height: 48 },
        `${format} ${bytes.length} bytes`,
      );
    }
    t.same(probeHeader(png, 64 * 48 - 1), { ok: false, why: 'pixels', format: 'png', width: 64, height: 48 });
    t.same(probeHeader(gif, 1e9), { ok: false, why: 'format' });
    const broken = (b: Buffer, at: number) =>
      Buffer.concat([b.subarray(0, at), Buffer.from([b[at]! ^ 0xff]), b.subarray(at + 1)]);
    const cases: [string, Buffer, 'png' | 'jpeg' | 'webp'][] = [
      ['a PNG cut inside its header', png.subarray(0, 30), 'png'],
      ['a PNG whose IHDR fails its CRC', broken(png, 20), 'png'],
      [
        'a PNG of colour type 2 at 4 bits',
        (() => {
          const b = Buffer.from(pngHeader(64, 48));
          b[24] = 4;
          b.writeUInt32BE(crc32(b.subarray(12, 29)), 29);
          return b;
        })(),
        'png',
      ],
      ['a PNG of width 0', pngHeader(0, 48), 'png'],
      [
        'a JPEG without a frame header',
        Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10]), Buffer.alloc(64)]),
        'jpeg',
      ],
      ['a lossy WebP without its start code', broken(webp, 23), 'webp'],
      ['a lossless WebP without its signature', broken(lossless, 20), 'webp'],
    ];
    for (const [what, bytes, format] of cases)
      t.same(probeHeader(bytes, 1e9), { ok: false, why: 'header', format }, what);

    const over = await post(
      form([
        ['input_reference', { bytes: png, type: 'image/png' }],
        ['input_reference', { bytes: pngHeader(8000, 6000), type: 'image/png' }],
      ]),
    );
    t.same(
      [over.status, over.json.error.code, over.json.error.message],
      [400, 'invalid_reference_image', 'input_reference 2: 8000x6000 is over 40 megapixels.'],
    );
    const unread = await post(form([['last_reference', { bytes: broken(png, 20), type: 'image/png' }]]));
    t.same(
      [unread.status, unread.json.error.code, unread.json.error.message],
      [400, 'invalid_reference_image', 'last_reference 1: its PNG header cannot be read.'],
    );
    // A whole header over cut data passes the reader: the decode after the hold finds it.
    t.equal(
      (await post(form([['input_reference', { bytes: png.subarray(0, png.length - 30), type: 'image/png' }]]))).status,
      200,
    );
  },
);

t.test('decoding: whole images of their format only, at most 40 megapixels', async (t) => {
  const d = await decodeImage(upload(png, 'png'), LIMITS.maxPixels);
  t.same([d.width, d.height, d.hasAlpha, d.rotated], [64, 48, false, false]);
  const refusals = [
    [upload(png.subarray(0, png.length - 30), 'png'), /truncated or corrupt|cannot be decoded/],
    [upload(pngHeader(8000, 6000), 'png'), /8000x6000 is over 40 megapixels/],
    [
      upload(Buffer.concat([Buffer.from([0xff, 0xd8, 0xff]), Buffer.alloc(64)]), 'jpeg'),
      /cannot be decoded|not a whole/,
    ],
  ] as const;
  for (const [img, why] of refusals) {
    const err = await decodeImage(img, LIMITS.maxPixels).catch((e: unknown) => e);
    t.ok(err instanceof GatewayError && err.code === 'invalid_reference_image', String(why));
    t.match((err as Error).message, why);
  }
});

t.test('prepared for the upstream: untouched, flattened, cover-cropped, contained', async (t) => {
  const plain = await decodeImage(upload(png, 'png'), LIMITS.maxPixels);
  const same = await prepareImage(plain, { fit: 'none' });
  t.equal(same.bytes, png, 'an image nothing changes goes byte for byte');
  t.same([same.mimeType, same.width, same.height], ['image/png', 64, 48]);

  // Transparency (the top-left quarter) flattened onto the solid background; no alpha left.
  const clear = await decodeImage(upload(await referencePng(64, 48, true), 'png'), LIMITS.maxPixels);
  t.equal(clear.hasAlpha, true);
  const flat = await prepareImage(clear, { fit: 'none' });
  const flatMeta = await sharp(flat.bytes).metadata();
  t.same([flatMeta.hasAlpha, flatMeta.width, flatMeta.height], [false, 64, 48]);
  const { data } = await sharp(flat.bytes).raw().toBuffer({ resolveWithObject: true });
  t.same(
    [...data.subarray(0, 3)],
    [FLATTEN_BACKGROUND.r, FLATTEN_BACKGROUND.g, FLATTEN_BACKGROUND.b],
    'a transparent pixel is the background',
  );

  // A 400x400 square with a red border: cover to 320x180 crops top and bottom; contain keeps all of it, padded.
  const square = await sharp({ create: { width: 400, height: 400, channels: 3, background: { r: 220, g: 0, b: 0 } } })
    .composite([{ input: await referencePng(380, 380), left: 10, top: 10 }])
    .png()
    .toBuffer();
  const sq = await decodeImage(upload(square, 'png'), LIMITS.maxPixels);
  const cover = await prepareImage(sq, { fit: 'cover', width: 320, height: 180 });
  t.same([cover.width, cover.height], [320, 180]);
  const coverPx = await sharp(cover.bytes).raw().toBuffer();
  const at = (buf: Buffer, w: number, x: number, y: number) => [...buf.subarray((y * w + x) * 3, (y * w + x) * 3 + 3)];
  t.ok(at(coverPx, 320, 160, 0)[0]! < 200 || at(coverPx, 320, 160, 0)[1]! > 40, 'the top border was cropped away');
  const contain = await prepareImage(sq, { fit: 'contain', width: 320, height: 180 });
  t.same([contain.width, contain.height], [320, 180]);
  const px = await sharp(contain.bytes).raw().toBuffer();
  t.same(at(px, 320, 10, 90), [PAD_BACKGROUND.r, PAD_BACKGROUND.g, PAD_BACKGROUND.b], 'padded beside the frame');
  const corner = at(px, 320, 71, 1);
  t.ok(corner[0]! > 180 && corner[1]! < 60, `the frame's own top-left border is there (${corner})`);
  const other = at(px, 320, 248, 178);
  t.ok(other[0]! > 180 && other[1]! < 60, `and its bottom-right border (${other})`);
});

t.test('EXIF orientation is applied before the image goes upstream', async (t) => {
  const tall = await sharp(await referencePng(40, 80))
    .jpeg()
    .withMetadata({ orientation: 6 })
    .toBuffer();
  const d = await decodeImage(upload(tall, 'jpeg'), LIMITS.maxPixels);
  t.equal(d.rotated, true);
  const out = await prepareImage(d, { fit: 'none' });
  const meta = await sharp(out.bytes).metadata();
  t.same([meta.width, meta.height, meta.orientation ?? 1], [80, 40, 1], 'turned upright');
});
