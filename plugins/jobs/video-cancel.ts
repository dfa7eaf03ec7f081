/**
 * Cancels of upstream video jobs nobody will pay for: a submit whose caller left before its job's id reached it, or
 * whose job could not be recorded, and a job the poller failed at its deadline. The provider renders such a job at
 * the operator's cost, so it is asked to stop at once, off the caller's path: the caller's answer never waits on it
 * and nothing is charged, whatever it answers.
 *
 * A provider that cannot answer (transport, 429, 5xx) is asked again after CANCEL_WAITS_MS, then left, logged and
 * counted `failed`. Not queued for the poller: a submit whose caller left has no job record for it to follow, and a
 * cancel is worth something only while the render runs (minutes), so it goes now, from the instance that knows the
 * upstream id. An instance that stops meanwhile makes no further try.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { UpstreamRetry, type UpstreamCancel } from '../upstream/video-provider.js';

/** Waits before the second and third tries of a cancel, ms: a blip is waited out, a provider that stays down is left. */
export const CANCEL_WAITS_MS: readonly number[] = [1_000, 5_000];
/** The longest a provider's Retry-After may stretch one wait, ms. */
const MAX_WAIT_MS = 30_000;

/** What became of a cancel: the provider's answer, or `failed` when none came after every try. */
export type CancelOutcome = UpstreamCancel | 'failed';

/**
 * Run `cancel` until the provider answers, trying again after each of `waitsMs` when it throws; `stop` ends the
 * waiting (the instance is stopping). `onError` sees each failed try.
 */
export async function cancelWithRetries(
  cancel: () => Promise<UpstreamCancel>,
  opts: { waitsMs?: readonly number[]; stop?: AbortSignal; onError(err: unknown, attempt: number): void },
): Promise<CancelOutcome> {
  const waits = opts.waitsMs ?? CANCEL_WAITS_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      return await cancel();
    } catch (err) {
      opts.onError(err, attempt);
      const wait = waits[attempt - 1];
      if (wait === undefined || opts.stop?.aborted) return 'failed';
      const asked = err instanceof UpstreamRetry ? (err.retryAfterMs ?? 0) : 0;
      const stopped = await sleep(Math.min(MAX_WAIT_MS, Math.max(wait, asked)), false, {
        signal: opts.stop,
        ref: false,
      }).catch(() => true);
      if (stopped) return 'failed';
    }
  }
}
