/**
 * Video jobs in Redis (keys.ts: video:<id>, videos-open): what the caller's polls read, what the poller follows, and
 * what survives any gateway restart. A job's record keeps who owns it (account, key), what was asked (model, family,
 * seconds, size, prompt), its money (chain, the hold's request and call ids, the amount held and the clip's price
 * when it was submitted), where it runs (provider, upstream model and id), and how it stands (status, progress,
 * times, error, the MP4's location and expiry).
 *
 * Status moves once, from in_progress to completed or failed, in one script that checks it is still in progress, so
 * two instances that see the end of a job at once cannot both move it. A job completes only while its hold is still
 * held: one whose hold was released (its submit failed after the record was written, its caller left, or the
 * sweeper found it past its deadline) fails instead, and no wallet is charged beyond what it holds. A job is recorded
 * `pending` and completes only once its submit's 200 has gone out (accept): a submit answered 503 after its record
 * landed (the write's reply lost) leaves a job that fails at its deadline, free, even if its hold's release is still
 * waiting in a spool when the render ends.
 * Times are on Redis's clock: the deadline is the hold's placement plus `deadline_ms`, and the hold outlives it by
 * VIDEO_HOLD_MARGIN_MS, the time the poller has to close the hold of a job it saw end at its last poll. The job stays in
 * `videos-open` until its hold is debited (completed) or released (failed): a poller that stops between the two
 * steps leaves it there, and the next pass debits it, which the debit script answers as the first run did if it had
 * run.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ChainName } from '../chains/config.js';
import { keys } from '../store/keys.js';
import { LuaScript } from '../store/redis-script.js';

/** States of a job (SPEC "States and transitions"). */
export type VideoStatus = 'in_progress' | 'completed' | 'failed';

/** A job as submitted. */
export interface NewVideoJob {
  readonly id: string;
  readonly account: string;
  readonly keyId: string;
  readonly model: string;
  readonly family: string;
  readonly seconds: number;
  readonly size: string;
  readonly prompt: string;
  /** The chain its hold is on; undefined when the gateway bills nothing (no chains configured). */
  readonly chain: ChainName | undefined;
  /** The submit's request id: the hold's, and the usage record's call id. */
  readonly requestId: string;
  readonly callId: string;
  /** Atomic units held, and the price of the clip when it was submitted (charged on completion). */
  readonly held: bigint;
  readonly price: bigint;
  /** Provider name in the config, the provider's model id, and its job id (an OpenAI video id, a Gemini operation). */
  readonly provider: string;
  readonly upstreamModel: string;
  readonly upstreamId: string;
}

/** A job as it stands. */
export interface VideoJob extends NewVideoJob {
  /** ms since the epoch (Redis's clock). */
  readonly createdAt: number;
  /** A job still running at this time (ms, Redis's clock) is failed and its hold released. */
  readonly deadline: number;
  readonly status: VideoStatus;
  readonly progress: number;
  readonly completedAt: number | null;
  readonly error: { readonly code: string; readonly message: string } | null;
  /** Where the MP4 is (completed), and until when the provider keeps it (ms). */
  readonly contentUrl: string | null;
  readonly expiresAt: number | null;
  /** Upstream polls so far (the poller's backoff). */
  readonly polls: number;
  /** The hold was debited or released. */
  readonly holdClosed: boolean;
  /** Its submit's answer has not been seen to go out (VideoStore.accept): it may not complete. */
  readonly pending: boolean;
}

/** How a job ended. */
export type VideoOutcome =
  | { readonly status: 'completed'; readonly contentUrl: string; readonly expiresAt: number }
  | { readonly status: 'failed'; readonly code: string; readonly message: string };

/** A job's hold outlives its deadline by this (ms): the poller closes the hold of a job it saw end before the sweeper may release it. */
export const VIDEO_HOLD_MARGIN_MS = 60_000;

/** A new job id: unguessable (128 random bits), in the shape of OpenAI's video ids. */
export function newVideoId(): string {
  return `video_${randomBytes(16).toString('hex')}`;
}

// Record a submitted job. KEYS: the record, videos-open, the hold's call record. ARGV: record ttl past the deadline
// ms, first poll delay ms, deadline ms, hold margin ms, job id, then the record's field/value pairs. The job is
// created now (Redis TIME); its deadline is its hold's placement plus the deadline (the hold's expiry minus the
// margin), or now plus the deadline when nothing is held. Returns {created_at, deadline}. Run again (a write ioredis
// sends again after a reconnect, the first having landed), it changes nothing, and answers as the first did: the job
// may have ended meanwhile, or been accepted. A new job is pending until accepted.
const CREATE = new LuaScript(`
local seen = redis.call('HMGET', KEYS[1], 'created_at', 'deadline')
if seen[1] then return {tonumber(seen[1]), tonumber(seen[2])} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[3])
-- The hold's expiry: e in the call record's layout (billing/call-records.ts), expires in the first one.
local e = redis.call('HMGET', KEYS[3], 'e', 'expires')
local expires = tonumber(e[1] or e[2] or '')
if expires and expires - tonumber(ARGV[4]) < deadline then deadline = expires - tonumber(ARGV[4]) end
redis.call('HSET', KEYS[1], 'created_at', now, 'deadline', deadline, 'status', 'in_progress', 'progress', 0, 'polls', 0,
  'pending', 1, unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[1], math.max(1, deadline - now + tonumber(ARGV[1])))
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[5])
return {now, deadline}
`);

// End a job still in progress. KEYS: the record, the hold's call record. ARGV: status, completed_at, progress, error
// code, error message, content url, expires_at, record ttl ms, '1' when the job holds money. A job that holds money
// completes only while the hold is held; else it fails (deadline_exceeded), free. Returns the status it moved to, or
// false if it was not in progress (or is gone).
const FINISH = new LuaScript(`
if redis.call('HGET', KEYS[1], 'status') ~= 'in_progress' then return false end
local hold = redis.call('HMGET', KEYS[2], 's', 'status')
if ARGV[1] == 'completed' and ARGV[9] == '1' and (hold[1] or hold[2]) ~= 'held' then
  redis.call('HSET', KEYS[1], 'status', 'failed', 'completed_at', ARGV[2], 'progress', 0, 'error_code', 'deadline_exceeded',
    'error_message', 'The video finished after its hold had been released; it is not charged.')
  redis.call('PEXPIRE', KEYS[1], ARGV[8])
  return 'failed'
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'completed_at', ARGV[2], 'progress', ARGV[3], 'error_code', ARGV[4],
  'error_message', ARGV[5], 'content_url', ARGV[6], 'expires_at', ARGV[7])
redis.call('PEXPIRE', KEYS[1], ARGV[8])
return ARGV[1]
`);

// Note a poll of a job still in progress and when to poll it next. KEYS: the record, videos-open. ARGV: progress,
// polls, next poll ms, job id. A job that ended meanwhile is left as it is.
const PROGRESS = new LuaScript(`
if redis.call('HGET', KEYS[1], 'status') ~= 'in_progress' then return 0 end
redis.call('HSET', KEYS[1], 'progress', ARGV[1], 'polls', ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[4])
return 1
`);

function num(s: string | undefined): number | null {
  return s === undefined || s === '' ? null : Number(s);
}

function toJob(h: Record<string, string>): VideoJob | null {
  if (!h.id || !h.status) return null;
  return {
    id: h.id,
    account: h.account ?? '',
    keyId: h.key_id ?? '',
    model: h.model ?? '',
    family: h.family ?? '',
    seconds: Number(h.seconds),
    size: h.size ?? '',
    prompt: h.prompt ?? '',
    chain: h.chain ? (h.chain as ChainName) : undefined,
    requestId: h.request_id ?? '',
    callId: h.call_id ?? '',
    held: BigInt(h.held ?? '0'),
    price: BigInt(h.price ?? '0'),
    provider: h.provider ?? '',
    upstreamModel: h.upstream_model ?? '',
    upstreamId: h.upstream_id ?? '',
    createdAt: Number(h.created_at),
    deadline: Number(h.deadline),
    status: h.status as VideoStatus,
    progress: Number(h.progress ?? '0'),
    completedAt: num(h.completed_at),
    error: h.error_code ? { code: h.error_code, message: h.error_message ?? '' } : null,
    contentUrl: h.content_url || null,
    expiresAt: num(h.expires_at),
    polls: Number(h.polls ?? '0'),
    holdClosed: h.hold_closed === '1',
    // A record of a gateway before `pending` has none: its submit was answered.
    pending: h.pending === '1',
  };
}

/** Jobs in Redis. */
export class VideoStore {
  constructor(
    private readonly r: Redis,
    /** How long a finished job stays readable (at least until its MP4 expires). */
    private readonly recordMs: number,
  ) {}

  /** Record a submitted job, in progress, failing `deadlineMs` after its hold was placed, first polled after `firstPollMs`. */
  async create(job: NewVideoJob, deadlineMs: number, firstPollMs: number): Promise<VideoJob> {
    const fields = {
      id: job.id,
      account: job.account,
      key_id: job.keyId,
      model: job.model,
      family: job.family,
      seconds: job.seconds,
      size: job.size,
      prompt: job.prompt,
      chain: job.chain ?? '',
      request_id: job.requestId,
      call_id: job.callId,
      held: job.held.toString(),
      price: job.price.toString(),
      provider: job.provider,
      upstream_model: job.upstreamModel,
      upstream_id: job.upstreamId,
    };
    const [createdAt, deadline] = await CREATE.run<[number, number]>(
      this.r,
      [keys.video(job.id), keys.videosOpen, keys.call(job.callId)],
      [this.recordMs, firstPollMs, deadlineMs, VIDEO_HOLD_MARGIN_MS, job.id, ...Object.entries(fields).flat()],
    );
    return {
      ...job,
      createdAt,
      deadline,
      status: 'in_progress',
      progress: 0,
      completedAt: null,
      error: null,
      contentUrl: null,
      expiresAt: null,
      polls: 0,
      holdClosed: false,
      pending: true,
    };
  }

  /** The job's submit was answered: it may complete from now on. */
  async accept(id: string): Promise<void> {
    await this.r.hdel(keys.video(id), 'pending');
  }

  /** A job by id (one HGETALL), or null. */
  async get(id: string): Promise<VideoJob | null> {
    return toJob(await this.r.hgetall(keys.video(id)));
  }

  /** Note a poll of a job in progress and when to poll it next; false if it ended meanwhile. */
  async progress(id: string, progress: number, polls: number, nextAt: number): Promise<boolean> {
    return (
      (await PROGRESS.run<number>(
        this.r,
        [keys.video(id), keys.videosOpen],
        [progress, polls, Math.ceil(nextAt), id],
      )) === 1
    );
  }

  /**
   * Move a job in progress to its end, at `now` (ms); the status it moved to (a completion whose hold was released
   * fails), or null if it was not in progress.
   */
  async finish(id: string, outcome: VideoOutcome, now: number): Promise<VideoStatus | null> {
    const done = outcome.status === 'completed';
    // Readable for the retention, and at least as long as its MP4 is.
    const ttl = Math.ceil(Math.max(this.recordMs, done ? outcome.expiresAt - now : 0));
    const [callId, chain] = await this.r.hmget(keys.video(id), 'call_id', 'chain');
    const moved = await FINISH.run<string | null>(
      this.r,
      [keys.video(id), keys.call(callId ?? '')],
      [
        outcome.status,
        now,
        done ? 100 : 0,
        done ? '' : outcome.code,
        done ? '' : outcome.message,
        done ? outcome.contentUrl : '',
        done ? Math.floor(outcome.expiresAt) : '',
        ttl,
        chain ? '1' : '0',
      ],
    );
    return moved === 'completed' || moved === 'failed' ? moved : null;
  }

  /** The job's hold is debited or released: it leaves the open set. */
  async holdClosed(id: string): Promise<void> {
    await this.r.multi().hset(keys.video(id), 'hold_closed', '1').zrem(keys.videosOpen, id).exec().then(failed);
  }

  /** Poll `id` next at `at` (ms), if it is still open. */
  async reschedule(id: string, at: number): Promise<void> {
    await this.r.zadd(keys.videosOpen, 'XX', Math.ceil(at), id);
  }

  /** Forget an open entry whose record is gone (expired with its retention). */
  async forget(id: string): Promise<void> {
    await this.r.zrem(keys.videosOpen, id);
  }

  /** Jobs due for a poll at `now` (ms), the most overdue first. */
  async due(now: number, limit: number): Promise<string[]> {
    return this.r.zrangebyscore(keys.videosOpen, '-inf', Math.floor(now), 'LIMIT', 0, limit);
  }

  /** Jobs not yet ended, or whose hold is not yet closed. */
  async openCount(): Promise<number> {
    return this.r.zcard(keys.videosOpen);
  }
}

/** A MULTI's replies: throw the first command error (exec resolves with them instead of rejecting). */
function failed(replies: [Error | null, unknown][] | null): void {
  for (const [err] of replies ?? []) if (err) throw err;
}
