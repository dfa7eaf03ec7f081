import t from 'tap';
import { GatewayError } from '../../policies/errors.js';
import { ASPECT_RATIOS, formValue, parseImageRequest } from '../../policies/image-request.js';
import { imageFormat } from '../../policies/image-size.js';

function refusal(body: unknown): { param: string | undefined; message: string } {
  try {
    parseImageRequest(body);
  } catch (err) {
    if (err instanceof GatewayError) return { param: err.param, message: err.message };
    throw err;
  }
  throw new Error('accepted');
}

t.test(
  'defaults: 1K, 1:1, b64_json; every listed value accepted; unknown fields kept apart for the upstream',
  async (t) => {
    const r = parseImageRequest({ model: 'img-pro', prompt: 'a boat', quality: 'high', user: 'u1' });
    t.same(r, {
      model: 'img-pro',
      prompt: 'a boat',
      size: '1K',
      aspectRatio: '1:1',
      responseFormat: 'b64_json',
      extra: { quality: 'high', user: 'u1' },
    });
    for (const size of ['1K', '2K', '4K']) t.equal(parseImageRequest({ model: 'm', prompt: 'p', size }).size, size);
    for (const ratio of ASPECT_RATIOS)
      t.equal(parseImageRequest({ model: 'm', prompt: 'p', aspect_ratio: ratio }).aspectRatio, ratio);
    t.equal(parseImageRequest({ model: 'm', prompt: 'p', response_format: 'url', n: 1 }).responseFormat, 'url');
    t.same(
      parseImageRequest({ model: 'm', prompt: 'p', size: null, n: null, response_format: null }).size,
      '1K',
      'null is absent',
    );
    t.same(
      parseImageRequest({ model: 'm', prompt: 'p', tools: null, generationConfig: null, seed: null, user: 'u' }).extra,
      { user: 'u' },
      'a field sent as null is absent, whatever it is; the others go on to the adapter as sent',
    );
    t.equal(
      parseImageRequest({ model: 'm', prompt: 'p'.repeat(32_000) }).prompt.length,
      32_000,
      'a prompt of 32,000 characters',
    );
  },
);

t.test('anything else is a 400 whose param names the field', async (t) => {
  const cases: [unknown, string][] = [
    [{ prompt: 'p' }, 'model'],
    [{ model: '', prompt: 'p' }, 'model'],
    [{ model: 'm' }, 'prompt'],
    [{ model: 'm', prompt: '' }, 'prompt'],
    [{ model: 'm', prompt: '   ' }, 'prompt'],
    [{ model: 'm', prompt: 5 }, 'prompt'],
    [{ model: 'm', prompt: 'p', size: '1024x1024' }, 'size'],
    [{ model: 'm', prompt: 'p', size: '1k' }, 'size'],
    [{ model: 'm', prompt: 'p', size: '8K' }, 'size'],
    [{ model: 'm', prompt: 'p', aspect_ratio: '1:2' }, 'aspect_ratio'],
    [{ model: 'm', prompt: 'p', aspect_ratio: '16:10' }, 'aspect_ratio'],
    [{ model: 'm', prompt: 'p', n: 2 }, 'n'],
    [{ model: 'm', prompt: 'p', n: 0 }, 'n'],
    [{ model: 'm', prompt: 'p', n: '1' }, 'n'],
    [{ model: 'm', prompt: 'p', response_format: 'png' }, 'response_format'],
    [{ model: 'm', prompt: 'p', stream: true }, 'stream'],
    // A longer prompt would be input tokens the image's price does not cover (and OpenAI refuses it).
    [{ model: 'm', prompt: 'p'.repeat(32_001) }, 'prompt'],
  ];
  for (const [body, param] of cases) {
    const r = refusal(body);
    t.equal(r.param, param, JSON.stringify(body));
    t.match(r.message, new RegExp(`^${param}: `));
  }
  t.match(refusal({ model: 'm', prompt: 'p', size: '8K' }).message, /1K, 2K, 4K/);
  t.equal(refusal([1]).param, undefined, 'not an object');
});

t.test('form fields: n and stream read as the JSON values they spell', async (t) => {
  t.equal(formValue('n', '1'), 1);
  t.equal(formValue('n', 'one'), 'one');
  t.equal(formValue('stream', 'false'), false);
  t.equal(formValue('size', '1K'), '1K');
});

t.test('formats are decided by the bytes', async (t) => {
  t.equal(imageFormat(Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex')), 'png');
  t.equal(imageFormat(Buffer.from('ffd8ffe000104a464946', 'hex')), 'jpeg');
  t.equal(imageFormat(Buffer.from('RIFF\x10\x00\x00\x00WEBPVP8 ', 'latin1')), 'webp');
  t.equal(imageFormat(Buffer.from('GIF89a......', 'latin1')), null);
  t.equal(imageFormat(Buffer.from('RIFF\x10\x00\x00\x00WAVEfmt ', 'latin1')), null);
  t.equal(imageFormat(Buffer.from('89504e47', 'hex')), null, 'too short to tell');
});
