/**
 * A video job as callers see it: SPEC "Video job" gives `id` and `status` (in_progress, completed, failed); where the
 * spec is silent, the fields of OpenAI's video object ("The video object", VideoResource), so the official SDKs read
 * it as their own. Times are Unix seconds; `expires_at` is when the MP4 stops being downloadable. `price` and
 * `price_atomic` are the gateway's own, named as GET /v1/calls/{id} names them: what the job's debit takes.
 */
import { debitedPrice } from '../billing/billing.js';
import { billOf } from '../jobs/video-poller.js';
import type { VideoJob } from '../jobs/video-store.js';
import { formatUsd } from '../../pricing/money.js';

/** The video object of OpenAI's API reference, as the gateway fills it. */
export interface VideoObject {
  id: string;
  object: 'video';
  model: string;
  status: VideoJob['status'];
  progress: number;
  created_at: number;
  completed_at: number | null;
  expires_at: number | null;
  prompt: string;
  size: string;
  /** Seconds as a string, as OpenAI's object has it. */
  seconds: string;
  remixed_from_video_id: null;
  error: { code: string; message: string } | null;
  /**
   * What the job is debited, in USD with 6 decimals and in atomic units: the clip's price once completed, 0 for a
   * failed job (free), null while it renders (its hold is the worst case the wallet keeps for it).
   */
  price: string | null;
  price_atomic: string | null;
}

/** What `job` is debited once ended (the poller's billOf), as the debit takes it from the hold; null while it renders. */
function jobPrice(job: VideoJob): bigint | null {
  if (job.status === 'in_progress') return null;
  return debitedPrice(billOf(job).price, job.chain === undefined ? undefined : job.held);
}

const unix = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** The video object of `job`. */
export function videoObject(job: VideoJob): VideoObject {
  const price = jobPrice(job);
  return {
    id: job.id,
    object: 'video',
    model: job.model,
    status: job.status,
    progress: job.progress,
    created_at: unix(job.createdAt)!,
    completed_at: unix(job.completedAt),
    expires_at: unix(job.expiresAt),
    prompt: job.prompt,
    size: job.size,
    seconds: String(job.seconds),
    remixed_from_video_id: null,
    error: job.error ? { code: job.error.code, message: job.error.message } : null,
    price: price === null ? null : formatUsd(price),
    price_atomic: price === null ? null : price.toString(),
  };
}
