/**
 * POST /v1/images/edits: image-to-image (SPEC "Image edit request"): a multipart/form-data body with the scalar
 * fields of a generation and 1 to 14 reference images, read and checked from their headers by police
 * (image-form.ts) before any hold, and decoded whole by prepare once the hold is placed.
 */
import type { ImageModel, ModelRoute } from '../../policies/catalog.js';
import { parseImageRequest } from '../../policies/image-request.js';
import type { Endpoint } from '../call.js';
import { decodeEditImages, readImageForm } from './image-form.js';
import { billImage, forwardImage, policeImage, quoteImage, type ImagePoliced } from './images.js';

/** The image edit endpoint. */
export const imageEdits: Endpoint<ImagePoliced> = {
  name: 'image_edits',
  method: 'POST',
  path: '/images/edits',
  protocol: 'openai',
  clientRule: 'images',
  body: 'multipart',
  async police(request, ctx) {
    // The model is routed as soon as its field arrives: an unknown one is refused before the images are read.
    const form = await readImageForm(request, (model) => ctx.catalog.route('images', model));
    const parsed = parseImageRequest(form.fields);
    const route = ctx.catalog.route('images', parsed.model) as ModelRoute<ImageModel>;
    return policeImage(route, parsed, form.images, ctx);
  },
  quote: quoteImage,
  prepare(call, p, ctx) {
    // A truncated or corrupt image is found by decoding it, which only a held call may cost the gateway.
    return decodeEditImages(p.references!, (s) => ctx.metrics.imageDecode.observe({ endpoint: 'image_edits' }, s), () => call.ended).then(() => p);
  },
  forward: forwardImage,
  bill: billImage,
};
