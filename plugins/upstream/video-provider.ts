/**
 * The job port: what the gateway needs of a provider's asynchronous video API, whatever its protocol. Submit a
 * render and get the provider's job id; ask how a job stands; stop a job no one will pay for; know where its MP4 is
 * and what authenticates the download. Each protocol's adapter is its folder's videos.ts (protocols/openai/,
 * protocols/gemini/); another provider's long-running API slots in as another, the job store and the poller stay as
 * they are.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { ProviderConfig } from '../../policies/catalog.js';
import { GatewayError } from '../../policies/errors.js';
import type { Upstreams } from './pools.js';
import { upstreamError } from './proxy.js';
import type { PreparedImage } from './reference-images.js';

/** A render to submit. */
export interface VideoSubmit {
  /** The provider's model id. */
  readonly model: string;
  /** The create URL of the model's route (its protocol's: protocols/registry.ts upstreamUrl). */
  readonly url: string;
  readonly prompt: string;
  readonly width: number;
  readonly height: number;
  readonly seconds: number;
  /** A starting frame, and a last frame beside it. */
  readonly firstFrame?: PreparedImage;
  readonly lastFrame?: PreparedImage;
  /** Subject and style references, in the order the prompt cites them (@image1, @image2, ...). */
  readonly subjects?: readonly PreparedImage[];
}

/** Where a finished job's MP4 is, and until when the provider keeps it (ms since the epoch). */
export interface VideoContent {
  readonly url: string;
  readonly expiresAt: number;
}

/** A provider's answer about one job. */
export type UpstreamJobState =
  | { readonly status: 'in_progress'; readonly progress: number }
  | { readonly status: 'completed'; readonly content: VideoContent }
  | { readonly status: 'failed'; readonly code: string; readonly message: string };

/**
 * What became of a cancel: the provider stopped the job (`cancelled`), no longer knows it (`gone`), refused to stop
 * it (`refused`, final), or its protocol has no way to stop a job (`unsupported`: no request was sent).
 */
export type UpstreamCancel = 'cancelled' | 'gone' | 'refused' | 'unsupported';

/** One provider protocol of asynchronous video generation. */
export interface VideoJobProvider {
  /** Start a render; a refusal is a GatewayError (400 upstream_invalid_request for the provider's 4xx). */
  submit(req: VideoSubmit): Promise<{ readonly upstreamId: string }>;
  /** How the job stands now; transport and 5xx failures throw (the poller retries), a job the provider lost is failed. */
  poll(upstreamId: string): Promise<UpstreamJobState>;
  /** Stop a job no one will pay for; transport failures, 429 and 5xx throw (worth another try), the rest is an answer. */
  cancel(upstreamId: string): Promise<UpstreamCancel>;
  /** Request headers that authenticate a download of `url` (none for a URL off the provider's own origin). */
  contentHeaders(url: string): Record<string, string>;
}

/** A provider's answer that failed with a status the poller can wait out. */
export class UpstreamRetry extends Error {
  constructor(
    readonly status: number,
    readonly retryAfterMs: number | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'UpstreamRetry';
  }
}

/** An upstream HTTP answer read whole (small JSON answers only). */
export interface UpstreamAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly text: string;
}

/** JSON answers of video APIs are small; a larger one is not the protocol's. */
const MAX_ANSWER_BYTES = 1024 * 1024;

/**
 * Longest a poll (or a cancel) may take, from its request to its answer's last byte: a provider that hangs on one
 * job, or trickles its answer, must not hold the poller's slot for the provider's whole timeout_ms (it may be
 * minutes, for submits that upload images), nor a job's last poll until its hold runs out.
 */
export const POLL_TIMEOUT_MS = 30_000;

/** One request to a provider on its keep-alive pool, its answer read whole. */
export async function exchange(
  upstreams: Upstreams,
  provider: ProviderConfig,
  req: {
    url: string;
    method: 'GET' | 'POST' | 'DELETE';
    headers: Record<string, string>;
    body?: string | Buffer;
    /** Longest wait for the answer to start, and longest silence inside it. Default: the provider's timeout_ms. */
    timeoutMs?: number;
    /** Longest the whole exchange may take, its answer read to the end. Default: no bound beyond timeoutMs's. */
    deadlineMs?: number;
  },
): Promise<UpstreamAnswer> {
  const { pool, path } = upstreams.target(req.url);
  const timeout = req.timeoutMs ?? provider.timeout_ms;
  const deadline = req.deadlineMs === undefined ? undefined : new AbortController();
  const timer =
    deadline && setTimeout(() => deadline.abort(new Error(`past ${req.deadlineMs} ms`)), req.deadlineMs).unref();
  const failed = (err: unknown) => {
    const code = (err as { code?: string }).code ?? '';
    return new GatewayError(
      deadline?.signal.aborted || code.includes('TIMEOUT') ? 'upstream_timeout' : 'upstream_error',
      {
        cause: err,
      },
    );
  };
  try {
    let res;
    try {
      res = await pool.request({
        path,
        method: req.method,
        headers: req.headers,
        body: req.body ?? null,
        headersTimeout: timeout,
        bodyTimeout: timeout,
        signal: deadline?.signal,
      });
    } catch (err) {
      throw failed(err);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) {
          res.body.destroy();
          throw new GatewayError('upstream_error', {
            cause: new Error(`${provider.name}: answer over ${MAX_ANSWER_BYTES} bytes`),
          });
        }
        chunks.push(chunk);
      }
    } catch (err) {
      throw err instanceof GatewayError ? err : failed(err);
    }
    return { status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') };
  } finally {
    clearTimeout(timer);
  }
}

/** The JSON object of a 2xx answer; anything else is the provider's failure. */
export function answerJson(provider: ProviderConfig, a: UpstreamAnswer): Record<string, unknown> {
  try {
    const v = JSON.parse(a.text) as unknown;
    if (v && typeof v === 'object' && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // below
  }
  throw new GatewayError('upstream_error', {
    cause: new Error(`${provider.name}: answer ${a.status} is not a JSON object: ${a.text.slice(0, 200)}`),
  });
}

/** A submit's non-2xx answer as the caller's error: the provider's refusal is a 400, its failures 429/5xx. */
export function submitError(a: UpstreamAnswer): GatewayError {
  const ra = a.headers['retry-after'];
  return upstreamError(a.status, a.text, typeof ra === 'string' ? ra : undefined);
}

/** A poll's non-2xx answer: a job the provider does not know is lost (failed); others are waited out. */
export function pollFailure(provider: ProviderConfig, a: UpstreamAnswer): UpstreamJobState {
  if (a.status === 404 || a.status === 410) {
    return {
      status: 'failed',
      code: 'upstream_job_lost',
      message: `The provider no longer knows this job (HTTP ${a.status}).`,
    };
  }
  const ra = a.headers['retry-after'];
  const seconds = typeof ra === 'string' ? Number(ra) : NaN;
  throw new UpstreamRetry(
    a.status,
    Number.isFinite(seconds) ? seconds * 1000 : undefined,
    `${provider.name}: poll answered ${a.status}: ${a.text.slice(0, 200)}`,
  );
}

/** A cancel's non-2xx answer: a job the provider does not know is gone, 429 and 5xx are worth another try, else refused. */
export function cancelFailure(provider: ProviderConfig, a: UpstreamAnswer): UpstreamCancel {
  if (a.status === 404 || a.status === 410) return 'gone';
  if (a.status === 408 || a.status === 429 || a.status >= 500) {
    const ra = a.headers['retry-after'];
    const seconds = typeof ra === 'string' ? Number(ra) : NaN;
    throw new UpstreamRetry(
      a.status,
      Number.isFinite(seconds) ? seconds * 1000 : undefined,
      `${provider.name}: cancel answered ${a.status}: ${a.text.slice(0, 200)}`,
    );
  }
  return 'refused';
}

/** A multipart/form-data body (RFC 7578) of text fields and files, built in one buffer. */
export function formData(
  fields: Readonly<Record<string, string>>,
  files: readonly { name: string; filename: string; type: string; bytes: Buffer }[],
): { body: Buffer; contentType: string } {
  const boundary = `----farebox${randomBytes(12).toString('hex')}`;
  const parts: Buffer[] = [];
  const quote = (s: string) => s.replace(/["\r\n\\]/g, '_');
  for (const [name, value] of Object.entries(fields)) {
    parts.push(
      Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="${quote(name)}"\r\n\r\n${value}\r\n`),
    );
  }
  for (const f of files) {
    parts.push(
      Buffer.from(
        `--${boundary}\r\ncontent-disposition: form-data; name="${quote(f.name)}"; filename="${quote(f.filename)}"\r\ncontent-type: ${f.type}\r\n\r\n`,
      ),
      f.bytes,
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), contentType: `multipart/form-data; boundary=${boundary}` };
}

/** Whether `url` is on the origin of `base` (a download URL elsewhere never gets the operator's key). */
export function sameOrigin(url: string, base: string): boolean {
  try {
    return new URL(url).origin === new URL(base).origin;
  } catch {
    return false;
  }
}
