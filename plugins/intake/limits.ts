/**
 * What each endpoint's uploads may be (SPEC Limits), as the one reader takes them (intake/multipart.ts): one line an
 * endpoint.
 */
import { EDIT_LIMITS } from '../../policies/image-request.js';
import { MAX_VIDEO_REFERENCES } from '../../policies/videos.js';
import type { UploadLimits } from './multipart.js';

const MiB = 1024 * 1024;

/** Pixels one video reference may have, checked from its header before it is decoded (a small file can hold a huge image). */
export const MAX_IMAGE_PIXELS = 40_000_000;

/** An image edit (policies/image-request.ts EDIT_LIMITS): 1 to 14 images in `image` or `image[]` parts. */
export const EDIT_UPLOAD: UploadLimits = Object.freeze({
  files: { image: 'image', 'image[]': 'image' },
  maxFiles: EDIT_LIMITS.images,
  maxFileBytes: EDIT_LIMITS.imageBytes,
  maxTotalBytes: EDIT_LIMITS.totalBytes,
  // The gateway's fields and those a provider's adapter may take (quality, background, ...), with room to spare.
  maxFields: 64,
  maxFieldBytes: EDIT_LIMITS.fieldBytes,
  maxPixels: EDIT_LIMITS.pixels,
});

/**
 * A video submit: up to 30 input_reference files and a last_reference, 3.5 MB each and 4 MB in all.
 * `input_reference[]` is the name the official SDKs give a list of files.
 */
export const VIDEO_UPLOAD: UploadLimits = Object.freeze({
  files: {
    input_reference: 'input_reference',
    'input_reference[]': 'input_reference',
    last_reference: 'last_reference',
  },
  maxFiles: MAX_VIDEO_REFERENCES + 1,
  maxFileBytes: 3.5 * MiB,
  maxTotalBytes: 4 * MiB,
  maxFields: 16,
  // A prompt of 8,000 characters is at most 32,000 bytes of UTF-8.
  maxFieldBytes: 64 * 1024,
  maxPixels: MAX_IMAGE_PIXELS,
});
