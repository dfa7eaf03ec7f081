/**
 * In-memory prompt caches of one simulator instance, keyed by a hash of the model and a prompt
 * prefix (segment boundaries of prompt.ts).
 * - Anthropic (prompt caching docs): explicit breakpoints; a hit is looked up at each breakpoint
 *   and up to 20 blocks before it; new prefixes up to a breakpoint are written with its TTL
 *   (5m or 1h, refreshed on each hit); prefixes under the minimum cacheable length are not cached.
 *   input_tokens, cache_read_input_tokens and cache_creation_input_tokens are disjoint.
 * - OpenAI (prompt caching guide): automatic for prompts of 1024 tokens or more; cached_tokens is
 *   the longest previously seen prefix, counted from 1024 in increments of 128.
 */
import { createHash, type Hash } from 'node:crypto';
import type { Prompt, Segment, Ttl } from './prompt.js';

/** Smallest prefix Anthropic caches (1024 tokens for its Sonnet and Opus 4 models). */
export const ANTHROPIC_MIN_CACHE_TOKENS = 1024;
/** Blocks before a breakpoint where Anthropic also looks for a hit. */
const LOOKBACK = 20;
/** OpenAI: caching starts at 1024 prompt tokens, hits grow in steps of 128. */
export const OPENAI_MIN_CACHE_TOKENS = 1024;
const OPENAI_STEP = 128;
/** OpenAI keeps a prefix 5 to 10 minutes after its last use; we take the low end. */
const OPENAI_TTL_MS = 5 * 60_000;
const TTL_MS: Record<Ttl, number> = { '5m': 5 * 60_000, '1h': 60 * 60_000 };

/** Anthropic's split of a request's input (the three token counts are disjoint). */
export interface AnthropicCacheUsage {
  input: number;
  read: number;
  write5m: number;
  write1h: number;
}

interface Entry {
  expires: number;
  ttlMs: number;
}

/** Prefix hashes at the wanted boundaries (index -> digest), hashing segments 0..upTo once. */
function prefixDigests(
  scope: string,
  segments: Segment[],
  upTo: number,
  wanted: (i: number) => boolean,
): Map<number, string> {
  const out = new Map<number, string>();
  const h: Hash = createHash('sha256').update(scope);
  for (let i = 0; i <= upTo; i++) {
    const s = segments[i]!;
    h.update('\u0000' + s.tag + '\u0001');
    h.update(typeof s.src === 'string' ? s.src : JSON.stringify(s.src));
    if (wanted(i)) out.set(i, h.copy().digest('base64'));
  }
  return out;
}

function prefixSums(segments: Segment[]): number[] {
  const sums = new Array<number>(segments.length);
  let acc = 0;
  for (let i = 0; i < segments.length; i++) sums[i] = acc += segments[i]!.tokens;
  return sums;
}

/** The prompt caches of one simulator instance. */
export class PromptCache {
  readonly #entries = new Map<string, Entry>();

  constructor(private readonly maxEntries = 100_000) {}

  #live(key: string | undefined, now: number): Entry | undefined {
    if (key === undefined) return undefined;
    const e = this.#entries.get(key);
    if (e === undefined) return undefined;
    if (e.expires > now) return e;
    this.#entries.delete(key);
    return undefined;
  }

  #put(key: string, ttlMs: number, now: number): void {
    // Re-insert so that Map order is least-recently-used first; evict from the front when full.
    this.#entries.delete(key);
    this.#entries.set(key, { expires: now + ttlMs, ttlMs });
    if (this.#entries.size > this.maxEntries) {
      const drop = Math.max(1, this.maxEntries >> 4);
      let n = 0;
      for (const k of this.#entries.keys()) {
        if (n++ >= drop) break;
        this.#entries.delete(k);
      }
    }
  }

  /** Accounts an Anthropic request: reads, writes and refreshes its cached prefixes. */
  anthropic(model: string, prompt: Prompt, now = Date.now()): AnthropicCacheUsage {
    const { segments, total } = prompt;
    const breakpoints: number[] = [];
    segments.forEach((s, i) => {
      if (s.ttl !== undefined) breakpoints.push(i);
    });
    if (breakpoints.length === 0) return { input: total, read: 0, write5m: 0, write1h: 0 };
    const sums = prefixSums(segments);
    const candidates = new Set<number>();
    for (const b of breakpoints) for (let j = Math.max(0, b - LOOKBACK + 1); j <= b; j++) candidates.add(j);
    const last = breakpoints[breakpoints.length - 1]!;
    const digests = prefixDigests('anthropic\u0000' + model, segments, last, (i) => candidates.has(i));

    let readEnd = -1;
    for (let j = last; j >= 0; j--) {
      const e = candidates.has(j) ? this.#live(digests.get(j), now) : undefined;
      if (e === undefined) continue;
      readEnd = j;
      this.#put(digests.get(j)!, e.ttlMs, now);
      break;
    }
    let written = readEnd;
    let write5m = 0;
    let write1h = 0;
    for (const b of breakpoints) {
      if (b <= readEnd || sums[b]! < ANTHROPIC_MIN_CACHE_TOKENS) continue;
      const tokens = sums[b]! - (written >= 0 ? sums[written]! : 0);
      const ttl = segments[b]!.ttl!;
      if (ttl === '1h') write1h += tokens;
      else write5m += tokens;
      this.#put(digests.get(b)!, TTL_MS[ttl], now);
      written = b;
    }
    const read = readEnd >= 0 ? sums[readEnd]! : 0;
    return { input: total - read - write5m - write1h, read, write5m, write1h };
  }

  /** Accounts an OpenAI request: returns cached_tokens and remembers its prefixes. */
  openai(model: string, prompt: Prompt, now = Date.now()): number {
    const { segments, total } = prompt;
    if (total < OPENAI_MIN_CACHE_TOKENS || segments.length === 0) return 0;
    const sums = prefixSums(segments);
    const first = sums.findIndex((s) => s >= OPENAI_MIN_CACHE_TOKENS);
    if (first < 0) return 0;
    const digests = prefixDigests('openai\u0000' + model, segments, segments.length - 1, (i) => i >= first);
    let hit = -1;
    for (let j = segments.length - 1; j >= first; j--) {
      if (this.#live(digests.get(j), now) !== undefined) {
        hit = j;
        break;
      }
    }
    for (const [, key] of digests) this.#put(key, OPENAI_TTL_MS, now);
    if (hit < 0) return 0;
    const p = sums[hit]!;
    return OPENAI_MIN_CACHE_TOKENS + Math.floor((p - OPENAI_MIN_CACHE_TOKENS) / OPENAI_STEP) * OPENAI_STEP;
  }
}
