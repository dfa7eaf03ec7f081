/**
 * The provider protocols, by the name a provider's config gives (`protocol`): a new protocol is a folder beside this
 * file and its line here. What the rest of the gateway asks of a provider's protocol goes through this file, the
 * config's checks included (plugins/config.ts): the names a config may give, the model kinds each serves, the
 * settings each refuses.
 */
import type { IncomingHttpHeaders } from 'node:http';
import {
  ENDPOINT_KIND,
  type CatalogEndpoint,
  type CatalogUpstream,
  type ModelConfig,
  type ProviderConfig,
} from '../../../policies/catalog.js';
import type { Protocol } from '../../../policies/errors.js';
import type { Upstreams } from '../pools.js';
import type { VideoJobProvider } from '../video-provider.js';
import { anthropic } from './anthropic/index.js';
import { gemini } from './gemini/index.js';
import { openai } from './openai/index.js';
import { notServed, USER_AGENT, type ImageAdapter, type ModelIssue, type ProviderProtocol } from './protocol.js';

const PROTOCOLS: ReadonlyMap<string, ProviderProtocol> = new Map([
  ['anthropic', anthropic],
  ['openai', openai],
  ['gemini', gemini],
]);

/** The names a provider's `protocol` may give. */
export const PROTOCOL_NAMES = [...PROTOCOLS.keys()] as [string, ...string[]];

/** The protocol of `name`; the config's check makes an unknown one a bug. */
function protocolNamed(name: string): ProviderProtocol {
  const protocol = PROTOCOLS.get(name);
  if (protocol === undefined) throw new Error(`unknown provider protocol ${name}`);
  return protocol;
}

/** Whether the protocol `name` serves models of `kind` (on any of its endpoints). */
export function servesKind(name: string, kind: ModelConfig['kind']): boolean {
  return protocolNamed(name).serves.some((e) => ENDPOINT_KIND[e] === kind);
}

/** The settings of `model` its provider's protocol `name` refuses. */
export function modelIssues(name: string, model: ModelConfig): readonly ModelIssue[] {
  return protocolNamed(name).checkModel?.(model) ?? [];
}

/** The upstream URL of `endpoint` for a model on `provider` (the catalogue's routes: policies/catalog.ts). */
function upstreamUrl(provider: ProviderConfig, endpoint: CatalogEndpoint, upstreamModel: string): string {
  return protocolNamed(provider.protocol).url(endpoint, provider.base_url, upstreamModel);
}

/** What the model catalogue asks of the protocols: which endpoints a provider serves, and their URLs. */
export const catalogUpstream: CatalogUpstream = {
  url: upstreamUrl,
  serves: (provider) => protocolNamed(provider.protocol).serves,
};

/** The wire format of text calls on `provider` (its protocol's). */
export function textWire(provider: ProviderConfig): Protocol {
  const text = protocolNamed(provider.protocol).text;
  if (text === undefined) throw notServed(provider.protocol, 'text');
  return text.wire;
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
  const text = protocolNamed(provider.protocol).text;
  if (text === undefined) throw notServed(provider.protocol, 'text');
  text.headers(h, provider, incoming, betas);
  return h;
}

/** The image adapter of `provider`'s protocol. */
export function imageAdapter(provider: ProviderConfig): ImageAdapter {
  const images = protocolNamed(provider.protocol).images;
  if (images === undefined) throw notServed(provider.protocol, 'images');
  return images;
}

/** The video job adapter of `provider`, or undefined where its protocol has no video jobs. */
export function videoJobProvider(upstreams: Upstreams, provider: ProviderConfig): VideoJobProvider | undefined {
  return protocolNamed(provider.protocol).videos?.(upstreams, provider);
}
