/**
 * What of a caller's request may reach the provider when it changes what the provider bills or accepts. Unknown body
 * fields pass through (SPEC: "other fields pass through to the model"), except the ones below whose pricing effect
 * the price table does not hold; caller headers reach the provider only from an allow-list.
 */
import { GatewayError } from './errors.js';
import type { BodyFacts } from './text-bounds.js';

/**
 * `anthropic-beta` flags forwarded to Anthropic: each changes nothing the price table does not already price (cache
 * TTLs, output ceilings the max_tokens clamp bounds, streaming and tool formats, context clearing, client tools the
 * input bound counts). Any other flag is dropped and named in `x-gw-dropped-beta`: for example the long-context flag
 * (`context-1m-...`, input priced higher past 200,000 tokens), server tools and code execution (per-use fees), MCP.
 */
export const FORWARDED_BETAS: ReadonlySet<string> = new Set([
  'claude-code-20250219',
  'interleaved-thinking-2025-05-14',
  'fine-grained-tool-streaming-2025-05-14',
  'token-efficient-tools-2025-02-19',
  'prompt-caching-2024-07-31',
  'extended-cache-ttl-2025-04-11',
  'output-128k-2025-02-19',
  'context-management-2025-06-27',
  'computer-use-2024-10-22',
  'computer-use-2025-01-24',
  'computer-use-2025-11-24',
  'token-counting-2024-11-01',
  'pdfs-2024-09-25',
  'files-api-2025-04-14',
  'structured-outputs-2025-11-13',
  'effort-2025-11-24',
]);

/** The beta flags of a request split into those forwarded and those dropped. */
export function splitBetas(header: string | string[] | undefined): { forwarded: string[]; dropped: string[] } {
  const forwarded: string[] = [];
  const dropped: string[] = [];
  if (header === undefined) return { forwarded, dropped };
  for (const flag of (Array.isArray(header) ? header.join(',') : header).split(',')) {
    const f = flag.trim();
    if (f === '') continue;
    (FORWARDED_BETAS.has(f) ? forwarded : dropped).push(f);
  }
  return { forwarded, dropped };
}

const unpriced = (param: string, why: string) =>
  new GatewayError('unsupported_parameter', {
    param,
    message: `${param}: ${why}; the gateway's price table does not cover it.`,
  });

/**
 * Refuse body fields whose effect on the provider's bill the price table does not hold (400 unsupported_parameter).
 * `facts`: the body's walk (policies/text-bounds.ts bodyFacts).
 */
export function refuseUnpriced(
  protocol: 'anthropic' | 'openai',
  body: Readonly<Record<string, unknown>>,
  facts: Pick<BodyFacts, 'inputAudio'>,
): void {
  if (protocol === 'anthropic') {
    if (body.container !== undefined) throw unpriced('container', 'code-execution containers bill by the hour');
    return;
  }
  if (body.web_search_options !== undefined) throw unpriced('web_search_options', 'web search bills per call');
  if (body.audio !== undefined || (Array.isArray(body.modalities) && body.modalities.includes('audio'))) {
    throw unpriced('modalities', 'audio output bills at audio rates');
  }
  if (body.prediction !== undefined) throw unpriced('prediction', 'rejected prediction tokens bill beyond max_tokens');
  if (body.service_tier === 'priority') throw unpriced('service_tier', 'the priority tier bills above standard rates');
  if (facts.inputAudio) throw unpriced('messages', 'input_audio parts bill at audio rates');
}
