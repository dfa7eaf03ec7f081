/**
 * Anthropic's Messages API (text): POST {base}/v1/messages and {base}/v1/messages/count_tokens, the base URL without
 * /v1 as Anthropic's SDKs take it; the key in `x-api-key`, the API version in `anthropic-version`, beta flags in
 * `anthropic-beta`.
 */
import { notServed, type ProviderProtocol } from '../protocol.js';

/** The version sent when the caller names none. */
const DEFAULT_VERSION = '2023-06-01';

export const anthropic: ProviderProtocol = {
  serves: ['messages', 'count_tokens'],

  url(endpoint, base) {
    if (endpoint === 'messages') return `${base}/v1/messages`;
    if (endpoint === 'count_tokens') return `${base}/v1/messages/count_tokens`;
    throw notServed('anthropic', endpoint);
  },

  text: {
    wire: 'anthropic',
    headers(h, provider, incoming, betas) {
      h['x-api-key'] = provider.key;
      // SPEC names the date-valued version header `alpha-version`; real clients send `anthropic-version`.
      const version = incoming['anthropic-version'] ?? incoming['alpha-version'];
      h['anthropic-version'] = typeof version === 'string' ? version : DEFAULT_VERSION;
      if (betas.length > 0) h['anthropic-beta'] = betas.join(',');
    },
  },
};
