/**
 * What a provider protocol is to the gateway: the upstream URL of each endpoint it serves, the headers of a text call,
 * and its adapters for images and video jobs where it has them. Each protocol is one folder beside this file,
 * registered in registry.ts.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { CatalogEndpoint, ImageModel, ModelRoute, ProviderConfig } from '../../../policies/catalog.js';
import type { ImageRequest } from '../../../policies/image-request.js';
import type { CallerFields, ImageUpstreamRequest, ReferenceImage } from '../image-answer.js';
import type { Upstreams } from '../pools.js';
import type { VideoJobProvider } from '../video-provider.js';

/** The user-agent of every upstream request. */
export const USER_AGENT = 'farebox/0.1.0';

/** A protocol's image adapter: the caller fields it takes, the upstream request of a call, the shape of its answer. */
export interface ImageAdapter {
  /** The caller's fields (beyond the gateway's own) as sent upstream, or a 400 for one the protocol does not take. */
  callerFields(route: ModelRoute<ImageModel>, extra: Readonly<Record<string, unknown>>): CallerFields;
  /** The upstream request of an image call; `references` make it an edit. */
  request(
    route: ModelRoute<ImageModel>,
    req: ImageRequest,
    references: readonly ReferenceImage[] | null,
  ): ImageUpstreamRequest;
  /**
   * How a b64_json answer reaches the caller: the provider's answer passed on as it is (`pass`, OpenAI's Images shape),
   * or rewritten into that shape (`convert`).
   */
  readonly answer: 'pass' | 'convert';
}

/** One provider protocol. */
export interface ProviderProtocol {
  /**
   * The upstream URL of `endpoint` for `upstreamModel` on a provider whose base URL is `base` (images and videos: the
   * create call; their adapters derive the others). Only endpoints the catalogue routes to the protocol are asked.
   */
  url(endpoint: CatalogEndpoint, base: string, upstreamModel: string): string;
  /**
   * Text calls: add the provider's auth, the protocol's version header and the allowed beta flags to `headers`
   * (absent: the protocol serves no text).
   */
  textHeaders?(
    headers: Record<string, string>,
    provider: ProviderConfig,
    incoming: IncomingHttpHeaders,
    betas: readonly string[],
  ): void;
  /** Image calls (absent: the protocol serves no images). */
  readonly images?: ImageAdapter;
  /** Video jobs of one provider (absent: the protocol serves no videos). */
  videos?(upstreams: Upstreams, provider: ProviderConfig): VideoJobProvider;
}

/** The error of an endpoint asked of a protocol that does not serve it (the config's checks make it a bug). */
export function notServed(protocol: string, endpoint: string): Error {
  return new Error(`the ${protocol} protocol serves no ${endpoint} endpoint`);
}
