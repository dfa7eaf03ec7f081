/**
 * Video jobs of one gateway instance: the store every instance reads and writes, the provider adapters by provider
 * name (the job port, plugins/upstream/video-provider.ts), and the poller, which runs on the instance that holds its
 * lease. The submit endpoint records jobs here; the poll and content routes read them.
 */
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import type { Admission } from '../billing/admission.js';
import type { FareboxConfig } from '../config.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Log } from '../log.js';
import type { Upstreams } from '../upstream/pools.js';
import { videoJobProvider } from '../upstream/protocols/registry.js';
import type { VideoJobProvider } from '../upstream/video-provider.js';
import { cancelWithRetries } from './video-cancel.js';
import { VideoPoller } from './video-poller.js';
import { VideoStore } from './video-store.js';

/** How long stop() waits for cancels and accepts in flight, ms. */
const CANCEL_DRAIN_MS = 2_000;
/** How long an accept is tried again while Redis is away, ms; a job never accepted fails at its deadline, free. */
const ACCEPT_TRIES_MS = 5 * 60_000;
/** The longest wait between two tries of an accept, ms. */
const ACCEPT_RETRY_MAX_MS = 15_000;

/** What VideoJobs is built from. */
export interface VideoJobsOptions {
  readonly redis: Redis;
  readonly config: Pick<FareboxConfig, 'providers' | 'videos'>;
  readonly upstreams: Upstreams;
  readonly admission: Admission;
  readonly metrics: Metrics;
  readonly log: Log;
  /** The lease holder's name (the billing instance's). */
  readonly instance?: string;
}

/** The video jobs of a gateway instance. */
export class VideoJobs {
  readonly store: VideoStore;
  readonly settings: FareboxConfig['videos'];
  /** Runs on this instance only when config `videos.poller` says so (start). */
  readonly poller: VideoPoller;
  private readonly adapters = new Map<string, VideoJobProvider>();
  /** Cancels and accepts in flight (stop waits for them). */
  private readonly cancels = new Set<Promise<void>>();
  private readonly stopping = new AbortController();

  constructor(private readonly opts: VideoJobsOptions) {
    this.settings = opts.config.videos;
    this.store = new VideoStore(opts.redis, this.settings.record_days * 86_400_000);
    this.poller = new VideoPoller(
      opts.redis,
      this.store,
      (name) => this.provider(name),
      opts.admission,
      opts.instance ?? `${hostname()}-${process.pid}`,
      { initialMs: this.settings.poll_initial_ms, maxMs: this.settings.poll_max_ms },
      opts.metrics,
      opts.log,
      (job) => this.cancelAbandoned(job.provider, job.upstreamId, { requestId: job.requestId, account: job.account }),
    );
  }

  /** The adapter of the provider named `name` in the config, or undefined (unknown, or a protocol without video jobs). */
  provider(name: string): VideoJobProvider | undefined {
    let a = this.adapters.get(name);
    if (a) return a;
    const p = Object.hasOwn(this.opts.config.providers, name) ? this.opts.config.providers[name]! : undefined;
    if (p) a = videoJobProvider(this.opts.upstreams, p);
    if (a) this.adapters.set(name, a);
    return a;
  }

  /** The provider's timeout_ms (downloads of its content). */
  timeoutOf(name: string): number {
    return this.opts.config.providers[name]?.timeout_ms ?? 600_000;
  }

  /**
   * Ask the provider to stop an upstream job nobody will pay for (video-cancel.ts): at once, without waiting for it,
   * and counted by what the provider did (farebox_video_cancels_total). Charges no one.
   */
  cancelAbandoned(
    providerName: string,
    upstreamId: string,
    context: { readonly requestId: string; readonly account: string },
  ): void {
    const provider = this.provider(providerName);
    const log = { ...context, provider: providerName, upstreamId };
    const run = cancelWithRetries(
      () => (provider ? provider.cancel(upstreamId) : Promise.resolve('unsupported' as const)),
      {
        stop: this.stopping.signal,
        onError: (err, attempt) =>
          this.opts.log.warn({ ...log, err, attempt }, 'cancelling an abandoned video job failed'),
      },
    )
      .then((outcome) => {
        this.opts.metrics.videoCancels.inc({ provider: providerName, outcome });
        if (outcome !== 'cancelled' && outcome !== 'gone') {
          this.opts.log.warn(
            { ...log, outcome },
            "an abandoned video job was not stopped: the provider renders it at the operator's cost",
          );
        }
      })
      .catch((err: unknown) => this.opts.log.error({ ...log, err }, 'cancelling an abandoned video job failed'));
    const tracked: Promise<void> = run.finally(() => this.cancels.delete(tracked));
    this.cancels.add(tracked);
  }

  /**
   * Mark a job's submit answered (VideoStore.accept), once its 200 has gone out: from then on the job may complete.
   * Tried again while Redis is away, for up to ACCEPT_TRIES_MS; not once the instance stops.
   */
  accept(id: string, context: { readonly requestId: string; readonly account: string }): void {
    const run = (async () => {
      const since = Date.now();
      for (let wait = 500; ; wait = Math.min(wait * 2, ACCEPT_RETRY_MAX_MS)) {
        try {
          await this.store.accept(id);
          return;
        } catch (err) {
          if (this.stopping.signal.aborted || Date.now() - since + wait > ACCEPT_TRIES_MS) {
            this.opts.log.error(
              { ...context, job: id, err },
              'a video job could not be accepted: it fails at its deadline, free',
            );
            return;
          }
          this.opts.log.warn({ ...context, job: id, err }, 'accepting a video job failed; trying again');
        }
        await sleep(wait, undefined, { ref: false, signal: this.stopping.signal }).catch(() => {});
      }
    })();
    const tracked: Promise<void> = run.finally(() => this.cancels.delete(tracked));
    this.cancels.add(tracked);
  }

  /** Start the poller, if this instance may hold its lease. */
  start(): void {
    if (this.settings.poller) this.poller.start();
  }

  /** Stop the poller and hand its lease over; cancels in flight get CANCEL_DRAIN_MS to end, and try no more. */
  async stop(): Promise<void> {
    this.stopping.abort();
    await Promise.all([
      this.poller.stop(),
      Promise.race([Promise.allSettled([...this.cancels]), new Promise((r) => setTimeout(r, CANCEL_DRAIN_MS).unref())]),
    ]);
  }
}
