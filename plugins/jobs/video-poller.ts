/**
 * The poller: one instance at a time (a Redis lease, as the chain watcher holds one per chain) follows every open
 * upstream job, each at its own pace: first `poll_initial_ms` after its submit, then 1.5x longer each time up to
 * `poll_max_ms` (a provider's Retry-After when it asks for more). Callers' polls read Redis only, so how often they
 * poll costs the provider nothing.
 *
 * When the provider says a job ended, the job's status moves once (video-store.ts) and its hold is closed through
 * Admission.finish from here: completed, debited at the clip's price for its duration; failed, released. A job not
 * seen completed by its deadline is failed and released: its last poll comes at the deadline, and its hold lasts a
 * margin longer. Closing a hold is safe to repeat: the job stays open until its debit has reached Redis (or the spool),
 * and the debit script answers a second run as the first did; so two instances that race (a lease handed over
 * mid-poll) or an instance that stops between the two steps charge a clip exactly once.
 */
import type { Redis } from 'ioredis';
import type { Admission, Admitted } from '../billing/admission.js';
import { FREE, type Bill } from '../billing/billing.js';
import { redisNow } from '../billing/wallets.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Log } from '../log.js';
import { keys } from '../store/keys.js';
import { Lease } from '../store/lease.js';
import { UpstreamRetry, type UpstreamJobState, type VideoJobProvider } from '../upstream/video-provider.js';
import { UNLIMITED } from '../../policies/limits.js';
import { makeUsage } from '../../pricing/index.js';
import { VIDEO_HOLD_MARGIN_MS, type VideoJob, type VideoOutcome, type VideoStore } from './video-store.js';

/** How the poller paces itself. */
export interface PollerSettings {
  /** First poll of a job after its submit, ms. */
  readonly initialMs: number;
  /** Longest wait between two polls of a job, ms. */
  readonly maxMs: number;
}

/** The lease's TTL: the same as earlier versions', so old and new instances stay exclusive (store/lease.ts). */
const LEASE_MS = 10_000;
/** A held lease is renewed once this much of it has run. */
const RENEW_AFTER_MS = LEASE_MS / 3;
/** Upstream polls in flight at once. */
const CONCURRENCY = 16;
/** Due jobs read per pass. */
const BATCH = 256;
/** Growth of the wait between two polls of one job. */
const GROWTH = 1.5;

/** The wait before the next poll of a job polled `polls` times, ms (±10%, so jobs submitted together spread out). */
export function backoffMs(settings: PollerSettings, polls: number, retryAfterMs = 0): number {
  const base = Math.min(settings.maxMs, settings.initialMs * GROWTH ** Math.max(0, polls));
  return Math.max(retryAfterMs, Math.round(base * (0.9 + Math.random() * 0.2)));
}

/** The hold of a job, as Admission.finish takes it. */
export function admittedOf(job: VideoJob): Admitted {
  return {
    decision: UNLIMITED,
    hold: job.chain
      ? {
          requestId: job.requestId,
          callId: job.callId,
          account: job.account,
          keyId: job.keyId,
          chain: job.chain,
          model: job.model,
          amount: job.held,
          owner: `job:${job.id}`,
        }
      : undefined,
    limits: { keyId: job.keyId, account: job.account, family: job.family, tokens: 0 },
  };
}

/** What an ended job is debited: the clip's price for its duration, or nothing. */
export function billOf(job: VideoJob): Bill {
  return job.status === 'completed' ? { usage: makeUsage({ video_seconds: job.seconds }), price: job.price } : FREE;
}

/** Follows upstream jobs while this instance holds the lease. */
export class VideoPoller {
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  private readonly lease: Lease;
  /** A standby asks for the lease again no sooner than this (ms): only a lapsed lease can be taken. */
  private nextTry = 0;
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly tickMs: number;

  constructor(
    private readonly r: Redis,
    private readonly store: VideoStore,
    private readonly providers: (name: string) => VideoJobProvider | undefined,
    private readonly admission: Admission,
    private readonly instance: string,
    private readonly settings: PollerSettings,
    private readonly metrics: Metrics,
    private readonly log: Log,
    /** Ask the provider to stop a job nobody will pay for (VideoJobs.cancelAbandoned). */
    private readonly abandon: (job: VideoJob) => void = () => {},
  ) {
    this.tickMs = Math.min(1000, Math.max(25, Math.floor(settings.initialMs / 4)));
    this.lease = new Lease(r, keys.videoPollerLease, instance, LEASE_MS);
  }

  /** Poll while this instance holds the lease; a standby asks for it every ~1.7 s. */
  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /**
   * Stop polling, hand the lease over, and let the pass and the polls in flight end, for at most `waitMs` in all: a
   * pass waiting on a Redis that does not answer does not hold a shutdown (it finds the poller stopped when it ends,
   * and a lease not handed over lapses).
   */
  async stop(waitMs = 2_000): Promise<void> {
    this.running = false;
    this.wake?.();
    const timeUp = new Promise<'time up'>((r) => setTimeout(() => r('time up'), waitMs).unref());
    if ((await Promise.race([this.loop, timeUp])) === 'time up') return;
    if ((await Promise.race([Promise.allSettled([...this.inFlight.values()]), timeUp])) === 'time up') return;
    if (this.lease.held) await Promise.race([this.lease.release().catch(() => {}), timeUp]);
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        if (await this.keepLease()) await this.pass();
      } catch (err) {
        this.log.warn({ err }, 'video poller pass failed');
      }
      if (!this.running) break;
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        this.timer = setTimeout(resolve, this.tickMs);
      });
      clearTimeout(this.timer);
      this.wake = undefined;
    }
  }

  /** Take or keep the lease; renewed only once RENEW_AFTER_MS of it has run. */
  private async keepLease(): Promise<boolean> {
    const now = Date.now();
    if (!this.lease.held && now < this.nextTry) return false;
    const held = await this.lease.keep(RENEW_AFTER_MS);
    if (!held) this.nextTry = now + Math.max(this.tickMs, RENEW_AFTER_MS / 2);
    return held;
  }

  /** Start polls of the jobs that are due and not already being polled; the loop goes on without waiting for them. */
  private async pass(): Promise<void> {
    if (this.inFlight.size >= CONCURRENCY) return;
    const now = await redisNow(this.r);
    const due = await this.store.due(now, BATCH);
    for (const id of due) {
      if (this.inFlight.size >= CONCURRENCY) break;
      if (this.inFlight.has(id)) continue;
      const p = this.follow(id, now)
        .catch((err) => this.log.warn({ err, job: id }, 'video job poll failed'))
        .finally(() => this.inFlight.delete(id));
      this.inFlight.set(id, p);
    }
    this.metrics.videoJobsOpen.set(await this.store.openCount());
  }

  /** Poll one job upstream and act on what it says, at `now` (ms, Redis's clock). */
  async follow(id: string, now: number): Promise<void> {
    const job = await this.store.get(id);
    if (job === null) return this.store.forget(id);
    if (job.status !== 'in_progress') return this.closeHold(job);
    const provider = this.providers(job.provider);
    if (provider === undefined) {
      return this.end(
        job,
        {
          status: 'failed',
          code: 'provider_unavailable',
          message: 'The provider of this job is no longer configured.',
        },
        now,
      );
    }
    // The last poll comes at the deadline: a job it does not see completed fails and costs nothing, and its render,
    // if it still runs, is stopped. Its hold lasts VIDEO_HOLD_MARGIN_MS past the deadline, so a clip seen completed
    // then is charged within its hold (the store completes a job only while its hold is held). A poll that comes
    // later than LAST_POLL_WITHIN_MS past the deadline (the poller was behind) would leave too little of that margin:
    // the job fails without it, so no wallet is ever charged beyond what it held.
    const last = now >= job.deadline;
    if (last && now >= job.deadline + LAST_POLL_WITHIN_MS) return this.end(job, deadlineFailure(job), now, true);
    const next = (retryAfterMs?: number) =>
      Math.min(job.deadline, now + backoffMs(this.settings, job.polls + 1, retryAfterMs));
    let state: UpstreamJobState;
    try {
      state = await provider.poll(job.upstreamId);
    } catch (err) {
      this.metrics.videoPolls.inc({ provider: job.provider, result: 'error' });
      if (last) return this.end(job, deadlineFailure(job), now, true);
      this.log.warn({ err, job: id }, 'video job poll failed; retrying later');
      await this.store.progress(
        id,
        job.progress,
        job.polls + 1,
        next(err instanceof UpstreamRetry ? err.retryAfterMs : undefined),
      );
      return;
    }
    this.metrics.videoPolls.inc({ provider: job.provider, result: state.status });
    if (state.status === 'in_progress') {
      if (last) return this.end(job, deadlineFailure(job), now, true);
      await this.store.progress(id, Math.max(job.progress, state.progress), job.polls + 1, next());
      return;
    }
    if (state.status === 'completed' && job.pending) {
      // Its submit's answer was not seen to go out (yet): it completes once accepted, or fails at its deadline.
      if (last) return this.end(job, deadlineFailure(job), now, true);
      await this.store.progress(id, job.progress, job.polls + 1, next());
      return;
    }
    const outcome: VideoOutcome =
      state.status === 'completed'
        ? { status: 'completed', contentUrl: state.content.url, expiresAt: state.content.expiresAt }
        : { status: 'failed', code: state.code, message: state.message };
    return this.end(job, outcome, now);
  }

  /**
   * Move the job to its end (once, whichever instance gets there first), then close its hold; `stop`: the render may
   * still run upstream, and the instance that ended the job asks the provider to stop it.
   */
  private async end(job: VideoJob, outcome: VideoOutcome, now: number, stop = false): Promise<void> {
    const moved = await this.store.finish(job.id, outcome, now);
    const ended = moved ? { ...job, status: moved } : await this.store.get(job.id);
    if (ended === null) return this.store.forget(job.id);
    if (moved && stop) this.abandon(job);
    if (moved) {
      this.metrics.videoJobs.inc({ model: job.model, status: moved });
      this.metrics.videoJobDuration.observe(
        { model: job.model, status: moved },
        Math.max(0, now - job.createdAt) / 1000,
      );
    }
    return this.closeHold(ended);
  }

  /** Debit (completed) or release (failed) the job's hold, then close the job. Safe to repeat. */
  private async closeHold(job: VideoJob): Promise<void> {
    if (job.status === 'in_progress') return;
    if (!job.holdClosed) await this.admission.finish(admittedOf(job), billOf(job));
    await this.store.holdClosed(job.id);
  }
}

/** How long past a job's deadline its last poll may start: a quarter of the hold's margin past it. */
const LAST_POLL_WITHIN_MS = VIDEO_HOLD_MARGIN_MS / 4;

function deadlineFailure(job: VideoJob): VideoOutcome {
  const minutes = Math.round((job.deadline - job.createdAt) / 60_000);
  return {
    status: 'failed',
    code: 'deadline_exceeded',
    message: `The video did not finish within ${minutes} minutes of its submit.`,
  };
}
