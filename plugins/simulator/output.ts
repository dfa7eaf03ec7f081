/**
 * What the simulated model answers: deterministic text (one token per piece) or a forced tool
 * call, cut by max_tokens or a stop sequence. Shared by both protocols.
 */
import { defaultAnswerLength, outputPieces } from './tokens.js';

/** Why generation ended: naturally, at max_tokens, or at a stop sequence. */
export type Ending = 'end' | 'max_tokens' | 'stop_sequence';

/** Text output: the pieces streamed one per delta; output tokens = pieces.length. */
export interface TextPlan {
  pieces: string[];
  ending: Ending;
  stopSequence: string | null;
}

/** Plans the text: `wanted` tokens (or the default handful), at most `maxTokens`, cut at the first stop sequence. */
export function planText(
  seed: number,
  wanted: number | undefined,
  maxTokens: number,
  stops: readonly string[],
): TextPlan {
  const n = wanted ?? defaultAnswerLength(seed);
  const capped = Math.min(n, maxTokens);
  const pieces = outputPieces(seed, capped, capped === n);
  const ending: Ending = capped < n ? 'max_tokens' : 'end';
  if (stops.length === 0) return { pieces, ending, stopSequence: null };
  const text = pieces.join('');
  let at = -1;
  let matched: string | null = null;
  for (const s of stops) {
    const i = s === '' ? -1 : text.indexOf(s);
    if (i >= 0 && (at < 0 || i < at)) {
      at = i;
      matched = s;
    }
  }
  if (matched === null) return { pieces, ending, stopSequence: null };
  // Keep what precedes the stop sequence; a piece it cuts keeps its head (still one token).
  const kept: string[] = [];
  let offset = 0;
  for (const p of pieces) {
    if (offset + p.length <= at) kept.push(p);
    else {
      if (at > offset) kept.push(p.slice(0, at - offset));
      break;
    }
    offset += p.length;
  }
  return { pieces: kept, ending: 'stop_sequence', stopSequence: matched };
}

/** A forced tool call: its input as JSON pieces (4 characters, one token each). */
export interface ToolPlan {
  name: string;
  /** JSON text of the input, split into the streamed pieces. */
  pieces: string[];
  /** The input object; `{}` when max_tokens cut its JSON. */
  input: unknown;
  ending: 'end' | 'max_tokens';
}

const SAMPLE_WORDS = ['alpha', 'river', 'stone', 'light', 'harbor', 'cedar', 'ember', 'orbit'];

/** A deterministic value matching a JSON schema closely enough (enum, type, properties). */
export function sampleValue(schema: unknown, seed: number, depth = 0): unknown {
  if (schema === null || typeof schema !== 'object') return SAMPLE_WORDS[seed % SAMPLE_WORDS.length];
  const s = schema as { type?: unknown; enum?: unknown; properties?: unknown; items?: unknown; const?: unknown };
  if (s.const !== undefined) return s.const;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0];
  const type = Array.isArray(s.type)
    ? s.type.find((t) => t !== 'null')
    : (s.type ?? (s.properties ? 'object' : undefined));
  switch (type) {
    case 'integer':
    case 'number':
      return 1 + (seed % 100);
    case 'boolean':
      return seed % 2 === 0;
    case 'array':
      return depth > 3 ? [] : [sampleValue(s.items, seed + 1, depth + 1)];
    case 'object': {
      const out: Record<string, unknown> = {};
      if (depth > 3 || s.properties === null || typeof s.properties !== 'object') return out;
      let i = 0;
      for (const [k, v] of Object.entries(s.properties as Record<string, unknown>))
        out[k] = sampleValue(v, seed + ++i, depth + 1);
      return out;
    }
    default:
      return SAMPLE_WORDS[seed % SAMPLE_WORDS.length];
  }
}

/** Plans a call of the tool `name` with an input sampled from `schema`, cut at `maxTokens` pieces. */
export function planTool(name: string, schema: unknown, seed: number, maxTokens: number): ToolPlan {
  const input = sampleValue(schema ?? { type: 'object' }, seed);
  const json = JSON.stringify(input);
  const pieces: string[] = [];
  for (let i = 0; i < json.length; i += 4) pieces.push(json.slice(i, i + 4));
  if (pieces.length <= maxTokens) return { name, pieces, input, ending: 'end' };
  return { name, pieces: pieces.slice(0, maxTokens), input: {}, ending: 'max_tokens' };
}
