/**
 * OpenAI's API: chat completions (text), the Images API (images.ts, sizes in image-sizes.ts) and the Videos API
 * (videos.ts), under a base URL that ends in /v1; the key as `Authorization: Bearer`.
 */
import { notServed, type ModelIssue, type ProviderProtocol } from '../protocol.js';
import { openaiCapabilities, openaiMayBeTransparent, openaiRenderedPixels } from './image-sizes.js';
import { openaiCallerFields, openaiImageRequest } from './images.js';
import { openaiVideos } from './videos.js';

export const openai: ProviderProtocol = {
  serves: ['chat_completions', 'images', 'videos'],

  url(endpoint, base) {
    if (endpoint === 'chat_completions') return `${base}/chat/completions`;
    if (endpoint === 'images') return `${base}/images/generations`;
    if (endpoint === 'videos') return `${base}/videos`;
    throw notServed('openai', endpoint);
  },

  text: {
    wire: 'openai',
    headers(h, provider) {
      h.authorization = `Bearer ${provider.key}`;
    },
  },

  images: {
    callerFields: openaiCallerFields,
    request: openaiImageRequest,
    answer: 'pass',
    capabilities: openaiCapabilities,
    renderedPixels: openaiRenderedPixels,
    mayBeTransparent: openaiMayBeTransparent,
  },

  videos: openaiVideos,

  checkModel(m) {
    const issues: ModelIssue[] = [];
    if (m.kind !== 'image') return issues;
    // A setting that would never be sent is a mistake.
    if (m.max_output_tokens !== undefined)
      issues.push({
        field: 'max_output_tokens',
        message: 'is a Gemini setting: this model is served through the openai protocol',
      });
    if (m.quality !== undefined) {
      // "Create image", quality: standard and hd are DALL-E's; low, medium and high the GPT image models'.
      const dalle = (m.upstream_model ?? m.id).startsWith('dall-e');
      const takes = dalle ? ['standard', 'hd'] : ['low', 'medium', 'high'];
      if (!takes.includes(m.quality))
        issues.push({ field: 'quality', message: `must be ${takes.join(' or ')} for ${m.upstream_model ?? m.id}` });
    }
    return issues;
  },
};
