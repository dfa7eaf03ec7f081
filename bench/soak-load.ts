/**
 * The soak's callers: an open-loop load at a fixed rate through whichever gateways are up (as a load balancer with
 * health checks would send it), from a seed. A mix of text calls (chat completions and messages, JSON and streams,
 * several models and chains), some that fail upstream (`#sim:status=500`), some whose caller hangs up mid-stream,
 * some long streams that outlive a fault. Every answer is kept: its request id, status, and whether it arrived whole,
 * which is what the checks (soak-check.ts) hold the ledger to.
 */
import { Agent, request } from 'undici';
import type { ChainName } from '../plugins/chains/config.js';
import { prng } from './fuzz-cases.js';
import type { Gateway } from './soak-cluster.js';
import { Sample, type Percentiles } from './stats.js';

/** A funded account and its keys. */
export interface Caller {
  account: string;
  keys: string[];
  /** Chains it is funded on; calls name one in x-gw-billing-chain, or none (its default, chain_a). */
  chains: ChainName[];
  /** Funded just enough to run out during the run (402s). */
  tight: boolean;
}

/** What a call was made to do; `over_window`: a prompt over the model's context window, refused upstream. */
export type Twist = 'none' | 'upstream_500' | 'hang_up' | 'long' | 'over_window';
type Kind = 'chat-json' | 'chat-stream' | 'messages-json' | 'messages-stream';

/**
 * How a call ended, from the caller's side: `whole` (200, the answer complete), `hung_up` (200, the caller hung up on
 * purpose), `upstream_failed` (the simulated upstream's 500, answered 502, or its 400 to a prompt over the window),
 * `refused` (402, 429, 503: nothing ran),
 * `connection_lost` (no answer: the gateway died before its headers), `cut` (200, the answer stopped short: the gateway
 * died mid-answer), `unexpected` (any other answer: a finding).
 */
export type Outcome = 'whole' | 'hung_up' | 'upstream_failed' | 'refused' | 'connection_lost' | 'cut' | 'unexpected';

/** One call as the caller saw it. */
export interface CallResult {
  n: number;
  gateway: string;
  account: string;
  chain: ChainName;
  kind: Kind;
  model: string;
  tokens: number;
  twist: Twist;
  /** What the scenario was doing when the call started, and when it ended. */
  phase: string;
  endPhase: string;
  startedAt: number;
  ms: number;
  status: number | null;
  requestId: string | null;
  outcome: Outcome;
  /** The error's code (`service_unavailable`, ...), for an error answer. */
  code: string | null;
  detail?: string;
}

const CHAT_MODELS = ['gamma-k3', 'gamma-q3', 'beta-5.6-mini', 'beta-5.6-sol', 'alpha-haiku-4-5'];
const MESSAGES_MODELS = ['alpha-haiku-4-5', 'alpha-sonnet-4-6', 'alpha-opus-4-6'];

interface Planned {
  n: number;
  caller: Caller;
  key: string;
  chain: ChainName;
  /** Whether x-gw-billing-chain names it (else the account's default). */
  named: boolean;
  kind: Kind;
  model: string;
  tokens: number;
  twist: Twist;
  /** For hang_up: events read before hanging up. */
  hangUpAfter: number;
  body: string;
}

/** The load: start it, move its phase, stop it, read what it saw. */
export class Load {
  readonly results: CallResult[] = [];
  phase = 'warm-up';
  private readonly rnd: () => number;
  private readonly agent = new Agent({
    keepAliveTimeout: 4_000,
    headersTimeout: 60_000,
    bodyTimeout: 60_000,
    connections: 256,
  });
  private readonly inflight = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private launched = 0;
  private skipped = 0;
  private next = 0;
  private startedAt = 0;
  private stoppedAt = 0;
  private readonly ttfb = new Sample();

  constructor(
    private readonly gateways: Gateway[],
    private readonly callers: Caller[],
    private readonly rate: number,
    seed: number,
    /** Long streams' length, at least and at most, in seconds. */
    private readonly longS: [number, number] = [10, 30],
    private readonly maxInflight = 1_500,
  ) {
    this.rnd = prng(seed);
  }

  /** Start sending `rate` calls a second. */
  start(): void {
    this.startedAt = Date.now();
    this.timer = setInterval(() => {
      const due = Math.floor(((Date.now() - this.startedAt) / 1000) * this.rate) - this.launched;
      for (let i = 0; i < due; i++) this.launch();
    }, 10);
  }

  /** Stop sending and wait for the calls in flight. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.stoppedAt = Date.now();
    await Promise.all([...this.inflight]);
    await this.agent.close();
  }

  /** Calls sent per second over the run, calls skipped (no gateway up, or too many in flight), time to a 200's headers. */
  stats(): { seconds: number; sent: number; perSecond: number; skipped: number; ttfb: Percentiles | null } {
    const seconds = this.startedAt ? ((this.stoppedAt || Date.now()) - this.startedAt) / 1000 : 0;
    const sent = this.launched - this.skipped;
    return {
      seconds,
      sent,
      perSecond: seconds ? sent / seconds : 0,
      skipped: this.skipped,
      ttfb: this.ttfb.percentiles(),
    };
  }

  private launch(): void {
    this.launched++;
    const up = this.gateways.filter((g) => g.up);
    if (up.length === 0 || this.inflight.size >= this.maxInflight) {
      this.skipped++;
      return;
    }
    const gateway = up[this.next++ % up.length]!;
    const call = this.plan(this.launched);
    const p = this.send(gateway, call).then((r) => {
      this.results.push(r);
    });
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  private plan(n: number): Planned {
    const r = this.rnd;
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    // The tight caller gets a small share: enough to run its wallet down during the run.
    const tight = this.callers.filter((c) => c.tight);
    const caller = tight.length && r() < 0.06 ? pick(tight) : pick(this.callers.filter((c) => !c.tight));
    const named = r() < 0.8 || !caller.chains.includes('chain_a');
    const chain = named ? pick(caller.chains) : 'chain_a';
    const k = r();
    const kind: Kind = k < 0.3 ? 'chat-json' : k < 0.6 ? 'chat-stream' : k < 0.75 ? 'messages-json' : 'messages-stream';
    const stream = kind.endsWith('stream');
    const t = r();
    const twist: Twist =
      t < 0.08
        ? 'upstream_500'
        : t < 0.11
          ? 'over_window'
          : stream && t < 0.18
            ? 'hang_up'
            : stream && t < 0.21
              ? 'long'
              : 'none';
    // Over the window: 300,000 tokens (1.2 MB) to Claude Haiku 4.5's 200,000, on either endpoint, refused upstream.
    const model =
      twist === 'over_window' ? 'alpha-haiku-4-5' : pick(kind.startsWith('chat') ? CHAT_MODELS : MESSAGES_MODELS);
    let tokens = 5 + Math.floor(r() * 60);
    let directives = '';
    if (twist === 'long') {
      // A chunk every 100 ms: still running when a fault starts, ending during it.
      tokens = Math.round(10 * (this.longS[0] + r() * (this.longS[1] - this.longS[0])));
      directives = '#sim:chunk_delay_ms=100';
    } else if (stream) {
      tokens = twist === 'hang_up' ? 40 : tokens;
      directives = `#sim:chunk_delay_ms=${twist === 'hang_up' ? 50 : Math.floor(r() * 40)}`;
    } else {
      directives = `#sim:delay_ms=${Math.floor(r() * 300)}`;
    }
    if (twist === 'upstream_500') directives += ' #sim:status=500';
    const filler = twist === 'over_window' ? 'word'.repeat(300_000) : '';
    const content = `${filler}soak call ${n} #sim:tokens=${tokens} ${directives}`;
    const payload: Record<string, unknown> = { model, max_tokens: 400, stream, messages: [{ role: 'user', content }] };
    return {
      n,
      caller,
      key: pick(caller.keys),
      chain,
      named,
      kind,
      model,
      tokens,
      twist,
      hangUpAfter: 2 + Math.floor(r() * 10),
      body: JSON.stringify(payload),
    };
  }

  private async send(g: Gateway, c: Planned): Promise<CallResult> {
    const started = Date.now();
    const t0 = process.hrtime.bigint();
    const base = {
      n: c.n,
      gateway: g.child?.name ?? g.name,
      account: c.caller.account,
      chain: c.chain,
      kind: c.kind,
      model: c.model,
      tokens: c.tokens,
      twist: c.twist,
      phase: this.phase,
      startedAt: started,
    };
    const done = (
      rest: Pick<CallResult, 'status' | 'requestId' | 'outcome' | 'code'> & { detail?: string },
    ): CallResult => ({
      ...base,
      endPhase: this.phase,
      ms: Date.now() - started,
      ...rest,
    });
    const messages = c.kind.startsWith('messages');
    const headers: Record<string, string> = { authorization: `Bearer ${c.key}`, 'content-type': 'application/json' };
    if (messages) headers['anthropic-version'] = '2023-06-01';
    if (c.named) headers['x-gw-billing-chain'] = c.chain;
    const abort = new AbortController();
    let res: Awaited<ReturnType<typeof request>>;
    try {
      res = await request(`${g.url}${messages ? '/v1/messages' : '/v1/chat/completions'}`, {
        method: 'POST',
        headers,
        body: c.body,
        dispatcher: this.agent,
        signal: abort.signal,
      });
    } catch (err) {
      return done({
        status: null,
        requestId: null,
        outcome: 'connection_lost',
        code: null,
        detail: (err as Error).message,
      });
    }
    // Admitted calls only: a 503 waits for the gateway's next reconnection attempt to Redis.
    if (res.statusCode === 200) this.ttfb.push(Number(process.hrtime.bigint() - t0) / 1e6);
    const requestId = typeof res.headers['x-request-id'] === 'string' ? res.headers['x-request-id'] : null;
    const status = res.statusCode;
    let text = '';
    let events = 0;
    let hungUp = false;
    try {
      for await (const chunk of res.body) {
        const s = (chunk as Buffer).toString();
        text += s;
        if (c.twist === 'hang_up' && status === 200) {
          events += s.split('data:').length - 1;
          if (events >= c.hangUpAfter) {
            hungUp = true;
            abort.abort();
            break;
          }
        }
      }
    } catch (err) {
      if (!hungUp) {
        const outcome = status === 200 ? 'cut' : 'unexpected';
        return done({ status, requestId, outcome, code: null, detail: `body: ${(err as Error).message}` });
      }
    }
    if (!requestId) return done({ status, requestId, outcome: 'unexpected', code: null, detail: 'no x-request-id' });
    if (status === 200) {
      if (hungUp) return done({ status, requestId, outcome: 'hung_up', code: null });
      return done({ status, requestId, outcome: complete(c.kind, text) ? 'whole' : 'cut', code: null });
    }
    let code: string | null = null;
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null;
    } catch {
      // not JSON: unexpected below
    }
    if (code?.startsWith('upstream_') && c.twist === 'upstream_500')
      return done({ status, requestId, outcome: 'upstream_failed', code });
    if (status === 400 && code === 'upstream_invalid_request' && c.twist === 'over_window')
      return done({ status, requestId, outcome: 'upstream_failed', code });
    if (
      (status === 503 && code === 'service_unavailable') ||
      (status === 402 && code === 'insufficient_funds') ||
      (status === 429 && code === 'rate_limited')
    ) {
      return done({ status, requestId, outcome: 'refused', code });
    }
    return done({ status, requestId, outcome: 'unexpected', code, detail: text.slice(0, 300) });
  }
}

/** Whether an answer arrived whole: a stream's last event, or a JSON body that parses. */
function complete(kind: Kind, text: string): boolean {
  if (kind === 'chat-stream') return text.includes('data: [DONE]');
  if (kind === 'messages-stream') return text.includes('event: message_stop');
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}
