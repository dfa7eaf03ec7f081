/**
 * A request's prompt as an ordered list of segments (one per tool, system block, message content
 * block), each with its token count and, for Anthropic, its cache_control breakpoint. Prompt
 * caching hashes prefixes of this list; counting sums it (see tokens.ts for the invariant).
 */
import { SimError } from './errors.js';
import { MESSAGE_OVERHEAD, jsonTokens, textTokens } from './tokens.js';

/** Cache lifetime of an Anthropic breakpoint (`cache_control.ttl`, default 5m). */
export type Ttl = '5m' | '1h';

/** One cacheable unit of a prompt. */
export interface Segment {
  tokens: number;
  /** Kind and role, hashed with `src` so that equal text in different places differs. */
  tag: string;
  /** What the cache key hashes: a string, or a value hashed as its JSON. */
  src: unknown;
  /** Set when the segment carries a cache breakpoint. */
  ttl?: Ttl;
}

/** Segments in provider order, and the request's whole input token count. */
export interface Prompt {
  segments: Segment[];
  total: number;
}

/** Anthropic allows at most four cache breakpoints per request (prompt caching docs). */
const MAX_BREAKPOINTS = 4;
/** OpenAI counts a few tokens to prime the reply (cookbook "How to count tokens"). */
const REPLY_PRIMING = 3;

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function cacheTtl(cc: unknown, where: string): Ttl | undefined {
  if (cc === undefined || cc === null) return undefined;
  if (!isObject(cc) || cc.type !== 'ephemeral')
    throw new SimError(400, `${where}.cache_control.type: Input should be 'ephemeral'`);
  if (cc.ttl === undefined || cc.ttl === '5m') return '5m';
  if (cc.ttl === '1h') return '1h';
  throw new SimError(400, `${where}.cache_control.ttl: Input should be '5m' or '1h'`);
}

/** The JSON of an object without its cache_control marker (the marker is not content). */
function contentJson(b: Record<string, unknown>): string {
  if (!('cache_control' in b)) return JSON.stringify(b);
  const { cache_control: _marker, ...rest } = b;
  return JSON.stringify(rest);
}

function blockSegment(block: unknown, tag: string, where: string): Segment {
  if (!isObject(block)) throw new SimError(400, `${where}: Input should be an object`);
  const ttl = cacheTtl(block.cache_control, where);
  if (block.type === 'text' && typeof block.text === 'string')
    return { tokens: textTokens(block.text), tag, src: block.text, ttl };
  const json = contentJson(block);
  return { tokens: textTokens(json), tag: tag + '#', src: json, ttl };
}

/** Segments of an Anthropic Messages / count_tokens body: tools, then system, then messages. */
export function anthropicPrompt(body: Record<string, unknown>): Prompt {
  const segments: Segment[] = [];
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) throw new SimError(400, 'tools: Input should be a valid list');
    body.tools.forEach((tool, i) => {
      if (!isObject(tool)) throw new SimError(400, `tools.${i}: Input should be an object`);
      const json = contentJson(tool);
      segments.push({
        tokens: textTokens(json),
        tag: 'tool',
        src: json,
        ttl: cacheTtl(tool.cache_control, `tools.${i}`),
      });
    });
  }
  const system = body.system;
  if (typeof system === 'string') {
    if (system !== '') segments.push({ tokens: textTokens(system), tag: 'system', src: system });
  } else if (Array.isArray(system)) {
    system.forEach((b, i) => segments.push(blockSegment(b, 'system', `system.${i}`)));
  } else if (system !== undefined && system !== null) {
    throw new SimError(400, 'system: Input should be a valid string or list');
  }
  if (!Array.isArray(body.messages)) throw new SimError(400, 'messages: Field required');
  if (body.messages.length === 0) throw new SimError(400, 'messages: at least one message is required');
  body.messages.forEach((m, i) => {
    if (!isObject(m) || (m.role !== 'user' && m.role !== 'assistant' && m.role !== 'system')) {
      throw new SimError(400, `messages.${i}.role: Input should be 'user' or 'assistant'`);
    }
    const tag = m.role;
    if (typeof m.content === 'string') {
      segments.push({ tokens: MESSAGE_OVERHEAD + textTokens(m.content), tag, src: m.content });
      return;
    }
    if (!Array.isArray(m.content))
      throw new SimError(400, `messages.${i}.content: Input should be a valid string or list`);
    if (m.content.length === 0) {
      segments.push({ tokens: MESSAGE_OVERHEAD, tag, src: '' });
      return;
    }
    m.content.forEach((b, j) => {
      const seg = blockSegment(b, j === 0 ? tag + '>' : tag, `messages.${i}.content.${j}`);
      if (j === 0) seg.tokens += MESSAGE_OVERHEAD;
      segments.push(seg);
    });
  });
  // Automatic caching: a top-level cache_control puts the breakpoint on the last cacheable block.
  const auto = cacheTtl(body.cache_control, 'body');
  const last = segments[segments.length - 1];
  if (auto !== undefined && last !== undefined && last.ttl === undefined) last.ttl = auto;
  let total = 0;
  let breakpoints = 0;
  for (const s of segments) {
    total += s.tokens;
    if (s.ttl !== undefined) breakpoints++;
  }
  if (breakpoints > MAX_BREAKPOINTS) {
    throw new SimError(
      400,
      `A maximum of ${MAX_BREAKPOINTS} blocks with cache_control may be provided. Found ${breakpoints}.`,
    );
  }
  return { segments, total };
}

function partsTokens(content: unknown): number {
  if (typeof content === 'string') return textTokens(content);
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const p of content)
    n += isObject(p) && p.type === 'text' && typeof p.text === 'string' ? textTokens(p.text) : jsonTokens(p);
  return n;
}

/** Segments of an OpenAI Chat Completions body: the tool list, then one per message. */
export function openaiPrompt(body: Record<string, unknown>): Prompt {
  const segments: Segment[] = [];
  if (Array.isArray(body.tools) && body.tools.length > 0) {
    const json = JSON.stringify(body.tools);
    segments.push({ tokens: textTokens(json), tag: 'tools', src: json });
  }
  if (!Array.isArray(body.messages))
    throw new SimError(400, "Missing required parameter: 'messages'.", 'messages', 'missing_required_parameter');
  body.messages.forEach((m, i) => {
    if (!isObject(m) || typeof m.role !== 'string') {
      throw new SimError(400, `Invalid value for 'messages[${i}]': expected an object with a role.`, `messages[${i}]`);
    }
    let tokens = MESSAGE_OVERHEAD + partsTokens(m.content);
    if (m.tool_calls !== undefined) tokens += jsonTokens(m.tool_calls);
    if (typeof m.name === 'string') tokens += textTokens(m.name);
    segments.push({ tokens, tag: 'message', src: m });
  });
  let total = REPLY_PRIMING;
  for (const s of segments) total += s.tokens;
  return { segments, total };
}
