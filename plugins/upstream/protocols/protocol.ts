/**
 * What a provider protocol is to the gateway: the catalogue endpoints it serves and the upstream URL of each, the
 * checks of a model's config it owns, the wire format and headers of a text call, and its adapters for images and
 * video jobs where it has them. Each protocol is one folder beside this file, registered in registry.ts.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type {
  CatalogEndpoint,
  ImageModel,
  ModelConfig,
  ModelRoute,
  ProviderConfig,
} from '../../../policies/catalog.js';
import type { Protocol } from '../../../policies/errors.js';
import type { AspectRatio, ImageRequest } from '../../../policies/image-request.js';
import type { ImageCapabilities } from '../../../policies/image-sizes.js';
import type { ImageSize } from '../../../pricing/index.js';
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
  /** The classes and ratios the provider documents for `upstreamModel` (a model's config may narrow or replace them). */
  capabilities(upstreamModel: string): ImageCapabilities;
  /** The pixels `upstreamModel` renders for a class at a ratio (what policies/image-sizes.ts deliveredClass checks). */
  renderedPixels(upstreamModel: string, size: ImageSize, ratio: AspectRatio): number;
  /** Whether an image of `upstreamModel` may carry an alpha channel, given the caller's fields. */
  mayBeTransparent(upstreamModel: string, extra: Readonly<Record<string, unknown>>): boolean;
}

/** A protocol's text calls. */
export interface TextAdapter {
  /**
   * The wire format its text calls speak, which the gateway's text path reads (body rules, bounds, usage, stream
   * events): Anthropic Messages or OpenAI chat completions.
   */
  readonly wire: Protocol;
  /** Add the provider's auth, the protocol's version header and the allowed beta flags to `headers`. */
  headers(
    headers: Record<string, string>,
    provider: ProviderConfig,
    incoming: IncomingHttpHeaders,
    betas: readonly string[],
  ): void;
}

/** A setting of a model's config the protocol refuses: the field, and why (config.ts puts it under models.<i>). */
export interface ModelIssue {
  readonly field: string;
  readonly message: string;
}

/** One provider protocol. */
export interface ProviderProtocol {
  /**
   * The catalogue endpoints it serves (policies/catalog.ts), and so the model kinds a provider speaking it may serve
   * (ENDPOINT_KIND).
   */
  readonly serves: readonly CatalogEndpoint[];
  /**
   * The upstream URL of `endpoint` for `upstreamModel` on a provider whose base URL is `base` (images and videos: the
   * create call; their adapters derive the others). Only endpoints the catalogue routes to the protocol are asked.
   */
  url(endpoint: CatalogEndpoint, base: string, upstreamModel: string): string;
  /** Text calls (absent: the protocol serves no text). */
  readonly text?: TextAdapter;
  /** Image calls (absent: the protocol serves no images). */
  readonly images?: ImageAdapter;
  /** Video jobs of one provider (absent: the protocol serves no videos). */
  videos?(upstreams: Upstreams, provider: ProviderConfig): VideoJobProvider;
  /**
   * The settings of `model` (served through a provider of this protocol) it refuses: another protocol's, or a value
   * its upstream does not take (absent: none). The config is read with them as errors.
   */
  checkModel?(model: ModelConfig): readonly ModelIssue[];
}

/** The error of an endpoint asked of a protocol that does not serve it (the config's checks make it a bug). */
export function notServed(protocol: string, endpoint: string): Error {
  return new Error(`the ${protocol} protocol serves no ${endpoint} endpoint`);
}
