/**
 * A finished video's MP4, passed through from the provider that keeps it: the caller's byte range goes upstream as
 * sent, the answer (200, 206 with its Content-Range, or 416) streams back as it arrives with backpressure, typed
 * video/mp4. Redirects (a Files API download answers with one to its storage) are followed, and the operator's key
 * goes only to the provider's own origin. Any instance serves any job: the job record holds where its MP4 is.
 */
import type { FastifyReply } from 'fastify';
import type { Dispatcher } from 'undici';
import { GatewayError } from '../../policies/errors.js';
import type { Upstreams } from './pools.js';
import { upstreamError } from './proxy.js';

/** Redirects followed at most. */
const MAX_REDIRECTS = 3;

/** Headers of the provider's answer passed on to the caller. */
const PASSED = ['content-length', 'content-range', 'etag', 'last-modified'] as const;

/** Where to fetch: the URL and the headers that authenticate it (VideoJobProvider.contentHeaders). */
export interface ContentSource {
  readonly url: string;
  readonly headers: (url: string) => Record<string, string>;
  /** Longest wait for the provider's answer to start, and longest silence inside it. */
  readonly timeoutMs: number;
}

async function fetchOnce(
  upstreams: Upstreams,
  url: string,
  headers: Record<string, string>,
  timeoutMs: number,
): Promise<Dispatcher.ResponseData> {
  const { pool, path } = upstreams.target(url);
  try {
    return await pool.request({ path, method: 'GET', headers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  } catch (err) {
    const code = (err as { code?: string }).code ?? '';
    throw new GatewayError(code.includes('TIMEOUT') ? 'upstream_timeout' : 'upstream_error', { cause: err });
  }
}

/**
 * Answer `reply` with the MP4 at `source`, honouring the caller's Range header. A provider that no longer has it is
 * 410 video_expired; a range it cannot satisfy is 416 invalid_range; its other failures are the usual upstream errors.
 */
export async function sendVideoContent(
  upstreams: Upstreams,
  reply: FastifyReply,
  source: ContentSource,
  range: string | undefined,
): Promise<FastifyReply> {
  let url = source.url;
  for (let hop = 0; ; hop++) {
    const headers: Record<string, string> = { ...source.headers(url), accept: 'video/mp4, */*' };
    if (range !== undefined) headers.range = range;
    const res = await fetchOnce(upstreams, url, headers, source.timeoutMs);
    const location = res.headers.location;
    if (res.statusCode >= 300 && res.statusCode < 400 && typeof location === 'string' && hop < MAX_REDIRECTS) {
      res.body.dump().catch(() => {});
      url = new URL(location, url).toString();
      continue;
    }
    if (res.statusCode === 200 || res.statusCode === 206) {
      const out: Record<string, string> = { 'content-type': 'video/mp4', 'accept-ranges': 'bytes' };
      for (const h of PASSED) {
        const v = res.headers[h];
        if (typeof v === 'string') out[h] = v;
      }
      return reply.code(res.statusCode).headers(out).send(res.body);
    }
    const text = await res.body.text().catch(() => '');
    if (res.statusCode === 416) {
      const total = res.headers['content-range'];
      throw new GatewayError('invalid_range', {
        headers: typeof total === 'string' ? { 'content-range': total } : undefined,
        cause: new Error(text.slice(0, 200)),
      });
    }
    if (res.statusCode === 404 || res.statusCode === 410)
      throw new GatewayError('video_expired', { cause: new Error(`provider answered ${res.statusCode}`) });
    const ra = res.headers['retry-after'];
    throw upstreamError(res.statusCode, text, typeof ra === 'string' ? ra : undefined);
  }
}
