/**
 * Request body schemas of the text endpoints (SPEC "Messages request", "Chat completion request").
 * Objects are loose: unknown fields pass through to the model unchanged.
 */
import { z } from 'zod';
import { GatewayError } from './errors.js';

const content = z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]);

/** POST /v1/messages. */
export const messagesBody = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().positive(),
  // Claude Code also sends role "system" entries inside messages; the upstream judges roles.
  messages: z.array(z.looseObject({ role: z.string().min(1), content })).min(1),
  stream: z.boolean().optional(),
  system: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]).optional(),
  temperature: z.number().min(0).max(1).optional(),
});

/** POST /v1/messages/count_tokens. */
export const countTokensBody = z.looseObject({
  model: z.string().min(1),
  messages: z.array(z.looseObject({ role: z.string().min(1), content })).min(1),
});

const chatContent = z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]);

/** POST /v1/chat/completions. */
export const chatBody = z.looseObject({
  model: z.string().min(1),
  messages: z
    .array(
      z.looseObject({
        role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
        content: chatContent.optional(),
      }),
    )
    .min(1),
  max_tokens: z.number().int().positive().nullish(),
  max_completion_tokens: z.number().int().positive().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  tools: z
    .array(z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string().min(1) }) }))
    .optional(),
  tool_choice: z
    .union([
      z.enum(['auto', 'none', 'required']),
      z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string().min(1) }) }),
    ])
    .optional(),
  reasoning_effort: z.string().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  n: z.number().int().min(1).max(8).nullish(),
});

/** Parsed messages body. */
export type MessagesBody = z.infer<typeof messagesBody>;
/** Parsed chat completions body. */
export type ChatBody = z.infer<typeof chatBody>;

/** Parse `body` with `schema` or throw a 400 naming the first field at fault. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GatewayError('invalid_request', { message: 'The request body must be a JSON object.' });
  }
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const path = issue.path.join('.');
  throw new GatewayError('invalid_request', {
    param: path || undefined,
    message: path ? `${path}: ${issue.message}` : issue.message,
  });
}
