/**
 * Admission, the gate of a call, with one owner: a call runs when its rate limits pass and, if it is billed, its
 * wallet covers its quote. One Redis script decides both (wallets.ts HOLD), so a call refused by either holds nothing
 * and counts against no limit. When the call is over, `finish` debits its hold and corrects its token limits to the
 * tokens billed, in one script too (wallets.ts DEBIT), so a resent or retried script counts once.
 *
 * A chain whose settlement falls behind takes no new calls. A caller may ask the escrow for its money back at any
 * moment and take it `withdrawalDelay` later (an hour on the dev chains; a day as the README deploys an escrow); a
 * debit not charged by then may find the money gone, and the call was served for free. Nothing else bounds the debit queue, so
 * admission refuses new holds on a chain (503 chain_settlement_behind, naming it; never a silent move to another
 * chain) once its oldest unsettled debit is billing.backlog_stop_ratio of the delay old, 0.5 by default, and admits
 * again once it is under half of that. Half, because the other half is what the debits already queued have left:
 * time for the settler to charge them and for their blocks to confirm once the chain moves again, for calls still
 * running to end, and for the watcher to see a withdrawal request made meanwhile; a stop nearer the delay would
 * leave minutes for a backlog that took half an hour to form. Not lower, because a stop is an outage of the chain
 * for its callers, and half an hour of backlog is far past any healthy settlement (seconds to minutes at 12
 * confirmations); FareboxDebitQueueStale warns at a quarter. Resuming at half the stop point keeps a settler working
 * its backlog down near that point from turning the chain on and off at every check.
 *
 * The hot path pays nothing for it: every billing.backlog_check_ms (1 s) each instance reads the escrows' terms the
 * watcher publishes and each chain's oldest debit in one Redis round trip, and admit() reads the verdict from memory.
 * The oldest debit is read from the queue itself, not from the settler, so a settler that is down stops its chain
 * too.
 */
import type { KeyIdentity } from '../accounts/accounts.js';
import type { Redis } from 'ioredis';
import { CHAIN_NAMES, type ChainName } from '../chains/config.js';
import { keys } from '../store/keys.js';
import { GatewayError, type Protocol } from '../../policies/errors.js';
import { UNLIMITED, type Decision } from '../../policies/limits.js';
import type { Usage } from '../../pricing/index.js';
import { formatUsd } from '../../pricing/index.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Log } from '../log.js';
import { FREE, type Bill, type Billing, type Hold, type Quote } from './billing.js';
import { RateLimiter, rateLimitedError, type RateLimitInput } from './rate-limit.js';
import type { KeyLimitRefusal } from './wallets.js';
import { describeLimit, keyWindow } from '../accounts/key-limits.js';

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
  if (header === undefined || header === 'auto')
    return names.includes(identity.defaultChain) ? (identity.defaultChain as ChainName) : 'chain_a';
  if (typeof header === 'string' && names.includes(header)) return header as ChainName;
  throw new GatewayError('invalid_billing_chain', { param: 'x-gw-billing-chain' });
}

/** The 402 of a call its key's spend limit does not cover: the limit, what is left, when it resets. */
export function keyLimitError(
  k: KeyLimitRefusal,
  amount: bigint,
  tokenPriced: boolean,
  chain: ChainName,
): GatewayError {
  const { end } = keyWindow(k.reset, k.windowStart);
  const resets = end === null ? 'It does not reset.' : `It resets at ${new Date(end).toISOString()}.`;
  const lower = tokenPriced ? ' A lower max_tokens lowers what the call holds.' : '';
  return new GatewayError('key_limit_exceeded', {
    message:
      `This API key's spend limit is ${describeLimit(k.limit, k.reset)}; ${formatUsd(k.left)} USD of it is left, ` +
      `counting its calls still running, and this call may cost up to ${formatUsd(amount)} USD. ${resets}${lower}`,
    headers: { 'x-gw-billing-chain': chain },
  });
}

/** How admission bounds each chain's debit backlog (billing.backlog_stop_ratio, billing.backlog_check_ms). */
export interface BacklogSettings {
  /** Stop a chain's new holds once its oldest debit is this fraction of the withdrawal delay old. Default 0.5. */
  stopRatio?: number;
  /** How often the backlogs and the escrows' terms are read. Default 1,000 ms. */
  checkMs?: number;
}

/** Admission's settings: the backlog stop, and where a caller refused for funds is sent. */
export interface AdmissionSettings extends BacklogSettings {
  /** The dashboard's URL, named in a 402 as where to fund the wallet; absent when none is configured. */
  dashboardUrl?: string;
}

/** A chain that takes no new calls: its oldest debit's age and its escrow's delay at the last check. */
interface Behind {
  ageMs: number;
  delayS: number;
}

/** Stream entry ids start with their creation time in ms (Redis's clock). */
function entryTime(id: string): number {
  return Number(id.slice(0, id.indexOf('-')));
}

/** Admits calls and finishes them. Without billing (no chains configured) it keeps the rate limits only. */
export class Admission {
  /** Each chain's per-charge cap, as the watcher published it (refreshed in the background, never per call). */
  private readonly caps = new Map<string, bigint>();
  /** Chains that take no new calls (see the head of this file), as of the last check. */
  private readonly behind = new Map<ChainName, Behind>();
  private readonly stopRatio: number;
  private readonly dashboardUrl: string | undefined;
  private readonly checkMs: number;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly limiter: RateLimiter,
    readonly billing: Billing | undefined,
    private readonly log: Log,
    private readonly redis?: Redis,
    backlog: AdmissionSettings = {},
    private readonly metrics?: Metrics,
  ) {
    this.dashboardUrl = backlog.dashboardUrl;
    this.stopRatio = backlog.stopRatio ?? 0.5;
    this.checkMs = backlog.checkMs ?? 1_000;
  }

  /** Read the escrows' terms and the debit backlogs now and every billing.backlog_check_ms. */
  async start(): Promise<void> {
    // Logged once per stretch of failures (Redis away): not once a second.
    let failing = false;
    const refresh = () =>
      this.refresh().then(
        () => void (failing = false),
        (err: unknown) => {
          if (!failing)
            this.log.warn({ err }, "reading the escrows' terms and the debit backlogs failed; the last verdicts stand");
          failing = true;
        },
      );
    await refresh();
    this.timer = setInterval(refresh, this.checkMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /**
   * Read what the watcher published of each escrow (keys.escrowCap, keys.escrowDelay) and each chain's oldest debit,
   * in one round trip, and decide which chains take new calls. A chain whose delay is not known yet is never stopped.
   */
  async refresh(): Promise<void> {
    if (!this.redis || !this.billing) return;
    const r = this.redis;
    const [terms, [s, us], ...heads] = await Promise.all([
      r.mget(...CHAIN_NAMES.flatMap((c) => [keys.escrowCap(c), keys.escrowDelay(c)])),
      // Redis's clock: the one the stream's entry ids were made on.
      r.time(),
      ...CHAIN_NAMES.map((c) => r.xrange(keys.debits(c), '-', '+', 'COUNT', 1)),
    ]);
    const now = Number(s) * 1000 + Math.floor(Number(us) / 1000);
    CHAIN_NAMES.forEach((c, i) => {
      const cap = terms[2 * i];
      if (cap && /^\d+$/.test(cap)) this.caps.set(c, BigInt(cap));
      else this.caps.delete(c);
      const delay = terms[2 * i + 1];
      const head = (heads[i] as [string, string[]][])[0];
      this.judge(
        c,
        head ? Math.max(0, now - entryTime(head[0])) : 0,
        delay && /^\d+$/.test(delay) ? Number(delay) : undefined,
      );
    });
  }

  /** Stop or resume `chain`'s new holds by the age of its oldest debit (the head of this file has the rule). */
  private judge(chain: ChainName, ageMs: number, delayS: number | undefined): void {
    const stopMs = delayS === undefined ? Infinity : this.stopRatio * delayS * 1000;
    const was = this.behind.has(chain);
    if (delayS !== undefined && (was ? ageMs >= stopMs / 2 : ageMs >= stopMs)) {
      this.behind.set(chain, { ageMs, delayS });
      if (!was) {
        const at = { chain, oldest_debit_s: Math.floor(ageMs / 1000), withdrawal_delay_s: delayS };
        this.log.warn(at, 'settlement behind: the chain takes no new calls until its debits are charged');
      }
    } else if (was) {
      this.behind.delete(chain);
      this.log.warn(
        { chain, oldest_debit_s: Math.floor(ageMs / 1000) },
        'settlement caught up: the chain takes new calls again',
      );
    }
    this.metrics?.chainAdmissionStopped.set({ chain }, this.behind.has(chain) ? 1 : 0);
  }

  /**
   * Admit a call, or throw its refusal: 400 bad chain or over the cap, 503 chain behind, 429 rate limited, 402 over
   * the key's spend limit or insufficient funds.
   */
  async admit(req: AdmitRequest): Promise<Admitted> {
    const limits: RateLimitInput = {
      keyId: req.identity.keyId,
      account: req.identity.account,
      family: req.family,
      tokens: req.tokens,
    };
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
    const behind = this.behind.get(chain);
    if (behind) {
      const age = Math.floor(behind.ageMs / 1000);
      throw new GatewayError('chain_settlement_behind', {
        message:
          `Settlement on ${chain} is behind: its oldest unsettled debit is ${age} s old, and its escrow pays a withdrawal ${behind.delayS} s after it is asked. ` +
          `${chain} takes no new calls until its debits are charged; retry later, or bill another chain with x-gw-billing-chain.`,
        headers: { 'x-gw-billing-chain': chain },
      });
    }
    const prepared = this.limiter.prepare(limits);
    const { result, hold } = await this.billing.hold(
      {
        requestId: req.requestId,
        account: req.identity.account,
        keyId: req.identity.keyId,
        chain,
        quote: req.quote,
        owner: req.owner,
        ttlMs: req.ttlMs,
      },
      prepared ?? undefined,
    );
    // Refused for the key's limit before the rate limits were decided: the reply has no decision.
    if (!result.placed && result.keyLimit)
      throw keyLimitError(result.keyLimit, req.quote.amount, req.tokens > 0, chain);
    const decision = prepared ? this.limiter.decide(prepared, result.limits) : UNLIMITED;
    if (!result.placed && result.rateLimited) throw rateLimitedError(decision, req.protocol);
    if (!result.placed) {
      const available = result.available < 0n ? 0n : result.available;
      // What to do, not only what is missing: where to fund, and (a token-priced call) how to hold less.
      const where = this.dashboardUrl ? ` (at ${this.dashboardUrl})` : '';
      const lower = req.tokens > 0 ? ' A lower max_tokens lowers what the call holds.' : '';
      throw new GatewayError('insufficient_funds', {
        message:
          `The wallet on ${chain} does not cover this call: it needs up to ${formatUsd(req.quote.amount)} USD at worst, ${formatUsd(available)} USD is available. ` +
          `Deposit USD to the escrow on ${chain}${where}, or bill a funded chain with x-gw-billing-chain.${lower}`,
        headers: { 'x-gw-billing-chain': chain },
      });
    }
    if (req.owner === undefined) this.billing.track(hold);
    return { decision, hold, limits };
  }

  /**
   * Count a video poll or download, or another read that needs no funds (`what` names them in the 429: a call's record,
   * the balance), against its key's and account's poll limits, or throw its 429; nothing is held.
   */
  async admitPoll(identity: KeyIdentity, protocol: Protocol, what = 'video polls'): Promise<Decision> {
    const decision = await this.limiter.checkPoll(identity.account, identity.keyId);
    if (!decision.allowed) {
      const whose = decision.which === 'account_requests' ? 'this account' : 'this API key';
      throw rateLimitedError(decision, protocol, undefined, `${what} per minute for ${whose}`);
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
