/**
 * GET /v1/videos/{id} and GET /v1/videos/{id}/content: plain authenticated routes, outside the call path (no hold,
 * no bill). A job is visible to its own account only; another account's id answers 404, as an unknown one does.
 *
 * A poll is no upstream call: the poller keeps the job current. Polls and downloads, 404s included, count against
 * the key's poll limit (`limits.video_polls`; 429 with the headers of any rate limit): they need no funds, so
 * nothing else bounds them. The limit's script and the job's read go out in the same turn, so a poll stays one Redis
 * round trip (store/redis.ts writes a turn's commands at once). A download goes to the provider (pass-through,
 * Range and all), so it also counts as a request against the key's and account's limits of the model's family.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Admission } from '../billing/admission.js';
import type { Call } from '../call.js';
import type { VideoJobs } from '../jobs/video-jobs.js';
import type { OnRequestHook } from '../phases/identify.js';
import type { VideoJob } from '../jobs/video-store.js';
import { sendVideoContent } from '../upstream/video-content.js';
import type { Upstreams } from '../upstream/pools.js';
import { GatewayError } from '../../policies/errors.js';
import { rateLimitHeaders } from '../../policies/limits.js';
import { videoObject } from './video-object.js';

/** What the routes use. */
export interface VideoJobRoutesContext {
  /** Identify's key check (phases/identify.ts authenticate). */
  readonly authenticate: OnRequestHook;
  readonly videos: VideoJobs;
  readonly admission: Admission;
  readonly upstreams: Upstreams;
}

const ID = /^video_[0-9a-f]{32}$/;

/** The caller's job `id` once its poll has passed the key's poll limit, or 429, or 404 (unknown, or another account's). */
async function ownJob(
  request: FastifyRequest,
  reply: FastifyReply,
  videos: VideoJobs,
  admission: Admission,
): Promise<VideoJob> {
  const { id } = request.params as { id: string };
  const call: Call = request.farebox;
  // Both sent in this turn: one round trip.
  const [decision, job] = await Promise.all([
    admission.admitPoll(call.identity!, call.protocol),
    ID.test(id) ? videos.store.get(id) : null,
  ]);
  if (decision.which !== null) reply.headers(rateLimitHeaders(decision, call.protocol));
  if (job === null || job.account !== call.identity!.account) {
    throw new GatewayError('video_not_found', {
      param: 'video_id',
      message: `No video job with id ${JSON.stringify(id.slice(0, 80))}.`,
    });
  }
  // The chain the job is billed on, as every answer about a billed call names it (SPEC "Billing chain selection").
  if (job.chain) reply.header('x-gw-billing-chain', job.chain);
  return job;
}

/** GET /v1/videos/{id}: the job, read from Redis. */
export function retrieveVideo(videos: VideoJobs, admission: Admission) {
  return async function retrieveVideo(request: FastifyRequest, reply: FastifyReply) {
    const job = await ownJob(request, reply, videos, admission);
    return reply.type('application/json').send(JSON.stringify(videoObject(job)));
  };
}

/** GET /v1/videos/{id}/content: the MP4 of a completed job, from its provider, while the provider keeps it. */
export function downloadVideo(ctx: VideoJobRoutesContext) {
  return async function downloadVideo(request: FastifyRequest, reply: FastifyReply) {
    const variant = (request.query as { variant?: unknown }).variant ?? 'video';
    if (variant !== 'video')
      throw new GatewayError('invalid_request', {
        param: 'variant',
        message: 'Only variant=video (the MP4) is served.',
      });
    const job = await ownJob(request, reply, ctx.videos, ctx.admission);
    // A retry cannot change these before the job does: the SDKs are told not to retry.
    const noRetry = { 'x-should-retry': 'false' };
    if (job.status === 'in_progress') {
      throw new GatewayError('video_not_ready', {
        headers: noRetry,
        message: `Video ${job.id} is in progress (${job.progress}%): poll GET /v1/videos/${job.id} until its status is completed.`,
      });
    }
    if (job.status === 'failed')
      throw new GatewayError('video_failed', {
        headers: noRetry,
        message: `Video ${job.id} failed (${job.error?.code ?? 'failed'}): it has no content.`,
      });
    if (job.contentUrl === null || (job.expiresAt !== null && job.expiresAt <= Date.now())) {
      throw new GatewayError('video_expired', {
        message: `Video ${job.id} was downloadable until ${new Date(job.expiresAt ?? 0).toISOString()}.`,
      });
    }
    const provider = ctx.videos.provider(job.provider);
    if (provider === undefined)
      throw new GatewayError('upstream_error', {
        cause: new Error(`provider ${job.provider} is no longer configured`),
      });
    const call = request.farebox;
    const admitted = await ctx.admission.admit({
      requestId: call.id,
      protocol: call.protocol,
      identity: call.identity!,
      family: job.family,
      tokens: 0,
    });
    if (admitted.decision.which !== null) reply.headers(rateLimitHeaders(admitted.decision, call.protocol));
    const range = request.headers.range;
    return sendVideoContent(
      ctx.upstreams,
      reply,
      {
        url: job.contentUrl,
        headers: (url) => provider.contentHeaders(url),
        timeoutMs: ctx.videos.timeoutOf(job.provider),
      },
      range,
    );
  };
}

/** Register the poll and content routes in the gateway's /v1 context. */
export function videoJobRoutes(v1: FastifyInstance, ctx: VideoJobRoutesContext): void {
  v1.get('/videos/:id', { onRequest: ctx.authenticate }, retrieveVideo(ctx.videos, ctx.admission));
  v1.get('/videos/:id/content', { onRequest: ctx.authenticate }, downloadVideo(ctx));
}
