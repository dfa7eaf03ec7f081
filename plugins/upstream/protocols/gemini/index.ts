/**
 * The Gemini API: generateContent for images (images.ts) and predictLongRunning for videos (videos.ts), under a base
 * URL that ends in /v1beta; the key in `x-goog-api-key`.
 */
import { notServed, type ProviderProtocol } from '../protocol.js';
import { geminiCallerFields, geminiImageRequest } from './images.js';
import { geminiVideos } from './videos.js';

export const gemini: ProviderProtocol = {
  url(endpoint, base, upstreamModel) {
    if (endpoint === 'images') return `${base}/models/${encodeURIComponent(upstreamModel)}:generateContent`;
    if (endpoint === 'videos') return `${base}/models/${encodeURIComponent(upstreamModel)}:predictLongRunning`;
    throw notServed('gemini', endpoint);
  },

  images: { callerFields: geminiCallerFields, request: geminiImageRequest, answer: 'convert' },

  videos: geminiVideos,
};
