/** Helpers of the video tests: a gateway with fast polling, the SDK's create-then-poll, multipart submits. */
import OpenAI from 'openai';
import type { Video, VideoCreateParams } from 'openai/resources/videos';
import { startHarness, type Harness } from '../helpers/harness.js';
import { validator } from '../helpers/conformance.js';
import type { Simulator } from '../../plugins/simulator/index.js';

/** A gateway whose poller follows jobs every 50-200 ms, on a simulator that renders in `renderMs`. */
export function videoHarness(
  opts: {
    renderMs?: number;
    chains?: boolean;
    prefix?: string;
    sim?: Simulator;
    videos?: Record<string, unknown>;
  } = {},
): Promise<Harness> {
  return startHarness({
    chains: opts.chains,
    prefix: opts.prefix,
    sim: opts.sim,
    videoRenderMs: opts.renderMs ?? 300,
    edit: (c) => {
      c.videos = { poll_initial_ms: 50, poll_max_ms: 200, ...opts.videos };
    },
  });
}

/** The official SDK on a harness. */
export function sdk(h: Harness, key = h.key): OpenAI {
  return new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
}

/**
 * Submit, then poll `videos.retrieve` until the job ends, as the Python SDK's `videos.create_and_poll` does (the
 * Node SDK has no poll helper for videos). Returns every object seen, the submit's first.
 */
export async function createAndPoll(
  openai: OpenAI,
  params: VideoCreateParams & Record<string, unknown>,
  everyMs = 50,
  timeoutMs = 20_000,
): Promise<{ seen: Video[]; requestId: string; chain: string | null }> {
  const { data, response } = await openai.videos.create(params as VideoCreateParams).withResponse();
  const seen: Video[] = [data];
  const deadline = Date.now() + timeoutMs;
  let v = data;
  while (v.status !== 'completed' && v.status !== 'failed') {
    if (Date.now() > deadline) throw new Error(`video ${v.id} still ${v.status}`);
    await new Promise((r) => setTimeout(r, everyMs));
    v = await openai.videos.retrieve(data.id);
    seen.push(v);
  }
  return { seen, requestId: response.headers.get('x-request-id')!, chain: response.headers.get('x-gw-billing-chain') };
}

const videoResource = validator('VideoResource');
/** The sizes OpenAI's VideoSize enumerates; the spec's other sizes are outside it. */
const OPENAI_SIZES = ['720x1280', '1280x720', '1024x1792', '1792x1024'];

/** Deviations of `v` from OpenAI's published VideoResource schema (a size outside VideoSize is the spec's, not one). */
export function videoSchemaErrors(v: unknown): string[] {
  const size = (v as { size?: string }).size ?? '';
  return videoResource(v).filter((e) => !(e.startsWith('/size ') && !OPENAI_SIZES.includes(size)));
}

/** A multipart submit by fetch (repeated parts, a last_reference: beyond the SDK's VideoCreateParams). */
export async function submitForm(
  h: Harness,
  fields: Record<string, string>,
  files: { name: string; bytes: Buffer; type?: string }[],
  key = h.key,
): Promise<{ status: number; json: any; headers: Headers }> {
  const form = new FormData();
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  files.forEach((f, i) => form.append(f.name, new Blob([f.bytes], { type: f.type ?? 'image/png' }), `ref-${i}.png`));
  const res = await fetch(`${h.url}/v1/videos`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
    body: form,
  });
  return { status: res.status, json: await res.json(), headers: res.headers };
}
