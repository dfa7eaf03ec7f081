/**
 * The Gemini API's image generation as an image upstream, from the Gemini API reference ("Generating content":
 * GenerateContentRequest, GenerateContentResponse, Candidate.FinishReason, PromptFeedback.BlockReason, UsageMetadata)
 * and its image generation guide:
 * - POST {base}/models/{model}:generateContent with `x-goog-api-key`; the prompt as a text part, reference images
 *   as `inlineData` parts after it; `generationConfig.responseModalities` IMAGE alone (text would be output the
 *   image's price does not cover), `maxOutputTokens` from the model's config, one candidate,
 *   `imageConfig.aspectRatio` and `imageConfig.imageSize` (image-sizes.ts).
 * - The image is the first `inlineData` part of the first candidate's content that is not a thought; text parts are
 *   read only for a refusal's reason.
 * - Refusals: `promptFeedback.blockReason` with no candidates (the prompt was blocked), or a candidate whose
 *   finishReason is a safety, policy or no-image reason (IMAGE_SAFETY, PROHIBITED_CONTENT, ...) and no image; an
 *   answer with text and no image is the model declining. Each is content_refused with the provider's reason.
 * - `usageMetadata` becomes OpenAI's ImageGenUsage (prompt, candidate and thought tokens by modality).
 * The caller's fields are an allow-list (geminiCallerFields): sampling fields of `generationConfig`, and
 * `safetySettings` where the operator allows them; OpenAI's own parameters are dropped; anything else is refused.
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { ImageModel, ModelRoute } from '../../../../policies/catalog.js';
import { GatewayError } from '../../../../policies/errors.js';
import type { ImageRequest } from '../../../../policies/image-request.js';
import { IMAGE_MIME } from '../../../../policies/image-size.js';
import { geminiImageConfig } from './image-sizes.js';
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

/** OpenAI Images parameters with no Gemini equivalent: dropped (named in x-gw-dropped-fields), not refused. */
const OPENAI_ONLY = new Set([
  'quality',
  'background',
  'output_format',
  'output_compression',
  'moderation',
  'style',
  'user',
  'input_fidelity',
]);

/** GenerationConfig fields that leave the price as it is: sampling only. */
const SAMPLING = new Set(['temperature', 'topP', 'top_p', 'topK', 'top_k', 'seed']);

/** What generationConfig.maxOutputTokens is when the model's config names none. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 8_192;

/**
 * The caller's fields (beyond the gateway's own) a Gemini image call takes: an allow-list, so that nothing the
 * price does not cover reaches the provider. Of `generationConfig`, the sampling fields (and candidateCount 1); the
 * rest (responseModalities, maxOutputTokens, thinkingConfig, imageConfig, ...) is the gateway's: the image alone,
 * its output tokens capped. `safetySettings` go only where the model's config allows callers' safety settings.
 * OpenAI's own parameters are dropped; anything else is a 400 naming it.
 */
export function geminiCallerFields(
  route: ModelRoute<ImageModel>,
  extra: Readonly<Record<string, unknown>>,
): CallerFields {
  const fields: Record<string, unknown> = {};
  const dropped: string[] = [];
  for (const [name, value] of Object.entries(extra)) {
    if (name === 'generationConfig' || name === 'generation_config') {
      if (!isObj(value))
        throw new GatewayError('invalid_request', { param: name, message: `${name}: must be an object.` });
      const sampling: Obj = {};
      for (const [key, v] of Object.entries(value)) {
        if (v === null) continue;
        if (SAMPLING.has(key)) {
          sampling[key] = v;
        } else if ((key === 'candidateCount' || key === 'candidate_count') && v === 1) {
          // One candidate is what the gateway asks for anyway.
        } else {
          throw new GatewayError('invalid_request', {
            param: `${name}.${key}`.slice(0, 100),
            message: `${name}.${key.slice(0, 60)}: set by the gateway, not the caller (one image, its output tokens capped); only ${[...SAMPLING].filter((k) => !k.includes('_')).join(', ')} are taken.`,
          });
        }
      }
      fields.generationConfig = sampling;
    } else if (name === 'safetySettings' || name === 'safety_settings') {
      if (route.model.caller_safety) fields.safetySettings = value;
      else dropped.push(name);
    } else if (OPENAI_ONLY.has(name)) {
      dropped.push(name);
    } else {
      throw unknownField(name);
    }
  }
  return { fields, dropped };
}

/** Finish reasons that mean the image was withheld (Candidate.FinishReason). */
const REFUSED = new Set([
  'SAFETY',
  'IMAGE_SAFETY',
  'PROHIBITED_CONTENT',
  'IMAGE_PROHIBITED_CONTENT',
  'BLOCKLIST',
  'SPII',
  'RECITATION',
  'IMAGE_RECITATION',
  'LANGUAGE',
  'NO_IMAGE',
  'IMAGE_OTHER',
]);

/** Longest reason passed on from the model's text. */
const REASON_CHARS = 1000;

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Sum of the token counts of one modality in a Gemini ModalityTokenCount list. */
function modality(list: unknown, name: string): number {
  if (!Array.isArray(list)) return 0;
  return list.reduce(
    (n: number, d: unknown) =>
      n + (isObj(d) && d.modality === name && typeof d.tokenCount === 'number' ? d.tokenCount : 0),
    0,
  );
}

/** Gemini's usageMetadata as OpenAI's ImageGenUsage. */
export function imageUsageOf(meta: Obj): Record<string, unknown> {
  const n = (v: unknown) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : 0);
  const input = n(meta.promptTokenCount);
  const candidates = n(meta.candidatesTokenCount);
  const output = candidates + n(meta.thoughtsTokenCount);
  return {
    input_tokens: input,
    input_tokens_details: {
      text_tokens: modality(meta.promptTokensDetails, 'TEXT'),
      image_tokens: modality(meta.promptTokensDetails, 'IMAGE'),
    },
    output_tokens: output,
    output_tokens_details: {
      image_tokens: modality(meta.candidatesTokensDetails, 'IMAGE'),
      text_tokens: output - modality(meta.candidatesTokensDetails, 'IMAGE'),
    },
    total_tokens: n(meta.totalTokenCount) || input + output,
  };
}

/** Reads a GenerateContentResponse: the image to the sink, the rest kept for the usage or the refusal. */
export class GeminiImageReader implements ImageAnswerReader {
  private readonly scanner: JsonScanner;
  private image: ImageString | null = null;
  private readonly thoughts = new Set<number>();
  private readonly mimeTypes = new Map<number, string>();
  private text = '';
  private finishReason: string | undefined;
  private finishMessage: string | undefined;
  private promptFeedback: Obj | undefined;
  private usageMetadata: Obj | undefined;

  constructor(private readonly sink: ImageSink) {
    this.scanner = new JsonScanner({
      take: (path, kind) => this.take(path, kind === 'string'),
      piece: (p) => this.image?.piece(p),
      stringEnd: () => this.image?.end(),
      captured: (path, value, whole) => this.captured(path, value, whole),
    });
  }

  private take(path: JsonPath, string: boolean): 'stream' | 'capture' | 'skip' {
    if (path.length === 1) return path[0] === 'promptFeedback' || path[0] === 'usageMetadata' ? 'capture' : 'skip';
    if (path[0] !== 'candidates' || path[1] !== 0) return 'skip';
    if (path.length === 3) return path[2] === 'finishReason' || path[2] === 'finishMessage' ? 'capture' : 'skip';
    if (path[2] !== 'content' || path[3] !== 'parts' || typeof path[4] !== 'number') return 'skip';
    const part = path[4];
    if (path.length === 6) {
      if (path[5] === 'thought') return 'capture';
      return path[5] === 'text' && string && !this.thoughts.has(part) ? 'capture' : 'skip';
    }
    if (path.length !== 7 || (path[5] !== 'inlineData' && path[5] !== 'inline_data')) return 'skip';
    if (path[6] === 'mimeType' || path[6] === 'mime_type') return 'capture';
    if (path[6] !== 'data' || !string || this.thoughts.has(part)) return 'skip';
    // The first image only; a string that turned out not to be one leaves room for the next.
    if (this.image !== null && (this.image.isImage || !this.image.ended)) return 'skip';
    const mime = this.mimeTypes.get(part);
    if (mime !== undefined && !mime.startsWith('image/')) return 'skip';
    this.image = new ImageString(this.sink);
    return 'stream';
  }

  private captured(path: JsonPath, value: string, whole: boolean): void {
    const last = path[path.length - 1];
    if (path.length === 1) {
      if (!whole) return;
      try {
        const v = JSON.parse(value) as unknown;
        if (!isObj(v)) return;
        if (last === 'promptFeedback') this.promptFeedback = v;
        else this.usageMetadata = v;
      } catch {
        // not kept
      }
    } else if (last === 'finishReason') {
      this.finishReason = value;
    } else if (last === 'finishMessage') {
      this.finishMessage = value.slice(0, REASON_CHARS);
    } else if (last === 'thought') {
      if (value === 'true') this.thoughts.add(path[4] as number);
    } else if (last === 'text') {
      if (this.text.length < REASON_CHARS)
        this.text = (this.text === '' ? value : `${this.text} ${value}`).slice(0, REASON_CHARS);
    } else if (last === 'mimeType' || last === 'mime_type') {
      this.mimeTypes.set(path[4] as number, value);
    }
  }

  feed(chunk: Buffer): void {
    this.scanner.write(chunk);
  }

  end(): ImageAnswerEnd {
    const whole = this.scanner.end();
    const image = whole && this.image !== null && this.image.isImage && this.image.ended;
    const usage = this.usageMetadata ? imageUsageOf(this.usageMetadata) : undefined;
    return { image, usage, failure: image ? null : this.failure(whole) };
  }

  /** Why the answer holds no image. */
  private failure(whole: boolean): GatewayError {
    const block = this.promptFeedback?.blockReason;
    if (typeof block === 'string') {
      const detail =
        typeof this.promptFeedback?.blockReasonMessage === 'string'
          ? `: ${String(this.promptFeedback.blockReasonMessage).slice(0, REASON_CHARS)}`
          : '';
      return new GatewayError('content_refused', {
        message: `The model provider blocked the prompt (${block})${detail}.`,
      });
    }
    const reason = this.finishReason;
    const said = this.finishMessage ?? this.text.trim();
    if (reason !== undefined && REFUSED.has(reason)) {
      return new GatewayError('content_refused', {
        message: `The model provider withheld the image (${reason})${said ? `: ${said}` : ''}.`,
      });
    }
    if (whole && said !== '') {
      return new GatewayError('content_refused', { message: `The model answered without an image: ${said}` });
    }
    const why = reason ? ` (finishReason ${reason})` : whole ? '' : ' (the answer was not whole JSON)';
    return new GatewayError('upstream_error', { message: `The model provider answered without an image${why}.` });
  }
}

/** Bytes of one reference image encoded at a time: a multiple of 3, so the pieces join without padding. */
const ENCODE_BYTES = 3 * 16 * 1024;

/** The base64 of `bytes` in pieces, so no whole encoded copy of an image is ever held. */
function* base64Pieces(bytes: Buffer): Generator<Buffer> {
  for (let off = 0; off < bytes.length; off += ENCODE_BYTES) {
    yield Buffer.from(bytes.subarray(off, off + ENCODE_BYTES).toString('base64'), 'latin1');
  }
}

/**
 * The GenerateContentRequest of a call; reference images go where the marker stands, encoded as the body is sent.
 * `req.extra` holds what geminiCallerFields let through: sampling fields, and safety settings where allowed.
 */
function requestBody(
  route: ModelRoute<ImageModel>,
  req: ImageRequest,
  references: readonly ReferenceImage[] | null,
): { body: string | Readable; length?: number } {
  const sampling = isObj(req.extra.generationConfig) ? req.extra.generationConfig : {};
  // Random, so no prompt can hold it.
  const marker = `\u0000references-${randomBytes(8).toString('hex')}\u0000`;
  const parts: unknown[] = [{ text: req.prompt }];
  if (references !== null && references.length > 0) parts.push(marker);
  const body: Obj = {
    contents: [{ role: 'user', parts }],
    generationConfig: {
      ...sampling,
      candidateCount: 1,
      // The image alone: text would be output tokens the image's price does not cover.
      responseModalities: ['IMAGE'],
      maxOutputTokens: route.model.max_output_tokens ?? DEFAULT_MAX_OUTPUT_TOKENS,
      imageConfig: geminiImageConfig(req.size, req.aspectRatio),
    },
  };
  if (req.extra.safetySettings !== undefined) body.safetySettings = req.extra.safetySettings;
  const json = JSON.stringify(body);
  if (parts.length === 1) return { body: json };
  const [head, tail] = json.split(JSON.stringify(marker)) as [string, string];
  const first = Buffer.from(head, 'utf8');
  const pieces: (Buffer | ReferenceImage)[] = [first];
  let length = first.length;
  references!.forEach((img, i) => {
    const open = Buffer.from(
      `${i > 0 ? ',' : ''}{"inlineData":{"mimeType":"${IMAGE_MIME[img.format]}","data":"`,
      'latin1',
    );
    const close = Buffer.from('"}}', 'latin1');
    pieces.push(open, img, close);
    length += open.length + 4 * Math.ceil(img.bytes.length / 3) + close.length;
  });
  const end = Buffer.from(tail, 'utf8');
  pieces.push(end);
  length += end.length;
  function* chunks(): Generator<Buffer> {
    for (const p of pieces) {
      if (Buffer.isBuffer(p)) yield p;
      else yield* base64Pieces(p.bytes);
    }
  }
  return { body: Readable.from(chunks(), { objectMode: false }), length };
}

/** The upstream request of an image call on the Gemini API; `references` make it an edit. */
export function geminiImageRequest(
  route: ModelRoute<ImageModel>,
  req: ImageRequest,
  references: readonly ReferenceImage[] | null,
): ImageUpstreamRequest {
  const { body, length } = requestBody(route, req, references);
  const headers: Record<string, string> = {
    'x-goog-api-key': route.provider.key,
    'content-type': 'application/json',
    accept: 'application/json',
    'user-agent': USER_AGENT,
  };
  if (length !== undefined) headers['content-length'] = String(length);
  return {
    url: route.url,
    method: 'POST',
    headers,
    body,
    provider: route.provider.name,
    timeoutMs: route.provider.timeout_ms,
    maxDurationMs: route.provider.max_duration_ms,
    reader: (sink) => new GeminiImageReader(sink),
    error: upstreamError,
  };
}
