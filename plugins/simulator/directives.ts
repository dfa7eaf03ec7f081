/**
 * `#sim:` directives (DESIGN.md "The simulated upstreams"): words in the last user message that
 * steer the simulator, so any client can ask for them through the gateway unchanged.
 */

/** Directives found in a text; absent fields were not asked for (or had invalid values). */
export interface SimDirectives {
  /** `#sim:tokens=N`: answer with exactly N output tokens (capped by max_tokens). */
  tokens?: number;
  /** `#sim:status=N` (400..599): answer that status with the provider's error body. */
  status?: number;
  /**
   * `#sim:hangup_after=N`: destroy the socket after N content chunks (text streams; text JSON: before the
   * body), or after N bytes of the body (images, video downloads).
   */
  hangupAfter?: number;
  /** `#sim:delay_ms=N`: wait before the first byte. */
  delayMs?: number;
  /** `#sim:chunk_delay_ms=N`: wait between content chunks of a stream, or 16 KiB slices of a JSON answer. */
  chunkDelayMs?: number;
  /** `#sim:video=fail`: the video render fails. */
  videoFail?: boolean;
  /** `#sim:render_ms=N`: the video job renders for N ms (else the simulator's videoRenderMs). */
  renderMs?: number;
  /**
   * `#sim:image=refuse`: the provider's safety system blocks the prompt; `#sim:image=refuse_output`: it
   * blocks the generated image (a distinct answer on Gemini, the same error on OpenAI); `#sim:image=detailed`: the
   * image carries grain and compresses as a photograph does (a 4K PNG of tens of MB, as real ones are).
   */
  image?: 'refuse' | 'refuse_output' | 'detailed';
}

const DIRECTIVE = /#sim:([a-z_]+)=(\S+)/g;

function count(value: string): number | undefined {
  if (!/^\d{1,15}$/.test(value)) return undefined;
  return Number(value);
}

/** Parses every `#sim:name=value` in `text`; unknown names and invalid values are ignored. */
export function parseDirectives(text: string): SimDirectives {
  const out: SimDirectives = {};
  if (!text.includes('#sim:')) return out;
  for (const [, name, value] of text.matchAll(DIRECTIVE)) {
    const n = count(value!);
    switch (name) {
      case 'tokens':
        if (n !== undefined) out.tokens = n;
        break;
      case 'status':
        if (n !== undefined && n >= 400 && n <= 599) out.status = n;
        break;
      case 'hangup_after':
        if (n !== undefined) out.hangupAfter = n;
        break;
      case 'delay_ms':
        if (n !== undefined) out.delayMs = n;
        break;
      case 'chunk_delay_ms':
        if (n !== undefined) out.chunkDelayMs = n;
        break;
      case 'video':
        if (value === 'fail') out.videoFail = true;
        break;
      case 'render_ms':
        if (n !== undefined) out.renderMs = n;
        break;
      case 'image':
        if (value === 'refuse' || value === 'refuse_output' || value === 'detailed') out.image = value;
        break;
    }
  }
  return out;
}

/**
 * Text of the last `role: "user"` message of a Messages or Chat Completions request: its string
 * content, or its text parts joined by newlines ('' when there is none).
 */
export function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i] as { role?: unknown; content?: unknown } | null;
    if (m === null || typeof m !== 'object' || m.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (!Array.isArray(m.content)) return '';
    let text = '';
    for (const part of m.content as Array<{ type?: unknown; text?: unknown } | null>) {
      if (part !== null && typeof part === 'object' && part.type === 'text' && typeof part.text === 'string') {
        text = text === '' ? part.text : text + '\n' + part.text;
      }
    }
    return text;
  }
  return '';
}
