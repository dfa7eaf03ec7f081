/**
 * Simulated OpenAI Videos API: POST /v1/videos (JSON, or multipart/form-data with `input_reference`
 * files), GET /v1/videos/{id}, GET /v1/videos/{id}/content (the MP4, byte ranges) and
 * DELETE /v1/videos/{id}, following OpenAI's API reference ("Videos": create, retrieve, download
 * content, delete; "The video object") and its video generation guide. A delete takes a job in any state
 * (the reference names completed and failed ones and says nothing of others): a render in progress stops,
 * and the job is gone (404) from then on. The simulated provider also
 * stands in for the spec's other video families, so it renders any even size from 320 to 1920 a side
 * and any whole duration from 1 to 30 s; it takes up to 30 `input_reference` parts (subject and style
 * references) and one `last_reference` (a last frame, beside exactly one input_reference).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { parseDirectives } from './directives.js';
import { SimError } from './errors.js';
import { newId } from './ids.js';
import { type FormFile, formSummary, isMultipart, readForm } from './multipart.js';
import { checkAuth } from './openai.js';
import { type ReceivedImage, decodeImage, parseDataUrl } from './received-images.js';
import { sendFile } from './respond.js';
import { type RouteContext, POST_ROUTE, applyFaults, bodyObject } from './route-context.js';
import { VIDEO_BOUNDS, type VideoJob, type VideoJobs, videoSeconds, videoSizeOk } from './video-jobs.js';

/** Subject and style references one request may carry (spec: up to 30 on vidB-2.5). */
const MAX_REFERENCES = 30;
/** Downloads stay valid an hour after completion (video generation guide). */
const EXPIRES_AFTER_S = 3600;

function invalid(param: string, message: string, code: string | null = 'invalid_value'): SimError {
  return new SimError(400, message, param, code);
}

/** The video object ("The video object") of a job as it is now. */
function videoObject(jobs: VideoJobs, job: VideoJob): Record<string, unknown> {
  const s = jobs.state(job);
  const completedAt = s.finishedAt === null ? null : Math.floor(s.finishedAt / 1000);
  return {
    id: job.id,
    object: 'video',
    model: job.model,
    status: s.status,
    progress: s.progress,
    created_at: Math.floor(job.createdAt / 1000),
    completed_at: completedAt,
    expires_at: s.status === 'completed' ? completedAt! + EXPIRES_AFTER_S : null,
    prompt: job.prompt,
    seconds: String(job.seconds),
    size: `${job.width}x${job.height}`,
    remixed_from_video_id: null,
    error:
      s.failure === null
        ? null
        : {
            code: s.failure.kind === 'directive' ? 'video_generation_failed' : 'internal_error',
            message: s.failure.message,
          },
  };
}

function findJob(ctx: RouteContext, req: FastifyRequest): VideoJob {
  const { id } = req.params as { id: string };
  const job = ctx.media.jobs.get(id);
  if (job?.protocol !== 'openai') throw new SimError(404, `Video with id '${id}' not found.`);
  return job;
}

/** A JSON `input_reference`: `{image_url}` as a base64 data URL (file ids and remote URLs are out of reach here). */
function jsonReference(v: unknown): FormFile {
  const url = (v as { image_url?: unknown } | null)?.image_url;
  const data = typeof url === 'string' ? parseDataUrl(url) : undefined;
  if (data === undefined) {
    throw invalid(
      'input_reference',
      'The simulated provider takes input_reference as an uploaded file or as {image_url} with a base64 data URL.',
    );
  }
  return { field: 'input_reference', filename: '', mimeType: data.mimeType, bytes: data.bytes };
}

/** Registers the video routes. */
export function openaiVideoRoutes(app: FastifyInstance, ctx: RouteContext): void {
  app.post('/v1/videos', POST_ROUTE, async (req, reply) => {
    let get: (name: string) => unknown;
    let files: FormFile[];
    if (isMultipart(req)) {
      const form = await readForm(req);
      ctx.record(req, formSummary(form));
      get = (name) => form.fields[name];
      files = form.files.filter((f) => f.field === 'input_reference' || f.field === 'last_reference');
    } else {
      ctx.record(req);
      const body = bodyObject(req.body);
      get = (name) => body[name];
      files =
        body.input_reference === undefined || body.input_reference === null
          ? []
          : [jsonReference(body.input_reference)];
    }
    checkAuth(req);
    const prompt = get('prompt');
    if (typeof prompt !== 'string' || prompt === '')
      throw invalid('prompt', "Missing required parameter: 'prompt'.", 'missing_required_parameter');
    const model = get('model') ?? 'sora-2';
    if (typeof model !== 'string' || model === '')
      throw invalid('model', "Invalid type for 'model': expected a string.");
    const sizeValue = get('size') ?? '720x1280';
    const m = typeof sizeValue === 'string' ? /^(\d{3,4})x(\d{3,4})$/.exec(sizeValue) : null;
    const [width, height] = [Number(m?.[1]), Number(m?.[2])];
    if (m === null || !videoSizeOk(width, height)) {
      throw invalid(
        'size',
        `Invalid value: '${String(sizeValue)}'. Supported values are WIDTHxHEIGHT with even sides from ${VIDEO_BOUNDS.minSide} to ${VIDEO_BOUNDS.maxSide}.`,
      );
    }
    const secondsValue = get('seconds') ?? '4';
    const seconds = videoSeconds(secondsValue);
    if (seconds === undefined) {
      throw invalid(
        'seconds',
        `Invalid value: '${String(secondsValue)}'. Supported values are whole seconds from 1 to ${VIDEO_BOUNDS.maxSeconds}.`,
      );
    }
    const inputs = files.filter((f) => f.field === 'input_reference').length;
    const lasts = files.length - inputs;
    if (inputs > MAX_REFERENCES)
      throw invalid(
        'input_reference',
        `Too many input_reference images: ${inputs}. At most ${MAX_REFERENCES} are accepted.`,
        'array_above_max_length',
      );
    if (lasts > 1) throw invalid('last_reference', 'At most one last_reference is accepted.');
    if (lasts === 1 && inputs !== 1)
      throw invalid('last_reference', 'last_reference needs exactly one input_reference (the first frame).');
    const refs: ReceivedImage[] = [];
    for (const f of files)
      refs.push(await decodeImage(f.field, f.mimeType, f.bytes, (msg) => invalid(f.field, msg, 'invalid_image_file')));
    ctx.media.recordImages(req, refs);

    const d = parseDirectives(prompt);
    await applyFaults(d);
    const job = ctx.media.jobs.create(newId('video_'), {
      protocol: 'openai',
      model,
      prompt,
      width,
      height,
      seconds,
      fail: d.videoFail === true,
      renderMs: d.renderMs,
      hangupAfter: d.hangupAfter,
    });
    return reply.header('x-request-id', newId('req_')).send(videoObject(ctx.media.jobs, job));
  });

  app.get('/v1/videos/:id', async (req, reply) => {
    ctx.record(req);
    checkAuth(req);
    return reply.header('x-request-id', newId('req_')).send(videoObject(ctx.media.jobs, findJob(ctx, req)));
  });

  app.get('/v1/videos/:id/content', async (req, reply) => {
    ctx.record(req);
    checkAuth(req);
    const job = findJob(ctx, req);
    const variant = (req.query as { variant?: string }).variant ?? 'video';
    if (variant !== 'video') {
      throw invalid(
        'variant',
        variant === 'thumbnail' || variant === 'spritesheet'
          ? 'The simulated provider serves the video variant only.'
          : `Invalid value: '${variant}'. Supported values are: 'video', 'thumbnail', 'spritesheet'.`,
      );
    }
    const state = ctx.media.jobs.state(job);
    if (state.status !== 'completed') {
      throw new SimError(
        404,
        `Video '${job.id}' has no content: its status is '${state.status}'. Poll GET /v1/videos/${job.id} until it is 'completed'.`,
      );
    }
    const clip = await ctx.media.jobs.clip(job);
    reply.hijack();
    sendFile(
      reply.raw,
      { ...clip, type: 'video/mp4' },
      req.headers.range,
      { 'x-request-id': newId('req_') },
      job.hangupAfter,
    );
  });

  app.delete('/v1/videos/:id', async (req, reply) => {
    ctx.record(req);
    checkAuth(req);
    const job = findJob(ctx, req);
    ctx.media.jobs.delete(job.id);
    return reply.header('x-request-id', newId('req_')).send({ id: job.id, object: 'video.deleted', deleted: true });
  });
}
