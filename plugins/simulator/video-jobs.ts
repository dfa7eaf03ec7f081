/**
 * Video jobs of the simulated providers, in this process's memory (the simulator is the upstream; the
 * gateway keeps its own state). A job's state is read from the clock, not moved by timers: queued for
 * the first 5% of the render time, then in progress with its progress rising with the time spent,
 * then completed once the render time has passed and the clip is on disk; or failed, for
 * `#sim:video=fail` or a render error.
 */
import { randomBytes } from 'node:crypto';
import type { Clip, VideoRenderer } from './video-render.js';

/** What a submit asked for. */
export interface VideoSpec {
  /** The protocol that owns the job: each finds only its own. */
  protocol: 'openai' | 'gemini';
  model: string;
  prompt: string;
  width: number;
  height: number;
  seconds: number;
  /** `#sim:video=fail`: the job ends failed at the end of its render time. */
  fail: boolean;
  /** `#sim:render_ms=N`: this job's render time, ms (else the simulator's). */
  renderMs?: number;
  /** `#sim:hangup_after=N`: downloads of the clip stop after N bytes. */
  hangupAfter?: number;
}

/** One job. */
export interface VideoJob extends VideoSpec {
  id: string;
  /** Submit time, ms since the epoch. */
  createdAt: number;
  clip?: Clip;
  /** When the clip was on disk, ms since the epoch. */
  renderedAt?: number;
  renderError?: string;
}

/** Lifecycle states, as OpenAI names them (Gemini operations say only done or not). */
export type VideoStatus = 'queued' | 'in_progress' | 'completed' | 'failed';

/** A job as seen at one instant. */
export interface VideoState {
  status: VideoStatus;
  /** 0-100. */
  progress: number;
  /** ms since the epoch, once completed or failed. */
  finishedAt: number | null;
  /** Why it failed: the directive asked it, or ffmpeg failed. */
  failure: { kind: 'directive' | 'render'; message: string } | null;
}

/**
 * Bounds of what the simulated video models render: even sides (yuv420p) from 320 to 1920 and whole
 * seconds from 1 to 30, which covers every size and duration of the spec's families (vidA, vidB, vidC).
 */
export const VIDEO_BOUNDS = { minSide: 320, maxSide: 1920, maxSeconds: 30 } as const;

/** Whether a frame size is within VIDEO_BOUNDS. */
export function videoSizeOk(width: number, height: number): boolean {
  const ok = (n: number) =>
    Number.isInteger(n) && n % 2 === 0 && n >= VIDEO_BOUNDS.minSide && n <= VIDEO_BOUNDS.maxSide;
  return ok(width) && ok(height);
}

/** Whole seconds from a JSON integer or a numeric string (OpenAI and Gemini document strings), else undefined. */
export function videoSeconds(v: unknown): number | undefined {
  const n = typeof v === 'string' && /^\d{1,3}$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= VIDEO_BOUNDS.maxSeconds ? n : undefined;
}

/** Jobs kept; the oldest is forgotten beyond this. */
const MAX_JOBS = 1000;

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** A random id of lowercase letters and digits (the shape of Gemini operation and file ids). */
export function shortId(length = 12): string {
  let s = '';
  for (const b of randomBytes(length)) s += ALPHABET[b % ALPHABET.length];
  return s;
}

/** The jobs of one simulator. */
export class VideoJobs {
  private readonly jobs = new Map<string, VideoJob>();

  constructor(
    private readonly renderer: () => VideoRenderer,
    /** How long a job renders before it can complete, ms. */
    readonly renderMs: number,
  ) {}

  /** Records a job under `id` and starts its render (none when it is to fail). */
  create(id: string, spec: VideoSpec): VideoJob {
    const job: VideoJob = { ...spec, id, createdAt: Date.now() };
    this.jobs.set(id, job);
    if (this.jobs.size > MAX_JOBS) this.jobs.delete(this.jobs.keys().next().value!);
    if (!spec.fail) {
      this.renderer()
        .render(spec.width, spec.height, spec.seconds)
        .then(
          (clip) => {
            // A deleted job's render is dropped: its clip is never attached (renders of one size are shared).
            if (this.jobs.get(id) !== job) return;
            job.clip = clip;
            job.renderedAt = Date.now();
          },
          (err: Error) => (job.renderError = err.message),
        );
    }
    return job;
  }

  /** The clip of a completed job; rendered again if the renderer has since dropped it from disk. */
  clip(job: VideoJob): Promise<Clip> {
    return this.renderer().render(job.width, job.height, job.seconds);
  }

  get(id: string): VideoJob | undefined {
    return this.jobs.get(id);
  }

  /** Forgets a job, whatever its state: a render in progress stops (its clip is never attached), polls find nothing. */
  delete(id: string): boolean {
    return this.jobs.delete(id);
  }

  /** The state of `job` at `now`. */
  state(job: VideoJob, now = Date.now()): VideoState {
    const renderMs = job.renderMs ?? this.renderMs;
    const due = job.createdAt + renderMs;
    if (now < due) {
      const progress = renderMs <= 0 ? 99 : Math.min(99, Math.floor((100 * (now - job.createdAt)) / renderMs));
      return { status: progress < 5 ? 'queued' : 'in_progress', progress, finishedAt: null, failure: null };
    }
    if (job.fail)
      return {
        status: 'failed',
        progress: 0,
        finishedAt: due,
        failure: { kind: 'directive', message: 'The video render failed.' },
      };
    if (job.renderError !== undefined) {
      return {
        status: 'failed',
        progress: 0,
        finishedAt: due,
        failure: { kind: 'render', message: 'The video render failed: internal error.' },
      };
    }
    if (job.clip === undefined) return { status: 'in_progress', progress: 99, finishedAt: null, failure: null };
    return { status: 'completed', progress: 100, finishedAt: Math.max(due, job.renderedAt!), failure: null };
  }
}
