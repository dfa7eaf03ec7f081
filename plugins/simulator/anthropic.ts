/**
 * Simulated Anthropic Messages API: POST /v1/messages (JSON and SSE) and
 * POST /v1/messages/count_tokens, following Anthropic's API reference ("Messages",
 * "Streaming Messages", "Count tokens", "Prompt caching", "Errors").
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { lastUserText, parseDirectives } from './directives.js';
import { SimError } from './errors.js';
import { newId } from './ids.js';
import { refuseOverAnthropicLimits } from './models.js';
import { planText, planTool, type TextPlan, type ToolPlan } from './output.js';
import type { AnthropicCacheUsage } from './prompt-cache.js';
import { anthropicPrompt } from './prompt.js';
import { sendJson, sendStream, type StreamPlan } from './respond.js';
import { hashSeed } from './tokens.js';
import { type RouteContext, POST_ROUTE, applyFaults, bodyObject } from './route-context.js';

/**
 * The provider's checks: an API key (x-api-key, or `Authorization: Bearer`, which the official
 * SDK sends since 1.x), and a version header.
 */
function checkHeaders(req: FastifyRequest): void {
  const key = req.headers['x-api-key'];
  const auth = req.headers.authorization;
  const bearer = typeof auth === 'string' && /^Bearer\s+\S/i.test(auth);
  if (!bearer && (typeof key !== 'string' || key === '')) throw new SimError(401, 'x-api-key header is required');
  const version = req.headers['anthropic-version'];
  if (typeof version !== 'string' || version === '') throw new SimError(400, 'anthropic-version: header is required');
}

interface Tool {
  name: string;
  schema: unknown;
}

/** The tool that tool_choice forces (`any` or `tool`), if any. */
function forcedTool(body: Record<string, unknown>): Tool | undefined {
  const choice = body.tool_choice as { type?: unknown; name?: unknown } | undefined | null;
  if (choice === undefined || choice === null || (choice.type !== 'any' && choice.type !== 'tool')) return undefined;
  const tools = (Array.isArray(body.tools) ? body.tools : []) as Array<{ name?: unknown; input_schema?: unknown }>;
  const named = tools.filter((t) => t !== null && typeof t === 'object' && typeof t.name === 'string');
  const tool =
    choice.type === 'tool'
      ? named.find((t) => t.name === choice.name)
      : (named.find((t) => t.input_schema) ?? named[0]);
  if (tool === undefined) {
    throw new SimError(
      400,
      choice.type === 'tool'
        ? `tool_choice: tool '${String(choice.name)}' is not in tools`
        : 'tool_choice: requires tools',
    );
  }
  return { name: tool.name as string, schema: tool.input_schema };
}

function usageJson(c: AnthropicCacheUsage, output: number): string {
  return (
    '{"input_tokens":' +
    c.input +
    ',"cache_creation_input_tokens":' +
    (c.write5m + c.write1h) +
    ',"cache_read_input_tokens":' +
    c.read +
    ',"cache_creation":{"ephemeral_5m_input_tokens":' +
    c.write5m +
    ',"ephemeral_1h_input_tokens":' +
    c.write1h +
    '},"output_tokens":' +
    output +
    ',"service_tier":"standard"}'
  );
}

function event(name: string, data: string): string {
  return 'event: ' + name + '\ndata: ' + data + '\n\n';
}

type Output = { kind: 'text'; plan: TextPlan } | { kind: 'tool'; plan: ToolPlan; id: string };

function stopReason(out: Output): string {
  if (out.kind === 'tool') return out.plan.ending === 'end' ? 'tool_use' : 'max_tokens';
  return out.plan.ending === 'end' ? 'end_turn' : out.plan.ending;
}

function stopSequence(out: Output): string {
  return out.kind === 'text' && out.plan.stopSequence !== null ? JSON.stringify(out.plan.stopSequence) : 'null';
}

function messageJson(id: string, model: string, out: Output, cache: AnthropicCacheUsage): string {
  let content: string;
  if (out.kind === 'tool') {
    content =
      '[{"type":"tool_use","id":"' +
      out.id +
      '","name":' +
      JSON.stringify(out.plan.name) +
      ',"input":' +
      JSON.stringify(out.plan.input) +
      '}]';
  } else {
    content =
      out.plan.pieces.length === 0 ? '[]' : '[{"type":"text","text":' + JSON.stringify(out.plan.pieces.join('')) + '}]';
  }
  return (
    '{"id":"' +
    id +
    '","type":"message","role":"assistant","model":' +
    model +
    ',"content":' +
    content +
    ',"stop_reason":"' +
    stopReason(out) +
    '","stop_sequence":' +
    stopSequence(out) +
    ',"usage":' +
    usageJson(cache, out.plan.pieces.length) +
    '}'
  );
}

/** message_start, content_block_start, ping | one delta per token | content_block_stop, message_delta, message_stop. */
function streamPlan(id: string, model: string, out: Output, cache: AnthropicCacheUsage): StreamPlan {
  const n = out.plan.pieces.length;
  const head = [
    event(
      'message_start',
      '{"type":"message_start","message":{"id":"' +
        id +
        '","type":"message","role":"assistant","model":' +
        model +
        ',"content":[],"stop_reason":null,"stop_sequence":null,"usage":' +
        usageJson(cache, Math.min(1, n)) +
        '}}',
    ),
  ];
  const tail: string[] = [];
  let chunks: string[];
  if (out.kind === 'tool') {
    head.push(
      event(
        'content_block_start',
        '{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"' +
          out.id +
          '","name":' +
          JSON.stringify(out.plan.name) +
          ',"input":{}}}',
      ),
    );
    chunks = out.plan.pieces.map((p) =>
      event(
        'content_block_delta',
        '{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":' +
          JSON.stringify(p) +
          '}}',
      ),
    );
  } else {
    if (n > 0)
      head.push(
        event(
          'content_block_start',
          '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        ),
      );
    chunks = out.plan.pieces.map((p) =>
      event(
        'content_block_delta',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":' + JSON.stringify(p) + '}}',
      ),
    );
  }
  head.push(event('ping', '{"type": "ping"}'));
  if (n > 0 || out.kind === 'tool') tail.push(event('content_block_stop', '{"type":"content_block_stop","index":0}'));
  tail.push(
    event(
      'message_delta',
      '{"type":"message_delta","delta":{"stop_reason":"' +
        stopReason(out) +
        '","stop_sequence":' +
        stopSequence(out) +
        '},"usage":{"input_tokens":' +
        cache.input +
        ',"cache_creation_input_tokens":' +
        (cache.write5m + cache.write1h) +
        ',"cache_read_input_tokens":' +
        cache.read +
        ',"output_tokens":' +
        n +
        '}}',
    ),
    event('message_stop', '{"type":"message_stop"}'),
  );
  return { head, chunks, tail };
}

function stopSequences(v: unknown): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string'))
    throw new SimError(400, 'stop_sequences: Input should be a list of strings');
  return v as string[];
}

/** Registers the Anthropic routes. */
export function anthropicRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post('/v1/messages', POST_ROUTE, async (req, reply) => {
    ctx.record(req);
    checkHeaders(req);
    const body = bodyObject(req.body);
    if (typeof body.model !== 'string' || body.model === '') throw new SimError(400, 'model: Field required');
    const maxTokens = body.max_tokens;
    if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
      throw new SimError(400, 'max_tokens: Field required (an integer >= 1)');
    }
    const prompt = anthropicPrompt(body);
    refuseOverAnthropicLimits(body.model, prompt.total, maxTokens);
    const stops = stopSequences(body.stop_sequences);
    const tool = forcedTool(body);
    const userText = lastUserText(body.messages);
    const d = parseDirectives(userText);
    await applyFaults(d);

    const seed = hashSeed(userText);
    const out: Output = tool
      ? { kind: 'tool', plan: planTool(tool.name, tool.schema, seed, maxTokens), id: newId('toolu_01') }
      : { kind: 'text', plan: planText(seed, d.tokens, maxTokens, stops) };
    const cache = ctx.cache.anthropic(body.model, prompt);
    const id = newId('msg_01');
    const model = JSON.stringify(body.model);
    reply.hijack();
    const headers = { 'request-id': newId('req_') };
    if (body.stream === true) return sendStream(reply.raw, headers, streamPlan(id, model, out, cache), d);
    await sendJson(
      reply.raw,
      200,
      headers,
      messageJson(id, model, out, cache),
      d.hangupAfter !== undefined,
      d.chunkDelayMs,
    );
  });

  app.post('/v1/messages/count_tokens', POST_ROUTE, async (req, reply) => {
    ctx.record(req);
    checkHeaders(req);
    const body = bodyObject(req.body);
    if (typeof body.model !== 'string' || body.model === '') throw new SimError(400, 'model: Field required');
    const prompt = anthropicPrompt(body);
    await applyFaults(parseDirectives(lastUserText(body.messages)));
    reply.hijack();
    await sendJson(reply.raw, 200, { 'request-id': newId('req_') }, '{"input_tokens":' + prompt.total + '}');
  });
}
