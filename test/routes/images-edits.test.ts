// POST /v1/images/edits: multipart, 1 to 14 reference images, formats by their bytes, limits while reading
// (policies/image-request.ts EDIT_LIMITS), through the official openai SDK and raw requests.
import t from 'tap';
import { request } from 'node:http';
import OpenAI, { toFile } from 'openai';
import sharp from 'sharp';
import { validator } from '../helpers/conformance.js';
import { startHarness } from '../helpers/harness.js';
import { referencePng } from '../helpers/media.js';

const h = await startHarness();
t.teardown(() => h.close());

const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const imagesResponse = validator('ImagesResponse');
const auth = { authorization: `Bearer ${h.key}` };

const png = await referencePng(96, 64);
const jpeg = await sharp(png).jpeg().toBuffer();
const webp = await sharp(png).webp().toBuffer();
const gif = await sharp(png).gif().toBuffer();

type Edited = { created: number; data: { b64_json?: string; url?: string }[] };

function edit(model: string, files: Buffer[], extra: Record<string, unknown> = {}) {
  return Promise.all(files.map((f, i) => toFile(f, `ref-${i}.png`, { type: 'image/png' }))).then((image) =>
    openai.images.edit({
      model,
      prompt: 'make it dusk',
      image: image.length === 1 ? image[0]! : image,
      ...extra,
    } as never),
  ) as unknown as Promise<Edited>;
}

/** A raw multipart POST to the edit endpoint. */
async function post(
  form: FormData | string,
  contentType?: string,
): Promise<{ status: number; body: { error: { code: string; param: string | null; message: string } } }> {
  const res = await fetch(`${h.url}/v1/images/edits`, {
    method: 'POST',
    headers: contentType ? { ...auth, 'content-type': contentType } : auth,
    body: form,
  });
  return { status: res.status, body: (await res.json()) as never };
}

function form(fields: Record<string, string>, files: [string, Buffer, string, string][] = []): FormData {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  for (const [name, bytes, filename, type] of files) f.append(name, new Blob([bytes], { type }), filename);
  return f;
}

t.test(
  '1 and 14 reference images through the SDK, on both protocols; the provider receives them decoded as sent',
  async (t) => {
    for (const model of ['img-pro', 'img-2']) {
      for (const count of [1, 14]) {
        const refs = await Promise.all(Array.from({ length: count }, (_, i) => referencePng(64 + i, 48, false, i)));
        h.sim.clear();
        const r = await edit(model, refs, { size: '2K', aspect_ratio: '4:3' });
        // OpenAI's published ImagesResponse lists three sizes in `size`; gpt-image-2 names the one it rendered.
        const { size: _size, ...rest } = r as Edited & { size?: string };
        t.same(imagesResponse(rest), [], `${model} x${count}: conforms`);
        const out = await sharp(Buffer.from(r.data[0]!.b64_json!, 'base64')).metadata();
        t.equal(
          `${out.width}x${out.height}`,
          model === 'img-pro' ? '2400x1792' : '2368x1776',
          `${model} x${count}: size as mapped`,
        );
        const got = h.sim.images.received[0]!.images;
        t.equal(got.length, count, `${model}: ${count} images reached the provider`);
        t.same(
          got.map((g) => [g.format, g.width]),
          refs.map((_, i) => ['png', 64 + i]),
          'in order, the same pixels',
        );
        const sent = h.sim.received[0]!;
        if (model === 'img-2') {
          t.equal(sent.url, '/v1/images/edits');
          const files = (sent.body as { files: { field: string }[] }).files.map((f) => f.field);
          t.same(
            files,
            Array(count).fill(count === 1 ? 'image' : 'image[]'),
            'one image in `image`, several in `image[]`',
          );
          t.match(sent.body, { model: 'gpt-image-2', prompt: 'make it dusk', size: '2368x1776', quality: 'medium' });
        } else {
          t.equal(sent.url, '/v1beta/models/gemini-3-pro-image-preview:generateContent');
          t.equal(got[0]!.field, 'inlineData');
        }
      }
    }
  },
);

t.test("the SDK's `image[]` and plain `image` parts are both read; url answers work for edits", async (t) => {
  const r = await post(
    form({ model: 'img-pro', prompt: 'p', response_format: 'url' }, [
      ['image', png, 'a.png', 'image/png'],
      ['image', jpeg, 'b.jpg', 'image/jpeg'],
    ]),
  );
  t.equal(r.status, 200);
  t.same(imagesResponse(r.body), []);
  const url = (r.body as unknown as Edited).data[0]!.url!;
  t.equal((await fetch(url)).headers.get('content-type'), 'image/png');
});

t.test('formats are decided by the bytes, not the file name or the declared type', async (t) => {
  h.sim.clear();
  const ok = await post(
    form({ model: 'img-2', prompt: 'p' }, [
      ['image[]', jpeg, 'looks.png', 'image/png'],
      ['image[]', webp, 'x.bin', 'application/octet-stream'],
    ]),
  );
  t.equal(ok.status, 200);
  const parts = (h.sim.received[0]!.body as { files: { mimeType: string; filename: string }[] }).files;
  t.same(
    parts.map((p) => p.mimeType),
    ['image/jpeg', 'image/webp'],
    'forwarded as what they are',
  );
  t.same(
    parts.map((p) => p.filename),
    ['image-1.jpg', 'image-2.webp'],
  );
  const disguised = await post(form({ model: 'img-2', prompt: 'p' }, [['image', gif, 'cat.png', 'image/png']]));
  t.equal(disguised.status, 400);
  t.match(disguised.body.error, {
    code: 'invalid_reference_image',
    param: 'image',
    message: /^image 1 is not a PNG, JPEG or WebP image/,
  });
});

t.test(
  'refused, the upstream never called: 0 or 15 images, another format, truncated or undecodable images, bad fields, no multipart',
  async (t) => {
    const before = h.sim.received.length;
    const cases: [string, FormData | string, string | undefined, string, RegExp][] = [
      ['no image', form({ model: 'img-pro', prompt: 'p' }), undefined, 'image', /No reference image/],
      [
        '15 images',
        form(
          { model: 'img-pro', prompt: 'p' },
          Array.from(
            { length: 15 },
            (_, i) => ['image[]', png, `${i}.png`, 'image/png'] as [string, Buffer, string, string],
          ),
        ),
        undefined,
        'image',
        /At most 14 image files/,
      ],
      [
        'a GIF',
        form({ model: 'img-pro', prompt: 'p' }, [['image', gif, 'a.gif', 'image/gif']]),
        undefined,
        'image',
        /not a PNG, JPEG or WebP/,
      ],
      [
        'a truncated PNG',
        form({ model: 'img-pro', prompt: 'p' }, [
          ['image', png, 'a.png', 'image/png'],
          ['image', png.subarray(0, png.length - 40), 'b.png', 'image/png'],
        ]),
        undefined,
        'image',
        /^image 2 is not a whole PNG image/,
      ],
      [
        'a truncated JPEG',
        form({ model: 'img-2', prompt: 'p' }, [
          ['image', jpeg.subarray(0, Math.floor(jpeg.length / 2)), 'a.jpg', 'image/jpeg'],
        ]),
        undefined,
        'image',
        /not a whole JPEG/,
      ],
      [
        'garbage after a PNG signature',
        form({ model: 'img-2', prompt: 'p' }, [
          ['image', Buffer.concat([png.subarray(0, 16), Buffer.alloc(500, 7)]), 'a.png', 'image/png'],
        ]),
        undefined,
        'image',
        /^image 1: its PNG header cannot be read/,
      ],
      [
        'an empty file',
        form({ model: 'img-2', prompt: 'p' }, [['image', Buffer.alloc(0), 'a.png', 'image/png']]),
        undefined,
        'image',
        /empty/,
      ],
      [
        'a mask',
        form({ model: 'img-2', prompt: 'p' }, [
          ['image', png, 'a.png', 'image/png'],
          ['mask', png, 'm.png', 'image/png'],
        ]),
        undefined,
        'mask',
        /Unexpected file field "mask"/,
      ],
      [
        'no prompt',
        form({ model: 'img-pro' }, [['image', png, 'a.png', 'image/png']]),
        undefined,
        'prompt',
        /prompt: is required/,
      ],
      [
        'a bad size',
        form({ model: 'img-pro', prompt: 'p', size: '3K' }, [['image', png, 'a.png', 'image/png']]),
        undefined,
        'size',
        /1K, 2K, 4K/,
      ],
      [
        'n of 2',
        form({ model: 'img-pro', prompt: 'p', n: '2' }, [['image', png, 'a.png', 'image/png']]),
        undefined,
        'n',
        /must be 1/,
      ],
      [
        'a JSON body',
        JSON.stringify({ model: 'img-pro', prompt: 'p' }),
        'application/json',
        'body',
        /multipart\/form-data/,
      ],
      ['a text body', 'model=img-pro', 'text/plain', 'body', /take a multipart\/form-data body/],
      ['a body of no known type', '<model/>', 'application/xml', '', /Content-Type must be multipart\/form-data/],
      [
        'a broken multipart body',
        '--x\r\nContent-Disposition: form-data; name="model"\r\n\r\nimg-pro\r\n--x\r\nContent-Disp',
        'multipart/form-data; boundary=x',
        'body',
        /multipart\/form-data body could not be read/,
      ],
    ];
    for (const [what, body, type, param, message] of cases) {
      const r = await post(body, type);
      t.equal(r.status, 400, what);
      t.match(r.body.error.message, message, what);
      if (param) t.equal(r.body.error.param, param, what);
    }
    const unknown = await post(form({ model: 'img-9', prompt: 'p' }, [['image', png, 'a.png', 'image/png']]));
    t.match(unknown, { status: 400, body: { error: { code: 'unknown_model', param: 'model' } } });
    const text = await post(form({ model: 'beta-5.5', prompt: 'p' }, [['image', png, 'a.png', 'image/png']]));
    t.match(text, { status: 400, body: { error: { code: 'wrong_endpoint' } } });
    t.equal(h.sim.received.length, before, 'the upstream was never called');
  },
);

/**
 * Send a multipart upload of one image part of `size` bytes in 64 KiB writes, as fast as the socket takes them;
 * returns the answer and how many bytes had been written when it came.
 */
function upload(size: number, fields = 'img-pro'): Promise<{ status: number; body: string; written: number }> {
  return new Promise((resolve, reject) => {
    const boundary = 'farebox-test';
    const head = Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n${fields}\r\n--${boundary}\r\nContent-Disposition: form-data; name="prompt"\r\n\r\np\r\n--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="big.png"\r\nContent-Type: image/png\r\n\r\n`,
    );
    const total = head.length + size + 40;
    const req = request(`${h.url}/v1/images/edits`, {
      method: 'POST',
      headers: { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': total },
    });
    let written = 0;
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => {
        resolve({ status: res.statusCode!, body, written });
        // The rest of the upload is not sent: the gateway cuts the connection (below) or this does.
        setTimeout(() => req.destroy(), 3_000).unref();
      });
    });
    // The gateway closes the connection after its answer: a write may fail before the answer is read.
    req.on('error', (err) => setTimeout(() => (answered ? undefined : reject(err)), 2_000).unref());
    req.write(head);
    written += head.length;
    const piece = Buffer.alloc(64 * 1024, 1);
    png.copy(piece, 0, 0, 16);
    const pump = () => {
      while (!answered && written < total - 40) {
        const ok = req.write(piece);
        written += piece.length;
        if (!ok) return void req.once('drain', pump);
      }
    };
    pump();
  });
}

t.test('an oversized image is refused while it is read (413), the rest of the upload never read', async (t) => {
  const big = await upload(200 * 1024 * 1024);
  t.equal(big.status, 413);
  t.match(JSON.parse(big.body).error, {
    code: 'reference_too_large',
    param: 'image',
    message: /^image 1 is over 7 MB/,
  });
  t.ok(big.written < 60 * 1024 * 1024, `answered after ${(big.written / 1048576).toFixed(1)} MiB of a 200 MiB upload`);
  const total = await post(
    form({ model: 'img-2', prompt: 'p' }, [
      ['image[]', Buffer.concat([png, Buffer.alloc(5_000_000)]), 'a.png', 'image/png'],
      ['image[]', Buffer.concat([png, Buffer.alloc(5_000_000)]), 'b.png', 'image/png'],
      ['image[]', Buffer.concat([png, Buffer.alloc(5_000_000)]), 'c.png', 'image/png'],
    ]),
  );
  t.equal(total.status, 413);
  t.match(total.body.error, {
    code: 'reference_too_large',
    param: 'image',
    message: /over 14 MB \(14,000,000 bytes\) in total/,
  });
  // The connection of a refused upload is cut a while after the answer, however much is still to come.
  const cut = await new Promise<boolean>((resolve) => {
    const boundary = 'b';
    const req = request(`${h.url}/v1/images/edits`, {
      method: 'POST',
      headers: { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': 1e9 },
    });
    req.on('error', () => {});
    req.on('close', () => resolve(true));
    req.write(`--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="a.gif"\r\n\r\n`);
    req.write(gif);
    const timer = setInterval(() => req.write(Buffer.alloc(1024)), 100);
    req.on('close', () => clearInterval(timer));
    setTimeout(() => resolve(false), 8_000).unref();
  });
  t.ok(cut, 'cut while the caller still sends');
  const early = await upload(50 * 1024 * 1024, 'img-unknown');
  t.equal(early.status, 400, 'an unknown model is refused as its field arrives');
  t.ok(early.written < 20 * 1024 * 1024);
});
