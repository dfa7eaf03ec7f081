/**
 * Simulated Gemini API video generation (Veo): POST /v1beta/models/{model}:predictLongRunning answers a
 * long-running operation `{name}`; GET /v1beta/{name} answers it `{name, done:false}` while rendering,
 * then `{name, done:true, response:{generateVideoResponse:{generatedSamples:[{video:{uri}}]}}}`, or
 * `{name, done:true, error:{code, message}}` (google.rpc.Status); the uri is a Files API download that
 * takes the API key and byte ranges. Follows the Gemini API Veo guide (ai.google.dev/gemini-api/docs/video:
 * instances[].prompt, image, lastFrame, referenceImages; parameters aspectRatio, resolution,
 * durationSeconds) and the Operation resource of the API reference. Like the API (its discovery document
 * gives `models.operations` get and list only), it has no cancel: a POST to `{name}:cancel` is a 404.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { parseDirectives } from './directives.js';
import { SimError } from './errors.js';
import { type ReceivedImage, decodeImage } from './received-images.js';
import { sendFile } from './respond.js';
import { type RouteContext, applyFaults, bodyObject, selfOrigin } from './route-context.js';
import { VIDEO_BOUNDS, type VideoJob, shortId, videoSeconds } from './video-jobs.js';

/**
 * Frame size per aspectRatio and resolution. Veo documents 16:9 and 9:16 at 720p and 1080p; 480p and
 * 4:3 / 3:4 are the simulator's, so the one provider also stands in for the spec's vidB and vidC
 * families (854x480, 640x480). 4k is beyond what the simulator renders (VIDEO_BOUNDS).
 */
const FRAME: Record<string, Record<string, [width: number, height: number]>> = {
  '16:9': { '480p': [854, 480], '720p': [1280, 720], '1080p': [1920, 1080] },
  '9:16': { '480p': [480, 854], '720p': [720, 1280], '1080p': [1080, 1920] },
  '4:3': { '480p': [640, 480], '720p': [960, 720], '1080p': [1440, 1080] },
  '3:4': { '480p': [480, 640], '720p': [720, 960], '1080p': [1080, 1440] },
};
/** Veo takes up to three reference images (Veo guide, "referenceImages"). */
const MAX_REFERENCE_IMAGES = 3;
/** google.rpc.Code INTERNAL: what a failed render reports. */
const RPC_INTERNAL = 13;

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** A Veo Image `{bytesBase64Encoded, mimeType}`, decoded. */
function veoImage(v: unknown, field: string): Promise<ReceivedImage> {
  const bytes = isObject(v) ? v.bytesBase64Encoded : undefined;
  const mimeType = isObject(v) ? v.mimeType : undefined;
  if (typeof bytes !== 'string' || bytes === '' || typeof mimeType !== 'string') {
    throw new SimError(
      400,
      `${field}: an image is {bytesBase64Encoded, mimeType} (Cloud Storage and file URIs are out of reach of the simulator).`,
    );
  }
  return decodeImage(field, mimeType, Buffer.from(bytes, 'base64'), (m) => new SimError(400, `${field}: ${m}`));
}

/** Starts a render for `model`; answers the operation's name. */
export async function predictLongRunning(
  req: FastifyRequest,
  reply: FastifyReply,
  ctx: RouteContext,
  model: string,
): Promise<void> {
  const body = bodyObject(req.body);
  const instances = body.instances;
  if (!Array.isArray(instances) || instances.length !== 1 || !isObject(instances[0])) {
    throw new SimError(400, 'instances: exactly one instance is required.');
  }
  const instance = instances[0];
  const prompt = instance.prompt;
  if (typeof prompt !== 'string' || prompt === '')
    throw new SimError(400, 'instances[0].prompt: a prompt is required.');
  const parameters = body.parameters ?? {};
  if (!isObject(parameters)) throw new SimError(400, 'parameters must be an object.');

  const aspectRatio = parameters.aspectRatio ?? '16:9';
  const resolution = parameters.resolution ?? '720p';
  if (typeof aspectRatio !== 'string' || FRAME[aspectRatio] === undefined) {
    throw new SimError(
      400,
      `parameters.aspectRatio: ${JSON.stringify(aspectRatio)} is not supported; use one of ${Object.keys(FRAME).join(', ')}.`,
    );
  }
  const frame = typeof resolution === 'string' ? FRAME[aspectRatio]![resolution] : undefined;
  if (frame === undefined)
    throw new SimError(
      400,
      `parameters.resolution: ${JSON.stringify(resolution)} is not supported; use 480p, 720p or 1080p.`,
    );
  const seconds = videoSeconds(parameters.durationSeconds ?? 8);
  if (seconds === undefined) {
    throw new SimError(
      400,
      `parameters.durationSeconds: ${JSON.stringify(parameters.durationSeconds)} is not supported; use whole seconds from 1 to ${VIDEO_BOUNDS.maxSeconds}.`,
    );
  }
  for (const count of ['numberOfVideos', 'sampleCount']) {
    if (parameters[count] !== undefined && parameters[count] !== 1)
      throw new SimError(400, `parameters.${count}: one video per request.`);
  }

  const images: ReceivedImage[] = [];
  if (instance.image !== undefined) images.push(await veoImage(instance.image, 'image'));
  if (instance.lastFrame !== undefined) {
    if (instance.image === undefined)
      throw new SimError(400, 'instances[0].lastFrame must be used in combination with instances[0].image.');
    images.push(await veoImage(instance.lastFrame, 'lastFrame'));
  }
  if (instance.referenceImages !== undefined) {
    const refs = instance.referenceImages;
    if (!Array.isArray(refs) || refs.length > MAX_REFERENCE_IMAGES) {
      throw new SimError(400, `instances[0].referenceImages: up to ${MAX_REFERENCE_IMAGES} reference images.`);
    }
    for (const ref of refs) images.push(await veoImage(isObject(ref) ? ref.image : undefined, 'referenceImages'));
  }
  ctx.media.recordImages(req, images);

  const d = parseDirectives(prompt);
  await applyFaults(d);
  const id = shortId();
  ctx.media.jobs.create(id, {
    protocol: 'gemini',
    model,
    prompt,
    width: frame[0],
    height: frame[1],
    seconds,
    fail: d.videoFail === true,
    renderMs: d.renderMs,
    hangupAfter: d.hangupAfter,
  });
  return reply.send({ name: `models/${model}/operations/${id}` });
}

function geminiJob(ctx: RouteContext, id: string): VideoJob | undefined {
  const job = ctx.media.jobs.get(id);
  return job?.protocol === 'gemini' ? job : undefined;
}

/** GET /v1beta/models/{model}/operations/{id}: the operation as it is now. */
export function getOperation(req: FastifyRequest, reply: FastifyReply, ctx: RouteContext): FastifyReply {
  const { model, op } = req.params as { model: string; op: string };
  const name = `models/${model}/operations/${op}`;
  const job = geminiJob(ctx, op);
  if (job === undefined || job.model !== model) throw new SimError(404, `Operation ${name} not found.`);
  const state = ctx.media.jobs.state(job);
  if (state.status === 'completed') {
    const uri = `${selfOrigin(req)}/v1beta/files/${job.id}:download?alt=media`;
    return reply.send({
      name,
      done: true,
      response: {
        '@type': 'type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse',
        generateVideoResponse: { generatedSamples: [{ video: { uri } }] },
      },
    });
  }
  if (state.status === 'failed')
    return reply.send({ name, done: true, error: { code: RPC_INTERNAL, message: state.failure!.message } });
  return reply.send({ name, done: false });
}

/** GET /v1beta/files/{id}:download: the clip, with byte ranges. */
export async function downloadFile(req: FastifyRequest, reply: FastifyReply, ctx: RouteContext): Promise<void> {
  const file = (req.params as { file: string }).file;
  const id = file.endsWith(':download') ? file.slice(0, -':download'.length) : undefined;
  const job = id === undefined ? undefined : geminiJob(ctx, id);
  if (job === undefined || ctx.media.jobs.state(job).status !== 'completed')
    throw new SimError(404, `File files/${id ?? file} not found.`);
  const clip = await ctx.media.jobs.clip(job);
  reply.hijack();
  sendFile(reply.raw, { ...clip, type: 'video/mp4' }, req.headers.range, {}, job.hangupAfter);
}
