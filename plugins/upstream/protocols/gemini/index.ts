/**
 * The Gemini API: generateContent for images (images.ts, sizes in image-sizes.ts) and predictLongRunning for videos
 * (videos.ts), under a base URL that ends in /v1beta; the key in `x-goog-api-key`.
 */
import { notServed, type ModelIssue, type ProviderProtocol } from '../protocol.js';
import { geminiCapabilities, geminiRenderedPixels } from './image-sizes.js';
import { geminiCallerFields, geminiImageRequest } from './images.js';
import { geminiVideos } from './videos.js';

export const gemini: ProviderProtocol = {
  serves: ['images', 'videos'],

  url(endpoint, base, upstreamModel) {
    if (endpoint === 'images') return `${base}/models/${encodeURIComponent(upstreamModel)}:generateContent`;
    if (endpoint === 'videos') return `${base}/models/${encodeURIComponent(upstreamModel)}:predictLongRunning`;
    throw notServed('gemini', endpoint);
  },

  images: {
    callerFields: geminiCallerFields,
    request: geminiImageRequest,
    answer: 'convert',
    capabilities: geminiCapabilities,
    renderedPixels: geminiRenderedPixels,
    // Gemini renders no transparency.
    mayBeTransparent: () => false,
  },

  videos: geminiVideos,

  checkModel(m) {
    const issues: ModelIssue[] = [];
    if (m.kind !== 'image') return issues;
    // A setting that would never be sent is a mistake.
    for (const field of ['quality', 'input_fidelity'] as const) {
      if (m[field] !== undefined)
        issues.push({
          field,
          message: 'is an OpenAI Images setting: this model is served through the gemini protocol',
        });
    }
    return issues;
  },
};
