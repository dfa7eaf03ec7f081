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
 * Input the gateway cannot size: media fetched by the upstream (any "url" that is not an inline `data:` one, in any
 * scheme or case), documents and files. A request with any is bounded by the whole context window.
 */
const MEDIA_BY_REFERENCE =
  /"url"\s*:\s*"(?!data:)|"type"\s*:\s*"(?:document|file|input_file|container_upload|search_result)"|"file_id"\s*:/;
const CACHE_1H = /"ttl"\s*:\s*"1h"/;
/** Nesting followed when looking for inline images; the body parser bounds nesting anyway. */
const MAX_DEPTH = 64;

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
  /**
   * The body's JSON text: as sent upstream, or the caller's text it was spliced from (routes/text.ts), which holds
   * every member sent. The checks for media by reference, documents, inline images and cache tiers read it.
   */
  readonly text: string;
  /** UTF-8 bytes of the body as sent upstream (default: of `text`). */
  readonly bytes?: number;
  /** The upstream protocol. */
  readonly protocol: 'anthropic' | 'openai';
  readonly family: string;
  readonly contextWindow: number;
  /** The model's max_image_tokens, if its config sets one. */
  readonly maxImageTokens?: number;
  /** Refuse a body that cannot fit the window (not for counting tokens, which runs nothing). Default true. */
  readonly mustFit?: boolean;
}

/** The highest cache-write tier a request body can trigger. */
export function cacheWriteTier(protocol: 'anthropic' | 'openai', body: string): CacheWriteTier {
  // OpenAI-protocol caching is automatic and has no write surcharge.
  if (protocol !== 'anthropic' || !body.includes('"cache_control"')) return 'none';
  return CACHE_1H.test(body) ? '1h' : '5m';
}

interface InlineImages {
  tokens: number;
  /** Base64 characters of the images: not text the tokenizer reads. */
  chars: number;
}

/** Inline images anywhere in the body (messages, system, tool results): their token bound and base64 size. */
function inlineImages(body: unknown, family: string, perImage: number): InlineImages {
  const found: InlineImages = { tokens: 0, chars: 0 };
  const add = (b64: string) => {
    found.chars += b64.length;
    const size = family === 'alpha' ? base64ImageSize(b64) : null;
    const tokens = size ? Math.ceil((size.width * size.height) / ANTHROPIC_PIXELS_PER_TOKEN) : perImage;
    found.tokens += Math.min(perImage, tokens);
  };
  const walk = (node: unknown, depth: number) => {
    if (depth > MAX_DEPTH || node === null || typeof node !== 'object') return;
    if (Array.isArray(node)) {
      for (const item of node) walk(item, depth + 1);
      return;
    }
    const o = node as Record<string, unknown>;
    const source = o.source as { type?: unknown; data?: unknown } | undefined;
    if (o.type === 'image' && source && source.type === 'base64' && typeof source.data === 'string') {
      add(source.data);
      return;
    }
    const url = (o.image_url as { url?: unknown } | undefined)?.url;
    if (o.type === 'image_url' && typeof url === 'string' && url.startsWith('data:')) {
      add(url.slice(url.indexOf(',') + 1));
      return;
    }
    for (const v of Object.values(o)) walk(v, depth + 1);
  };
  walk(body, 0);
  return found;
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
  const cacheWrite = cacheWriteTier(i.protocol, i.text);
  const bytes = i.bytes ?? Buffer.byteLength(i.text, 'utf8');
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
  const images =
    i.text.includes('"base64"') || i.text.includes('"data:')
      ? inlineImages(i.body, i.family, i.maxImageTokens ?? MAX_IMAGE_TOKENS[i.family] ?? MAX_IMAGE_TOKENS.gamma!)
      : { tokens: 0, chars: 0 };
  if (i.mustFit !== false && bytes - images.chars > i.contextWindow * MAX_BYTES_PER_TOKEN) {
    throw new GatewayError('context_window_exceeded', {
      message: `The request cannot fit the model's context window of ${i.contextWindow} tokens: its text alone is ${bytes - images.chars} bytes.`,
    });
  }
  if (MEDIA_BY_REFERENCE.test(i.text)) return { inputBound: i.contextWindow, cacheWrite };
  return { inputBound: Math.min(i.contextWindow, bytes + FRAMING_TOKENS + images.tokens + tools), cacheWrite };
}
