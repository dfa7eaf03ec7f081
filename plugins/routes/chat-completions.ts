/** POST /v1/chat/completions: the chat-completions protocol (SPEC "Chat completion request"), alpha, beta and gamma. */
import type { TextModel, ModelRoute } from '../../policies/catalog.js';
import { rewriteChat } from '../../policies/rewrite.js';
import { chatBody, parseBody } from '../../policies/schemas.js';
import type { Endpoint } from '../call.js';
import { CALLER_MEMBERS, billText, forwardText, quoteText, textPoliced, type TextPoliced } from './text.js';

/** The chat completions endpoint. */
export const chatCompletions: Endpoint<TextPoliced> = {
  name: 'chat_completions',
  method: 'POST',
  path: '/chat/completions',
  protocol: 'openai',
  clientRule: 'chat_completions',
  forwards: CALLER_MEMBERS,
  police(request, ctx) {
    const parsed = parseBody(chatBody, request.body);
    const route = ctx.catalog.route('chat_completions', parsed.model) as ModelRoute<TextModel>;
    return textPoliced(route, rewriteChat(parsed, route), request.headers, request.farebox, parsed.n ?? 1);
  },
  quote: quoteText,
  forward: forwardText,
  bill: billText,
};
