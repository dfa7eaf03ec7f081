// The input bound of a text request counts what providers bill by other measures than bytes: inline images by their
// pixels, client tools by the system prompt they add; what cannot be bounded is refused.
import t from 'tap';
import sharp from 'sharp';
import { GatewayError } from '../../policies/errors.js';
import { FORWARDED_BETAS, refuseUnpriced, splitBetas } from '../../policies/forwarding.js';
import { base64ImageSize, imageSize } from '../../policies/image-size.js';
import {
  FRAMING_TOKENS,
  bodyFacts,
  inputBounds,
  MAX_IMAGE_TOKENS,
  TOOL_TOKENS,
  type BoundsInput,
} from '../../policies/text-bounds.js';

const bounds = (body: Record<string, unknown>, o: Partial<BoundsInput> = {}) =>
  inputBounds({
    body,
    bytes: Buffer.byteLength(JSON.stringify(body)),
    protocol: 'anthropic',
    family: 'alpha',
    contextWindow: 200_000,
    ...o,
  });
const codeOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    return e instanceof GatewayError ? `${e.code}:${e.param ?? ''}` : String(e);
  }
  return 'no error';
};

t.test('image headers: PNG, JPEG, GIF and WebP sizes read from the first bytes', async (t) => {
  const raw = { create: { width: 1092, height: 731, channels: 3 as const, background: '#204080' } };
  for (const format of ['png', 'jpeg', 'gif', 'webp'] as const) {
    const bytes = await sharp(raw).toFormat(format).toBuffer();
    t.same(imageSize(bytes), { width: 1092, height: 731 }, format);
    t.same(base64ImageSize(bytes.toString('base64')), { width: 1092, height: 731 }, `${format} from base64`);
  }
  const lossless = await sharp(raw).webp({ lossless: true }).toBuffer();
  t.same(imageSize(lossless), { width: 1092, height: 731 }, 'lossless WebP (VP8L)');
  const alpha = await sharp({ create: { ...raw.create, channels: 4, background: '#20408080' } })
    .webp()
    .toBuffer();
  t.same(imageSize(alpha), { width: 1092, height: 731 }, 'WebP with alpha (VP8X)');
  // A JPEG whose frame header comes after a large metadata segment.
  const exif = await sharp(raw)
    .jpeg()
    .withMetadata({ exif: { IFD0: { ImageDescription: 'x'.repeat(30_000) } } })
    .toBuffer();
  t.same(imageSize(exif), { width: 1092, height: 731 }, 'JPEG with metadata before its frame');
  t.equal(imageSize(Buffer.from('not an image at all, not a header')), null);
});

t.test('100 flat 1092x1092 PNGs are bound by their pixels, not their few bytes', async (t) => {
  const png = (
    await sharp({ create: { width: 1092, height: 1092, channels: 3, background: '#ffffff' } })
      .png({ compressionLevel: 9 })
      .toBuffer()
  ).toString('base64');
  t.ok(png.length < 8_000, `a flat image is small: ${png.length} base64 characters`);
  const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } };
  const body = {
    model: 'm',
    max_tokens: 1,
    messages: [{ role: 'user', content: Array.from({ length: 100 }, () => image) }],
  };
  const perImage = Math.ceil((1092 * 1092) / 750);
  const b = bounds(body, { contextWindow: 1_000_000 });
  t.ok(b.inputBound >= 100 * perImage, `${b.inputBound} >= ${100 * perImage} (Anthropic: width x height / 750 each)`);
  t.equal(bounds(body).inputBound, 200_000, 'capped at the window');
  // Nested in a tool result and in system, as Claude Code sends them.
  const nested = {
    model: 'm',
    max_tokens: 1,
    system: [{ type: 'text', text: 's' }],
    messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [image] }] }],
  };
  t.ok(bounds(nested, { contextWindow: 1_000_000 }).inputBound >= perImage, 'an image in a tool result counts');
  // Other families: the model's most per image, whatever the header says.
  const chat = {
    model: 'm',
    messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } }] }],
  };
  t.ok(
    bounds(chat, { protocol: 'openai', family: 'beta' }).inputBound >= MAX_IMAGE_TOKENS.beta!,
    'a data: URL on beta',
  );
  t.ok(
    bounds(chat, { protocol: 'openai', family: 'gamma', maxImageTokens: 50_000 }).inputBound >= 50_000,
    "the model's max_image_tokens",
  );
  const broken = {
    model: 'm',
    messages: [
      { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] },
    ],
  };
  t.ok(bounds(broken).inputBound >= MAX_IMAGE_TOKENS.alpha!, 'an unreadable header counts the most an image costs');
});

t.test('client tools add the system prompt tokens Anthropic documents; server tools and MCP are refused', async (t) => {
  const plain = { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] };
  const base = bounds(plain).inputBound;
  t.equal(base, JSON.stringify(plain).length + FRAMING_TOKENS);
  const tools = [
    { type: 'bash_20250124', name: 'bash' },
    { type: 'text_editor_20250728', name: 'str_replace_based_edit_tool' },
    { type: 'computer_20250124', name: 'computer', display_width_px: 1024, display_height_px: 768 },
  ];
  const withTools = { ...plain, tools };
  t.equal(
    bounds(withTools).inputBound,
    JSON.stringify(withTools).length +
      FRAMING_TOKENS +
      TOOL_TOKENS.bash_! +
      TOOL_TOKENS.text_editor_! +
      TOOL_TOKENS.computer_!,
  );
  t.equal(
    bounds({
      ...plain,
      tools: [
        { name: 'f', input_schema: { type: 'object' } },
        { type: 'custom', name: 'g', input_schema: {} },
      ],
    }).inputBound > base,
    true,
    'custom tools count by their bytes',
  );
  for (const type of ['web_search_20250305', 'web_fetch_20250910', 'code_execution_20250825', 'mcp_toolset']) {
    t.equal(
      codeOf(() => bounds({ ...plain, tools: [{ type, name: 'x' }] })),
      'unsupported_tool:tools',
      type,
    );
  }
  t.equal(
    codeOf(() => bounds({ ...plain, mcp_servers: [{ type: 'url', url: 'https://example.com/sse', name: 'x' }] })),
    'unsupported_tool:mcp_servers',
  );
});

t.test(
  'media by reference is bound by the window; a body that cannot fit is refused, except when counting',
  async (t) => {
    const byUrl = {
      model: 'm',
      max_tokens: 1,
      messages: [
        { role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] },
      ],
    };
    t.equal(bounds(byUrl).inputBound, 200_000);
    const image = (url: string) => ({
      model: 'm',
      max_tokens: 1,
      messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url } }] }],
    });
    for (const url of [
      'HTTPS://EXAMPLE.COM/A.PNG',
      'Http://example.com/a.png',
      'ftp://example.com/a.png',
      '//example.com/a.png',
      'DATA:image/png;base64,AAAA',
    ]) {
      t.equal(bounds(image(url)).inputBound, 200_000, `${url}: fetched upstream, bounded by the window`);
    }
    const chat = (url: string) => ({
      model: 'm',
      messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }],
    });
    t.equal(bounds(chat('HTTPS://example.com/a.png'), { protocol: 'openai' }).inputBound, 200_000);
    const huge = { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'a'.repeat(1_000 * 64 + 1) }] };
    t.equal(
      codeOf(() => bounds(huge, { contextWindow: 1_000 })),
      'context_window_exceeded:',
    );
    t.equal(bounds(huge, { contextWindow: 1_000, mustFit: false }).inputBound, 1_000);
  },
);

t.test('pricing-affecting parameters are refused; anthropic-beta flags pass only from the allow-list', async (t) => {
  const chat = { model: 'm', messages: [] };
  const refused = (body: Record<string, unknown>) =>
    codeOf(() => refuseUnpriced('openai', body, bodyFacts(body, 'gamma', 1)));
  t.equal(refused({ ...chat, web_search_options: {} }), 'unsupported_parameter:web_search_options');
  t.equal(refused({ ...chat, modalities: ['text', 'audio'] }), 'unsupported_parameter:modalities');
  t.equal(refused({ ...chat, audio: { voice: 'x', format: 'wav' } }), 'unsupported_parameter:modalities');
  t.equal(refused({ ...chat, prediction: { type: 'content', content: 'x' } }), 'unsupported_parameter:prediction');
  t.equal(refused({ ...chat, service_tier: 'priority' }), 'unsupported_parameter:service_tier');
  t.equal(
    refused({ ...chat, service_tier: 'flex' }),
    'no error',
    "a cheaper tier is the operator's gain, not the caller's loss",
  );
  t.equal(
    refused({
      ...chat,
      messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'x', format: 'wav' } }] }],
    }),
    'unsupported_parameter:messages',
  );
  t.equal(refused({ ...chat, logprobs: true, seed: 1, metadata: { a: 'b' } }), 'no error', 'other fields pass through');
  t.equal(
    codeOf(() => refuseUnpriced('anthropic', { container: 'c' }, bodyFacts({}, 'alpha', 1))),
    'unsupported_parameter:container',
  );

  t.same(splitBetas('claude-code-20250219, context-1m-2025-08-07,interleaved-thinking-2025-05-14,,oauth-2025-04-20'), {
    forwarded: ['claude-code-20250219', 'interleaved-thinking-2025-05-14'],
    dropped: ['context-1m-2025-08-07', 'oauth-2025-04-20'],
  });
  t.same(splitBetas(['code-execution-2025-05-22', 'extended-cache-ttl-2025-04-11']), {
    forwarded: ['extended-cache-ttl-2025-04-11'],
    dropped: ['code-execution-2025-05-22'],
  });
  t.notOk(FORWARDED_BETAS.has('context-1m-2025-08-07'), 'never the long-context flag');
});

t.test('bodyFacts: one walk reads what the provider parses, at any depth the parser allows', async (t) => {
  const f = (body: unknown) => bodyFacts(body, 'gamma', 100);
  const deep = (n: number, leaf: object) => {
    let node: object = leaf;
    for (let i = 0; i < n; i++) node = { c: [node] };
    return node;
  };
  t.ok(f(deep(60, { url: 'https://example.com/x.pdf' })).byReference, 'a URL 120 levels down');
  t.notOk(f({ messages: [{ content: 'a "url":"https://x" in text' }] }).byReference, 'text in a string is text');
  t.ok(f({ a: [{ file_id: null }] }).byReference, 'any file_id');
  t.ok(f({ a: { type: 'search_result' } }).byReference);
  t.notOk(f({ a: { type: 'text', url: 'data:image/png;base64,AA' } }).byReference, 'inline data is not a reference');
  t.ok(f({ a: { url: 'DATA:image/png;base64,AA' } }).byReference, 'DATA: in capitals is fetched upstream');
  t.same(
    [f({ s: [{ cache_control: { type: 'ephemeral' } }] }), f({ s: [{ cache_control: { ttl: '1h' } }] })].map((x) => [
      x.cacheControl,
      x.ttl1h,
    ]),
    [
      [true, false],
      [true, true],
    ],
  );
  t.notOk(f({ s: ['cache_control'] }).cacheControl, 'only the key sets a cache tier');
  t.ok(f({ m: [{ type: 'input_audio' }] }).inputAudio, 'the part type');
  t.ok(f({ m: [{ input_audio: {} }] }).inputAudio, 'the key');
  t.equal(
    codeOf(() => f(deep(70, {}))),
    'invalid_request:',
    'deeper than the parser allows: refused',
  );
  const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
  const img = f({
    messages: [
      { content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: png } }] },
      { content: [{ type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } }] },
    ],
  });
  t.equal(img.imageTokens, 200, 'two images at the most one costs');
  t.equal(img.imageChars, 2 * png.length);
});
