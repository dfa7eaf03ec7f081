/**
 * The provider protocols, by the name a provider's config gives (`protocol`): a new protocol is a folder beside this
 * file and its line here. What the rest of the gateway asks of a provider's protocol goes through this file.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { CatalogEndpoint, ProviderConfig } from '../../../policies/catalog.js';
import type { Upstreams } from '../pools.js';
import type { VideoJobProvider } from '../video-provider.js';
import { anthropic } from './anthropic/index.js';
import { gemini } from './gemini/index.js';
import { openai } from './openai/index.js';
import { notServed, USER_AGENT, type ImageAdapter, type ProviderProtocol } from './protocol.js';

const PROTOCOLS: Readonly<Record<ProviderConfig['protocol'], ProviderProtocol>> = { anthropic, openai, gemini };

/** The upstream URL of `endpoint` for a model on `provider` (the catalogue's routes: policies/catalog.ts). */
export function upstreamUrl(provider: ProviderConfig, endpoint: CatalogEndpoint, upstreamModel: string): string {
  return PROTOCOLS[provider.protocol].url(endpoint, provider.base_url, upstreamModel);
}

/**
 * Request headers of a text call sent upstream: the provider's auth, the protocol's version header and the allowed
 * beta flags (policies/forwarding.ts), nothing of the caller's key.
 */
export function textUpstreamHeaders(
  provider: ProviderConfig,
  incoming: IncomingHttpHeaders,
  stream: boolean,
  betas: readonly string[],
): Record<string, string> {
  const h: Record<string, string> = {
    'content-type': 'application/json',
    'user-agent': USER_AGENT,
    accept: stream ? 'text/event-stream' : 'application/json',
  };
  const protocol = PROTOCOLS[provider.protocol];
  if (protocol.textHeaders === undefined) throw notServed(provider.protocol, 'text');
  protocol.textHeaders(h, provider, incoming, betas);
  return h;
}

/** The image adapter of `provider`'s protocol. */
export function imageAdapter(provider: ProviderConfig): ImageAdapter {
  const images = PROTOCOLS[provider.protocol].images;
  if (images === undefined) throw notServed(provider.protocol, 'images');
  return images;
}

/** The video job adapter of `provider`, or undefined where its protocol has no video jobs. */
export function videoJobProvider(upstreams: Upstreams, provider: ProviderConfig): VideoJobProvider | undefined {
  return PROTOCOLS[provider.protocol].videos?.(upstreams, provider);
}
