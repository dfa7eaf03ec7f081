/**
 * POST /v1/videos: submit a video job (SPEC "Video submit request"). Police reads the body (JSON for text-to-video;
 * multipart/form-data when files come, its limits enforced while it is read, each image's format and pixel size read
 * from its header) and checks it against the model's family and config (policies/videos.ts), before any hold;
 * prepare decodes the references and fits them to the video once the hold is placed. The quote is the clip's
 * price, held for the job (`job:<id>`) until VIDEO_HOLD_MARGIN_MS past its deadline. Forward submits the render
 * through the provider's adapter, records the job and answers at once with it, in progress. The finished request
 * bills nothing: the job owns its hold, and the poller debits it when the clip completes, or releases it when it
 * fails. A submit the provider refused (400) or failed is free, its hold released at once; so is one whose caller
 * left before the job's id reached it (the job, if recorded, is failed: no one could ever fetch its clip). The
 * provider is then asked to stop that job, as it is when the job could not be recorded (VideoJobs.cancelAbandoned).
 */
import type { FastifyRequest } from 'fastify';
import { FREE } from '../billing/billing.js';
import type { Endpoint, Policed } from '../call.js';
import { newVideoId, VIDEO_HOLD_MARGIN_MS } from '../jobs/video-store.js';
import { decodeImage, decodeInOrder } from '../intake/images.js';
import { VIDEO_UPLOAD } from '../intake/limits.js';
import { isMultipartRequest, readUpload, type UploadedImage } from '../intake/multipart.js';
import { onConnectionClose } from '../phases/identify.js';
import type { Exchange } from '../upstream/exchange.js';
import { prepareImage, type ImageFit, type PreparedImage } from '../upstream/reference-images.js';
import type { ModelRoute, VideoModel } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import { planVideo, type VideoFields, type VideoPlan } from '../../policies/videos.js';
import { worstCaseVideo } from '../../pricing/index.js';
import { videoObject } from './video-object.js';

/** A policed submit. */
export interface VideoPoliced extends Policed {
  readonly route: ModelRoute<VideoModel>;
  readonly plan: VideoPlan;
  /** The uploaded references, checked from their headers; decoded and prepared by prepare into the frames below. */
  readonly inputs: readonly UploadedImage[];
  readonly lasts: readonly UploadedImage[];
  readonly firstFrame?: PreparedImage;
  readonly lastFrame?: PreparedImage;
  readonly subjects?: readonly PreparedImage[];
  /** The job's id, known before its hold so that the hold can name it as its owner. */
  readonly jobId: string;
  /** How long the hold lasts: the job's deadline, then the margin in which the poller closes it. */
  readonly holdMs: number;
}

/** The scalar fields and files of a submit, from either body. */
async function readSubmit(
  request: FastifyRequest,
): Promise<{ fields: VideoFields & { model?: unknown }; uploads: UploadedImage[] }> {
  if (isMultipartRequest(request)) {
    const form = await readUpload(request, VIDEO_UPLOAD);
    return { fields: form.fields, uploads: form.files };
  }
  const body = request.body;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GatewayError('invalid_request', {
      message: 'The request body must be a JSON object, or multipart/form-data when files are sent.',
    });
  }
  for (const name of ['input_reference', 'last_reference']) {
    if (name in body) {
      throw new GatewayError('invalid_request', {
        param: name,
        message: `${name} is a file: send the request as multipart/form-data.`,
      });
    }
  }
  return { fields: body as VideoFields, uploads: [] };
}

/**
 * Decode and prepare the references as the plan says: frames fitted to the video, subject references as they are.
 * `observe` gets each image's decode time (farebox_image_decode_seconds).
 */
async function prepareReferences(
  p: VideoPoliced,
  observe: (seconds: number) => void,
  left: () => boolean,
): Promise<Pick<VideoPoliced, 'firstFrame' | 'lastFrame' | 'subjects'>> {
  const { plan } = p;
  const refs = plan.references;
  if (refs.kind === 'none') return {};
  const fit: ImageFit =
    refs.kind === 'subjects' ? { fit: 'none' } : { fit: refs.fit, width: plan.width, height: plan.height };
  const prepared = await decodeInOrder(
    [...p.inputs, ...p.lasts].map(
      (img) => () => decodeImage(img, VIDEO_UPLOAD.maxPixels).then((d) => prepareImage(d, fit)),
    ),
    observe,
    left,
  );
  if (refs.kind === 'subjects') return { subjects: prepared };
  const [firstFrame, lastFrame] = prepared;
  return { firstFrame, lastFrame };
}

/** The submit endpoint. */
export const videos: Endpoint<VideoPoliced> = {
  name: 'videos',
  method: 'POST',
  path: '/videos',
  protocol: 'openai',
  clientRule: 'videos',
  body: 'json-or-multipart',
  async police(request, ctx) {
    const { fields, uploads } = await readSubmit(request);
    if (typeof fields.model !== 'string' || fields.model === '') {
      throw new GatewayError('invalid_request', { param: 'model', message: 'model: a video model id is required.' });
    }
    const route = ctx.catalog.route('videos', fields.model) as ModelRoute<VideoModel>;
    const inputs = uploads.filter((u) => u.field === 'input_reference');
    const lasts = uploads.filter((u) => u.field === 'last_reference');
    const plan = planVideo(route.model, fields, { inputs: inputs.length, lasts: lasts.length });
    return { route, plan, inputs, lasts, jobId: newVideoId(), holdMs: ctx.videos.deadline_ms + VIDEO_HOLD_MARGIN_MS };
  },
  quote(p, prices) {
    const amount = worstCaseVideo(prices, p.route.model.id, p.plan.seconds);
    // The hold is the job's: no instance renews it, and the sweeper releases it only past the job's deadline.
    return { quote: { model: p.route.model.id, amount }, tokens: 0, owner: `job:${p.jobId}`, ttlMs: p.holdMs };
  },
  prepare(call, p, ctx) {
    // Decoding and fitting the references is work only a held call may cost the gateway; a text-to-video submit has none.
    if (p.plan.references.kind === 'none') return undefined;
    return prepareReferences(
      p,
      (s) => ctx.metrics.imageDecode.observe({ endpoint: 'videos' }, s),
      () => call.ended,
    ).then((images) => ({ ...p, ...images }));
  },
  async forward(call, p, reply, ctx) {
    const provider = ctx.videos.provider(p.route.provider.name);
    if (provider === undefined)
      throw new GatewayError('internal_error', {
        cause: new Error(`provider ${p.route.provider.name} has no video protocol`),
      });
    const exchange: Exchange = {};
    call.exchange = exchange;
    const providerName = p.route.provider.name;
    const sent = process.hrtime.bigint();
    let upstreamId: string;
    try {
      ({ upstreamId } = await provider.submit({
        model: p.route.upstreamModel,
        url: p.route.url,
        prompt: p.plan.prompt,
        width: p.plan.width,
        height: p.plan.height,
        seconds: p.plan.seconds,
        firstFrame: p.firstFrame,
        lastFrame: p.lastFrame,
        subjects: p.subjects,
      }));
    } catch (err) {
      exchange.status = err instanceof GatewayError ? err.status : 502;
      ctx.metrics.upstreamErrors.inc({ provider: providerName, status: String(exchange.status) });
      throw err;
    } finally {
      ctx.metrics.upstreamDuration.observe({ provider: providerName }, Number(process.hrtime.bigint() - sent) / 1e9);
    }
    // The caller left before its job's id could reach it: no job is recorded, the hold is released, and the
    // provider is asked to stop a render nobody will pay for.
    const abandon = () =>
      ctx.videos.cancelAbandoned(providerName, upstreamId, { requestId: call.id, account: call.identity!.account });
    if (call.ended) {
      exchange.status = 499;
      abandon();
      return reply.send();
    }
    const hold = call.admitted?.hold;
    let job;
    try {
      job = await ctx.videos.store.create(
        {
          id: p.jobId,
          account: call.identity!.account,
          keyId: call.identity!.keyId,
          model: p.route.model.id,
          family: p.route.model.family,
          seconds: p.plan.seconds,
          size: p.plan.size,
          prompt: p.plan.prompt,
          chain: hold?.chain,
          requestId: call.id,
          callId: hold?.callId ?? '',
          held: hold?.amount ?? 0n,
          price: hold?.amount ?? 0n,
          provider: providerName,
          upstreamModel: p.route.upstreamModel,
          upstreamId,
        },
        ctx.videos.settings.deadline_ms,
        ctx.videos.settings.poll_initial_ms,
      );
    } catch (err) {
      // Whether or not the record was written, the hold is released now: a job the poller may still find can then
      // only fail (the store completes a job only while its hold is held), and its render is stopped.
      exchange.status = 503;
      abandon();
      throw err;
    }
    /** The job fails, free, and its render is stopped: its id never reached the caller. */
    const unanswered = () => {
      abandon();
      return ctx.videos.store
        .finish(
          job.id,
          { status: 'failed', code: 'client_disconnected', message: 'The caller left before the job was accepted.' },
          job.createdAt,
        )
        .catch((err: unknown) =>
          reply.log.warn({ err, job: job.id }, 'a job whose caller left could not be failed; it fails at its deadline'),
        );
    };
    if (call.ended) {
      // The caller left while the job was being recorded: its hold is released now (bill).
      exchange.status = 499;
      await unanswered();
      return reply.send();
    }
    exchange.status = 200;
    ctx.metrics.videoJobs.inc({ model: job.model, status: 'submitted' });
    // The job may complete once its 200 has left for the caller's socket (accepted). One whose connection closed
    // first (the answer waiting behind another on it: a queued answer sees no close of its own) fails; the poller
    // then releases its hold.
    const res = reply.raw;
    const answered = () => {
      offConnection();
      ctx.videos.accept(job.id, { requestId: call.id, account: call.identity!.account });
    };
    const closed = () => {
      res.off('finish', answered);
      if (!res.writableFinished) void unanswered();
    };
    res.once('finish', answered);
    const offConnection = onConnectionClose(reply, closed);
    return reply
      .code(200)
      .type('application/json')
      .send(JSON.stringify(videoObject(job)));
  },
  bill(call) {
    // Recorded: the job owns the hold from here. Refused, failed or never recorded: released now.
    return call.exchange?.status === 200 ? null : FREE;
  },
};
