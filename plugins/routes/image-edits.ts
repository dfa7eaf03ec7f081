/**
 * POST /v1/images/edits: image-to-image (SPEC "Image edit request"): a multipart/form-data body with the scalar
 * fields of a generation and 1 to 14 reference images, read and checked from their headers by police
 * (intake/multipart.ts, within intake/limits.ts EDIT_UPLOAD) before any hold, and decoded whole by prepare once the
 * hold is placed (at a thumbnail's cost: the images go upstream as uploaded).
 */
import type { ImageModel, ModelRoute } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import { EDIT_LIMITS, formValue, parseImageRequest } from '../../policies/image-request.js';
import { checkDecodes, decodeInOrder } from '../intake/images.js';
import { EDIT_UPLOAD } from '../intake/limits.js';
import { isMultipartRequest, readUpload } from '../intake/multipart.js';
import type { Endpoint } from '../call.js';
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
    if (!isMultipartRequest(request)) {
      throw new GatewayError('invalid_request', {
        param: 'body',
        message: `Image edits take a multipart/form-data body: the fields as text parts, 1 to ${EDIT_LIMITS.images} images in image parts.`,
      });
    }
    // The model is routed as soon as its field arrives: an unknown one is refused before the images are read.
    const form = await readUpload(request, EDIT_UPLOAD, (name, value) => {
      if (name === 'model' && value !== '') ctx.catalog.route('images', value);
    });
    if (form.files.length === 0) {
      throw new GatewayError('invalid_request', {
        param: 'image',
        message: `No reference image: an edit takes 1 to ${EDIT_LIMITS.images} images in image parts.`,
      });
    }
    const fields = Object.fromEntries(Object.entries(form.fields).map(([k, v]) => [k, formValue(k, v)]));
    const parsed = parseImageRequest(fields);
    const route = ctx.catalog.route('images', parsed.model) as ModelRoute<ImageModel>;
    return policeImage(route, parsed, form.files, ctx);
  },
  quote: quoteImage,
  prepare(call, p, ctx) {
    // A truncated or corrupt image is found by decoding it, which only a held call may cost the gateway.
    const decodes = p.references!.map(
      (img, i) => () => checkDecodes({ ...img, field: 'image', index: i + 1 }, EDIT_UPLOAD.maxPixels),
    );
    return decodeInOrder(
      decodes,
      (s) => ctx.metrics.imageDecode.observe({ endpoint: 'image_edits' }, s),
      () => call.ended,
    ).then(() => p);
  },
  forward: forwardImage,
  bill: billImage,
};
