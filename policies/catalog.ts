/**
 * Which models are served on which endpoint, and where each call goes upstream.
 * SPEC: the messages endpoint serves alpha models; chat completions serves alpha, beta and gamma.
 */
import type { FareboxConfig, ModelConfig, ProviderConfig } from '../plugins/config.js';
import { GatewayError } from './errors.js';

/** The text endpoints a model can be called on. */
export type TextEndpoint = 'messages' | 'count_tokens' | 'chat_completions';

/** Where one call on one endpoint goes. */
export interface ModelRoute {
  readonly model: ModelConfig;
  readonly provider: ProviderConfig;
  readonly upstreamModel: string;
  /** Full upstream URL of the endpoint. */
  readonly url: string;
}

const TEXT_FAMILIES = new Set(['alpha', 'beta', 'gamma']);

function upstreamUrl(provider: ProviderConfig, endpoint: TextEndpoint): string {
  // Anthropic base URLs carry no /v1 (the SDK convention); OpenAI base URLs end in /v1.
  if (provider.protocol === 'anthropic') {
    return `${provider.base_url}/v1/messages${endpoint === 'count_tokens' ? '/count_tokens' : ''}`;
  }
  return `${provider.base_url}/chat/completions`;
}

/** Resolves a model id on an endpoint to its route, from a table built once from the config. */
export class ModelCatalog {
  private readonly routes = new Map<string, ModelRoute>();
  private readonly known = new Set<string>();

  constructor(config: FareboxConfig) {
    for (const model of config.models) {
      this.known.add(model.id);
      if (!TEXT_FAMILIES.has(model.family)) continue;
      const upstreamModel = model.upstream_model ?? model.id;
      const native = config.providers[model.provider];
      if (model.family === 'alpha' && native.protocol === 'anthropic') {
        for (const ep of ['messages', 'count_tokens'] as const) {
          this.routes.set(`${ep}\0${model.id}`, { model, provider: native, upstreamModel, url: upstreamUrl(native, ep) });
        }
      }
      const chat = config.providers[model.chat_provider ?? model.provider];
      if (chat.protocol === 'openai') {
        this.routes.set(`chat_completions\0${model.id}`, { model, provider: chat, upstreamModel, url: upstreamUrl(chat, 'chat_completions') });
      }
    }
  }

  /** The route of `modelId` on `endpoint`; 400 unknown_model or wrong_endpoint otherwise. */
  route(endpoint: TextEndpoint, modelId: string): ModelRoute {
    const r = this.routes.get(`${endpoint}\0${modelId}`);
    if (r) return r;
    if (this.known.has(modelId)) {
      throw new GatewayError('wrong_endpoint', { param: 'model', message: `The model ${modelId} is not served on this endpoint.` });
    }
    throw new GatewayError('unknown_model', { param: 'model', message: `Unknown model: ${JSON.stringify(modelId).slice(0, 120)}. Model ids must be copied exactly.` });
  }

  /** Model ids served on `endpoint`. */
  ids(endpoint: TextEndpoint): string[] {
    const out: string[] = [];
    for (const k of this.routes.keys()) if (k.startsWith(`${endpoint}\0`)) out.push(k.slice(endpoint.length + 1));
    return out;
  }
}
