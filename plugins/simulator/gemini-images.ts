/**
 * Simulated Gemini API image generation: POST /v1beta/models/{model}:generateContent with
 * `generationConfig.responseModalities` and `generationConfig.imageConfig` {aspectRatio, imageSize},
 * reference images as inline data parts, following the Gemini API reference ("Generating content":
 * GenerateContentRequest, GenerateContentResponse, Candidate, UsageMetadata, PromptFeedback) and its
 * image generation guide. Request fields are read in either JSON spelling the API accepts (camelCase or
 * snake_case); answers are camelCase. Errors are rendered by the plugin's handler (errors.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { parseDirectives } from './directives.js';
import { SimError } from './errors.js';
import { newId } from './ids.js';
import { imageSeed, renderImage } from './image-render.js';
import { type ReceivedImage, decodeImage } from './received-images.js';
import { sendBody } from './respond.js';
import { type RouteContext, applyFaults, bodyObject } from './route-context.js';
import { defaultAnswerLength, hashSeed, outputPieces, textTokens } from './tokens.js';

/** Aspect ratios of `imageConfig.aspectRatio`. */
export type AspectRatio = '1:1' | '2:3' | '3:2' | '3:4' | '4:3' | '4:5' | '5:4' | '9:16' | '16:9' | '21:9';
/** Size classes of `imageConfig.imageSize` (an upper-case K, as documented). */
export type ImageSize = '1K' | '2K' | '4K';

/**
 * Pixel sizes of Gemini 3 Pro Image per aspect ratio and size class, from the table of the Gemini API
 * image generation guide (ai.google.dev/gemini-api/docs/image-generation, "Aspect ratios and image size").
 */
const SIZES: Record<AspectRatio, Record<ImageSize, [width: number, height: number]>> = {
  '1:1': { '1K': [1024, 1024], '2K': [2048, 2048], '4K': [4096, 4096] },
  '2:3': { '1K': [848, 1264], '2K': [1696, 2528], '4K': [3392, 5056] },
  '3:2': { '1K': [1264, 848], '2K': [2528, 1696], '4K': [5056, 3392] },
  '3:4': { '1K': [896, 1200], '2K': [1792, 2400], '4K': [3584, 4800] },
  '4:3': { '1K': [1200, 896], '2K': [2400, 1792], '4K': [4800, 3584] },
  '4:5': { '1K': [928, 1152], '2K': [1856, 2304], '4K': [3712, 4608] },
  '5:4': { '1K': [1152, 928], '2K': [2304, 1856], '4K': [4608, 3712] },
  '9:16': { '1K': [768, 1376], '2K': [1536, 2752], '4K': [3072, 5504] },
  '16:9': { '1K': [1376, 768], '2K': [2752, 1536], '4K': [5504, 3072] },
  '21:9': { '1K': [1584, 672], '2K': [3168, 1344], '4K': [6336, 2688] },
};

/** Output tokens of one image (same table): 1120 at 1K and 2K, 2000 at 4K. */
const IMAGE_OUTPUT_TOKENS: Record<ImageSize, number> = { '1K': 1120, '2K': 1120, '4K': 2000 };
/** Input tokens of one reference image (Gemini 3 Pro Image model card: 560 per input image). */
const IMAGE_INPUT_TOKENS = 560;
/** Reference images per request (model card: up to 14). */
const MAX_REFERENCES = 14;

/** A field in either JSON spelling. */
function pick(obj: Record<string, unknown>, camel: string, snake: string): unknown {
  return obj[camel] ?? obj[snake];
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** The prompt's text (text parts of the last user content) and every inline image of the conversation, decoded. */
async function readContents(contents: unknown[]): Promise<{ text: string; images: ReceivedImage[] }> {
  const images: ReceivedImage[] = [];
  let text = '';
  for (let i = 0; i < contents.length; i++) {
    const content = contents[i];
    if (!isObject(content) || !Array.isArray(content.parts))
      throw new SimError(400, `* GenerateContentRequest.contents[${i}].parts: contents.parts must not be empty.`);
    const user = content.role === undefined || content.role === 'user';
    let own = '';
    for (const part of content.parts as unknown[]) {
      if (!isObject(part)) continue;
      if (typeof part.text === 'string' && part.thought !== true) own = own === '' ? part.text : own + '\n' + part.text;
      const field =
        part.inlineData !== undefined ? 'inlineData' : part.inline_data !== undefined ? 'inline_data' : undefined;
      if (field === undefined) continue;
      const blob = part[field];
      const mimeType = isObject(blob) ? pick(blob, 'mimeType', 'mime_type') : undefined;
      const data = isObject(blob) ? blob.data : undefined;
      if (typeof mimeType !== 'string' || typeof data !== 'string' || data === '') {
        throw new SimError(
          400,
          `* GenerateContentRequest.contents[${i}].parts: ${field} needs a mimeType and base64 data.`,
        );
      }
      if (!mimeType.startsWith('image/')) continue;
      images.push(
        await decodeImage(
          field,
          mimeType,
          Buffer.from(data, 'base64'),
          (m) => new SimError(400, `Unable to process input image. ${m}`),
        ),
      );
    }
    if (user) text = own;
  }
  return { text, images };
}

/** The table's aspect ratio nearest to a reference image's (the model keeps the input's shape by default). */
function nearestRatio(width: number, height: number): AspectRatio {
  const target = Math.log(width / height);
  let best: AspectRatio = '1:1';
  for (const ratio of Object.keys(SIZES) as AspectRatio[]) {
    const [w, h] = SIZES[ratio]['1K'];
    if (Math.abs(Math.log(w / h) - target) < Math.abs(Math.log(SIZES[best]['1K'][0] / SIZES[best]['1K'][1]) - target))
      best = ratio;
  }
  return best;
}

interface Config {
  text: boolean;
  image: boolean;
  ratio: AspectRatio;
  size: ImageSize;
  /** generationConfig.maxOutputTokens, if set: an answer that would need more stops at MAX_TOKENS. */
  maxOutputTokens?: number;
}

function readConfig(body: Record<string, unknown>, refs: ReceivedImage[]): Config {
  const gen = pick(body, 'generationConfig', 'generation_config') ?? {};
  if (!isObject(gen)) throw new SimError(400, 'Invalid JSON payload: generationConfig must be an object.');
  const modalities = pick(gen, 'responseModalities', 'response_modalities') ?? ['TEXT', 'IMAGE'];
  if (
    !Array.isArray(modalities) ||
    modalities.some((m) => typeof m !== 'string' || !['TEXT', 'IMAGE'].includes(m.toUpperCase()))
  ) {
    throw new SimError(
      400,
      'Invalid value at generation_config.response_modalities: the simulated image models answer TEXT and IMAGE.',
    );
  }
  const upper = (modalities as string[]).map((m) => m.toUpperCase());
  const imageConfig = pick(gen, 'imageConfig', 'image_config') ?? {};
  if (!isObject(imageConfig)) throw new SimError(400, 'Invalid JSON payload: imageConfig must be an object.');
  const ratio = pick(imageConfig, 'aspectRatio', 'aspect_ratio');
  const size = pick(imageConfig, 'imageSize', 'image_size') ?? '1K';
  if (ratio !== undefined && !(typeof ratio === 'string' && ratio in SIZES)) {
    throw new SimError(
      400,
      `Unsupported aspect ratio: ${JSON.stringify(ratio)}. Supported: ${Object.keys(SIZES).join(', ')}.`,
    );
  }
  if (size !== '1K' && size !== '2K' && size !== '4K')
    throw new SimError(400, `Unsupported image size: ${JSON.stringify(size)}. Supported: 1K, 2K, 4K.`);
  const max = pick(gen, 'maxOutputTokens', 'max_output_tokens');
  if (max !== undefined && !(Number.isInteger(max) && (max as number) > 0)) {
    throw new SimError(
      400,
      `Invalid value at 'generation_config.max_output_tokens' (TYPE_INT32), ${JSON.stringify(max)}`,
    );
  }
  const first = refs[0];
  return {
    maxOutputTokens: max as number | undefined,
    text: upper.length === 0 || upper.includes('TEXT'),
    image: upper.length === 0 || upper.includes('IMAGE'),
    ratio:
      (ratio as AspectRatio | undefined) ?? (first === undefined ? '1:1' : nearestRatio(first.width, first.height)),
    size,
  };
}

/** Answers generateContent for `model`: text and image parts, a safety block, or a fault. */
export async function generateContent(
  req: FastifyRequest,
  reply: FastifyReply,
  ctx: RouteContext,
  model: string,
): Promise<void> {
  const body = bodyObject(req.body);
  const contents = body.contents;
  if (!Array.isArray(contents) || contents.length === 0)
    throw new SimError(400, '* GenerateContentRequest.contents: contents is not specified');
  const { text, images } = await readContents(contents);
  if (images.length > MAX_REFERENCES)
    throw new SimError(400, `Too many input images: ${images.length}. At most ${MAX_REFERENCES} are supported.`);
  ctx.media.recordImages(req, images);
  const config = readConfig(body, images);
  const d = parseDirectives(text);
  await applyFaults(d);

  const promptText = textTokens(text);
  const promptImages = IMAGE_INPUT_TOKENS * images.length;
  const promptTokensDetails = [{ modality: 'TEXT', tokenCount: promptText }];
  if (promptImages > 0) promptTokensDetails.push({ modality: 'IMAGE', tokenCount: promptImages });
  const envelope = { modelVersion: model, responseId: newId('') };
  let answer: Record<string, unknown>;
  if (d.image === 'refuse') {
    // Blocked prompt: promptFeedback.blockReason and no candidates (GenerateContentResponse, PromptFeedback).
    answer = {
      promptFeedback: {
        blockReason: 'SAFETY',
        safetyRatings: [{ category: 'HARM_CATEGORY_DANGEROUS_CONTENT', probability: 'HIGH', blocked: true }],
      },
      usageMetadata: {
        promptTokenCount: promptText + promptImages,
        totalTokenCount: promptText + promptImages,
        promptTokensDetails,
      },
      ...envelope,
    };
  } else if (d.image === 'refuse_output') {
    // Blocked image: a candidate with finishReason IMAGE_SAFETY and no content (Candidate.FinishReason).
    answer = {
      candidates: [{ finishReason: 'IMAGE_SAFETY', index: 0 }],
      usageMetadata: {
        promptTokenCount: promptText + promptImages,
        totalTokenCount: promptText + promptImages,
        promptTokensDetails,
      },
      ...envelope,
    };
  } else if (
    config.maxOutputTokens !== undefined &&
    config.image &&
    config.maxOutputTokens < IMAGE_OUTPUT_TOKENS[config.size]
  ) {
    // The image does not fit the output budget: the candidate stops at MAX_TOKENS without one (Candidate.FinishReason).
    answer = {
      candidates: [{ finishReason: 'MAX_TOKENS', index: 0 }],
      usageMetadata: {
        promptTokenCount: promptText + promptImages,
        totalTokenCount: promptText + promptImages,
        promptTokensDetails,
      },
      ...envelope,
    };
  } else {
    const parts: Record<string, unknown>[] = [];
    const candidatesTokensDetails: { modality: string; tokenCount: number }[] = [];
    if (config.text) {
      const seed = hashSeed(text);
      const said = outputPieces(seed, defaultAnswerLength(seed), true).join('');
      parts.push({ text: said });
      candidatesTokensDetails.push({ modality: 'TEXT', tokenCount: textTokens(said) });
    }
    if (config.image) {
      const [width, height] = SIZES[config.ratio][config.size];
      const png = await renderImage({
        width,
        height,
        seed: imageSeed(text),
        format: 'png',
        alpha: false,
        detailed: d.image === 'detailed',
      });
      parts.push({ inlineData: { mimeType: 'image/png', data: png.toString('base64') } });
      candidatesTokensDetails.push({ modality: 'IMAGE', tokenCount: IMAGE_OUTPUT_TOKENS[config.size] });
    }
    const candidates = candidatesTokensDetails.reduce((sum, x) => sum + x.tokenCount, 0);
    answer = {
      candidates: [{ content: { parts, role: 'model' }, finishReason: 'STOP', index: 0 }],
      usageMetadata: {
        promptTokenCount: promptText + promptImages,
        candidatesTokenCount: candidates,
        totalTokenCount: promptText + promptImages + candidates,
        promptTokensDetails,
        candidatesTokensDetails,
      },
      ...envelope,
    };
  }
  reply.hijack();
  sendBody(
    reply.raw,
    200,
    { 'content-type': 'application/json; charset=UTF-8' },
    JSON.stringify(answer),
    d.hangupAfter,
  );
}
