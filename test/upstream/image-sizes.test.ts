import t from 'tap';
import type { ProviderConfig } from '../../policies/catalog.js';
import { ASPECT_RATIOS, type AspectRatio } from '../../policies/image-request.js';
import { deliveredClass as billedClass } from '../../policies/image-sizes.js';
import type { ImageSize } from '../../pricing/index.js';
import { geminiImageConfig } from '../../plugins/upstream/protocols/gemini/image-sizes.js';
import { nearestSize, openaiSize } from '../../plugins/upstream/protocols/openai/image-sizes.js';
import { imageAdapter } from '../../plugins/upstream/protocols/registry.js';

// Each provider's sizes, reached as the image route reaches them: the image adapter of the provider's protocol.
const adapter = (protocol: string) => imageAdapter({ protocol } as ProviderConfig);
const documentedCapabilities = (protocol: string, model: string) => adapter(protocol).capabilities(model);
const renderedPixels = (protocol: string, model: string, size: ImageSize, ratio: AspectRatio) =>
  adapter(protocol).renderedPixels(model, size, ratio);
const deliveredClass = (
  protocol: string,
  model: string,
  requested: ImageSize,
  ratio: AspectRatio,
  pixels: number | null,
) => billedClass((s) => renderedPixels(protocol, model, s, ratio), requested, pixels);

t.test('OpenAI sizes: the nearest the model accepts, by ratio then area', async (t) => {
  const table = (model: string) =>
    Object.fromEntries(
      ASPECT_RATIOS.map((r) => [r, (['1K', '2K', '4K'] as const).map((s) => openaiSize(model, s, r))]),
    );
  const fixed = table('gpt-image-1');
  for (const r of ['1:1']) t.same(fixed[r], ['1024x1024', '1024x1024', '1024x1024']);
  for (const r of ['3:2', '4:3', '5:4', '16:9', '21:9']) t.same(fixed[r], ['1536x1024', '1536x1024', '1536x1024'], r);
  for (const r of ['2:3', '3:4', '4:5', '9:16']) t.same(fixed[r], ['1024x1536', '1024x1536', '1024x1536'], r);
  t.same(table('gpt-image-1.5'), fixed, 'every fixed-size GPT image model');
  t.same(table('dall-e-3')['16:9'], ['1792x1024', '1792x1024', '1792x1024']);
  t.same(table('dall-e-3')['4:5'], ['1024x1024', '1024x1024', '1024x1024']);
  t.same(table('dall-e-2')['16:9'], ['1024x1024', '1024x1024', '1024x1024'], 'the square nearest the class');
  t.equal(nearestSize(['256x256', '512x512', '1024x1024'], '1K', '1:1'), '1024x1024');
  const free = table('gpt-image-2');
  t.same(free['1:1'], ['1024x1024', '2048x2048', '2880x2880']);
  t.same(free['16:9'], ['1360x768', '2736x1536', '3840x2160']);
  t.same(free['9:16'], ['768x1360', '1536x2736', '2160x3840']);
  t.same(free['21:9'], ['1568x672', '3136x1344', '3840x1632']);
  for (const [ratio, sizes] of Object.entries(free)) {
    for (const s of sizes) {
      const [w, h] = s.split('x').map(Number) as [number, number];
      t.ok(
        w % 16 === 0 && h % 16 === 0 && Math.max(w, h) <= 3840 && w * h <= 3840 * 2160,
        `${ratio} ${s} within gpt-image-2's bounds`,
      );
      t.ok(Math.max(w / h, h / w) <= 3);
      const [a, b] = ratio.split(':').map(Number) as [number, number];
      t.ok(Math.abs(Math.log(w / h / (a / b))) < 0.02, `${ratio} ${s} keeps the ratio`);
    }
  }
});

t.test('Gemini takes both directly; 1K is its default and left out', async (t) => {
  t.same(geminiImageConfig('1K', '16:9'), { aspectRatio: '16:9' });
  t.same(geminiImageConfig('4K', '21:9'), { aspectRatio: '21:9', imageSize: '4K' });
});

t.test('what each upstream renders, as its provider documents it: classes and ratios', async (t) => {
  t.same(
    documentedCapabilities('openai', 'gpt-image-2'),
    { sizes: ['1K', '2K', '4K'], ratios: ASPECT_RATIOS },
    'gpt-image-2: any ratio, three classes',
  );
  t.same(
    documentedCapabilities('openai', 'gpt-image-1'),
    { sizes: ['1K'], ratios: ['1:1', '2:3', '3:2'] },
    'gpt-image-1: its three sizes',
  );
  t.same(documentedCapabilities('openai', 'gpt-image-1.5'), { sizes: ['1K'], ratios: ['1:1', '2:3', '3:2'] });
  t.same(
    documentedCapabilities('openai', 'dall-e-3'),
    { sizes: ['1K'], ratios: ['1:1', '9:16', '16:9'] },
    '1792x1024 is within 2% of 16:9',
  );
  t.same(documentedCapabilities('openai', 'dall-e-2'), { sizes: ['1K'], ratios: ['1:1'] });
  t.same(documentedCapabilities('gemini', 'gemini-3-pro-image-preview'), {
    sizes: ['1K', '2K', '4K'],
    ratios: ASPECT_RATIOS,
  });
  t.same(
    documentedCapabilities('gemini', 'gemini-2.5-flash-image'),
    { sizes: ['1K'], ratios: ASPECT_RATIOS },
    'no imageSize: 1K',
  );
});

t.test('the class a delivered image is billed at: what its pixels hold, never more than asked', async (t) => {
  t.equal(renderedPixels('openai', 'gpt-image-2', '4K', '21:9'), 3840 * 1632);
  t.equal(renderedPixels('gemini', 'gemini-3-pro-image-preview', '2K', '16:9'), 2048 * 2048);
  t.equal(deliveredClass('openai', 'gpt-image-2', '4K', '21:9', 3840 * 1632), '4K', 'the size asked for');
  t.equal(deliveredClass('openai', 'gpt-image-2', '4K', '21:9', 3136 * 1344), '2K', 'a 2K image');
  t.equal(deliveredClass('openai', 'gpt-image-2', '4K', '1:1', 1024 * 1024), '1K');
  t.equal(deliveredClass('gemini', 'gemini-3-pro-image-preview', '4K', '21:9', 6336 * 2688), '4K');
  t.equal(deliveredClass('gemini', 'gemini-3-pro-image-preview', '4K', '16:9', 2752 * 1536), '2K');
  t.equal(
    deliveredClass('gemini', 'gemini-3-pro-image-preview', '2K', '1:1', 256 * 256),
    '1K',
    'any image is at least 1K',
  );
  t.equal(
    deliveredClass('gemini', 'gemini-3-pro-image-preview', '1K', '1:1', 8192 * 8192),
    '1K',
    'a larger one: what was asked',
  );
  t.equal(
    deliveredClass('gemini', 'gemini-3-pro-image-preview', '2K', '1:1', null),
    '2K',
    'a header not read: the declared class',
  );
  // A config that declares 2K and 4K for gpt-image-1, which renders 1536x1024 for every class: billed as 1K.
  t.equal(deliveredClass('openai', 'gpt-image-1', '4K', '3:2', 1536 * 1024), '1K', 'no class of its own above 1K');
  t.equal(deliveredClass('openai', 'gpt-image-1', '4K', '3:2', null), '1K', 'even with no header read');
});
