/**
 * The Gemini API's video generation (Veo) behind the job port, as its video guide and API reference document it:
 * POST {base}/models/{model}:predictLongRunning with `x-goog-api-key` and one instance (`prompt`, `image` for a first
 * frame, `lastFrame`, `referenceImages` with `referenceType: "asset"`; images as `{bytesBase64Encoded, mimeType}`) and
 * `parameters` (`aspectRatio`, `resolution`, `durationSeconds`) answers a long-running operation `{name}`;
 * GET {base}/{name} answers it with `done` and, once done, `response.generateVideoResponse.generatedSamples[].video.uri`
 * (a Files API download that takes the key and follows a redirect) or `error` (google.rpc.Status). A done operation
 * without samples had them filtered (`raiMediaFilteredReasons`). Generated videos stay on the server two days.
 * A job cannot be stopped: the API's discovery document gives `models.operations` get and list only (no
 * `{name}:cancel`, google.longrunning's CancelOperation, and no delete), so cancel sends nothing and answers
 * `unsupported`; the render runs on and is counted as such (farebox_video_cancels_total).
 */
import type { ProviderConfig } from '../../../../policies/catalog.js';
import type { Upstreams } from '../../pools.js';
import type { PreparedImage } from '../../reference-images.js';
import {
  POLL_TIMEOUT_MS,
  answerJson,
  exchange,
  pollFailure,
  sameOrigin,
  submitError,
  type UpstreamCancel,
  type UpstreamJobState,
  type VideoJobProvider,
  type VideoSubmit,
} from '../../video-provider.js';

/** Generated videos are kept on the server for 2 days (Gemini API video guide). */
const RETENTION_MS = 2 * 86_400_000;

/** Aspect ratios by name; a frame size maps to the one within 1% of its own. */
const RATIOS: readonly [string, number][] = [
  ['16:9', 16 / 9],
  ['9:16', 9 / 16],
  ['4:3', 4 / 3],
  ['3:4', 3 / 4],
  ['1:1', 1],
];

/** `aspectRatio` and `resolution` of a frame size (1280x720 -> 16:9, 720p); the provider refuses what it lacks. */
export function veoFormat(width: number, height: number): { aspectRatio: string; resolution: string } {
  const r = width / height;
  const named = RATIOS.find(([, v]) => Math.abs(v - r) / v < 0.01)?.[0] ?? `${width}:${height}`;
  return { aspectRatio: named, resolution: `${Math.min(width, height)}p` };
}

function image(img: PreparedImage): { bytesBase64Encoded: string; mimeType: string } {
  return { bytesBase64Encoded: img.bytes.toString('base64'), mimeType: img.mimeType };
}

/** The Gemini predictLongRunning protocol of one provider. */
export function geminiVideos(upstreams: Upstreams, provider: ProviderConfig): VideoJobProvider {
  const pollTimeout = Math.min(provider.timeout_ms, POLL_TIMEOUT_MS);
  const auth = { 'x-goog-api-key': provider.key };
  return {
    async submit(req: VideoSubmit) {
      const instance: Record<string, unknown> = { prompt: req.prompt };
      if (req.firstFrame) instance.image = image(req.firstFrame);
      if (req.lastFrame) instance.lastFrame = image(req.lastFrame);
      if (req.subjects?.length)
        instance.referenceImages = req.subjects.map((img) => ({ image: image(img), referenceType: 'asset' }));
      const body = JSON.stringify({
        instances: [instance],
        parameters: { ...veoFormat(req.width, req.height), durationSeconds: req.seconds },
      });
      const a = await exchange(upstreams, provider, {
        url: req.url,
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body,
      });
      if (a.status < 200 || a.status >= 300) throw submitError(a);
      const name = answerJson(provider, a).name;
      if (typeof name !== 'string' || name === '') throw submitError({ ...a, status: 502 });
      return { upstreamId: name };
    },

    async poll(name: string): Promise<UpstreamJobState> {
      // The operation's name is a path under the API base (models/{model}/operations/{id}); each segment stays as named.
      const url = `${provider.base_url}/${name.split('/').map(encodeURIComponent).join('/')}`;
      const a = await exchange(upstreams, provider, {
        url,
        method: 'GET',
        headers: auth,
        timeoutMs: pollTimeout,
        deadlineMs: pollTimeout,
      });
      if (a.status < 200 || a.status >= 300) return pollFailure(provider, a);
      const op = answerJson(provider, a);
      if (op.done !== true) {
        const pct = (op.metadata as { progressPercent?: unknown } | undefined)?.progressPercent;
        return {
          status: 'in_progress',
          progress: typeof pct === 'number' ? Math.max(0, Math.min(99, Math.floor(pct))) : 0,
        };
      }
      const error = op.error as { code?: unknown; message?: unknown } | undefined;
      if (error) {
        return {
          status: 'failed',
          code: 'video_generation_failed',
          message:
            typeof error.message === 'string' && error.message
              ? error.message.slice(0, 1000)
              : `The provider failed the operation (code ${String(error.code)}).`,
        };
      }
      const generated = (
        op.response as
          | {
              generateVideoResponse?: {
                generatedSamples?: { video?: { uri?: unknown } }[];
                raiMediaFilteredReasons?: unknown;
              };
            }
          | undefined
      )?.generateVideoResponse;
      const uri = generated?.generatedSamples?.[0]?.video?.uri;
      if (typeof uri !== 'string' || uri === '') {
        const reasons = Array.isArray(generated?.raiMediaFilteredReasons)
          ? generated.raiMediaFilteredReasons.join(' ')
          : '';
        return {
          status: 'failed',
          code: 'content_filtered',
          message: reasons ? reasons.slice(0, 1000) : 'The provider returned no video.',
        };
      }
      return { status: 'completed', content: { url: uri, expiresAt: Date.now() + RETENTION_MS } };
    },

    async cancel(): Promise<UpstreamCancel> {
      return 'unsupported';
    },

    contentHeaders(url: string) {
      return sameOrigin(url, provider.base_url) ? auth : {};
    },
  };
}
