/**
 * Admission, the gate of a call, with one owner: a call runs when its rate limits pass and, if it is billed, its
 * wallet covers its quote. One Redis script decides both (wallets.ts HOLD), so a call refused by either holds nothing
 * and counts against no limit. When the call is over, `finish` debits its hold and corrects its token limits to the
 * tokens billed, in one script too (wallets.ts DEBIT), so a resent or retried script counts once.
 */
import type { KeyIdentity } from '../accounts/accounts.js';
import type { Redis } from 'ioredis';
import { CHAIN_NAMES, type ChainName } from '../chains/config.js';
import { keys } from '../store/keys.js';
import { GatewayError, type Protocol } from '../../policies/errors.js';
import { UNLIMITED, type Decision } from '../../policies/limits.js';
import type { Usage } from '../../pricing/index.js';
import { formatUsd } from '../../pricing/index.js';
import { FREE, type Bill, type Billing, type Hold, type Quote } from './billing.js';
import { RateLimiter, rateLimitedError, type RateLimitInput } from './rate-limit.js';

/** A call asking to run. */
export interface AdmitRequest {
  readonly requestId: string;
  /** The caller's protocol: a 429's headers follow it. */
  readonly protocol: Protocol;
  readonly identity: KeyIdentity;
  /** The model's family: rate limits are per family. */
  readonly family: string;
  /** Tokens the call may use at most (input bound + max output), counted against token limits; 0 where none apply. */
  readonly tokens: number;
  /** Its worst-case price; absent for a call that is never billed (count_tokens). */
  readonly quote?: Quote;
  /** The `x-gw-billing-chain` request header as sent. */
  readonly chainHeader?: string | string[];
  /** Who owns the hold, and for how long (a job's); default: this instance, renewed while the call runs. */
  readonly owner?: string;
  readonly ttlMs?: number;
}

/** An admitted call. */
export interface Admitted {
  /** The rate-limit decision (its headers go on the answer). */
  readonly decision: Decision;
  /** The call's hold, when it is billed. */
  readonly hold?: Hold;
  /** What the rate limits counted, corrected at the end. */
  readonly limits: RateLimitInput;
}

/** Tokens a usage counts against token limits. */
export function tokensOf(u: Usage): number {
  return u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_5m_tokens + u.cache_write_1h_tokens;
}

/** The chain a call bills on: `x-gw-billing-chain` (chain_a..chain_d), else (`auto` or absent) the account's default. */
export function chooseChain(identity: KeyIdentity, header: string | string[] | undefined): ChainName {
  const names = CHAIN_NAMES as readonly string[];
  if (header === undefined || header === 'auto') return names.includes(identity.defaultChain) ? (identity.defaultChain as ChainName) : 'chain_a';
  if (typeof header === 'string' && names.includes(header)) return header as ChainName;
  throw new GatewayError('invalid_billing_chain', { param: 'x-gw-billing-chain' });
}

type Log = { warn(obj: object, msg: string): void };

/** Admits calls and finishes them. Without billing (no chains configured) it keeps the rate limits only. */
export class Admission {
  /** Each chain's per-charge cap, as the watcher published it (refreshed in the background, never per call). */
  private readonly caps = new Map<string, bigint>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly limiter: RateLimiter,
    readonly billing: Billing | undefined,
    private readonly log: Log,
    private readonly redis?: Redis,
  ) {}

  /** Read the escrows' per-charge caps now and every `everyMs`. */
  async start(everyMs = 30_000): Promise<void> {
    const refresh = () => this.refreshCaps().catch((err) => this.log.warn({ err }, 'reading the escrows\' caps failed'));
    await refresh();
    this.timer = setInterval(refresh, everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Read the caps the watcher published (keys.escrowCap). */
  async refreshCaps(): Promise<void> {
    if (!this.redis || !this.billing) return;
    const values = await this.redis.mget(...CHAIN_NAMES.map((c) => keys.escrowCap(c)));
    CHAIN_NAMES.forEach((c, i) => {
      const v = values[i];
      if (v && /^\d+$/.test(v)) this.caps.set(c, BigInt(v));
      else this.caps.delete(c);
    });
  }

  /** Admit a call, or throw its refusal: 400 bad chain, 429 rate limited, 402 insufficient funds. */
  async admit(req: AdmitRequest): Promise<Admitted> {
    const limits: RateLimitInput = { keyId: req.identity.keyId, account: req.identity.account, family: req.family, tokens: req.tokens };
    if (!this.billing || !req.quote) {
      const decision = await this.limiter.check(limits);
      if (!decision.allowed) throw rateLimitedError(decision, req.protocol);
      return { decision, limits };
    }
    const chain = chooseChain(req.identity, req.chainHeader);
    const cap = this.caps.get(chain);
    if (cap !== undefined && req.quote.amount > cap) {
      // The escrow would refuse the charge (ChargeOverCap), and the call would go free.
      throw new GatewayError('charge_cap_exceeded', {
        message: `This call may cost up to ${formatUsd(req.quote.amount)} USD, more than the ${formatUsd(cap)} USD one charge may take on ${chain}; lower max_tokens.`,
        headers: { 'x-gw-billing-chain': chain },
      });
    }
    const prepared = this.limiter.prepare(limits);
    const { result, hold } = await this.billing.hold({
      requestId: req.requestId, account: req.identity.account, keyId: req.identity.keyId, chain, quote: req.quote,
      owner: req.owner, ttlMs: req.ttlMs,
    }, prepared ?? undefined);
    const decision = prepared ? this.limiter.decide(prepared, result.limits) : UNLIMITED;
    if (!result.placed && result.rateLimited) throw rateLimitedError(decision, req.protocol);
    if (!result.placed) {
      const available = result.available < 0n ? 0n : result.available;
      throw new GatewayError('insufficient_funds', {
        message: `The wallet on ${chain} does not cover this call: it needs up to ${formatUsd(req.quote.amount)} USD at worst, ${formatUsd(available)} USD is available.`,
        headers: { 'x-gw-billing-chain': chain },
      });
    }
    if (req.owner === undefined) this.billing.track(hold);
    return { decision, hold, limits };
  }

  /** Count a video poll or download against its key's and account's poll limits, or throw its 429; nothing is held. */
  async admitPoll(identity: KeyIdentity, protocol: Protocol): Promise<Decision> {
    const decision = await this.limiter.checkPoll(identity.account, identity.keyId);
    if (!decision.allowed) {
      const whose = decision.which === 'account_requests' ? 'this account' : 'this API key';
      throw rateLimitedError(decision, protocol, undefined, `video polls per minute for ${whose}`);
    }
    return decision;
  }

  /**
   * The call is over: debit its hold at `bill` (FREE releases it) and correct its token limits to the tokens billed.
   * Callable from outside a request (a job's completion). Throws only DebitNotReached (Billing.debit).
   */
  async finish(admitted: Admitted, bill: Bill = FREE): Promise<void> {
    const tokens = tokensOf(bill.usage);
    const { hold, limits } = admitted;
    if (hold && this.billing) {
      this.billing.untrack(hold);
      const correction = limits.tokens > 0 ? this.limiter.prepareAdjust(limits, tokens) : null;
      await this.billing.debit(hold, bill, correction);
      return;
    }
    if (limits.tokens > 0) {
      await this.limiter.adjust(limits, tokens).catch((err) => this.log.warn({ err }, 'rate-limit correction failed'));
    }
  }
}
