// An upload refused while it is read (its size, its count of images, its format) is answered with `connection:
// close` and its connection closed right behind the answer (intake/multipart.ts closeUnreadUpload), so the
// caller's next request goes on a new connection and is answered at once; a refusal after the body was read whole
// keeps the connection. One reader (intake/multipart.ts readUpload) with each endpoint's limits: image edits and video
// submits. Over a raw socket and through the official openai SDK.
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import OpenAI, { toFile } from 'openai';
import { startHarness } from '../helpers/harness.js';
import { referencePng } from '../helpers/media.js';

const h = await startHarness();
t.teardown(() => h.close());
const port = Number(new URL(h.url).port);
const png = await referencePng(64, 48);
/** A PNG padded past a size limit: its format and header read fine, its size does not. */
const padded = (bytes: number) => Buffer.concat([png, Buffer.alloc(bytes - png.length)]);

/** A multipart body of text fields and files, with its boundary. */
function multipart(fields: Record<string, string>, files: [string, Buffer][]): { body: Buffer; type: string } {
  const b = 'farebox-refused-upload';
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(fields))
    parts.push(Buffer.from(`--${b}\r\ncontent-disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`));
  for (const [name, bytes] of files) {
    parts.push(
      Buffer.from(
        `--${b}\r\ncontent-disposition: form-data; name="${name}"; filename="f.png"\r\ncontent-type: image/png\r\n\r\n`,
      ),
      bytes,
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from(`--${b}--\r\n`));
  return { body: Buffer.concat(parts), type: `multipart/form-data; boundary=${b}` };
}

/** What one raw connection saw: its answers, parsed, and whether the gateway closed it (FIN) after the last one. */
class Raw {
  private readonly socket: Socket;
  private buffered = Buffer.alloc(0);
  private waiting: (() => void) | undefined;
  ended = false;

  constructor() {
    this.socket = connect(port, '127.0.0.1');
    this.socket.on('data', (d: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, d]);
      this.waiting?.();
    });
    this.socket.on('end', () => {
      this.ended = true;
      this.waiting?.();
    });
    // A write still under way when the gateway closes is refused by the kernel: expected, the answer was read first.
    this.socket.on('error', () => {});
  }

  /** Send a request; the body is written as the socket takes it, while the answer may already be coming. */
  send(method: string, path: string, body?: { body: Buffer; type: string }): void {
    const head = [`${method} ${path} HTTP/1.1`, 'host: 127.0.0.1', `authorization: Bearer ${h.key}`];
    if (body) head.push(`content-type: ${body.type}`, `content-length: ${body.body.length}`);
    this.socket.write(`${head.join('\r\n')}\r\n\r\n`);
    if (body) this.socket.write(body.body);
  }

  /** The next answer on the connection: its status, headers and JSON body; rejects if the connection ends first. */
  async answer(): Promise<{ status: number; headers: Record<string, string>; json: any }> {
    for (;;) {
      const end = this.buffered.indexOf('\r\n\r\n');
      if (end >= 0) {
        const lines = this.buffered.subarray(0, end).toString('latin1').split('\r\n');
        const headers = Object.fromEntries(
          lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
        );
        const length = Number(headers['content-length']);
        if (this.buffered.length >= end + 4 + length) {
          const json = JSON.parse(this.buffered.subarray(end + 4, end + 4 + length).toString('utf8'));
          this.buffered = this.buffered.subarray(end + 4 + length);
          return { status: Number(lines[0]!.split(' ')[1]), headers, json };
        }
      }
      if (this.ended) throw new Error('the connection ended before an answer');
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
  }

  /** Resolves when the gateway has closed its side of the connection. */
  async closed(): Promise<void> {
    while (!this.ended) await new Promise<void>((resolve) => (this.waiting = resolve));
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Wait for `p`, failing after `ms` instead of hanging (the bug this file guards against is a silent stall). */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>(
    (_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms)),
  );
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

const VIDEO = { model: 'vidA-v6', prompt: 'a quay #sim:video=fail', seconds: '4' } as const;
const EDIT = { model: 'img-2', prompt: 'dusk' };

/** Uploads refused while they are read, each endpoint's: [what, path, body, status, error code]. */
const refused: [string, string, { body: Buffer; type: string }, number, string][] = [
  [
    'a video reference over 3.5 MB',
    '/v1/videos',
    multipart(VIDEO, [['input_reference', padded(5.5 * 1024 * 1024)]]),
    413,
    'reference_too_large',
  ],
  [
    'video references over 4 MB in all',
    '/v1/videos',
    multipart(VIDEO, [
      ['input_reference[]', padded(3_000_000)],
      ['input_reference[]', padded(3_000_000)],
    ]),
    413,
    'reference_too_large',
  ],
  [
    'more video files than taken',
    '/v1/videos',
    multipart(
      VIDEO,
      Array.from({ length: 33 }, () => ['input_reference[]', padded(100_000)] as [string, Buffer]),
    ),
    400,
    'too_many_references',
  ],
  [
    'a video reference that is no image, more to come',
    '/v1/videos',
    multipart(VIDEO, [
      ['input_reference[]', Buffer.alloc(200_000, 7)],
      ['input_reference[]', padded(1_000_000)],
    ]),
    400,
    'invalid_reference_image',
  ],
  [
    'an edit image over 7 MB',
    '/v1/images/edits',
    multipart(EDIT, [['image', padded(7_500_000)]]),
    413,
    'reference_too_large',
  ],
  [
    'more than 14 edit images',
    '/v1/images/edits',
    multipart(
      EDIT,
      Array.from({ length: 16 }, () => ['image[]', padded(200_000)] as [string, Buffer]),
    ),
    400,
    'too_many_references',
  ],
  [
    'an edit image that is no image, more to come',
    '/v1/images/edits',
    multipart(EDIT, [
      ['image[]', Buffer.alloc(200_000, 7)],
      ['image[]', padded(1_000_000)],
    ]),
    400,
    'invalid_reference_image',
  ],
];

t.test('raw socket: an upload refused while it is read is answered with connection: close, then closed', async (t) => {
  for (const [what, path, body, status, code] of refused) {
    const raw = new Raw();
    raw.send('POST', path, body);
    const a = await within(raw.answer(), 10_000, what);
    t.same(
      [a.status, a.json.error.code, a.headers.connection],
      [status, code, 'close'],
      `${what}: ${status} ${code}, connection: close`,
    );
    const answered = Date.now();
    await within(raw.closed(), 5_000, `${what}: the close`);
    // Its FIN right behind the answer, before the end of the linger (LINGER_MS, 2 s: the gateway's cut of a
    // connection whose caller keeps sending, which would also end a connection left stalled); half a second of it
    // is left to a loaded machine.
    t.ok(Date.now() - answered < 1_500, `${what}: closed ${Date.now() - answered} ms after the answer`);
    raw.destroy();
  }
});

t.test(
  'raw socket: a refusal after the whole upload was read keeps the connection, and the next request on it is answered',
  async (t) => {
    const raw = new Raw();
    t.teardown(() => raw.destroy());
    raw.send(
      'POST',
      '/v1/videos',
      multipart({ ...VIDEO, model: 'vidB-2.1', seconds: '5' }, [
        ['input_reference[]', png],
        ['input_reference[]', png],
      ]),
    );
    const first = await within(raw.answer(), 10_000, 'the refusal');
    t.same([first.status, first.json.error.code, first.headers.connection], [400, 'too_many_references', 'keep-alive']);
    raw.send('GET', '/v1/videos/video_unknown');
    const next = await within(raw.answer(), 5_000, 'the next request');
    t.same([next.status, next.json.error.code], [404, 'video_not_found'], 'answered on the same connection');
  },
);

t.test('SDK: a refused videos.create, then videos.retrieve is answered at once', async (t) => {
  // The SDK's own timeout well under a stalled connection's: a poll sent on a dead connection fails the test.
  const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0, timeout: 5_000 });
  for (const [what, input] of [
    ['over 3.5 MB', [padded(5.5 * 1024 * 1024)]],
    ['over 4 MB in all', [padded(3_000_000), padded(3_000_000)]],
  ] as const) {
    const e = await openai.videos
      .create({
        ...VIDEO,
        input_reference: await Promise.all(input.map((b) => toFile(b, 'ref.png', { type: 'image/png' }))),
      } as never)
      .catch((x: unknown) => x);
    t.ok(
      e instanceof OpenAI.APIError && e.status === 413 && e.code === 'reference_too_large',
      `${what}: 413 reference_too_large`,
    );
    const next = await openai.videos.retrieve('video_unknown').catch((x: unknown) => x);
    t.ok(next instanceof OpenAI.NotFoundError, `${what}: the next poll is answered (404), not ${String(next)}`);
    const made = await openai.videos.create(VIDEO);
    t.equal(made.status, 'in_progress', `${what}: and a submit after it`);
  }
});

t.test('SDK: a refused images.edit, then the next edit is answered at once', async (t) => {
  const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0, timeout: 5_000 });
  const big = await openai.images
    .edit({ ...EDIT, image: await toFile(padded(7_500_000), 'big.png', { type: 'image/png' }) } as never)
    .catch((x: unknown) => x);
  t.ok(
    big instanceof OpenAI.APIError && big.status === 413 && big.code === 'reference_too_large',
    `413 reference_too_large for an image over 7 MB: ${String(big)}`,
  );
  const many = await openai.images
    .edit({
      ...EDIT,
      image: await Promise.all(
        Array.from({ length: 16 }, () => toFile(padded(200_000), 'r.png', { type: 'image/png' })),
      ),
    } as never)
    .catch((x: unknown) => x);
  t.ok(
    many instanceof OpenAI.BadRequestError && many.code === 'too_many_references',
    `400 too_many_references for 16 images: ${String(many)}`,
  );
  const ok = await openai.images.edit({ ...EDIT, image: await toFile(png, 'a.png', { type: 'image/png' }) } as never);
  t.equal(ok.data?.length, 1, 'the next edit is answered');
  const generated = await openai.images.generate({ ...EDIT, prompt: 'a quay' } as never);
  t.equal(generated.data?.length, 1, 'and a call of another kind');
});
