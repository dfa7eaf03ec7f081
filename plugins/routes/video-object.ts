/**
 * A video job as callers see it: SPEC "Video job" gives `id` and `status` (in_progress, completed, failed); where the
 * spec is silent, the fields of OpenAI's video object ("The video object", VideoResource), so the official SDKs read
 * it as their own. Times are Unix seconds; `expires_at` is when the MP4 stops being downloadable.
 */
import type { VideoJob } from '../jobs/video-store.js';

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
}

const unix = (ms: number | null) => (ms === null ? null : Math.floor(ms / 1000));

/** The video object of `job`. */
export function videoObject(job: VideoJob): VideoObject {
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
  };
}
