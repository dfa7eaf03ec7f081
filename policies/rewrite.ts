/**
 * How a text request is rewritten before it goes upstream (SPEC "Chat completion request", "Limits";
 * DESIGN "Police"): clamp max_tokens to the model's ceiling, accept max_completion_tokens as an alias,
 * drop temperature where the model refuses it, map reasoning_effort, and always ask for usage.
 */
import { REASONING_SCALE, type ReasoningLevel } from './families.js';
import { GatewayError } from './errors.js';
import type { ModelRoute, TextModel } from './catalog.js';
import type { ChatBody, MessagesBody } from './schemas.js';

/** What the rewrite decided, besides the upstream body. */
export interface RewriteResult {
  /** The body to send upstream. */
  body: Record<string, unknown>;
  /** Output-token limit the upstream will honour (after clamping). */
  maxOutputTokens: number;
  /** Set when the caller's max_tokens exceeded the ceiling: the value it was clamped to. */
  clampedTo?: number;
  stream: boolean;
  /** OpenAI streams: whether the caller asked for the usage chunk (it is removed otherwise). */
  callerWantsUsage: boolean;
}

const SCALE_INDEX = new Map<string, number>(REASONING_SCALE.map((l, i) => [l, i]));
const COMMON_LEVELS = new Set(['low', 'medium', 'high', 'xhigh', 'max']);

/**
 * The level sent upstream for a requested reasoning_effort, or undefined to drop the field.
 * SPEC: low..max on beta and alpha; alpha also accepts none and minimal and uses the nearest level it
 * supports; gamma does not use it; anything else is a 400.
 */
export function mapReasoningEffort(
  family: string,
  supported: readonly ReasoningLevel[],
  requested: string,
): ReasoningLevel | undefined {
  if (family === 'gamma') return undefined;
  const accepted =
    COMMON_LEVELS.has(requested) || (family === 'alpha' && (requested === 'none' || requested === 'minimal'));
  if (!accepted) {
    throw new GatewayError('invalid_reasoning_effort', {
      param: 'reasoning_effort',
      message: `reasoning_effort ${JSON.stringify(requested).slice(0, 40)} is not accepted; use ${family === 'alpha' ? 'none, minimal, ' : ''}low, medium, high, xhigh or max.`,
    });
  }
  if (supported.length === 0) return requested as ReasoningLevel;
  if (supported.includes(requested as ReasoningLevel)) return requested as ReasoningLevel;
  // Nearest on the scale; on a tie the lower level (cheaper, and never more than asked).
  const want = SCALE_INDEX.get(requested)!;
  let best = supported[0];
  let bestDist = Infinity;
  for (const level of supported) {
    const d = Math.abs(SCALE_INDEX.get(level)! - want);
    if (d < bestDist || (d === bestDist && SCALE_INDEX.get(level)! < SCALE_INDEX.get(best)!)) {
      best = level;
      bestDist = d;
    }
  }
  return best;
}

/** Rewrite a /v1/messages (or count_tokens) body for its upstream. */
export function rewriteMessages(parsed: MessagesBody, route: ModelRoute<TextModel>): RewriteResult {
  const body: Record<string, unknown> = { ...parsed, model: route.upstreamModel };
  const ceiling = route.model.max_tokens;
  let maxOutputTokens = parsed.max_tokens;
  let clampedTo: number | undefined;
  if (maxOutputTokens > ceiling) {
    maxOutputTokens = ceiling;
    clampedTo = ceiling;
    body.max_tokens = ceiling;
  }
  if (!route.model.temperature) delete body.temperature;
  return { body, maxOutputTokens, clampedTo, stream: parsed.stream === true, callerWantsUsage: true };
}

/** Rewrite a /v1/chat/completions body for its upstream. */
export function rewriteChat(parsed: ChatBody, route: ModelRoute<TextModel>): RewriteResult {
  if (Array.isArray(parsed.stop) && parsed.stop.length > 4) {
    throw new GatewayError('too_many_stop_sequences', { param: 'stop' });
  }
  const body: Record<string, unknown> = { ...parsed, model: route.upstreamModel };
  const ceiling = route.model.max_tokens;
  const asked = parsed.max_completion_tokens ?? parsed.max_tokens ?? undefined;
  let maxOutputTokens = ceiling;
  let clampedTo: number | undefined;
  if (asked !== undefined) {
    if (asked > ceiling) clampedTo = ceiling;
    else maxOutputTokens = asked;
  }
  // Always bound the output upstream: the worst-case price assumes this limit.
  delete body.max_tokens;
  delete body.max_completion_tokens;
  body[route.provider.max_tokens_field] = maxOutputTokens;

  if (!route.model.temperature) delete body.temperature;
  if (parsed.reasoning_effort != null) {
    const level = mapReasoningEffort(route.model.family, route.model.reasoning_levels, parsed.reasoning_effort);
    if (level === undefined) delete body.reasoning_effort;
    else body.reasoning_effort = level;
  }

  const stream = parsed.stream === true;
  const callerWantsUsage = parsed.stream_options?.include_usage === true;
  if (stream) body.stream_options = { ...(parsed.stream_options ?? {}), include_usage: true };
  else delete body.stream_options;
  return { body, maxOutputTokens, clampedTo, stream, callerWantsUsage };
}
