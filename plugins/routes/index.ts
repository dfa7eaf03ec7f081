/** The endpoints of the call path, in the order they are registered. */
import type { Endpoint } from '../call.js';
import { chatCompletions } from './chat-completions.js';
import { countTokens } from './count-tokens.js';
import { imageEdits } from './image-edits.js';
import { imageGenerations } from './image-generations.js';
import { messages } from './messages.js';
import { videos } from './videos.js';

export { accountReadRoutes } from './account-reads.js';
export { healthRoute } from './health.js';
export { imageContentRoute } from './image-content.js';
export { imageUrlOrigin } from './images.js';
export { modelsRoutes } from './models.js';
export { videoJobRoutes } from './video-jobs.js';
export type { Endpoint, EndpointName, ForwardContext, PoliceContext, Policed, Quoted } from '../call.js';

/** Every endpoint module. */
export const ENDPOINTS: readonly Endpoint[] = [
  messages,
  countTokens,
  chatCompletions,
  imageGenerations,
  imageEdits,
  videos,
] as readonly Endpoint[];
