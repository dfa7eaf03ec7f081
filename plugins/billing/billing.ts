/**
 * Billing on the call path (DESIGN "The path of one call", steps 3 and 5): the funds gate places a hold at the
 * call's worst-case price before the upstream runs (else 402), and settlement turns the hold into a debit of what
 * was actually delivered when the response closes.
 *
 * Worst case of a text call (never below its actual price):
 *   input side  - every input token (plain, cache read or cache write) priced at the highest rate the request can
 *                 trigger: the cache-write tier of its cache_control (1h: 2x input, 5m: 1.25x), else input or cache
 *                 read. Bound on their count: the UTF-8 size of the upstream request body plus 1024 tokens for
 *                 the provider's own framing (tokenizers emit at most one token per byte), capped at the model's
 *                 context window; a request that references media by URL or carries documents or files is bound
 *                 by the context window alone, since their tokens do not follow the request's size.
 *   output side - max_tokens after clamping (times n on chat completions) at the output rate.
 *   One rounding, upward (pricing/worst-case.ts).
 *
 * Actual price: the upstream's usage when the answer was delivered whole. A stream cut short (the caller hung up,
 * the upstream failed mid-way) is charged only for what reached the caller: output = content deltas forwarded
 * (every delta carries at least one token), input from message_start where the protocol reports it early, else
 * estimated at one token per 4 bytes of the request. An upstream error, or no answer, costs 0.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import type { CallContext, CallObserver } from '../call.js';
import { CHAIN_NAMES, type ChainName } from '../chains/config.js';
import { callIdOf } from '../chains/port.js';
import { GatewayError } from '../../policies/errors.js';
import type { Metrics } from '../metrics/metrics.js';
import type { PreparedAdjust, PreparedLimits } from './rate-limit.js';
import { usdOf } from '../metrics/metrics.js';
import { placeHold, settleHold, walletKeys } from './wallets.js';
import {
  formatUsd,
  fromAnthropicUsage,
  fromOpenAIUsage,
  makeUsage,
  priceCall,
  worstCaseText,
  type CacheWriteTier,
  type PriceTable,
  type Usage,
} from '../../pricing/index.js';

/** Tokens allowed for a provider's own framing of a request (system prompts it adds for tools, role markers). */
export const FRAMING_TOKENS = 1024;

/** Billing settings (config `billing`). */
export interface BillingSettings {
  /** How long call records (usage records) are kept after their call. */
  retentionMs: number;
  /** A hold outlives its call by this much before any instance may release it. */
  holdGraceMs: number;
  /** An instance whose heartbeat is older than this is dead: its holds are released. */
  instanceTimeoutMs: number;
}

const MEDIA_BY_REFERENCE = /"url"\s*:\s*"(?:https?|gs|s3):|"type"\s*:\s*"(?:document|file|input_file|container_upload|search_result)"|"file_id"\s*:/;
const CACHE_1H = /"ttl"\s*:\s*"1h"/;

/** Billing's state of one call. */
interface CallBilling {
  chain: ChainName;
  /** callIdOf(call.id): the key of the call's record and its escrow charge. */
  callId: string;
  hold: bigint;
  cacheWrite: CacheWriteTier;
  inputBound: number;
}

/** The highest cache-write tier a request body can trigger. */
export function cacheWriteTier(protocol: 'anthropic' | 'openai', body: string): CacheWriteTier {
  // OpenAI-protocol caching is automatic and has no write surcharge.
  if (protocol !== 'anthropic' || !body.includes('"cache_control"')) return 'none';
  return CACHE_1H.test(body) ? '1h' : '5m';
}

/** Upper bound on the input-side tokens of a request body (see the header comment). */
export function inputTokensBound(body: string, contextWindow: number): number {
  if (MEDIA_BY_REFERENCE.test(body)) return contextWindow;
  return Math.min(contextWindow, Buffer.byteLength(body, 'utf8') + FRAMING_TOKENS);
}

/** The usage billed for a finished call (see the header comment). */
export function billedUsage(call: CallContext, b: { cacheWrite: CacheWriteTier; inputBound: number }): Usage {
  const status = call.upstreamStatus ?? 0;
  if (!call.meter || status < 200 || status >= 300) return makeUsage({});
  const r = call.meter.reading;
  const anthropic = call.route!.provider.protocol === 'anthropic';
  const reported = r.usage ? (anthropic ? fromAnthropicUsage(r.usage, b.cacheWrite) : fromOpenAIUsage(r.usage)) : null;
  const whole = r.complete && !call.clientAborted && r.streamError === null;
  if (whole && reported) return reported;
  const maxOut = call.rewrite!.maxOutputTokens * Number((call.rewrite!.body as { n?: number }).n ?? 1);
  const delivered = Math.min(r.deltas, maxOut);
  const output = whole ? delivered : reported && reported.output_tokens > 1 ? Math.min(reported.output_tokens, delivered) : delivered;
  // Anthropic reports input (and cache) usage in message_start, before any output; OpenAI only at the end.
  if (reported && anthropic) return makeUsage({ ...reported, output_tokens: output });
  const estimate = Math.min(b.inputBound, Math.ceil(call.bodyBytes / 4));
  return makeUsage({ input_tokens: estimate, output_tokens: output });
}

/** The funds gate and per-call settlement. */
export class Billing implements CallObserver {
  readonly instance = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  private readonly r: Redis;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    redis: Redis,
    private readonly prices: PriceTable,
    private readonly settings: BillingSettings,
    private readonly metrics: Metrics,
    private readonly log: { error(obj: object, msg: string): void; warn(obj: object, msg: string): void },
  ) {
    this.r = redis;
  }

  /** Chain of a call: the x-gw-billing-chain header, or the account's default (`auto` or absent). */
  chainOf(call: CallContext, header: string | string[] | undefined): ChainName {
    if (header === undefined || header === 'auto') return (CHAIN_NAMES as readonly string[]).includes(call.identity!.defaultChain) ? (call.identity!.defaultChain as ChainName) : 'chain_a';
    if (typeof header === 'string' && (CHAIN_NAMES as readonly string[]).includes(header)) return header as ChainName;
    throw new GatewayError('invalid_billing_chain', { param: 'x-gw-billing-chain' });
  }

  /** Billing decides the call's rate limits in the hold script (wallets.ts), in the same step as its hold. */
  readonly decidesLimits = true;

  async gate(call: CallContext, reply: FastifyReply, limits?: PreparedLimits): Promise<readonly number[]> {
    const chain = this.chainOf(call, reply.request.headers['x-gw-billing-chain']);
    reply.header('x-gw-billing-chain', chain);
    const route = call.route!;
    const body = call.upstreamBody!;
    const cacheWrite = cacheWriteTier(route.provider.protocol, body);
    const inputBound = call.inputBound ?? inputTokensBound(body, route.model.context_window);
    const n = Number((call.rewrite!.body as { n?: number }).n ?? 1);
    const hold = worstCaseText(this.prices, route.model.id, { inputTokensBound: inputBound, maxOutputTokens: call.rewrite!.maxOutputTokens * n, cacheWrite });
    const now = Date.now();
    const callId = callIdOf(call.id);
    const result = await placeHold(this.r, {
      requestId: call.id,
      callId,
      account: call.identity!.account,
      chain,
      amount: hold,
      instance: this.instance,
      expiresAt: now + route.provider.timeout_ms + this.settings.holdGraceMs,
      model: route.model.id,
      keyId: call.identity!.keyId,
      now,
      retentionMs: this.settings.retentionMs,
    }, limits);
    // Refused by a rate limit: nothing held; the caller answers 429 from the decision.
    if (!result.placed && result.rateLimited) return result.limits;
    if (!result.placed) {
      const available = result.available < 0n ? 0n : result.available;
      throw new GatewayError('insufficient_funds', {
        message: `The wallet on ${chain} does not cover this call: it needs up to ${formatUsd(hold)} USD at worst, ${formatUsd(available)} USD is available.`,
      });
    }
    this.metrics.holdsPlaced.inc({ chain });
    call.billing = { chain, callId, hold, cacheWrite, inputBound } satisfies CallBilling;
    return result.limits;
  }

  async settle(call: CallContext, correctLimits?: (billedTokens: number) => PreparedAdjust | null): Promise<void> {
    const b = call.billing as CallBilling | undefined;
    if (!b) return;
    let usage: Usage;
    let price: bigint;
    try {
      usage = billedUsage(call, b);
      price = priceCall(this.prices, call.route!.model.id, usage);
    } catch (err) {
      // An upstream that reports nonsense usage is charged nothing rather than guessed at.
      this.log.error({ err, requestId: call.id }, 'usage not billable; call charged 0');
      usage = makeUsage({});
      price = 0n;
    }
    call.billedTokens = usage.input_tokens + usage.output_tokens + usage.cache_read_tokens + usage.cache_write_5m_tokens + usage.cache_write_1h_tokens;
    const limits = correctLimits?.(call.billedTokens) ?? null;
    for (let attempt = 0; ; attempt++) {
      try {
        const done = await settleHold(this.r, {
          requestId: call.id,
          callId: b.callId,
          account: call.identity!.account,
          chain: b.chain,
          instance: this.instance,
          price,
          usageJson: JSON.stringify(usage),
          retentionMs: this.settings.retentionMs,
          limits,
        });
        if (done && done.debited > 0n) {
          this.metrics.charged.inc({ chain: b.chain, model: call.route!.model.id }, usdOf(done.debited));
          this.countTokens(call.route!.model.id, usage);
        }
        if (done?.capped) this.metrics.priceAboveHold.inc({ model: call.route!.model.id });
        return;
      } catch (err) {
        // Redis away: retry for a while; after that the hold expires and is released (the call goes free).
        if (attempt >= 5) {
          this.log.error({ err, requestId: call.id }, 'settlement failed; the hold will expire');
          return;
        }
        await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
      }
    }
  }

  private countTokens(model: string, u: Usage): void {
    if (u.input_tokens) this.metrics.tokens.inc({ model, kind: 'input' }, u.input_tokens);
    if (u.output_tokens) this.metrics.tokens.inc({ model, kind: 'output' }, u.output_tokens);
    if (u.cache_read_tokens) this.metrics.tokens.inc({ model, kind: 'cache_read' }, u.cache_read_tokens);
    const writes = u.cache_write_5m_tokens + u.cache_write_1h_tokens;
    if (writes) this.metrics.tokens.inc({ model, kind: 'cache_write' }, writes);
  }

  /** Heartbeat this instance and release holds of dead instances and expired holds, every `everyMs`. */
  start(everyMs = 5_000): void {
    const tick = () => {
      this.sweep().catch((err) => this.log.warn({ err }, 'hold sweep failed'));
    };
    tick();
    this.timer = setInterval(tick, everyMs);
    this.timer.unref();
  }

  /** One sweep: heartbeat, then release what died (exported for tests). */
  async sweep(now = Date.now()): Promise<number> {
    await this.r.zadd(walletKeys.instances, now, this.instance);
    let released = 0;
    const dead = await this.r.zrangebyscore(walletKeys.instances, '-inf', now - this.settings.instanceTimeoutMs);
    for (const instance of dead) {
      if (instance === this.instance) continue;
      const ids = await this.r.smembers(walletKeys.instanceHolds(instance));
      for (const id of ids) released += await this.release(id, 'instance_died');
      if ((await this.r.scard(walletKeys.instanceHolds(instance))) === 0) await this.r.zrem(walletKeys.instances, instance);
    }
    const expired = await this.r.zrangebyscore(walletKeys.holds, '-inf', now, 'LIMIT', 0, 500);
    for (const id of expired) released += await this.release(id, 'expired');
    this.metrics.holdsOpen.set(await this.r.zcard(walletKeys.holds));
    return released;
  }

  private async release(requestId: string, reason: string): Promise<number> {
    const callId = callIdOf(requestId);
    const h = await this.r.hmget(walletKeys.call(callId), 'account', 'chain', 'instance', 'status');
    if (!h[0] || !h[1] || !h[2] || h[3] !== 'held') {
      await this.r.zrem(walletKeys.holds, requestId);
      return 0;
    }
    const done = await settleHold(this.r, {
      requestId, callId, account: h[0], chain: h[1] as ChainName, instance: h[2],
      price: 0n, usageJson: JSON.stringify(makeUsage({})), freeStatus: 'free', retentionMs: this.settings.retentionMs,
    });
    // Debited: the call settled itself between the read and this release.
    if (!done || done.debited > 0n) return 0;
    this.metrics.holdsReleased.inc({ reason });
    return 1;
  }

  /** Stop the sweep and retire this instance (its holds are settled by then, or released by others later). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.r.zrem(walletKeys.instances, this.instance).catch(() => {});
  }
}
