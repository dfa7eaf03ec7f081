/**
 * Simulated OpenAI Chat Completions: POST /v1/chat/completions (JSON and SSE chunks), following
 * OpenAI's API reference ("Create chat completion", "The chat completion chunk object",
 * stream_options.include_usage, function tool calls) and its prompt caching guide.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { setTimeout as sleep } from 'node:timers/promises';
import { lastUserText, parseDirectives } from './directives.js';
import { SimError, defaultMessage } from './errors.js';
import { newId } from './ids.js';
import { refuseOverChatLimits } from './models.js';
import { planText, planTool, type TextPlan, type ToolPlan } from './output.js';
import { openaiPrompt } from './prompt.js';
import { sendJson, sendStream, type StreamPlan } from './respond.js';
import { type RouteContext, POST_ROUTE, bodyObject } from './route-context.js';
import { hashSeed } from './tokens.js';

const MAX_STOPS = 4;

/** OpenAI's check: an `Authorization: Bearer` key (any value), else 401 as the API answers it. */
export function checkAuth(req: FastifyRequest): void {
  const auth = req.headers.authorization;
  if (typeof auth !== 'string' || !/^Bearer\s+\S/i.test(auth)) {
    throw new SimError(
      401,
      "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
      null,
      null,
    );
  }
}

/** max_completion_tokens, else the older max_tokens; unbounded when neither is given. */
function outputLimit(body: Record<string, unknown>): number {
  let limit = Infinity;
  for (const param of ['max_tokens', 'max_completion_tokens'] as const) {
    const v = body[param];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
      throw new SimError(
        400,
        `Invalid '${param}': integer below minimum value. Expected a value >= 1.`,
        param,
        'integer_below_min_value',
      );
    }
    limit = Math.min(limit, v);
  }
  return limit;
}

function stops(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  const list = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(list) || list.some((s) => typeof s !== 'string'))
    throw new SimError(400, "Invalid type for 'stop'.", 'stop');
  if (list.length > MAX_STOPS)
    throw new SimError(
      400,
      `Invalid 'stop': array too long. Expected an array with maximum length ${MAX_STOPS}.`,
      'stop',
      'array_above_max_length',
    );
  return list as string[];
}

interface Tool {
  name: string;
  schema: unknown;
}

/** The function tool_choice forces (`required` or a named function), if any. */
function forcedTool(body: Record<string, unknown>): Tool | undefined {
  const choice = body.tool_choice;
  const tools = (Array.isArray(body.tools) ? body.tools : []) as Array<{
    type?: unknown;
    function?: { name?: unknown; parameters?: unknown };
  }>;
  if (choice !== undefined && choice !== null && tools.length === 0) {
    throw new SimError(
      400,
      "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
      'tool_choice',
    );
  }
  const fns = tools.filter((t) => t?.type === 'function' && typeof t.function?.name === 'string');
  let tool: (typeof fns)[number] | undefined;
  if (choice === 'required') tool = fns[0];
  else if (choice !== null && typeof choice === 'object' && (choice as { type?: unknown }).type === 'function') {
    const name = (choice as { function?: { name?: unknown } }).function?.name;
    tool = fns.find((t) => t.function!.name === name);
    if (tool === undefined)
      throw new SimError(
        400,
        `Invalid value for 'tool_choice': function '${String(name)}' is not in tools.`,
        'tool_choice',
      );
  } else return undefined;
  if (tool === undefined)
    throw new SimError(400, "Invalid value for 'tool_choice': no function tool to call.", 'tool_choice');
  return { name: tool.function!.name as string, schema: tool.function!.parameters };
}

type Output = { kind: 'text'; plan: TextPlan } | { kind: 'tool'; plan: ToolPlan; id: string };

function finishReason(out: Output): string {
  if (out.plan.ending === 'max_tokens') return 'length';
  return out.kind === 'tool' ? 'tool_calls' : 'stop';
}

function usageJson(prompt: number, cached: number, completion: number): string {
  return (
    '{"prompt_tokens":' +
    prompt +
    ',"completion_tokens":' +
    completion +
    ',"total_tokens":' +
    (prompt + completion) +
    ',"prompt_tokens_details":{"cached_tokens":' +
    cached +
    ',"audio_tokens":0}' +
    ',"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}'
  );
}

function completionJson(id: string, created: number, model: string, out: Output, usage: string): string {
  const message =
    out.kind === 'tool'
      ? '{"role":"assistant","content":null,"tool_calls":[{"id":"' +
        out.id +
        '","type":"function","function":{"name":' +
        JSON.stringify(out.plan.name) +
        ',"arguments":' +
        JSON.stringify(out.plan.pieces.join('')) +
        '}}],"refusal":null,"annotations":[]}'
      : '{"role":"assistant","content":' +
        JSON.stringify(out.plan.pieces.join('')) +
        ',"refusal":null,"annotations":[]}';
  return (
    '{"id":"' +
    id +
    '","object":"chat.completion","created":' +
    created +
    ',"model":' +
    model +
    ',"choices":[{"index":0,"message":' +
    message +
    ',"logprobs":null,"finish_reason":"' +
    finishReason(out) +
    '"}]' +
    ',"usage":' +
    usage +
    ',"service_tier":"default"}'
  );
}

/** Role chunk | one chunk per token | finish_reason chunk, usage chunk (include_usage), [DONE]. */
function streamPlan(id: string, created: number, model: string, out: Output, usage: string | null): StreamPlan {
  const open =
    'data: {"id":"' +
    id +
    '","object":"chat.completion.chunk","created":' +
    created +
    ',"model":' +
    model +
    ',"service_tier":"default"';
  const close = usage === null ? '}\n\n' : ',"usage":null}\n\n';
  const chunk = (delta: string, finish: string) =>
    open + ',"choices":[{"index":0,"delta":' + delta + ',"logprobs":null,"finish_reason":' + finish + '}]' + close;
  let first: string;
  let chunks: string[];
  if (out.kind === 'tool') {
    first =
      '{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"' +
      out.id +
      '","type":"function","function":{"name":' +
      JSON.stringify(out.plan.name) +
      ',"arguments":""}}],"refusal":null}';
    chunks = out.plan.pieces.map((p) =>
      chunk('{"tool_calls":[{"index":0,"function":{"arguments":' + JSON.stringify(p) + '}}]}', 'null'),
    );
  } else {
    first = '{"role":"assistant","content":"","refusal":null}';
    chunks = out.plan.pieces.map((p) => chunk('{"content":' + JSON.stringify(p) + '}', 'null'));
  }
  const tail = [chunk('{}', '"' + finishReason(out) + '"')];
  if (usage !== null) tail.push(open + ',"choices":[],"usage":' + usage + '}\n\n');
  tail.push('data: [DONE]\n\n');
  return { head: [chunk(first, 'null')], chunks, tail };
}

/** Registers the OpenAI route. */
export function openaiRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post('/v1/chat/completions', POST_ROUTE, async (req, reply) => {
    ctx.record(req);
    checkAuth(req);
    const body = bodyObject(req.body);
    if (typeof body.model !== 'string' || body.model === '')
      throw new SimError(400, 'you must provide a model parameter');
    if (Array.isArray(body.messages) && body.messages.length === 0) {
      throw new SimError(
        400,
        "Invalid 'messages': empty array. Expected an array with minimum length 1.",
        'messages',
        'empty_array',
      );
    }
    const prompt = openaiPrompt(body);
    if (body.n !== undefined && body.n !== null && body.n !== 1)
      throw new SimError(400, 'The simulated upstream supports n=1 only.', 'n');
    const stream = body.stream === true;
    if (body.stream_options !== undefined && body.stream_options !== null && !stream) {
      throw new SimError(
        400,
        "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        'stream_options',
      );
    }
    const limit = outputLimit(body);
    refuseOverChatLimits(body.model, prompt.total, limit);
    const stopList = stops(body.stop);
    const tool = forcedTool(body);
    const userText = lastUserText(body.messages);
    const d = parseDirectives(userText);
    // Inline, not applyFaults(): no await on the benchmark's path when no fault is asked.
    if (d.delayMs) await sleep(d.delayMs);
    if (d.status !== undefined) throw new SimError(d.status, defaultMessage(d.status));

    const seed = hashSeed(userText);
    const out: Output = tool
      ? { kind: 'tool', plan: planTool(tool.name, tool.schema, seed, limit), id: newId('call_') }
      : { kind: 'text', plan: planText(seed, d.tokens, limit, stopList) };
    const cached = ctx.cache.openai(body.model, prompt);
    const usage = usageJson(prompt.total, cached, out.plan.pieces.length);
    const id = newId('chatcmpl-');
    const created = Math.floor(Date.now() / 1000);
    const model = JSON.stringify(body.model);
    reply.hijack();
    const headers = { 'x-request-id': newId('req_') };
    if (stream) {
      const includeUsage =
        (body.stream_options as { include_usage?: unknown } | null | undefined)?.include_usage === true;
      return sendStream(reply.raw, headers, streamPlan(id, created, model, out, includeUsage ? usage : null), d);
    }
    await sendJson(
      reply.raw,
      200,
      headers,
      completionJson(id, created, model, out, usage),
      d.hangupAfter !== undefined,
      d.chunkDelayMs,
    );
  });
}
