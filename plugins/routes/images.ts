/**
 * What the image endpoints share: police of what the model can do with a request (the classes and ratios its
 * upstream renders, the caller's provider fields through the adapter's allow-list, whether url answers are served),
 * its quote (one image of the requested model and size: pricing/worst-case.ts), its forward through the model's
 * protocol adapter (OpenAI Images or Gemini generateContent) with the delivery the caller asked for (url: room
 * reserved in the image store first), and its bill (billImage: the delivery rule).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { FREE, type Bill } from '../billing/billing.js';
import type { Call, ForwardContext, PoliceContext, Policed, Quoted } from '../call.js';
import type { FareboxConfig } from '../config.js';
import type { ReferenceImage } from '../upstream/image-answer.js';
import type { Exchange } from '../upstream/exchange.js';
import type { ImageDelivery } from '../upstream/image-exchange.js';
import { exchangeImage } from '../upstream/image-exchange.js';
import { imageAdapter } from '../upstream/protocols/registry.js';
import { priceOf } from '../phases/finish.js';
import type { ImageModel, ModelRoute } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import type { ImageRequest } from '../../policies/image-request.js';
import { deliveredClass } from '../../policies/image-sizes.js';
import { makeUsage, priceCall, worstCaseImage, type PriceTable } from '../../pricing/index.js';

/** A policed image request. */
export interface ImagePoliced extends Policed {
  readonly route: ModelRoute<ImageModel>;
  readonly request: ImageRequest;
  /** An edit's reference images, checked; null for a generation. */
  readonly references: readonly ReferenceImage[] | null;
}

/** Where a gateway's image URLs point, under the prefix the gateway is mounted at. */
const CONTENT_PATH = '/images/content/';

/**
 * Image base64 characters an answer may hand to the caller's connection and still cost nothing if the caller leaves
 * then: 1,024, or 768 bytes of the image, which is the file's signature and header (PNG's signature and IHDR take
 * 33 bytes, a baseline JPEG's markers and tables about 600) and no usable part of a served image. Past it, the
 * image is paid for whatever the caller does after: a caller that stops reading and hangs up has been handed what
 * the kernel's socket buffers hold (megabytes), and its answer was written as fast as the caller took it.
 */
export const FREE_IMAGE_CHARS = 1024;

/**
 * Most bytes a url image may take decoded, and the room reserved for it: its pixels (5% more than the class's rendered
 * size) at 3 bytes each, or 4 where it may be transparent (the protocol's `mayBeTransparent`: an OpenAI GPT image
 * model whose background is not `opaque`; gpt-image-2 and Gemini render no transparency), times 9/8, and 1 MiB of headers and metadata. 9/8: a
 * deflate stream of fixed Huffman codes spends at most 9 bits a byte (RFC 1951 3.2.6), which the fastest level of
 * some PNG encoders emits even for pixels that do not compress (5.7% over raw measured on noise); JPEG and WebP stay
 * under raw. A larger answer is refused (502, free).
 */
function reservedBytes(route: ModelRoute<ImageModel>, request: ImageRequest): number {
  const adapter = imageAdapter(route.provider);
  const pixels = adapter.renderedPixels(route.upstreamModel, request.size, request.aspectRatio);
  const transparent = adapter.mayBeTransparent(route.upstreamModel, request.extra);
  return Math.ceil((Math.ceil(pixels * 1.05) * (transparent ? 4 : 3) * 9) / 8) + 1024 * 1024;
}

/** The classes and ratios a model's upstream renders: its config's, else what the provider documents. */
export function imageCapabilities(route: ModelRoute<ImageModel>): {
  sizes: readonly string[];
  ratios: readonly string[];
} {
  const documented = imageAdapter(route.provider).capabilities(route.upstreamModel);
  return { sizes: route.model.sizes ?? documented.sizes, ratios: route.model.aspect_ratios ?? documented.ratios };
}

/**
 * The police of an image call, once its fields are parsed and its model routed: a class or ratio the model's upstream
 * does not render is a 400 naming the field (never a smaller image at a larger price); the caller's provider fields
 * go through the adapter's allow-list (refused, dropped and named in x-gw-dropped-fields, or sent); url answers only
 * where the gateway has an origin for their URLs.
 */
export function policeImage(
  route: ModelRoute<ImageModel>,
  parsed: ImageRequest,
  references: readonly ReferenceImage[] | null,
  ctx: PoliceContext,
): ImagePoliced {
  const { sizes, ratios } = imageCapabilities(route);
  const id = route.model.id;
  if (!sizes.includes(parsed.size)) {
    throw new GatewayError('invalid_request', {
      param: 'size',
      message: `size: ${id} renders ${sizes.join(', ')}, not ${parsed.size}.`,
    });
  }
  if (!ratios.includes(parsed.aspectRatio)) {
    throw new GatewayError('invalid_request', {
      param: 'aspect_ratio',
      message: `aspect_ratio: ${id} renders ${ratios.join(', ')}, not ${parsed.aspectRatio}.`,
    });
  }
  if (parsed.responseFormat === 'url' && !ctx.imageUrls) {
    throw new GatewayError('invalid_request', {
      param: 'response_format',
      message:
        'response_format: url is not served here (the operator has set no public origin for image URLs): ask for b64_json.',
    });
  }
  const { fields, dropped } = imageAdapter(route.provider).callerFields(route, parsed.extra);
  const request: ImageRequest = { ...parsed, extra: fields };
  return dropped.length > 0
    ? { route, request, references, headers: { 'x-gw-dropped-fields': dropped.join(',') } }
    : { route, request, references };
}

/**
 * The origin image URLs name: `images.public_url`; else the dashboard's configured origin the call came in on (or
 * its first); else, on the embedded default alone (loopback, no proxy), the call's own. Elsewhere a caller's Host
 * header never names it: null, and url answers are refused.
 */
export function imageUrlOrigin(
  config: Pick<FareboxConfig, 'images' | 'dashboard' | 'embedded'>,
): ((request: FastifyRequest) => string) | null {
  const fixed = config.images.public_url;
  if (fixed !== undefined) return () => fixed;
  const origins = config.dashboard.origins;
  if (origins !== undefined) {
    return (request) => {
      const own = `${request.protocol}://${request.host}`;
      return origins.includes(own) ? own : origins[0]!;
    };
  }
  return config.embedded ? (request) => `${request.protocol}://${request.host}` : null;
}

/** The worst case of an image call: one image of its model and size; rate limits count the request, no tokens. */
export function quoteImage(p: ImagePoliced, prices: PriceTable): Quoted {
  return {
    quote: { model: p.route.model.id, amount: worstCaseImage(prices, p.route.model.id, p.request.size, 1) },
    tokens: 0,
  };
}

/** The URL of a stored image: its origin, the gateway's /v1 path, the image's id. */
function urlOf(
  reply: FastifyReply,
  origin: (request: FastifyRequest) => string,
  endpointPath: string,
): (id: string) => string {
  const request = reply.request;
  const base = origin(request);
  const routeUrl = request.routeOptions.url ?? '';
  // The route's own path ends with the endpoint's; what is before it is /v1 under the host app's prefix.
  const path = routeUrl.endsWith(endpointPath) ? routeUrl.slice(0, -endpointPath.length) : '/v1';
  return (id) => `${base}${path}${CONTENT_PATH}${id}`;
}

/**
 * Forward an image call through its provider's adapter; the caller gets b64_json or a URL, as asked. A url call
 * first reserves room for the image in the store, so a full store refuses it (503, free) before the provider renders.
 */
export function forwardImage(
  call: Call,
  p: ImagePoliced,
  reply: FastifyReply,
  ctx: ForwardContext,
): FastifyReply | Promise<FastifyReply> {
  const adapter = imageAdapter(p.route.provider);
  const upstream = adapter.request(p.route, p.request, p.references);
  // x-gw-price: what billImage charges once the image is delivered, asked when the head goes out (its class known).
  const price = () => priceOf(call, deliveredImage(call.exchange!, p, ctx.prices));
  if (p.request.responseFormat !== 'url')
    return exchangeImage(ctx.upstreams, reply, call, upstream, { kind: adapter.answer }, price, ctx.metrics);
  const { store, origin } = ctx.images;
  // The reservation outlives the call's longest run (its deadline starts when the upstream request does) by a minute.
  return store
    .reserve(reservedBytes(p.route, p.request), p.route.provider.max_duration_ms + 60_000)
    .then((reservation) => {
      if (reservation === null) {
        throw new GatewayError('service_unavailable', {
          message: 'The image store is full; retry later, or ask for b64_json.',
          headers: { 'retry-after': '60' },
        });
      }
      const release = () => void store.release(reservation).catch(() => {});
      // The caller left while the room was reserved: nothing is asked of the provider (finish bills it nothing).
      if (call.ended) {
        release();
        return reply;
      }
      // The room goes back unless the image was stored in it (the store then holds its own size).
      reply.raw.once('close', () => {
        if (call.exchange?.delivered !== 1 || call.clientAborted) release();
      });
      const delivery: ImageDelivery = {
        kind: 'store',
        store,
        reservation,
        urlOf: urlOf(reply, origin!, call.endpoint!.path),
      };
      return exchangeImage(ctx.upstreams, reply, call, upstream, delivery, price, ctx.metrics);
    });
}

/**
 * The bill of a finished image call: the listed price of one image, at the class of what was rendered (never above
 * the requested one), once it was delivered:
 * - b64_json: once more than FREE_IMAGE_CHARS of the image went to the caller's connection, unless the provider's
 *   answer broke off without a whole image; a caller that leaves after that pays, as a stream's caller pays for
 *   what was sent.
 * - url: once the answer with the URL was written out whole (a caller that left first never got it: the image is
 *   removed and the call is free).
 * Anything else (a refusal, a provider failure, a caller who left before the image began) costs nothing.
 */
export function billImage(call: Call, p: ImagePoliced, prices: PriceTable): Bill {
  const ex = call.exchange;
  if (ex === undefined) return FREE;
  const delivered =
    p.request.responseFormat === 'url'
      ? ex.delivered === 1 && !call.clientAborted
      : (ex.imageChars ?? 0) > FREE_IMAGE_CHARS && ex.imageBroken !== true;
  return delivered ? deliveredImage(ex, p, prices) : FREE;
}

/** The bill of the image of `ex` once delivered: one image at the class of its pixels as read so far. */
function deliveredImage(ex: Exchange, p: ImagePoliced, prices: PriceTable): Bill {
  const { route, request } = p;
  const adapter = imageAdapter(route.provider);
  const size = deliveredClass(
    (s) => adapter.renderedPixels(route.upstreamModel, s, request.aspectRatio),
    request.size,
    ex.imagePixels ?? null,
  );
  const usage = makeUsage({ images: 1 });
  return { usage, price: priceCall(prices, p.route.model.id, usage, { imageSize: size }), size };
}
