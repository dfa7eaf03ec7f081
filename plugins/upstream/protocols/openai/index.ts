/**
 * OpenAI's API: chat completions (text), the Images API (images.ts) and the Videos API (videos.ts), under a base URL
 * that ends in /v1; the key as `Authorization: Bearer`.
 */
import { notServed, type ProviderProtocol } from '../protocol.js';
import { openaiCallerFields, openaiImageRequest } from './images.js';
import { openaiVideos } from './videos.js';

export const openai: ProviderProtocol = {
  url(endpoint, base) {
    if (endpoint === 'chat_completions') return `${base}/chat/completions`;
    if (endpoint === 'images') return `${base}/images/generations`;
    if (endpoint === 'videos') return `${base}/videos`;
    throw notServed('openai', endpoint);
  },

  textHeaders(h, provider) {
    h.authorization = `Bearer ${provider.key}`;
  },

  images: { callerFields: openaiCallerFields, request: openaiImageRequest, answer: 'pass' },

  videos: openaiVideos,
};
