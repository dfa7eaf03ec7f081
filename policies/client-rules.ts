/**
 * The spec's client and model-family rules as one pure function (SPEC "Client and
 * model-family rules"; Authentication 4; Errors 403 "unsupported client").
 *
 * Decisions where the spec leaves room:
 * - alpha on messages and count_tokens: direct and coding_agent pass. third_party is refused
 *   (Authentication 4). agent_framework is refused too: on this endpoint a framework is a
 *   third-party client other than the recommended coding agent, and the rules support alpha
 *   only for direct requests and that client.
 * - alpha on chat completions: agent_framework is refused (rule 8.2, Authentication 4).
 *   third_party is refused as well: rule 8.1 says other third-party clients "are not supported
 *   for these models and are refused", for alpha models on any endpoint; Authentication 4
 *   names the messages case only as the one a third-party client meets in practice.
 *   coding_agent passes (the recommended client for alpha).
 * - beta: everything passes (rule 8.3).
 * - gamma: rule 8.4 promises direct requests and agent frameworks. coding_agent and
 *   third_party also pass: no rule refuses them, Authentication 4 lists every 403 case and
 *   gamma is not among them; "works for" is a support promise, the spec says "refused" where
 *   it refuses.
 * - Any other family (images, videos): no client rule.
 */
import type { ClientClass } from './clients.js';

/** Endpoints the client rules are asked about. */
export type ClientRuleEndpoint = 'messages' | 'chat_completions' | 'count_tokens' | 'images' | 'videos';

/** Stable ids of the rules that refuse a client; safe to log and to show. */
export type ClientRuleId =
  | 'alpha_messages_third_party'
  | 'alpha_messages_agent_framework'
  | 'alpha_chat_third_party'
  | 'alpha_chat_agent_framework';

/** A refusal: 403 `unsupported_client`, naming the rule that refused. */
export interface ClientRuleRefusal {
  readonly code: 'unsupported_client';
  readonly rule: ClientRuleId;
  readonly message: string;
}

function refusal(rule: ClientRuleId, message: string): ClientRuleRefusal {
  return Object.freeze({ code: 'unsupported_client', rule, message: `${message} (rule ${rule})` });
}

// Preallocated: the check runs on every text call.
const ALPHA_MESSAGES: Partial<Record<ClientClass, ClientRuleRefusal>> = Object.freeze({
  third_party: refusal(
    'alpha_messages_third_party',
    'alpha models on the messages endpoint support direct requests and the recommended coding-agent client only; third-party clients are refused',
  ),
  agent_framework: refusal(
    'alpha_messages_agent_framework',
    'alpha models on the messages endpoint support direct requests and the recommended coding-agent client only; an agent framework is a third-party client of this endpoint and is refused',
  ),
});

const ALPHA_CHAT: Partial<Record<ClientClass, ClientRuleRefusal>> = Object.freeze({
  third_party: refusal(
    'alpha_chat_third_party',
    'alpha models support direct requests and the recommended coding-agent client only; third-party clients are refused',
  ),
  agent_framework: refusal(
    'alpha_chat_agent_framework',
    'agent frameworks are refused on alpha models on the chat-completions endpoint; use a beta or gamma model',
  ),
});

/**
 * Null when `client` may call a `family` model on `endpoint`, else the refusal (403).
 * `family` is the model's family as configured (alpha, beta, gamma, img, vidA, ...).
 */
export function checkClientRule(
  endpoint: ClientRuleEndpoint,
  family: string,
  client: ClientClass,
): ClientRuleRefusal | null {
  if (family !== 'alpha') return null;
  switch (endpoint) {
    case 'messages':
    case 'count_tokens':
      return ALPHA_MESSAGES[client] ?? null;
    case 'chat_completions':
      return ALPHA_CHAT[client] ?? null;
    default:
      return null;
  }
}
