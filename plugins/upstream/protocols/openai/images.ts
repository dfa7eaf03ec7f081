/**
 * The OpenAI Images API as an image upstream, from OpenAI's API reference ("Create image", "Create image edit",
 * "The image generation response", error codes):
 * - generations: POST {base}/images/generations, JSON; edits: POST {base}/images/edits, multipart/form-data with the
 *   reference images as `image` (one) or repeated `image[]` parts (several), as the official SDK sends them.
 * - `size` is the nearest size the model accepts (image-sizes.ts). GPT image models always answer base64
 *   and take no `response_format`; `dall-e-*` models are asked for `b64_json` (their default is a URL).
 * - The answer is an ImagesResponse: `data[0].b64_json`, `created`, `usage` (GPT image models).
 * - A prompt or image the safety system blocks is a 400 with `code: moderation_blocked` (GPT image models) or
 *   `content_policy_violation` (DALL-E): a refusal, passed on as content_refused with the provider's message.
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ImageModel, ModelRoute } from '../../../../policies/catalog.js';
import { GatewayError } from '../../../../policies/errors.js';
import type { ImageRequest } from '../../../../policies/image-request.js';
import { IMAGE_MIME } from '../../../../policies/image-size.js';
import { openaiSize } from './image-sizes.js';
import {
  ImageString,
  unknownField,
  type CallerFields,
  type ImageAnswerEnd,
  type ImageAnswerReader,
  type ImageSink,
  type ImageUpstreamRequest,
  type ReferenceImage,
} from '../../image-answer.js';
import { JsonScanner, type JsonPath } from '../../json-scan.js';
import { USER_AGENT } from '../protocol.js';
import { upstreamError } from '../../proxy.js';

/**
 * Caller fields of the Create image / Create image edit requests that leave the price as it is (the same output
 * tokens and image): the background, the encoding of the answer, the end-user id, dall-e-3's style.
 */
const PRICE_NEUTRAL = new Set(['background', 'output_format', 'output_compression', 'user', 'style']);

/** Gemini request fields, meaningless here: dropped, not refused, so one request serves either image model. */
export const GEMINI_FIELDS = new Set(['generationConfig', 'generation_config', 'safetySettings', 'safety_settings']);

/** The `quality` every call of the model is sent: the config's, else medium (GPT image), standard (dall-e-3), none (dall-e-2). */
export function pinnedQuality(model: ImageModel, upstreamModel: string): string | undefined {
  if (model.quality !== undefined) return model.quality;
  if (upstreamModel.startsWith('dall-e-2')) return undefined;
  return upstreamModel.startsWith('dall-e') ? 'standard' : 'medium';
}

/**
 * The caller's fields (beyond the gateway's own) an OpenAI Images call takes: an allow-list, so that nothing the
 * price does not cover reaches the provider. `quality` and `input_fidelity` are the operator's (the same value, or
 * `auto` for quality, is accepted); `moderation` goes only where the model's config allows callers' safety settings.
 * Anything else is a 400 naming it.
 */
export function openaiCallerFields(
  route: ModelRoute<ImageModel>,
  extra: Readonly<Record<string, unknown>>,
): CallerFields {
  const fields: Record<string, unknown> = {};
  const dropped: string[] = [];
  const model = route.model;
  for (const [name, value] of Object.entries(extra)) {
    if (PRICE_NEUTRAL.has(name)) {
      fields[name] = value;
    } else if (name === 'quality') {
      const pinned = pinnedQuality(model, route.upstreamModel);
      if (value !== 'auto' && value !== pinned) {
        throw new GatewayError('invalid_request', {
          param: 'quality',
          message:
            pinned === undefined
              ? `quality: ${model.id} takes no quality setting.`
              : `quality: ${model.id} renders at quality ${pinned}, which its price covers: send ${pinned}, auto, or nothing.`,
        });
      }
    } else if (name === 'input_fidelity') {
      if (value !== model.input_fidelity) {
        throw new GatewayError('invalid_request', {
          param: 'input_fidelity',
          message: `input_fidelity: set by the gateway for ${model.id} (${model.input_fidelity ?? "the provider's default"}), which its price covers: leave it out.`,
        });
      }
    } else if (name === 'moderation') {
      if (model.caller_safety) fields[name] = value;
      else dropped.push(name);
    } else if (GEMINI_FIELDS.has(name)) {
      dropped.push(name);
    } else {
      throw unknownField(name);
    }
  }
  return { fields, dropped };
}

/** Error codes of a refusal by OpenAI's safety system. */
const REFUSAL_CODES = new Set(['moderation_blocked', 'content_policy_violation']);

/** The GatewayError of an OpenAI Images error answer: a safety refusal is content_refused, the rest as any upstream's. */
export function openaiImageError(status: number, text: string, retryAfter: string | undefined): GatewayError {
  if (status === 400) {
    try {
      const e = (JSON.parse(text) as { error?: { code?: unknown; type?: unknown; message?: unknown } }).error;
      if (e && (REFUSAL_CODES.has(String(e.code)) || e.type === 'image_generation_user_error')) {
        const message = typeof e.message === 'string' ? e.message.slice(0, 1000) : undefined;
        return new GatewayError('content_refused', {
          message,
          cause: new Error(`upstream ${status}: ${text.slice(0, 500)}`),
        });
      }
    } catch {
      // not JSON: as any other error
    }
  }
  return upstreamError(status, text, retryAfter);
}

/** Reads an ImagesResponse: the first image's base64 to the sink, `created` and `usage` captured. */
export class OpenAIImageReader implements ImageAnswerReader {
  private readonly scanner: JsonScanner;
  private readonly image: ImageString;
  private created: number | undefined;
  private usage: Record<string, unknown> | undefined;
  private inImage = false;

  constructor(sink: ImageSink) {
    this.image = new ImageString(sink);
    this.scanner = new JsonScanner({
      take: (path: JsonPath, kind) => {
        if (path.length === 1 && (path[0] === 'created' || path[0] === 'usage')) return 'capture';
        if (kind === 'string' && path.length === 3 && path[0] === 'data' && path[1] === 0 && path[2] === 'b64_json') {
          this.inImage = true;
          return 'stream';
        }
        return 'skip';
      },
      piece: (p) => this.image.piece(p),
      stringEnd: () => {
        this.inImage = false;
        this.image.end();
      },
      captured: (path, value, whole) => {
        if (!whole) return;
        if (path[0] === 'created' && /^\d{1,12}$/.test(value)) this.created = Number(value);
        if (path[0] === 'usage') {
          try {
            const u = JSON.parse(value) as unknown;
            if (u && typeof u === 'object' && !Array.isArray(u)) this.usage = u as Record<string, unknown>;
          } catch {
            // no usage
          }
        }
      },
    });
  }

  feed(chunk: Buffer): void {
    this.scanner.write(chunk);
  }

  end(): ImageAnswerEnd {
    const whole = this.scanner.end();
    const image = whole && this.image.ended && this.image.isImage;
    return {
      image,
      created: this.created,
      usage: this.usage,
      failure: image
        ? null
        : new GatewayError('upstream_error', { message: 'The model provider answered without an image.' }),
    };
  }
}

function headers(route: ModelRoute<ImageModel>, contentType: string, length?: number): Record<string, string> {
  const h: Record<string, string> = {
    authorization: `Bearer ${route.provider.key}`,
    'content-type': contentType,
    accept: 'application/json',
    'user-agent': USER_AGENT,
  };
  if (length !== undefined) h['content-length'] = String(length);
  return h;
}

/**
 * The body fields of a call: the caller's allowed fields (`req.extra`, from openaiCallerFields), then what this
 * gateway decides: the model, prompt, size, quality and, on edits, input fidelity.
 */
function fields(route: ModelRoute<ImageModel>, req: ImageRequest, edit: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {
    ...req.extra,
    model: route.upstreamModel,
    prompt: req.prompt,
    size: openaiSize(route.upstreamModel, req.size, req.aspectRatio),
  };
  const quality = pinnedQuality(route.model, route.upstreamModel);
  if (quality !== undefined) body.quality = quality;
  if (edit && route.model.input_fidelity !== undefined) body.input_fidelity = route.model.input_fidelity;
  if (route.upstreamModel.startsWith('dall-e')) body.response_format = 'b64_json';
  return body;
}

/** A field name in a Content-Disposition header, encoded as the HTML standard encodes form names. */
function formName(name: string): string {
  return name.replace(/"/g, '%22').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}

/** A multipart/form-data body as a stream of the parts, the images not copied; and its length. */
function multipart(
  values: Record<string, unknown>,
  images: readonly ReferenceImage[],
): { body: Readable; boundary: string; length: number } {
  const boundary = `----farebox${randomBytes(12).toString('hex')}`;
  const chunks: Buffer[] = [];
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined || value === null) continue;
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    chunks.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${formName(name)}"\r\n\r\n${text}\r\n`,
        'utf8',
      ),
    );
  }
  const field = images.length === 1 ? 'image' : 'image[]';
  images.forEach((img, i) => {
    const ext = img.format === 'jpeg' ? 'jpg' : img.format;
    chunks.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${field}"; filename="image-${i + 1}.${ext}"\r\nContent-Type: ${IMAGE_MIME[img.format]}\r\n\r\n`,
        'latin1',
      ),
    );
    chunks.push(img.bytes);
    chunks.push(Buffer.from('\r\n', 'latin1'));
  });
  chunks.push(Buffer.from(`--${boundary}--\r\n`, 'latin1'));
  const length = chunks.reduce((n, c) => n + c.length, 0);
  return { body: Readable.from(chunks, { objectMode: false }), boundary, length };
}

/** The upstream request of an image call on the OpenAI Images API; `references` make it an edit. */
export function openaiImageRequest(
  route: ModelRoute<ImageModel>,
  req: ImageRequest,
  references: readonly ReferenceImage[] | null,
): ImageUpstreamRequest {
  const common = {
    method: 'POST' as const,
    provider: route.provider.name,
    timeoutMs: route.provider.timeout_ms,
    maxDurationMs: route.provider.max_duration_ms,
    reader: (sink: ImageSink) => new OpenAIImageReader(sink),
    error: openaiImageError,
  };
  if (references === null) {
    return {
      ...common,
      url: route.url,
      headers: headers(route, 'application/json'),
      body: JSON.stringify(fields(route, req, false)),
    };
  }
  const form = multipart(fields(route, req, true), references);
  return {
    ...common,
    url: `${route.provider.base_url}/images/edits`,
    headers: headers(route, `multipart/form-data; boundary=${form.boundary}`, form.length),
    body: form.body,
  };
}
