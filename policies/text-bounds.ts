/**
 * Bounds of a text request known before it runs, for its worst-case price (pricing/worst-case.ts has the proof that
 * the price never exceeds the hold given these bounds).
 *
 * Input side: every input token (plain, cache read or cache write) is priced at the highest rate the request can
 * trigger: the cache-write tier of its cache_control (1h: 2x input, 5m: 1.25x), else input or cache read. Their
 * count is bounded by the sum of:
 * - the UTF-8 size of the upstream request body (a tokenizer emits at most one token per byte) plus FRAMING_TOKENS
 *   for the provider's own framing (role markers, the tool-use system prompt);
 * - for each inline image (base64 source, `data:` URL), what its provider bills for it at most: on alpha models
 *   Anthropic's published rule, width x height / 750 from the image's header (images are scaled down to about 1.15
 *   megapixels, so at most MAX_IMAGE_TOKENS.alpha); elsewhere the model's `max_image_tokens`, the most one image can
 *   cost on it; an image whose header cannot be read counts that most too;
 * - for each provider-defined client tool, the system prompt tokens its provider documents it adds (TOOL_TOKENS);
 * capped at the model's context window. A request that references media by URL or file id, or carries documents,
 * is bound by the context window alone, since their tokens do not follow the request's size.
 * Server tools (web search, web fetch, code execution, MCP) bill their results as input over several internal turns
 * and carry per-use fees the price table does not hold: requests with them are refused, as are bodies whose text
 * could not fit the window even at MAX_BYTES_PER_TOKEN bytes a token.
 * Output side: max_tokens after clamping, times n.
 */
import { GatewayError } from './errors.js';
import { base64ImageSize } from './image-size.js';
import type { CacheWriteTier } from '../pricing/index.js';

/** Tokens allowed for a provider's own framing of a request (system prompts it adds for tools, role markers). */
export const FRAMING_TOKENS = 1024;

/**
 * The most input tokens one image costs, by family, where the model's config sets no `max_image_tokens`: alpha by
 * Anthropic's vision page (images scaled to ~1.15 megapixels, ~1,600 tokens); beta by OpenAI's published image
 * rules (high-detail tiles at most 1,105-1,445 tokens, 32-pixel patches at most 1,536 times a model multiplier up
 * to 1.62); gamma by the open-weight vision models' default pixel budgets (16,384 patches of 28 x 28 pixels).
 */
export const MAX_IMAGE_TOKENS: Readonly<Record<string, number>> = { alpha: 1_600, beta: 2_500, gamma: 16_384 };

/** Anthropic's rule: an image costs width x height / 750 tokens. */
const ANTHROPIC_PIXELS_PER_TOKEN = 750;

/**
 * Input tokens Anthropic documents for its client tools (tool use page, each tool's page): the tool's system prompt
 * and definition, over the tool-use system prompt FRAMING_TOKENS covers. Keyed by type prefix (versions vary).
 */
export const TOOL_TOKENS: Readonly<Record<string, number>> = {
  bash_: 245,
  text_editor_: 700,
  computer_: 1_300, // 466-499 tokens of system prompt and 735 of tool definition
};

/** Anthropic tool types whose results and fees the price table cannot bound. */
const SERVER_TOOL = /^(web_search|web_fetch|code_execution|tool_search|mcp)/;

/** A token of any tokenizer in use covers at most this many bytes: a body larger than window x this cannot fit. */
export const MAX_BYTES_PER_TOKEN = 64;

/**
 * Input the gateway cannot size: media fetched by the upstream (a "url" whose value is not an inline `data:` one, in
 * any scheme or case), documents and files (a "type" below, a "file_id"). A request with any is bounded by the whole
 * context window.
 */
const BY_REFERENCE_TYPES: ReadonlySet<string> = new Set([
  'document',
  'file',
  'input_file',
  'container_upload',
  'search_result',
]);
/** Nesting the walk follows: the body parser refuses deeper bodies (intake/json-body.ts MAX_JSON_DEPTH). */
const MAX_DEPTH = 128;

/** What a text request's input may cost at most. */
export interface InputBounds {
  /** Upper bound on the input-side tokens. */
  readonly inputBound: number;
  /** The highest cache-write tier the request can trigger. */
  readonly cacheWrite: CacheWriteTier;
}

/** A text request's upstream body and what its bounds depend on. */
export interface BoundsInput {
  readonly body: Readonly<Record<string, unknown>>;
  /** UTF-8 bytes of the body as sent upstream. */
  readonly bytes: number;
  /** The body's facts (bodyFacts), when the caller has walked it already. */
  readonly facts?: BodyFacts;
  /** The upstream protocol. */
  readonly protocol: 'anthropic' | 'openai';
  readonly family: string;
  readonly contextWindow: number;
  /** The model's max_image_tokens, if its config sets one. */
  readonly maxImageTokens?: number;
  /** Refuse a body that cannot fit the window (not for counting tokens, which runs nothing). Default true. */
  readonly mustFit?: boolean;
}

/** What the bounds and the refusals read of a text request's body, found in one walk (bodyFacts). */
export interface BodyFacts {
  /** Some object sets cache_control. */
  cacheControl: boolean;
  /** Some "ttl" is "1h". */
  ttl1h: boolean;
  /** Media by URL, documents or files (BY_REFERENCE_TYPES): the body's size does not bound their tokens. */
  byReference: boolean;
  /** A key or a string "input_audio" (OpenAI's audio input part). */
  inputAudio: boolean;
  /** The inline images' token bound. */
  imageTokens: number;
  /** Base64 characters of the inline images: not text the tokenizer reads. */
  imageChars: number;
}

/**
 * One walk over a text request's parsed body, every object and array at any depth (messages, system, tool results),
 * reading keys and short values, never scanning its strings: what the checks need, as the provider will read it
 * (escapes decoded, whitespace gone). Inline images (base64 sources, `data:` URLs) count `perImage` tokens at most
 * each; on alpha, Anthropic's rule from the image's header.
 */
export function bodyFacts(body: unknown, family: string, perImage: number): BodyFacts {
  const facts: BodyFacts = {
    cacheControl: false,
    ttl1h: false,
    byReference: false,
    inputAudio: false,
    imageTokens: 0,
    imageChars: 0,
  };
  const addImage = (b64: string) => {
    facts.imageChars += b64.length;
    const size = family === 'alpha' ? base64ImageSize(b64) : null;
    const tokens = size ? Math.ceil((size.width * size.height) / ANTHROPIC_PIXELS_PER_TOKEN) : perImage;
    facts.imageTokens += Math.min(perImage, tokens);
  };
  const walk = (node: object, depth: number) => {
    if (depth > MAX_DEPTH) {
      throw new GatewayError('invalid_request', { message: `The request body nests deeper than ${MAX_DEPTH} levels.` });
    }
    if (Array.isArray(node)) {
      for (const v of node) {
        if (v !== null && typeof v === 'object') walk(v, depth + 1);
        else if (v === 'input_audio') facts.inputAudio = true;
      }
      return;
    }
    const o = node as Record<string, unknown>;
    if (o.type === 'image') {
      const source = o.source as { type?: unknown; data?: unknown } | null | undefined;
      if (source && source.type === 'base64' && typeof source.data === 'string') addImage(source.data);
    } else if (o.type === 'image_url') {
      const url = (o.image_url as { url?: unknown } | null | undefined)?.url;
      if (typeof url === 'string' && url.startsWith('data:')) addImage(url.slice(url.indexOf(',') + 1));
    }
    for (const k in o) {
      const v = o[k];
      switch (k) {
        case 'cache_control':
          facts.cacheControl = true;
          break;
        case 'ttl':
          if (v === '1h') facts.ttl1h = true;
          break;
        case 'url':
          if (typeof v === 'string' && !v.startsWith('data:')) facts.byReference = true;
          break;
        case 'type':
          if (typeof v === 'string' && BY_REFERENCE_TYPES.has(v)) facts.byReference = true;
          break;
        case 'file_id':
          facts.byReference = true;
          break;
        case 'input_audio':
          facts.inputAudio = true;
          break;
      }
      if (v !== null && typeof v === 'object') walk(v, depth + 1);
      else if (v === 'input_audio') facts.inputAudio = true;
    }
  };
  if (body !== null && typeof body === 'object') walk(body, 0);
  return facts;
}

/** The highest cache-write tier a request body can trigger. */
function cacheWriteTier(protocol: 'anthropic' | 'openai', facts: BodyFacts): CacheWriteTier {
  // OpenAI-protocol caching is automatic and has no write surcharge.
  if (protocol !== 'anthropic' || !facts.cacheControl) return 'none';
  return facts.ttl1h ? '1h' : '5m';
}

/** Input tokens Anthropic's client tools add; a server tool is refused. */
function toolTokens(tools: unknown): number {
  if (!Array.isArray(tools)) return 0;
  let sum = 0;
  for (const tool of tools) {
    const type = (tool as { type?: unknown } | null)?.type;
    if (typeof type !== 'string' || type === 'custom') continue;
    if (SERVER_TOOL.test(type)) {
      throw new GatewayError('unsupported_tool', {
        param: 'tools',
        message: `The server tool ${JSON.stringify(type).slice(0, 60)} is not supported: its results and fees cannot be priced before the call.`,
      });
    }
    const prefix = Object.keys(TOOL_TOKENS).find((p) => type.startsWith(p));
    sum += prefix ? TOOL_TOKENS[prefix]! : 0;
  }
  return sum;
}

/** The input bounds of a text request (see the file comment); throws 400 for what cannot be bounded or fit. */
export function inputBounds(i: BoundsInput): InputBounds {
  let tools = 0;
  if (i.protocol === 'anthropic') {
    if (i.body.mcp_servers !== undefined) {
      throw new GatewayError('unsupported_tool', {
        param: 'mcp_servers',
        message: "MCP servers are not supported: their tools' results cannot be priced before the call.",
      });
    }
    tools = toolTokens(i.body.tools);
  }
  const facts = i.facts ?? bodyFacts(i.body, i.family, maxImageTokens(i.family, i.maxImageTokens));
  const cacheWrite = cacheWriteTier(i.protocol, facts);
  const text = i.bytes - facts.imageChars;
  if (i.mustFit !== false && text > i.contextWindow * MAX_BYTES_PER_TOKEN) {
    throw new GatewayError('context_window_exceeded', {
      message: `The request cannot fit the model's context window of ${i.contextWindow} tokens: its text alone is ${text} bytes.`,
    });
  }
  if (facts.byReference) return { inputBound: i.contextWindow, cacheWrite };
  return { inputBound: Math.min(i.contextWindow, i.bytes + FRAMING_TOKENS + facts.imageTokens + tools), cacheWrite };
}

/** The most one inline image costs on a model: its config's max_image_tokens, else its family's. */
export function maxImageTokens(family: string, configured: number | undefined): number {
  return configured ?? MAX_IMAGE_TOKENS[family] ?? MAX_IMAGE_TOKENS.gamma!;
}
