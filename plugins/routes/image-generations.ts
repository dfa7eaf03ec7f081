/** POST /v1/images/generations: text-to-image (SPEC "Image generation request"), JSON, img models. */
import type { ImageModel, ModelRoute } from '../../policies/catalog.js';
import { parseImageRequest } from '../../policies/image-request.js';
import type { Endpoint } from '../call.js';
import { billImage, forwardImage, policeImage, quoteImage, type ImagePoliced } from './images.js';

/** The image generation endpoint. */
export const imageGenerations: Endpoint<ImagePoliced> = {
  name: 'image_generations',
  method: 'POST',
  path: '/images/generations',
  protocol: 'openai',
  clientRule: 'images',
  police(request, ctx) {
    const parsed = parseImageRequest(request.body);
    const route = ctx.catalog.route('images', parsed.model) as ModelRoute<ImageModel>;
    return policeImage(route, parsed, null, ctx);
  },
  quote: quoteImage,
  forward: forwardImage,
  bill: billImage,
};
