/**
 * Meters what an upstream answer delivers to the caller as it streams through.
 *
 * A meter is fed each upstream chunk and returns what to write to the caller for it (proxy.ts writes it straight
 * to the socket: no stream objects per call, DESIGN "Hot path"). SseMeter parses server-sent events of both
 * protocols without buffering the answer: it returns every complete event as soon as its chunk arrives (one
 * write per upstream chunk, never more; the chunk itself when it is forwarded unchanged), reads usage
 * (Anthropic: message_start and message_delta; OpenAI: the include_usage chunk), counts the content
 * deltas that went out, and removes the OpenAI usage chunk when the caller did not ask for it (the gateway
 * always asks upstream). Only the events that carry usage are JSON-parsed (DESIGN "Hot path"); the one that closes
 * the usage (OpenAI's usage chunk, Anthropic's message_delta) is written again with the call's price in
 * `usage.cost` when the meter is given a pricer, so a stream's caller sees what it pays where headers cannot say it.
 * JsonMeter passes a JSON answer through and reads its usage at the end.
 */
import { StringDecoder } from 'node:string_decoder';
import type { Protocol } from '../../policies/errors.js';

/** The usage object as the upstream reported it, in its own protocol's fields. */
export type RawUsage = Record<string, unknown>;

/** What a meter saw by the time the call ended. */
export interface MeterReading {
  /** The upstream's usage (merged across events for Anthropic streams), or null if none arrived. */
  usage: RawUsage | null;
  /** Content delta events forwarded to the caller (streams). */
  deltas: number;
  /** Bytes of those delta events. */
  deltaBytes: number;
  /** Characters of generated text (and tool-call JSON, and visible reasoning) those deltas carried. */
  deltaChars: number;
  /** The answer ended normally (message_stop / [DONE] / a whole JSON body). */
  complete: boolean;
  /** An error event inside the stream (Anthropic `event: error`). */
  streamError: string | null;
  /** Bytes forwarded to the caller. */
  bytesOut: number;
}

/** Meters one answer: `feed` each upstream chunk in order, then `end`; `reading` is final after `end`. */
export interface Meter {
  readonly reading: MeterReading;
  /** What to forward for this chunk (null: nothing yet). */
  feed(chunk: Buffer): Buffer | string | null;
  /** What is left to forward once the upstream has ended (null: nothing). */
  end(): Buffer | string | null;
}

function newReading(): MeterReading {
  return { usage: null, deltas: 0, deltaBytes: 0, deltaChars: 0, complete: false, streamError: null, bytesOut: 0 };
}

const USAGE_OBJECT = /"usage"\s*:\s*\{/g;
/** The opening of an Anthropic text delta's value, as Anthropic writes the event's JSON (compact, type first). */
const TEXT_DELTA = '"delta":{"type":"text_delta","text":"';
/** The generated value of an Anthropic delta: text, thinking, or a tool call's JSON. */
const ANTHROPIC_DELTA = /"(?:text|thinking|partial_json)"\s*:\s*"/g;
/** An OpenAI chunk delta with generated content: text, tool-call arguments, reasoning or a refusal. */
const TOKEN_DELTA = /"(?:content|arguments|reasoning_content|reasoning|refusal)"\s*:\s*"[^"]/g;

/**
 * The price of a stream's usage, as `usage.cost` shows it (a USD decimal with 6 decimals), given the usage the meter
 * has read so far (Anthropic: message_start's and message_delta's merged); null: not priced, the event goes out as
 * it came. Called once the event is on its way to the caller: the call is billed what it answers.
 */
export type StreamPricer = (usage: RawUsage) => string | null;

/**
 * Meters an SSE answer of `protocol`; with `dropUsageChunk` the OpenAI usage-only chunk is not forwarded; with
 * `price`, the usage event forwarded carries `usage.cost`.
 */
export class SseMeter implements Meter {
  readonly reading = newReading();
  private readonly decoder = new StringDecoder('utf8');
  private carry = '';

  constructor(
    private readonly protocol: Protocol,
    private readonly dropUsageChunk = false,
    private readonly price?: StreamPricer,
  ) {}

  feed(chunk: Buffer): Buffer | string | null {
    const whole = this.carry.length === 0;
    const text = whole ? this.decoder.write(chunk) : this.carry + this.decoder.write(chunk);
    const cut = lastEventEnd(text);
    if (cut < 0) {
      this.carry = text;
      return null;
    }
    this.carry = cut === text.length ? '' : text.slice(cut);
    const block = cut === text.length ? text : text.slice(0, cut);
    const out = this.protocol === 'anthropic' ? this.anthropic(block) : this.openai(block);
    if (out.length === 0) return null;
    // A chunk of whole events forwarded unchanged goes out as it came: no re-encoding of the text.
    const same = whole && out === text && this.carry.length === 0;
    const bytes = same ? chunk.length : Buffer.byteLength(out, 'utf8');
    this.reading.bytesOut += bytes;
    return same ? chunk : out;
  }

  end(): string | null {
    const rest = this.carry + this.decoder.end();
    this.carry = '';
    if (rest.length === 0) return null;
    const out = this.protocol === 'anthropic' ? this.anthropic(rest) : this.openai(rest);
    if (out.length === 0) return null;
    this.reading.bytesOut += Buffer.byteLength(out, 'utf8');
    return out;
  }

  /**
   * Anthropic: named events; everything is forwarded, usage read from message_start / message_delta (the latter
   * written again with its cost).
   */
  private anthropic(block: string): string {
    let start = 0;
    let out = '';
    let kept = 0;
    while (start < block.length) {
      const end = nextEventEnd(block, start);
      const event = block.slice(start, end);
      start = end;
      const name = eventName(event);
      if (name === 'content_block_delta') {
        // A text delta as Anthropic writes it (the delta's type first, then its text): its text is the first
        // ANTHROPIC_DELTA of the event, found in one search.
        const text = event.indexOf(TEXT_DELTA);
        if (text >= 0) {
          this.reading.deltas++;
          this.reading.deltaBytes += event.length;
          this.reading.deltaChars += stringChars(event, text + TEXT_DELTA.length);
        } else if (!event.includes('"signature_delta"')) {
          // A signature_delta closes a thinking block: no tokens in it.
          this.reading.deltas++;
          this.reading.deltaBytes += event.length;
          ANTHROPIC_DELTA.lastIndex = 0;
          const m = ANTHROPIC_DELTA.exec(event);
          if (m) this.reading.deltaChars += stringChars(event, m.index + m[0].length);
        }
      } else if (name === 'message_start') {
        const data = parseData(event) as { message?: { usage?: RawUsage } } | null;
        if (data?.message?.usage) this.reading.usage = { ...data.message.usage };
      } else if (name === 'message_delta') {
        const data = parseData(event) as { usage?: RawUsage } | null;
        // message_delta usage is cumulative; fields it carries replace message_start's.
        if (data?.usage) {
          this.reading.usage = { ...(this.reading.usage ?? {}), ...stripNulls(data.usage) };
          const priced = this.priced(event, data as { usage: RawUsage }, this.reading.usage);
          if (priced !== null) {
            out += block.slice(kept, start - event.length) + priced;
            kept = start;
          }
        }
      } else if (name === 'message_stop') {
        this.reading.complete = true;
      } else if (name === 'error') {
        const data = parseData(event) as { error?: { message?: string } } | null;
        this.reading.streamError = data?.error?.message ?? 'stream error';
      }
    }
    return kept === 0 ? block : out + block.slice(kept);
  }

  /** `event` written again with `usage.cost`, the price of `usage`; null without a pricer or a price. */
  private priced(event: string, data: { usage: RawUsage }, usage: RawUsage): string | null {
    const cost = this.price?.(usage) ?? null;
    if (cost === null) return null;
    data.usage.cost = cost;
    // The lines before the data (event:, id:) as they came, one data line, the event's own line ends.
    const nl = event.endsWith('\r\n') ? '\r\n' : '\n';
    return `${event.slice(0, event.indexOf('data:'))}data: ${JSON.stringify(data)}${nl}${nl}`;
  }

  /**
   * OpenAI: data-only events ending in [DONE]; the usage chunk is read and maybe removed. Only the events that hold a
   * usage object are sliced out and parsed; the rest of the block is counted in place and forwarded as it is.
   */
  private openai(block: string): string {
    USAGE_OBJECT.lastIndex = 0;
    let found = USAGE_OBJECT.exec(block);
    if (found === null) {
      this.countOpenAI(block, 0, block.length);
      return block;
    }
    let out = '';
    let kept = 0;
    let start = 0;
    while (found !== null) {
      const s = eventStart(block, found.index);
      const e = nextEventEnd(block, s);
      this.countOpenAI(block, start, s);
      const event = block.slice(s, e);
      const data = parseData(event) as { usage?: RawUsage; choices?: unknown[] } | null;
      if (data?.usage) this.reading.usage = data.usage;
      const usageOnly = Array.isArray(data?.choices) && data.choices.length === 0;
      if (usageOnly && this.dropUsageChunk) {
        out += block.slice(kept, s);
        kept = e;
      } else {
        this.countOpenAI(block, s, e);
        const priced = data?.usage ? this.priced(event, data as { usage: RawUsage }, data.usage) : null;
        if (priced !== null) {
          out += block.slice(kept, s) + priced;
          kept = e;
        }
      }
      start = e;
      USAGE_OBJECT.lastIndex = e;
      found = USAGE_OBJECT.exec(block);
    }
    this.countOpenAI(block, start, block.length);
    return kept === 0 ? block : out + block.slice(kept);
  }

  private countOpenAI(block: string, from: number, to: number): void {
    let s = from;
    while (s < to) {
      const e = Math.min(nextEventEnd(block, s), to);
      if (isDone(block, s, e)) {
        this.reading.complete = true;
      } else {
        // Only deltas that carry generated text count: not the role chunk, not the finish chunk.
        const value = deltaValue(block, s, e);
        if (value >= 0) {
          this.reading.deltas++;
          this.reading.deltaBytes += e - s;
          this.reading.deltaChars += stringChars(block, value);
        }
      }
      s = e;
    }
  }
}

/**
 * Where the generated string of the OpenAI chunk block.slice(s, e) starts (just past its opening quote), or -1 when
 * the chunk carries none: TOKEN_DELTA's first match, read in the chunk alone (a chunk without one, such as a tool
 * call's, must not send the search through the rest of the block). Providers write compact JSON, so a non-empty
 * `"content":"` with none of TOKEN_DELTA's other keys before it is that match, found without the regex.
 */
function deltaValue(block: string, s: number, e: number): number {
  const event = block.slice(s, e);
  const c = event.indexOf('"content":"');
  if (c >= 0 && event.charCodeAt(c + 11) !== 34) {
    // The delta's first member (the usual chunk): what precedes it is the chunk's id, object, created, model and the
    // choice's index, none of them a generated value, so nothing before it is TOKEN_DELTA's. Searching those for the
    // other keys was a third of a long stream's CPU.
    if (c >= 9 && event.startsWith('"delta":{', c - 9)) return s + c + 11;
    const before = event.slice(0, c);
    if (!OTHER_DELTA_KEYS.some((k) => before.includes(k))) return s + c + 11;
  }
  TOKEN_DELTA.lastIndex = 0;
  const m = TOKEN_DELTA.exec(event);
  // The match ends one character into the string value.
  return m ? s + m.index + m[0].length - 1 : -1;
}

/** What TOKEN_DELTA could match before a chunk's `"content":"` (reasoning covers reasoning_content). */
const OTHER_DELTA_KEYS = ['"content"', '"arguments"', '"reasoning', '"refusal"'];

/** Index where the event holding index `i` starts: just past the blank line before it, or 0. */
function eventStart(block: string, i: number): number {
  for (let lf = block.lastIndexOf('\n', i); lf > 0; lf = block.lastIndexOf('\n', lf - 1)) {
    const end = blankLineEnd(block, lf);
    if (end >= 0) return end;
  }
  return 0;
}

/**
 * The most of a JSON answer the meter keeps to read its usage, and the most of one the proxy holds (proxy.ts): far
 * above any text answer (a text model's max_tokens of JSON is a few MB), so only a broken provider reaches it.
 */
export const JSON_ANSWER_MAX_BYTES = 64 * 1024 * 1024;

/** Passes a JSON answer through chunk by chunk and parses it once at the end for its usage. */
export class JsonMeter implements Meter {
  readonly reading = newReading();
  private readonly chunks: Buffer[] = [];
  private size = 0;

  constructor(private readonly maxBytes = JSON_ANSWER_MAX_BYTES) {}

  feed(chunk: Buffer): Buffer {
    this.size += chunk.length;
    if (this.size <= this.maxBytes) this.chunks.push(chunk);
    this.reading.bytesOut += chunk.length;
    return chunk;
  }

  end(): null {
    if (this.size <= this.maxBytes) {
      try {
        const whole = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
        const body = JSON.parse(whole.toString('utf8')) as { usage?: RawUsage };
        if (body && typeof body.usage === 'object' && body.usage !== null) this.reading.usage = body.usage;
        this.reading.complete = true;
      } catch {
        // Not JSON: no usage; billing treats it as an answer without usage.
      }
    }
    this.chunks.length = 0;
    return null;
  }
}

/** Characters of the JSON string value starting at `from` (just past its opening quote); an escape counts as one. */
function stringChars(s: string, from: number): number {
  let n = 0;
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 34) return n; // closing quote
    if (c === 92) i += s.charCodeAt(i + 1) === 117 ? 5 : 1; // \uXXXX or \x
    n++;
  }
  return n;
}

/** Whether the event block.slice(s, e) is `data: [DONE]`. */
function isDone(block: string, s: number, e: number): boolean {
  // `data: [DONE]` with its line ends, and room for an id line: a longer event is content, whatever it says.
  if (e - s > 64) return false;
  return block.slice(s, e).includes('[DONE]');
}

function stripNulls(u: RawUsage): RawUsage {
  const out: RawUsage = {};
  for (const [k, v] of Object.entries(u)) if (v !== null && v !== undefined) out[k] = v;
  return out;
}

function skipSpace(s: string, i: number): number {
  while (s.charCodeAt(i) === 32) i++;
  return i;
}

/**
 * Index just past the line feed at `lf` when it ends a blank line (`\n\n` or `\r\n\r\n` ends an event), else -1.
 */
function blankLineEnd(s: string, lf: number): number {
  const prev = s.charCodeAt(lf - 1);
  if (prev === 10) return lf + 1;
  return prev === 13 && s.charCodeAt(lf - 2) === 10 ? lf + 1 : -1;
}

/**
 * Index just past the last complete event (blank-line terminated) in `s`, or -1. Walks back over line feeds from
 * the end, so a chunk that ends with its event costs one step, whatever its length.
 */
function lastEventEnd(s: string): number {
  for (let lf = s.lastIndexOf('\n'); lf > 0; lf = s.lastIndexOf('\n', lf - 1)) {
    const end = blankLineEnd(s, lf);
    if (end >= 0) return end;
  }
  return -1;
}

/** Index just past the event that starts at `from` (or the end of `s`): a walk over its own line feeds. */
function nextEventEnd(s: string, from: number): number {
  for (let lf = s.indexOf('\n', from); lf >= 0; lf = s.indexOf('\n', lf + 1)) {
    if (lf > from) {
      const end = blankLineEnd(s, lf);
      if (end >= 0) return end;
    }
  }
  return s.length;
}

function eventName(event: string): string | null {
  const i = event.indexOf('event:');
  if (i < 0) return null;
  const start = skipSpace(event, i + 6);
  let end = start;
  while (end < event.length && event.charCodeAt(end) !== 10 && event.charCodeAt(end) !== 13) end++;
  return event.slice(start, end);
}

function parseData(event: string): unknown {
  // One data line per event in both protocols; join several if a provider splits them.
  let payload = '';
  let i = event.indexOf('data:');
  while (i >= 0) {
    let end = event.indexOf('\n', i);
    if (end < 0) end = event.length;
    payload += (payload ? '\n' : '') + event.slice(skipSpace(event, i + 5), end).replace(/\r$/, '');
    i = event.indexOf('data:', end);
  }
  try {
    return JSON.parse(payload);
  } catch {
    return null;
  }
}
