/**
 * What the image endpoints share: the policed image request, its quote (one image of the requested model and size:
 * pricing/worst-case.ts), its forward through the model's protocol adapter (OpenAI Images or Gemini generateContent)
 * with the delivery the caller asked for, and its bill: the listed price of one image of the requested size when an
 * image was delivered whole, else nothing (a refusal, a failure, a caller who hung up first).
 */
import type { FastifyReply } from 'fastify';
import { FREE, type Bill } from '../billing/billing.js';
import type { Call } from '../call.js';
import { geminiImageRequest } from '../upstream/gemini-images.js';
import type { ImageDelivery } from '../upstream/image-exchange.js';
import { exchangeImage } from '../upstream/image-exchange.js';
import { openaiImageRequest, type ReferenceImage } from '../upstream/openai-images.js';
import type { ImageModel, ModelRoute } from '../../policies/catalog.js';
import type { ImageRequest } from '../../policies/image-request.js';
import { makeUsage, priceCall, worstCaseImage, type PriceTable } from '../../pricing/index.js';
import type { ForwardContext, Policed, Quoted } from './endpoint.js';

/** A policed image request. */
export interface ImagePoliced extends Policed {
  readonly route: ModelRoute<ImageModel>;
  readonly request: ImageRequest;
  /** An edit's reference images, checked; null for a generation. */
  readonly references: readonly ReferenceImage[] | null;
}

/** Where a gateway's image URLs point, under the prefix the gateway is mounted at. */
const CONTENT_PATH = '/images/content/';

/** The worst case of an image call: one image of its model and size; rate limits count the request, no tokens. */
export function quoteImage(p: ImagePoliced, prices: PriceTable): Quoted {
  return { quote: { model: p.route.model.id, amount: worstCaseImage(prices, p.route.model.id, p.request.size, 1) }, tokens: 0 };
}

/** The URL of a stored image: the public origin (or the call's), the gateway's /v1 path, the image's id. */
function urlOf(reply: FastifyReply, publicUrl: string | undefined, endpointPath: string): (id: string) => string {
  const request = reply.request;
  const origin = publicUrl ?? `${request.protocol}://${request.host}`;
  const routeUrl = request.routeOptions.url ?? '';
  // The route's own path ends with the endpoint's; what is before it is /v1 under the host app's prefix.
  const base = routeUrl.endsWith(endpointPath) ? routeUrl.slice(0, -endpointPath.length) : '/v1';
  return (id) => `${origin}${base}${CONTENT_PATH}${id}`;
}

/** Forward an image call through its provider's adapter; the caller gets b64_json or a URL, as asked. */
export function forwardImage(call: Call, p: ImagePoliced, reply: FastifyReply, ctx: ForwardContext): FastifyReply {
  const gemini = p.route.provider.protocol === 'gemini';
  const upstream = gemini ? geminiImageRequest(p.route, p.request, p.references) : openaiImageRequest(p.route, p.request, p.references);
  const delivery: ImageDelivery = p.request.responseFormat === 'url'
    ? { kind: 'store', store: ctx.images.store, urlOf: urlOf(reply, ctx.images.publicUrl, call.endpoint!.path) }
    : { kind: gemini ? 'convert' : 'pass' };
  return exchangeImage(ctx.upstreams, reply, call, upstream, delivery, ctx.metrics);
}

/** The bill of a finished image call: one image at its size when it reached the caller whole, else nothing. */
export function billImage(call: Call, p: ImagePoliced, prices: PriceTable): Bill {
  const delivered = call.exchange?.delivered ?? 0;
  if (delivered < 1 || call.clientAborted) return FREE;
  const usage = makeUsage({ images: 1 });
  return { usage, price: priceCall(prices, p.route.model.id, usage, { imageSize: p.request.size }), size: p.request.size };
}
