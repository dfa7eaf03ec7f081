/**
 * Bounds of a text request known before it runs, for its worst-case price (pricing/worst-case.ts has the proof that
 * the price never exceeds the hold given these bounds).
 *
 * Input side: every input token (plain, cache read or cache write) is priced at the highest rate the request can
 * trigger: the cache-write tier of its cache_control (1h: 2x input, 5m: 1.25x), else input or cache read. Their
 * count is at most the UTF-8 size of the upstream request body plus FRAMING_TOKENS for the provider's own framing
 * (a tokenizer emits at most one token per byte), capped at the model's context window; a request that references
 * media by URL or carries documents or files is bound by the context window alone, since their tokens do not follow
 * the request's size. Output side: max_tokens after clamping, times n.
 */
import type { CacheWriteTier } from '../pricing/index.js';

/** Tokens allowed for a provider's own framing of a request (system prompts it adds for tools, role markers). */
export const FRAMING_TOKENS = 1024;

const MEDIA_BY_REFERENCE = /"url"\s*:\s*"(?:https?|gs|s3):|"type"\s*:\s*"(?:document|file|input_file|container_upload|search_result)"|"file_id"\s*:/;
const CACHE_1H = /"ttl"\s*:\s*"1h"/;

/** The highest cache-write tier a request body can trigger. */
export function cacheWriteTier(protocol: 'anthropic' | 'openai', body: string): CacheWriteTier {
  // OpenAI-protocol caching is automatic and has no write surcharge.
  if (protocol !== 'anthropic' || !body.includes('"cache_control"')) return 'none';
  return CACHE_1H.test(body) ? '1h' : '5m';
}

/** Upper bound on the input-side tokens of a request body (see the file comment). */
export function inputTokensBound(body: string, contextWindow: number): number {
  if (MEDIA_BY_REFERENCE.test(body)) return contextWindow;
  return Math.min(contextWindow, Buffer.byteLength(body, 'utf8') + FRAMING_TOKENS);
}
