/**
 * The image endpoints' requests (SPEC "Image generation request", "Image edit request", "Limits"): the scalar fields
 * both share, validated with zod (unknown fields pass through), an edit's form fields as the schema reads them, and
 * the limits of an edit's reference images (enforced by plugins/intake/, intake/limits.ts EDIT_UPLOAD).
 */
import { z } from 'zod';
import { IMAGE_SIZES, type ImageSize } from '../pricing/index.js';
import { parseBody } from './schemas.js';

/** Aspect ratios of SPEC "Image generation request"; the first is the default. */
export const ASPECT_RATIOS = ['1:1', '2:3', '3:2', '3:4', '4:3', '4:5', '5:4', '9:16', '16:9', '21:9'] as const;
/** One aspect ratio. */
export type AspectRatio = (typeof ASPECT_RATIOS)[number];

/** Response formats; the first is the default. */
export const RESPONSE_FORMATS = ['b64_json', 'url'] as const;
/** One response format. */
export type ResponseFormat = (typeof RESPONSE_FORMATS)[number];

/**
 * Limits of an edit's reference images, enforced while the upload is read.
 * - images: 1 to 14 (SPEC "Limits").
 * - 7 MB each: the Gemini 3 Pro Image model card (Vertex AI) caps an inline image at 7 MB; OpenAI's GPT image models
 *   take up to 50 MB each ("Create image edit"), so the tighter bound serves every image model.
 * - 14 MB in total: the Gemini API takes inline data in requests of up to 20 MB, and base64 makes 14 MB of images
 *   18.7 MB, leaving room for the prompt.
 * - 64 megapixels each (8192 x 8192): a small file can decode to an enormous image; no provider renders from more.
 * - 128 KiB per text field: OpenAI's longest prompt is 32,000 characters (4 bytes each at most in UTF-8).
 */
export const EDIT_LIMITS = {
  images: 14,
  imageBytes: 7_000_000,
  totalBytes: 14_000_000,
  pixels: 8192 * 8192,
  fieldBytes: 128 * 1024,
} as const;

/** The fields this gateway reads; the others go to the provider's adapter, which takes only an allow-list of them. */
export const OWN_FIELDS = ['model', 'prompt', 'size', 'aspect_ratio', 'n', 'response_format', 'stream'] as const;

/**
 * Longest prompt, in characters: OpenAI's GPT image models take 32,000 ("Create image", prompt). It also bounds what
 * a prompt costs the operator as input tokens on a provider that bills them apart from the image (Gemini).
 */
export const MAX_PROMPT_CHARS = 32_000;

const oneOf = <T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be one of ${values.join(', ')}` }).nullish();

/** The scalar fields of both image endpoints; null counts as absent, as in OpenAI's API. */
export const imageBody = z.looseObject({
  model: z
    .string({ error: 'is required: a model id such as img-pro or img-2' })
    .min(1, 'is required: a model id such as img-pro or img-2'),
  prompt: z
    .string({ error: 'is required: a non-empty string' })
    .max(MAX_PROMPT_CHARS, `must be at most ${MAX_PROMPT_CHARS} characters`)
    .refine((s) => s.trim().length > 0, 'must not be empty'),
  size: oneOf(IMAGE_SIZES),
  aspect_ratio: oneOf(ASPECT_RATIOS),
  n: z.literal(1, { error: 'must be 1: one image per call' }).nullish(),
  response_format: oneOf(RESPONSE_FORMATS),
  // An image stream (partial images) cannot be billed per delivered image: refused rather than passed on.
  stream: z.literal(false, { error: 'is not served on the image endpoints: leave it out' }).nullish(),
});

/** A validated image request. */
export interface ImageRequest {
  readonly model: string;
  readonly prompt: string;
  readonly size: ImageSize;
  readonly aspectRatio: AspectRatio;
  readonly responseFormat: ResponseFormat;
  /**
   * Fields this gateway does not read: as parsed, the caller's others (null ones left out); once policed, only those
   * the provider's adapter lets through (routes/images.ts).
   */
  readonly extra: Readonly<Record<string, unknown>>;
}

/** Validate the scalar fields of an image request (a JSON body, or an edit's form fields): 400 naming the field. */
export function parseImageRequest(body: unknown): ImageRequest {
  const parsed = parseBody(imageBody, body);
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(parsed)) {
    // A field sent as null is absent, as in OpenAI's API (never passed on as null).
    if ((OWN_FIELDS as readonly string[]).includes(k) || v === null) continue;
    extra[k] = v;
  }
  return {
    model: parsed.model,
    prompt: parsed.prompt,
    size: parsed.size ?? '1K',
    aspectRatio: parsed.aspect_ratio ?? '1:1',
    responseFormat: parsed.response_format ?? 'b64_json',
    extra,
  };
}

/** A form field's value as the schema reads it: `n` as a number when it is written as one. */
export function formValue(name: string, value: string): unknown {
  if (name === 'n' && /^\d{1,6}$/.test(value)) return Number(value);
  if (name === 'stream') return value === 'true' ? true : value === 'false' ? false : value;
  return value;
}
