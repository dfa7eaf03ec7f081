/**
 * The text models the simulator imitates and their limits as their makers document them, and the refusals of
 * requests over them in each provider's words, so that the simulator refuses what the real upstream refuses: a
 * prompt over the context window, an output limit over the model's most. A model the table lacks has no limits.
 *
 * Sources: Anthropic's model pages (platform.claude.com/docs/en/models/<model>/overview: "Context window", "Max
 * output"); OpenAI's (developers.openai.com/api/docs/models/<model>); the open-weight models' cards (Qwen3-235B-
 * A22B-Instruct-2507: 262,144 tokens natively; Moonshot's Kimi K3: a 1M-token window, 1,048,576 as Moonshot counts
 * it for K3.1), which an open-weight host serves whole, output included.
 */
import { SimError } from './errors.js';

/** Whose rules a model's refusals follow. */
export type LimitRules = 'anthropic' | 'openai' | 'open-weights';

/** One model's limits. */
export interface ModelLimits {
  readonly rules: LimitRules;
  /** Tokens of the context window. */
  readonly contextWindow: number;
  /** The most output tokens a request may ask for; an open-weight host allows what the window leaves. */
  readonly maxOutput: number;
}

const claude = (contextWindow: number, maxOutput: number): ModelLimits => ({
  rules: 'anthropic',
  contextWindow,
  maxOutput,
});
const gpt = (contextWindow: number, maxOutput: number): ModelLimits => ({ rules: 'openai', contextWindow, maxOutput });
const open = (contextWindow: number): ModelLimits => ({
  rules: 'open-weights',
  contextWindow,
  maxOutput: contextWindow,
});

/** The provider models, by the id their provider serves them under. */
const PROVIDER_MODELS: Readonly<Record<string, ModelLimits>> = {
  'claude-fable-5': claude(1_000_000, 128_000),
  'claude-haiku-4-5': claude(200_000, 64_000),
  'claude-opus-4-6': claude(1_000_000, 128_000),
  'claude-opus-4-7': claude(1_000_000, 128_000),
  'claude-opus-4-8': claude(1_000_000, 128_000),
  'claude-opus-5': claude(1_000_000, 128_000),
  'claude-sonnet-4-6': claude(1_000_000, 128_000),
  'claude-sonnet-5': claude(1_000_000, 128_000),
  'gpt-5.5': gpt(1_050_000, 128_000),
  'gpt-5.6-sol': gpt(1_050_000, 128_000),
  'gpt-5.6-terra': gpt(1_050_000, 128_000),
  'gpt-5.6-luna': gpt(1_050_000, 128_000),
  'moonshotai/Kimi-K3': open(1_048_576),
  'Qwen/Qwen3-235B-A22B-Instruct-2507': open(262_144),
};

/**
 * The spec's model ids (the embedded default sends them as they are) and the provider model each stands for: alpha
 * ids are Claude's with the prefix swapped, beta-5.6-mini is the mini tier of GPT-5.6 (Terra), gamma the open weights.
 */
const SPEC_MODELS: Readonly<Record<string, string>> = {
  'alpha-fable-5': 'claude-fable-5',
  'alpha-haiku-4-5': 'claude-haiku-4-5',
  'alpha-opus-4-6': 'claude-opus-4-6',
  'alpha-opus-4-7': 'claude-opus-4-7',
  'alpha-opus-4-8': 'claude-opus-4-8',
  'alpha-opus-5': 'claude-opus-5',
  'alpha-sonnet-4-6': 'claude-sonnet-4-6',
  'alpha-sonnet-5': 'claude-sonnet-5',
  'beta-5.5': 'gpt-5.5',
  'beta-5.6-sol': 'gpt-5.6-sol',
  'beta-5.6-mini': 'gpt-5.6-terra',
  'gamma-k3': 'moonshotai/Kimi-K3',
  'gamma-q3': 'Qwen/Qwen3-235B-A22B-Instruct-2507',
};

/** The limits of the model a request names (a provider id or a spec id), or undefined for one the table lacks. */
export function modelLimits(model: string): ModelLimits | undefined {
  if (Object.hasOwn(PROVIDER_MODELS, model)) return PROVIDER_MODELS[model];
  return Object.hasOwn(SPEC_MODELS, model) ? PROVIDER_MODELS[SPEC_MODELS[model]!] : undefined;
}

/**
 * Anthropic Messages' refusals (errors page; the texts as the API words them): max_tokens over the model's most
 * output, then input over the window. Input plus max_tokens over the window is served, not refused: the API ends an
 * answer that fills the window with the stop reason `model_context_window_exceeded`, and Claude Haiku 4.5 has been
 * seen answering 199,936 input tokens with max_tokens 10,000. count_tokens refuses neither: it counts a prompt over
 * the window.
 */
export function refuseOverAnthropicLimits(model: string, inputTokens: number, maxTokens: number): void {
  const l = modelLimits(model);
  if (l === undefined) return;
  if (maxTokens > l.maxOutput) {
    throw new SimError(
      400,
      `max_tokens: ${maxTokens} > ${l.maxOutput}, which is the maximum allowed number of output tokens for ${model}`,
    );
  }
  if (inputTokens > l.contextWindow)
    throw new SimError(400, `prompt is too long: ${inputTokens} tokens > ${l.contextWindow} maximum`);
}

/**
 * Chat Completions' refusals, by the model's maker. OpenAI: an output limit over the model's most (named
 * `max_tokens` whichever field carried it), then input over the window less the most output (its "configured
 * limit": 922,000 of 1,050,000). An open-weight host: input over the window, then input plus the output limit over
 * it. Claude on Anthropic's OpenAI-compatible endpoint: Anthropic's checks and words in OpenAI's error shape.
 * `outputLimit` is Infinity when the request sets none.
 */
export function refuseOverChatLimits(model: string, inputTokens: number, outputLimit: number): void {
  const l = modelLimits(model);
  if (l === undefined) return;
  if (l.rules === 'anthropic') {
    if (outputLimit !== Infinity && outputLimit > l.maxOutput) {
      throw new SimError(
        400,
        `max_tokens: ${outputLimit} > ${l.maxOutput}, which is the maximum allowed number of output tokens for ${model}`,
        null,
        null,
      );
    }
    if (inputTokens > l.contextWindow)
      throw new SimError(400, `prompt is too long: ${inputTokens} tokens > ${l.contextWindow} maximum`, null, null);
    return;
  }
  if (l.rules === 'openai') {
    if (outputLimit !== Infinity && outputLimit > l.maxOutput) {
      throw new SimError(
        400,
        `max_tokens is too large: ${outputLimit}. This model supports at most ${l.maxOutput} completion tokens, whereas you provided ${outputLimit}.`,
        'max_tokens',
        'invalid_value',
      );
    }
    const inputLimit = l.contextWindow - l.maxOutput;
    if (inputTokens > inputLimit) {
      throw overflow(
        `Input tokens exceed the configured limit of ${inputLimit} tokens. Your messages resulted in ${inputTokens} tokens. Please reduce the length of the messages.`,
      );
    }
  } else if (inputTokens > l.contextWindow) {
    throw overflow(
      `This model's maximum context length is ${l.contextWindow} tokens. However, your messages resulted in ${inputTokens} tokens. Please reduce the length of the messages.`,
    );
  }
  if (outputLimit !== Infinity && inputTokens + outputLimit > l.contextWindow) {
    throw overflow(
      `This model's maximum context length is ${l.contextWindow} tokens. However, you requested ${inputTokens + outputLimit} tokens ` +
        `(${inputTokens} in the messages, ${outputLimit} in the completion). Please reduce the length of the messages or completion.`,
    );
  }
}

/** OpenAI's context overflow: 400 invalid_request_error on `messages`, code context_length_exceeded. */
function overflow(message: string): SimError {
  return new SimError(400, message, 'messages', 'context_length_exceeded');
}
