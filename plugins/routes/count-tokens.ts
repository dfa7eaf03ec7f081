/** POST /v1/messages/count_tokens: counts a prompt's tokens (Messages protocol); never billed, rate limited as a request. */
import type { TextModel, ModelRoute } from '../../policies/catalog.js';
import { countTokensBody, parseBody } from '../../policies/schemas.js';
import type { Endpoint } from '../call.js';
import { CALLER_MEMBERS, billNothing, forwardText, textPoliced, type TextPoliced } from './text.js';

/** The count_tokens endpoint. */
export const countTokens: Endpoint<TextPoliced> = {
  name: 'count_tokens',
  method: 'POST',
  path: '/messages/count_tokens',
  protocol: 'anthropic',
  clientRule: 'count_tokens',
  forwards: CALLER_MEMBERS,
  billed: false,
  police(request, ctx) {
    const parsed = parseBody(countTokensBody, request.body);
    const route = ctx.catalog.route('count_tokens', parsed.model) as ModelRoute<TextModel>;
    const rewrite = {
      body: { ...parsed, model: route.upstreamModel },
      maxOutputTokens: 0,
      stream: false,
      callerWantsUsage: true,
    };
    // Counting runs nothing: a prompt too large for the window still gets its count.
    return textPoliced(route, rewrite, request.headers, request.farebox, 1, false);
  },
  quote: () => ({ tokens: 0 }),
  forward: forwardText,
  bill: billNothing,
};
