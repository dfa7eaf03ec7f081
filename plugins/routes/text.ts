/**
 * What the text endpoints share: the policed text request, its quote (pricing/worst-case.ts), its forward through
 * the streaming proxy with a meter of its protocol, and its bill from the upstream's usage or, for an answer cut
 * short, from what reached the caller.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { Bill } from '../billing/billing.js';
import { FREE } from '../billing/billing.js';
import type { Call, ForwardContext, Policed, Quoted } from '../call.js';
import type { JsonText } from '../intake/json-body.js';
import type { JsonMember } from '../intake/json-skeleton.js';
import { JsonMeter, SseMeter, type RawUsage } from '../upstream/metering.js';
import type { Exchange } from '../upstream/exchange.js';
import { textUpstreamHeaders, textWire } from '../upstream/protocols/registry.js';
import { proxyCall } from '../upstream/proxy.js';
import { showBill } from '../phases/finish.js';
import type { ModelRoute, TextModel } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import type { RewriteResult } from '../../policies/rewrite.js';
import { refuseUnpriced, splitBetas } from '../../policies/forwarding.js';
import { bodyFacts, inputBounds, maxImageTokens } from '../../policies/text-bounds.js';
import {
  fromAnthropicUsage,
  fromOpenAIUsage,
  makeUsage,
  priceCall,
  worstCaseText,
  ZERO_USAGE,
  type CacheWriteTier,
  type PriceTable,
  type Usage,
} from '../../pricing/index.js';

/** A policed text request. */
export interface TextPoliced extends Policed {
  readonly route: ModelRoute<TextModel>;
  /** What the rewrite decided; its body is in upstreamBody (a call does not keep the parsed body alive). */
  readonly rewrite: Omit<RewriteResult, 'body'>;
  /**
   * The rewritten body as sent upstream: serialized once, or spliced from the caller's bytes (upstreamBody), its
   * parts written in turn under the content-length upstreamHeaders names.
   */
  readonly upstreamBody: string | readonly Buffer[];
  readonly upstreamHeaders: Record<string, string>;
  /** Upper bound on the input-side tokens (policies/text-bounds.ts). */
  readonly inputBound: number;
  readonly cacheWrite: CacheWriteTier;
  /** Choices the upstream generates: chat completions' n, else 1. */
  readonly n: number;
  /** Size of the caller's request body. */
  readonly bodyBytes: number;
}

/** The betas of a call that has none (OpenAI's protocol): one shared value, never written to. */
const NO_BETAS: { readonly forwarded: readonly string[]; readonly dropped: readonly string[] } = Object.freeze({
  forwarded: Object.freeze([]),
  dropped: Object.freeze([]),
});

/** The policed form of a rewritten text request; `body` is the call's request body as the JSON parser read it. */
export function textPoliced(
  route: ModelRoute<TextModel>,
  rewrite: RewriteResult,
  incoming: IncomingHttpHeaders,
  body: { readonly bodyBytes: number; readonly json?: JsonText },
  n = 1,
  mustFit = true,
): TextPoliced {
  const upstream = upstreamBody(rewrite.body, body.json);
  const protocol = textWire(route.provider);
  const facts = bodyFacts(
    rewrite.body,
    route.model.family,
    maxImageTokens(route.model.family, route.model.max_image_tokens),
  );
  refuseUnpriced(protocol, rewrite.body, facts);
  const { inputBound, cacheWrite } = inputBounds({
    body: rewrite.body,
    bytes: upstream.bytes,
    facts,
    protocol,
    family: route.model.family,
    contextWindow: route.model.context_window,
    maxImageTokens: route.model.max_image_tokens,
    mustFit,
  });
  const betas = protocol === 'anthropic' ? splitBetas(incoming['anthropic-beta']) : NO_BETAS;
  let headers: Record<string, string> | undefined;
  if (rewrite.clampedTo !== undefined) headers = { 'x-gw-clamped-max-tokens': String(rewrite.clampedTo) };
  if (betas.dropped.length > 0) (headers ??= {})['x-gw-dropped-beta'] = betas.dropped.join(',');
  const upstreamHeaders = textUpstreamHeaders(route.provider, incoming, rewrite.stream, betas.forwarded);
  if (typeof upstream.body !== 'string') upstreamHeaders['content-length'] = String(upstream.bytes);
  return {
    route,
    rewrite: {
      maxOutputTokens: rewrite.maxOutputTokens,
      clampedTo: rewrite.clampedTo,
      stream: rewrite.stream,
      callerWantsUsage: rewrite.callerWantsUsage,
    },
    upstreamBody: upstream.body,
    upstreamHeaders,
    inputBound,
    cacheWrite,
    n,
    bodyBytes: body.bodyBytes,
    headers,
  };
}

/**
 * Top-level members forwarded as the caller wrote them (Endpoint.forwards): the conversation, nearly all of an agent's
 * megabyte. policies/rewrite.ts never changes them; the price reads them only through the body's size and its walk
 * (bodyFacts), which reads what the provider parses from them.
 */
export const CALLER_MEMBERS: ReadonlySet<string> = new Set(['messages', 'system']);

/** A text request's body as sent upstream, and its size. */
interface UpstreamBody {
  /** Serialized, or the parts of a splice (not copied into one buffer: a megabyte less to allocate and copy). */
  readonly body: string | readonly Buffer[];
  /** UTF-8 bytes of `body`. */
  readonly bytes: number;
}

/**
 * The upstream body: the rewritten body serialized, except the caller's messages and system when the body parser
 * left them as skeletons (intake/json-body.ts), which are the caller's bytes (the last of each, as the parser took
 * it): a skeleton is never serialized.
 */
function upstreamBody(body: Readonly<Record<string, unknown>>, json: JsonText | undefined): UpstreamBody {
  const kept = new Map<string, JsonMember>();
  if (json) for (const m of json.members) if (CALLER_MEMBERS.has(m.key) && m.key in body) kept.set(m.key, m);
  if (kept.size === 0) {
    const text = JSON.stringify(body);
    return { body: text, bytes: Buffer.byteLength(text, 'utf8') };
  }
  const rest: Record<string, unknown> = {};
  for (const k in body) if (!kept.has(k)) rest[k] = body[k];
  const head = JSON.stringify(rest);
  const parts: Buffer[] = [Buffer.from(head.length > 2 ? `${head.slice(0, -1)},` : '{', 'utf8')];
  let bytes = parts[0]!.length + 1;
  for (const m of kept.values()) {
    if (parts.length > 1) {
      parts.push(COMMA);
      bytes++;
    }
    parts.push(json!.bytes.subarray(m.start, m.end));
    bytes += m.end - m.start;
  }
  parts.push(CLOSE);
  return { body: parts, bytes };
}

const COMMA = Buffer.from(',');
const CLOSE = Buffer.from('}');

/** The worst case of a text call and the tokens its limits count (input bound + max output). */
export function quoteText(p: TextPoliced, prices: PriceTable): Quoted {
  const maxOutputTokens = p.rewrite.maxOutputTokens * p.n;
  const amount = worstCaseText(prices, p.route.model.id, {
    inputTokensBound: p.inputBound,
    maxOutputTokens,
    cacheWrite: p.cacheWrite,
  });
  return { quote: { model: p.route.model.id, amount }, tokens: p.inputBound + maxOutputTokens };
}

/**
 * Forward a text call: the rewritten body to its upstream, the answer streamed back through a meter. A billed call
 * shows its price: a JSON answer in x-gw-price (held whole: proxy.ts), a stream in its usage event's `usage.cost`.
 */
export function forwardText(call: Call, p: TextPoliced, reply: FastifyReply, ctx: ForwardContext): FastifyReply {
  const provider = p.route.provider;
  const protocol = textWire(provider);
  const dropUsageChunk = protocol === 'openai' && !p.rewrite.callerWantsUsage;
  const billed = call.endpoint?.billed !== false;
  // A stream's usage event closes its usage: the call is billed that usage, as if it ended there (billedUsage).
  const streamPrice = (raw: RawUsage): string | null => {
    const usage = reportedUsage(raw, protocol === 'anthropic', p.cacheWrite);
    return usage === null ? null : showBill(call, { usage, price: priceCall(ctx.prices, p.route.model.id, usage) });
  };
  return proxyCall(
    ctx.upstreams,
    reply,
    call,
    {
      url: p.route.url,
      method: 'POST',
      headers: p.upstreamHeaders,
      body: p.upstreamBody,
      provider: provider.name,
      timeoutMs: provider.timeout_ms,
      maxDurationMs: provider.max_duration_ms,
      meter: (ct) =>
        isSse(ct) ? new SseMeter(protocol, dropUsageChunk, billed ? streamPrice : undefined) : new JsonMeter(),
      keepLength: (ct) => !p.rewrite.stream && !isSse(ct),
      price: billed ? () => showBill(call, billText(call, p, ctx.prices)) : undefined,
    },
    ctx.metrics,
  );
}

function isSse(contentType: string | undefined): boolean {
  return contentType !== undefined && contentType.startsWith('text/event-stream');
}

/**
 * The usage billed for a finished text call. The upstream's usage when the answer was delivered whole. An answer cut
 * short (the caller hung up, the upstream failed mid-way) is charged only for what reached the caller, rounded up:
 * output = the larger of the content deltas forwarded (each carries at least one token) and their generated
 * characters / 4 (a JSON answer: its bytes written / 4; a billed one is written whole or not at all, proxy.ts), at
 * most max_tokens; input from message_start where the protocol reports it early, else estimated at one token per 4
 * bytes of the request. An answer cut before any generated content reached the caller, an upstream error, or no
 * answer, costs 0. Usage the upstream reports in a shape no count can be read from (negative, fractional, a string)
 * is taken as no usage: the answer is billed by what was metered, as one without usage. A call whose answer showed
 * its price is not billed here: finish debits the bill shown (call.bill).
 */
export function billedUsage(p: TextPoliced, exchange: Exchange | undefined, clientAborted: boolean): Usage {
  const status = exchange?.status ?? 0;
  const meter = exchange?.meter;
  if (!meter || status < 200 || status >= 300) return ZERO_USAGE;
  const r = meter.reading;
  const anthropic = textWire(p.route.provider) === 'anthropic';
  const reported = r.usage ? reportedUsage(r.usage, anthropic, p.cacheWrite) : null;
  const whole = r.complete && !clientAborted && r.streamError === null;
  if (whole && reported) return reported;
  const streamed = r.deltas > 0 || p.rewrite.stream;
  const delivered = streamed ? Math.max(r.deltas, Math.ceil(r.deltaChars / 4)) : Math.ceil(r.bytesOut / 4);
  if (!whole && delivered === 0) return ZERO_USAGE;
  const maxOut = p.rewrite.maxOutputTokens * p.n;
  const cut = Math.min(delivered, maxOut);
  const output = whole || !reported || reported.output_tokens <= 1 ? cut : Math.min(reported.output_tokens, cut);
  // Anthropic reports input (and cache) usage in message_start, before any output; OpenAI only at the end.
  if (reported && anthropic) return makeUsage({ ...reported, output_tokens: output });
  const estimate = Math.min(p.inputBound, Math.ceil(p.bodyBytes / 4));
  return makeUsage({ input_tokens: estimate, output_tokens: output });
}

/** The upstream's usage in our terms, or null when its counts are not non-negative integers. */
function reportedUsage(raw: RawUsage, anthropic: boolean, cacheWrite: TextPoliced['cacheWrite']): Usage | null {
  try {
    return anthropic ? fromAnthropicUsage(raw, cacheWrite) : fromOpenAIUsage(raw);
  } catch {
    return null;
  }
}

/** The bill of a finished text call. */
export function billText(call: Call, p: TextPoliced, prices: PriceTable): Bill {
  const usage = billedUsage(p, call.exchange, call.clientAborted);
  return { usage, price: priceCall(prices, p.route.model.id, usage) };
}

/** The bill of a call that is never billed (count_tokens). */
export function billNothing(): Bill {
  return FREE;
}
