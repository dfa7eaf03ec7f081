/**
 * Simulated OpenAI Images API: POST /v1/images/generations (JSON) and POST /v1/images/edits
 * (multipart/form-data, images in `image` or repeated `image[]` parts), following OpenAI's API
 * reference ("Create image", "Create image edit", "The image generation response") and its image
 * generation guide (output tokens per size and quality). GPT image models answer base64 with usage;
 * `dall-e-*` models also answer `response_format: url`, served here at /blobs/<name> for 60 minutes.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { parseDirectives } from './directives.js';
import { SimError } from './errors.js';
import { newId } from './ids.js';
import { IMAGE_MIME, type ImageFormat, imageSeed, renderImage } from './image-render.js';
import { formSummary, isMultipart, readForm } from './multipart.js';
import { checkAuth } from './openai.js';
import { type ReceivedImage, decodeImage } from './received-images.js';
import { sendBody } from './respond.js';
import { type RouteContext, POST_ROUTE, applyFaults, bodyObject, selfOrigin } from './route-context.js';
import { textTokens } from './tokens.js';

/** GPT image models take up to 16 images per edit (API reference, "Create image edit"). */
const MAX_EDIT_IMAGES = 16;

/**
 * What each model takes (API reference, "Create image": size, quality, prompt, background): fixed sizes, or for
 * gpt-image-2 any WIDTHxHEIGHT with sides divisible by 16, a ratio between 1:3 and 3:1, a long edge of at most 3,840
 * and at most 3840x2160 pixels (and no transparent background).
 */
interface ModelRules {
  sizes: readonly string[] | 'free';
  qualities: readonly string[];
  maxPrompt: number;
  transparent: boolean;
}

const GPT_QUALITIES = ['auto', 'low', 'medium', 'high'] as const;

function rules(model: string): ModelRules {
  if (model.startsWith('dall-e-2'))
    return { sizes: ['256x256', '512x512', '1024x1024'], qualities: ['standard'], maxPrompt: 1000, transparent: false };
  if (model.startsWith('dall-e-3'))
    return {
      sizes: ['1024x1024', '1792x1024', '1024x1792'],
      qualities: ['standard', 'hd'],
      maxPrompt: 4000,
      transparent: false,
    };
  if (model.startsWith('gpt-image-2'))
    return { sizes: 'free', qualities: GPT_QUALITIES, maxPrompt: 32_000, transparent: false };
  return {
    sizes: ['1024x1024', '1536x1024', '1024x1536'],
    qualities: GPT_QUALITIES,
    maxPrompt: 32_000,
    transparent: true,
  };
}

/** A request's image parameters, validated. */
interface ImageParams {
  model: string;
  prompt: string;
  n: number;
  width: number;
  height: number;
  quality: 'low' | 'medium' | 'high';
  format: ImageFormat;
  /** JPEG/WebP quality from output_compression. */
  compression?: number;
  background: 'transparent' | 'opaque';
  responseFormat: 'b64_json' | 'url';
  /** GPT image models (anything not `dall-e-*`): base64 only, usage and the echoed settings in the answer. */
  gpt: boolean;
}

function invalid(param: string, message: string, code: string | null = 'invalid_value'): SimError {
  return new SimError(400, message, param, code);
}

/** The error OpenAI answers when its safety system blocks a prompt or an image (API reference, error codes). */
function moderationBlocked(): SimError {
  return new SimError(
    400,
    `Your request was rejected by the safety system. If you believe this is an error, contact us at help.openai.com and include the request ID ${newId('req_')}.`,
    null,
    'moderation_blocked',
    'image_generation_user_error',
  );
}

function oneOf<T extends string>(v: unknown, param: string, allowed: readonly T[], fallback: T): T {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'string' || !allowed.includes(v as T)) {
    throw invalid(
      param,
      `Invalid value: '${String(v)}'. Supported values are: ${allowed.map((a) => `'${a}'`).join(', ')}.`,
    );
  }
  return v as T;
}

/** An integer given as a JSON number or a form string. */
function integer(v: unknown, param: string, min: number, max: number): number | undefined {
  if (v === undefined || v === null) return undefined;
  const n = typeof v === 'string' && /^\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
    throw invalid(param, `Invalid '${param}': expected an integer from ${min} to ${max}, got ${JSON.stringify(v)}.`);
  }
  return n;
}

/** The model's `size`, or `auto` (1024x1024) on the GPT image models. */
function size(v: unknown, model: string, r: ModelRules): [number, number] {
  const gpt = !model.startsWith('dall-e');
  if (v === undefined || v === null || (v === 'auto' && gpt)) return [1024, 1024];
  if (r.sizes !== 'free') {
    if (typeof v !== 'string' || !r.sizes.includes(v)) {
      const listed = [...r.sizes, ...(gpt ? ['auto'] : [])].map((x) => `'${x}'`);
      throw invalid(
        'size',
        `Invalid value: '${String(v)}'. Supported values are: ${listed.slice(0, -1).join(', ')}, and ${listed.at(-1)}.`,
      );
    }
    const [w, h] = v.split('x').map(Number) as [number, number];
    return [w, h];
  }
  const m = typeof v === 'string' ? /^(\d{1,5})x(\d{1,5})$/.exec(v) : null;
  const w = Number(m?.[1]);
  const h = Number(m?.[2]);
  const fits =
    m !== null &&
    w > 0 &&
    h > 0 &&
    w % 16 === 0 &&
    h % 16 === 0 &&
    Math.max(w, h) <= 3840 &&
    w * h <= 3840 * 2160 &&
    Math.max(w / h, h / w) <= 3;
  if (!fits) {
    throw invalid(
      'size',
      `Invalid value: '${String(v)}'. Supported values are 'auto' and WIDTHxHEIGHT with both sides divisible by 16, an aspect ratio between 1:3 and 3:1, and at most 3840x2160 pixels.`,
    );
  }
  return [w, h];
}

/** Validates the parameters common to generations and edits (`get` reads a JSON field or a form field). */
function imageParams(get: (name: string) => unknown): ImageParams {
  const prompt = get('prompt');
  if (typeof prompt !== 'string' || prompt === '')
    throw invalid('prompt', "Missing required parameter: 'prompt'.", 'missing_required_parameter');
  const model = get('model');
  if (model !== undefined && (typeof model !== 'string' || model === ''))
    throw invalid('model', "Invalid type for 'model': expected a string.");
  const name = (model as string | undefined) ?? 'gpt-image-1';
  const gpt = !name.startsWith('dall-e');
  const r = rules(name);
  if (prompt.length > r.maxPrompt) {
    throw invalid(
      'prompt',
      `Invalid 'prompt': string too long. Expected a string with maximum length ${r.maxPrompt}, but got a string with length ${prompt.length} instead.`,
      'string_above_max_length',
    );
  }
  const [width, height] = size(get('size'), name, r);
  const quality = oneOf(get('quality'), 'quality', r.qualities as readonly string[], r.qualities[0]!);
  const format = oneOf(get('output_format'), 'output_format', ['png', 'jpeg', 'webp'] as const, 'png');
  const background = oneOf(get('background'), 'background', ['auto', 'transparent', 'opaque'] as const, 'auto');
  if (background === 'transparent' && !r.transparent) {
    throw invalid('background', `Transparent background is not supported for ${name}: use 'opaque' or 'auto'.`);
  }
  if (background === 'transparent' && format === 'jpeg') {
    throw invalid(
      'background',
      "Transparent background is not supported with output_format 'jpeg': use 'png' or 'webp'.",
    );
  }
  const rf = get('response_format');
  // The GPT image models always answer base64 and take no response_format (API reference, "Create image").
  if (gpt && rf !== undefined && rf !== null)
    throw invalid('response_format', "Unknown parameter: 'response_format'.", 'unknown_parameter');
  if (get('stream') === true || get('stream') === 'true')
    throw invalid('stream', 'The simulated image models do not stream.');
  return {
    model: name,
    prompt,
    n: integer(get('n'), 'n', 1, 10) ?? 1,
    width,
    height,
    quality: quality === 'low' || quality === 'high' ? quality : quality === 'hd' ? 'high' : 'medium',
    format: gpt ? format : 'png',
    compression: integer(get('output_compression'), 'output_compression', 0, 100),
    background: background === 'transparent' ? 'transparent' : 'opaque',
    responseFormat: oneOf(rf, 'response_format', ['b64_json', 'url'] as const, gpt ? 'b64_json' : 'url'),
    gpt,
  };
}

/** Output image tokens of GPT image models at the guide's sizes ("Cost and latency"); other sizes scale by area. */
const OUTPUT_TOKENS: Record<ImageParams['quality'], [square: number, portrait: number, landscape: number]> = {
  low: [272, 408, 400],
  medium: [1056, 1584, 1568],
  high: [4160, 6240, 6208],
};

function outputTokens(p: ImageParams): number {
  const [square, portrait, landscape] = OUTPUT_TOKENS[p.quality];
  if (p.width === 1024 && p.height === 1536) return portrait;
  if (p.width === 1536 && p.height === 1024) return landscape;
  return Math.max(1, Math.round((square * p.width * p.height) / (1024 * 1024)));
}

/** Tokens of an input image by OpenAI's tiling rule (fit in 2048x2048, short side to 768, 85 + 170 per 512px tile). */
export function inputImageTokens(width: number, height: number): number {
  const fit = Math.min(1, 2048 / Math.max(width, height));
  const short = Math.min(1, 768 / Math.min(width * fit, height * fit));
  const w = width * fit * short;
  const h = height * fit * short;
  return 85 + 170 * Math.ceil(w / 512) * Math.ceil(h / 512);
}

/** Renders the images and answers them in the ImagesResponse shape; directives apply first. */
async function answer(
  req: FastifyRequest,
  reply: FastifyReply,
  ctx: RouteContext,
  p: ImageParams,
  refs: ReceivedImage[],
): Promise<void> {
  const d = parseDirectives(p.prompt);
  await applyFaults(d);
  if (d.image === 'refuse' || d.image === 'refuse_output') throw moderationBlocked();
  const alpha = p.background === 'transparent';
  const detailed = d.image === 'detailed';
  const images = await Promise.all(
    Array.from({ length: p.n }, (_, i) =>
      renderImage({
        width: p.width,
        height: p.height,
        seed: imageSeed(p.prompt, i),
        format: p.format,
        alpha,
        quality: p.compression,
        detailed,
      }),
    ),
  );
  const origin = selfOrigin(req);
  const data = images.map((bytes) => {
    const item: Record<string, string> =
      p.responseFormat === 'url'
        ? {
            url: `${origin}/blobs/${ctx.media.putBlob(bytes, IMAGE_MIME[p.format], p.format === 'jpeg' ? 'jpg' : p.format)}`,
          }
        : { b64_json: bytes.toString('base64') };
    if (p.model.startsWith('dall-e-3')) item.revised_prompt = p.prompt;
    return item;
  });
  const created = Math.floor(Date.now() / 1000);
  let body: Record<string, unknown> = { created, data };
  if (p.gpt) {
    const text = textTokens(p.prompt);
    const image = refs.reduce((sum, r) => sum + inputImageTokens(r.width, r.height), 0);
    const output = outputTokens(p) * p.n;
    body = {
      created,
      background: p.background,
      data,
      output_format: p.format,
      quality: p.quality,
      size: `${p.width}x${p.height}`,
      usage: {
        input_tokens: text + image,
        input_tokens_details: { image_tokens: image, text_tokens: text },
        output_tokens: output,
        output_tokens_details: { image_tokens: output, text_tokens: 0 },
        total_tokens: text + image + output,
      },
    };
  }
  reply.hijack();
  sendBody(
    reply.raw,
    200,
    { 'content-type': 'application/json', 'x-request-id': newId('req_') },
    JSON.stringify(body),
    d.hangupAfter,
  );
}

/** Registers the image routes. */
export function openaiImageRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post('/v1/images/generations', POST_ROUTE, async (req, reply) => {
    ctx.record(req);
    checkAuth(req);
    const body = bodyObject(req.body);
    await answer(
      req,
      reply,
      ctx,
      imageParams((name) => body[name]),
      [],
    );
  });

  app.post('/v1/images/edits', POST_ROUTE, async (req, reply) => {
    if (!isMultipart(req)) {
      ctx.record(req);
      checkAuth(req);
      throw new SimError(400, 'Image edits take a multipart/form-data body.');
    }
    const form = await readForm(req);
    ctx.record(req, formSummary(form));
    checkAuth(req);
    const p = imageParams((name) => form.fields[name]);
    const parts = form.files.filter((f) => f.field === 'image' || f.field === 'image[]' || f.field === 'mask');
    const count = parts.filter((f) => f.field !== 'mask').length;
    if (count === 0) throw invalid('image', "Missing required parameter: 'image'.", 'missing_required_parameter');
    if (count > MAX_EDIT_IMAGES)
      throw invalid(
        'image',
        `Too many images: ${count}. At most ${MAX_EDIT_IMAGES} images can be edited at once.`,
        'array_above_max_length',
      );
    const refs: ReceivedImage[] = [];
    for (const f of parts)
      refs.push(
        await decodeImage(f.field, f.mimeType, f.bytes, (m) =>
          invalid(f.field === 'mask' ? 'mask' : 'image', m, 'invalid_image_file'),
        ),
      );
    ctx.media.recordImages(req, refs);
    await answer(
      req,
      reply,
      ctx,
      p,
      refs.filter((r) => r.field !== 'mask'),
    );
  });

  // The capability URLs of `response_format: url`: no key, like the provider's signed storage URLs.
  app.get('/blobs/:name', async (req, reply) => {
    const blob = ctx.media.blob((req.params as { name: string }).name);
    if (blob === undefined) throw new SimError(404, 'The image does not exist or its URL has expired.');
    reply.hijack();
    sendBody(reply.raw, 200, { 'content-type': blob.type, 'cache-control': 'private, max-age=3600' }, blob.bytes);
  });
}
