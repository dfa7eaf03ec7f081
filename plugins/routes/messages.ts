/** POST /v1/messages: the Messages protocol (SPEC "Messages request"), alpha models, streaming or not. */
import type { TextModel, ModelRoute } from '../../policies/catalog.js';
import { rewriteMessages } from '../../policies/rewrite.js';
import { messagesBody, parseBody } from '../../policies/schemas.js';
import type { Endpoint } from '../call.js';
import { CALLER_MEMBERS, billText, forwardText, quoteText, textPoliced, type TextPoliced } from './text.js';

/** The messages endpoint. */
export const messages: Endpoint<TextPoliced> = {
  name: 'messages',
  method: 'POST',
  path: '/messages',
  protocol: 'anthropic',
  clientRule: 'messages',
  forwards: CALLER_MEMBERS,
  police(request, ctx) {
    const parsed = parseBody(messagesBody, request.body);
    const route = ctx.catalog.route('messages', parsed.model) as ModelRoute<TextModel>;
    return textPoliced(route, rewriteMessages(parsed, route), request.headers, request.farebox);
  },
  quote: quoteText,
  forward: forwardText,
  bill: billText,
};
