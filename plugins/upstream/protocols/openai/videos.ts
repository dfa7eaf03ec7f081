/**
 * The OpenAI Videos API behind the job port, as OpenAI's API reference documents it ("Videos": create, retrieve,
 * download content, delete; "The video object"): POST {base}/videos as JSON, or as multipart/form-data when reference
 * files go with it; GET {base}/videos/{id} for the job (status queued, in_progress, completed or failed; progress;
 * expires_at for the downloadable assets; error {code, message}); GET {base}/videos/{id}/content for the MP4;
 * DELETE {base}/videos/{id} to stop a job (answered `{id, object: "video.deleted", deleted}`). The API has no cancel
 * of its own: the reference describes delete for "a completed or failed video and its stored assets" and says
 * nothing of a job in progress, so a delete the provider refuses is taken as its final answer (refused).
 * `seconds` is sent as the string the reference lists. OpenAI documents one `input_reference`; a provider of the
 * protocol whose models take more (subject references, a last frame) gets them as repeated `input_reference` parts
 * and a `last_reference` part, and only for models whose config says they take them.
 */
import type { ProviderConfig } from '../../../../policies/catalog.js';
import type { Upstreams } from '../../pools.js';
import type { PreparedImage } from '../../reference-images.js';
import {
  POLL_TIMEOUT_MS,
  answerJson,
  cancelFailure,
  exchange,
  formData,
  pollFailure,
  sameOrigin,
  submitError,
  type UpstreamCancel,
  type UpstreamJobState,
  type VideoJobProvider,
  type VideoSubmit,
} from '../../video-provider.js';

/** When the video object names no expiry: OpenAI keeps downloads about an hour after completion (its video guide). */
const DEFAULT_RETENTION_MS = 3_600_000;

const EXT: Record<string, string> = { 'image/png': 'png', 'image/jpeg': 'jpg', 'image/webp': 'webp' };

function file(name: string, i: number, img: PreparedImage) {
  return { name, filename: `${name}-${i}.${EXT[img.mimeType] ?? 'bin'}`, type: img.mimeType, bytes: img.bytes };
}

/** The OpenAI Videos protocol of one provider. */
export function openaiVideos(upstreams: Upstreams, provider: ProviderConfig): VideoJobProvider {
  const pollTimeout = Math.min(provider.timeout_ms, POLL_TIMEOUT_MS);
  const auth = { authorization: `Bearer ${provider.key}` };
  const jobUrl = (id: string) => `${provider.base_url}/videos/${encodeURIComponent(id)}`;
  return {
    async submit(req: VideoSubmit) {
      const fields = {
        model: req.model,
        prompt: req.prompt,
        seconds: String(req.seconds),
        size: `${req.width}x${req.height}`,
      };
      const images = [
        ...(req.firstFrame ? [file('input_reference', 1, req.firstFrame)] : []),
        ...(req.subjects ?? []).map((img, i) => file('input_reference', i + 1, img)),
        ...(req.lastFrame ? [file('last_reference', 1, req.lastFrame)] : []),
      ];
      let body: string | Buffer;
      let contentType: string;
      if (images.length === 0) {
        body = JSON.stringify(fields);
        contentType = 'application/json';
      } else {
        ({ body, contentType } = formData(fields, images));
      }
      const a = await exchange(upstreams, provider, {
        url: req.url,
        method: 'POST',
        headers: { ...auth, 'content-type': contentType, accept: 'application/json' },
        body,
      });
      if (a.status < 200 || a.status >= 300) throw submitError(a);
      const id = answerJson(provider, a).id;
      if (typeof id !== 'string' || id === '') throw submitError({ ...a, status: 502 });
      return { upstreamId: id };
    },

    async poll(upstreamId: string): Promise<UpstreamJobState> {
      const a = await exchange(upstreams, provider, {
        url: jobUrl(upstreamId),
        method: 'GET',
        headers: { ...auth, accept: 'application/json' },
        timeoutMs: pollTimeout,
        deadlineMs: pollTimeout,
      });
      if (a.status < 200 || a.status >= 300) return pollFailure(provider, a);
      const v = answerJson(provider, a);
      switch (v.status) {
        case 'queued':
        case 'in_progress':
          return {
            status: 'in_progress',
            progress: typeof v.progress === 'number' ? Math.max(0, Math.min(99, Math.floor(v.progress))) : 0,
          };
        case 'completed': {
          const expires = typeof v.expires_at === 'number' ? v.expires_at * 1000 : Date.now() + DEFAULT_RETENTION_MS;
          return { status: 'completed', content: { url: `${jobUrl(upstreamId)}/content`, expiresAt: expires } };
        }
        case 'failed': {
          const e = (v.error ?? {}) as { code?: unknown; message?: unknown };
          return {
            status: 'failed',
            code: typeof e.code === 'string' && e.code ? e.code : 'video_generation_failed',
            message:
              typeof e.message === 'string' && e.message
                ? e.message.slice(0, 1000)
                : 'The provider could not render the video.',
          };
        }
        default:
          return pollFailure(provider, { ...a, status: 502 });
      }
    },

    async cancel(upstreamId: string): Promise<UpstreamCancel> {
      const a = await exchange(upstreams, provider, {
        url: jobUrl(upstreamId),
        method: 'DELETE',
        headers: { ...auth, accept: 'application/json' },
        timeoutMs: pollTimeout,
        deadlineMs: pollTimeout,
      });
      if (a.status < 200 || a.status >= 300) return cancelFailure(provider, a);
      // `deleted: false` is the provider keeping the job.
      return answerJson(provider, a).deleted === false ? 'refused' : 'cancelled';
    },

    contentHeaders(url: string) {
      return sameOrigin(url, provider.base_url) ? auth : {};
    },
  };
}
