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
  feed(chunk: Buffer): Buffer | null;
  /** What is left to forward once the upstream has ended (null: nothing). */
  end(): Buffer | null;
}

function newReading(): MeterReading {
  return { usage: null, deltas: 0, deltaBytes: 0, deltaChars: 0, complete: false, streamError: null, bytesOut: 0 };
}

/**
 * An Anthropic text delta, as Anthropic writes the event's JSON (compact, type first), from the brace that opens it
 * (OPENING_CONTENT says why), after `"delta":`.
 */
const TEXT_DELTA = '{"type":"text_delta","text":"';
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
 *
 * A block of events is read as latin1, one character per byte, so that an index into its text is an index into its
 * bytes: the SSE syntax, JSON's quotes, backslashes and the keys the meter looks for are ASCII, and no byte of a
 * UTF-8 sequence is ASCII. What goes out is bytes cut from what came in; UTF-8 is decoded only in the events parsed
 * for their usage, and generated characters are counted from UTF-8 lead bytes (stringUnits).
 */
export class SseMeter implements Meter {
  readonly reading = newReading();
  /** The start of an event not yet whole, in the chunks that brought it, and their length. */
  private carry: Buffer[] = [];
  private carried = 0;
  /**
   * An event ran past `maxEventBytes` without its end: it is dropped and nothing more is metered or forwarded; the
   * proxy cuts the answer there, as for an upstream that failed mid-answer.
   */
  overflowed = false;
  /**
   * Index of the first OPENING_CONTENT (OpenAI) or TEXT_DELTA (Anthropic) at or after the last search in the block
   * metered (its length: none; `opening`): a stream of other deltas does not send a search through the rest of the
   * block for each of its events.
   */
  private content = -1;

  constructor(
    private readonly protocol: Protocol,
    private readonly dropUsageChunk = false,
    private readonly price?: StreamPricer,
    private readonly maxEventBytes = JSON_ANSWER_MAX_BYTES,
  ) {}

  feed(chunk: Buffer): Buffer | null {
    if (this.overflowed) return null;
    let bytes = chunk;
    if (this.carried > 0) {
      // What is carried ends no event, so only a line feed of this chunk can. A long event's carry is joined only
      // once one may have (not again for every chunk that brings more of it); a short one's at once, as a chunk that
      // ends inside an event, the usual case, costs less that way.
      if (this.carried > JOIN_AT_ONCE_BYTES && !blankLineIn(this.carry, chunk)) {
        return this.hold(chunk);
      }
      bytes = Buffer.concat([...this.carry, chunk], this.carried + chunk.length);
      this.carry = [];
      this.carried = 0;
    }
    const text = bytes.toString('latin1');
    const cut = lastEventEnd(text);
    if (cut < 0) return this.hold(bytes);
    if (cut < bytes.length) this.hold(bytes.subarray(cut));
    return this.meter(
      cut === bytes.length ? bytes : bytes.subarray(0, cut),
      cut === text.length ? text : text.slice(0, cut),
    );
  }

  end(): Buffer | null {
    if (this.carried === 0) return null;
    const rest = Buffer.concat(this.carry, this.carried);
    this.carry = [];
    this.carried = 0;
    return this.meter(rest, rest.toString('latin1'));
  }

  /** Carry `bytes`, the start of an event; past maxEventBytes the answer has overflowed. */
  private hold(bytes: Buffer): null {
    this.carried += bytes.length;
    if (this.carried > this.maxEventBytes) {
      this.overflowed = true;
      this.carry = [];
      this.carried = 0;
      return null;
    }
    this.carry.push(bytes);
    return null;
  }

  /** What to forward for a block of events (`block` is `bytes` read as latin1); null when nothing is left of it. */
  private meter(bytes: Buffer, block: string): Buffer | null {
    const edits: Edit[] = [];
    if (this.protocol === 'anthropic') this.anthropic(bytes, block, edits);
    else this.openai(bytes, block, edits);
    const out = edits.length === 0 ? bytes : applyEdits(bytes, edits);
    if (out.length === 0) return null;
    this.reading.bytesOut += out.length;
    return out;
  }

  /**
   * Anthropic: named events; everything is forwarded, usage read from message_start / message_delta (the latter
   * written again with its cost).
   */
  private anthropic(bytes: Buffer, block: string, edits: Edit[]): void {
    this.content = -1;
    let s = 0;
    while (s < block.length) {
      const e = nextEventEnd(block, s);
      const name = eventName(block, s, e);
      if (name >= 0) {
        if (named(block, name, 'content_block_delta')) this.anthropicDelta(block, s, e);
        else if (named(block, name, 'message_start')) {
          const data = parseData(bytes.toString('utf8', s, e)) as { message?: { usage?: RawUsage } } | null;
          if (data?.message?.usage) this.reading.usage = { ...data.message.usage };
        } else if (named(block, name, 'message_delta')) {
          const event = bytes.toString('utf8', s, e);
          const data = parseData(event) as { usage?: RawUsage } | null;
          // message_delta usage is cumulative; fields it carries replace message_start's.
          if (data?.usage) {
            this.reading.usage = { ...(this.reading.usage ?? {}), ...stripNulls(data.usage) };
            const priced = this.priced(event, data as { usage: RawUsage }, this.reading.usage);
            if (priced !== null) edits.push({ from: s, to: e, with: priced });
          }
        } else if (named(block, name, 'message_stop')) {
          this.reading.complete = true;
        } else if (named(block, name, 'error')) {
          const data = parseData(bytes.toString('utf8', s, e)) as { error?: { message?: string } } | null;
          this.reading.streamError = data?.error?.message ?? 'stream error';
        }
      }
      s = e;
    }
  }

  /** A content_block_delta event, block[s, e): counted unless it is a thinking block's signature. */
  private anthropicDelta(block: string, s: number, e: number): void {
    // A text delta as Anthropic writes it (the delta's type first, then its text): its text is the first
    // ANTHROPIC_DELTA of the event, found in one search.
    const text = this.opening(block, s, TEXT_DELTA);
    if (text < e && block.startsWith('"delta":', text - 8)) {
      this.counted(s, e, stringUnits(block, text + TEXT_DELTA.length));
      return;
    }
    const event = block.slice(s, e);
    // A signature_delta closes a thinking block: no tokens in it.
    if (event.includes('"signature_delta"')) return;
    ANTHROPIC_DELTA.lastIndex = 0;
    const m = ANTHROPIC_DELTA.exec(event);
    this.counted(s, e, m ? stringUnits(event, m.index + m[0].length) : 0);
  }

  /**
   * Index of the block's first `pattern` (the protocol's one) at or after `s`, its length when there is none: searched
   * for again only once the events metered have passed the one found.
   */
  private opening(block: string, s: number, pattern: string): number {
    if (this.content < s) {
      const i = block.indexOf(pattern, s);
      this.content = i < 0 ? block.length : i;
    }
    return this.content;
  }

  /** One content delta of `units` generated characters, the event block[s, e), went out. */
  private counted(s: number, e: number, units: number): void {
    this.reading.deltas++;
    this.reading.deltaBytes += e - s;
    this.reading.deltaChars += units;
  }

  /** `event` written again with `usage.cost`, the price of `usage`; null without a pricer or a price. */
  private priced(event: string, data: { usage: RawUsage }, usage: RawUsage): string | null {
    const cost = this.price?.(usage) ?? null;
    if (cost === null) return null;
    // A copy: the usage read (OpenAI's is this very object) stays as the upstream sent it.
    const shown = { ...data, usage: { ...data.usage, cost } };
    // Its other lines (event:, id:) as they came, before or after its data, which becomes one line where its first
    // data line was; the event's own line ends.
    const nl = event.endsWith('\r\n') ? '\r\n' : '\n';
    let out = '';
    let wrote = false;
    for (const line of event.split('\n')) {
      const l = line.endsWith('\r') ? line.slice(0, -1) : line;
      if (l === '') continue;
      if (!l.startsWith('data:')) out += `${l}${nl}`;
      else if (!wrote) {
        out += `data: ${JSON.stringify(shown)}${nl}`;
        wrote = true;
      }
    }
    return `${out}${nl}`;
  }

  /**
   * OpenAI: data-only events ending in [DONE]; the usage chunk is read and maybe removed. Only the events that hold a
   * usage object are parsed; the rest of the block is counted in place and forwarded as it is.
   */
  private openai(bytes: Buffer, block: string, edits: Edit[]): void {
    this.content = -1;
    let found = usageObject(block, 0);
    let start = 0;
    while (found >= 0) {
      const s = eventStart(block, found);
      const e = nextEventEnd(block, s);
      this.countOpenAI(block, start, s);
      const event = bytes.toString('utf8', s, e);
      const data = parseData(event) as { usage?: RawUsage; choices?: unknown[] } | null;
      if (data?.usage) this.reading.usage = data.usage;
      const usageOnly = Array.isArray(data?.choices) && data.choices.length === 0;
      if (usageOnly && this.dropUsageChunk) {
        edits.push({ from: s, to: e, with: '' });
      } else {
        this.countOpenAI(block, s, e);
        const priced = data?.usage ? this.priced(event, data as { usage: RawUsage }, data.usage) : null;
        if (priced !== null) edits.push({ from: s, to: e, with: priced });
      }
      start = e;
      found = usageObject(block, e);
    }
    this.countOpenAI(block, start, block.length);
  }

  private countOpenAI(block: string, from: number, to: number): void {
    let s = from;
    while (s < to) {
      const e = Math.min(nextEventEnd(block, s), to);
      if (isDone(block, s, e)) {
        this.reading.complete = true;
      } else {
        // Only deltas that carry generated text count: not the role chunk, not the finish chunk.
        const value = this.deltaValue(block, s, e);
        if (value >= 0) this.counted(s, e, stringUnits(block, value));
      }
      s = e;
    }
  }

  /**
   * Where the generated string of the OpenAI chunk block[s, e) starts (just past its opening quote), or -1 when the
   * chunk carries none: TOKEN_DELTA's first match in the chunk. The usual chunk's delta opens with its text,
   * `"delta":{"content":"…`, and what precedes it (the chunk's id, object, created, model, the choice's index) holds
   * no generated value: it is found by searching the block once for OPENING_CONTENT, not each chunk for a regex.
   */
  private deltaValue(block: string, s: number, e: number): number {
    const c = this.opening(block, s, OPENING_CONTENT);
    const value = c + OPENING_CONTENT.length;
    if (c < e && block.charCodeAt(value) !== 34 && c >= s + 8 && block.startsWith('"delta":', c - 8)) return value;
    return otherDeltaValue(block, s, e);
  }
}

/** TOKEN_DELTA's first match in the OpenAI chunk block[s, e) (deltaValue), for a chunk of another shape. */
function otherDeltaValue(block: string, s: number, e: number): number {
  const event = block.slice(s, e);
  // Compact JSON: a non-empty `"content":"` with none of TOKEN_DELTA's other keys before it is that match.
  const c = event.indexOf('"content":"');
  if (c >= 0 && event.charCodeAt(c + 11) !== 34 && !OTHER_DELTA_KEYS.some((k) => within(event, k, 0, c))) {
    return s + c + 11;
  }
  TOKEN_DELTA.lastIndex = 0;
  const m = TOKEN_DELTA.exec(event);
  // The match ends one character into the string value.
  return m ? s + m.index + m[0].length - 1 : -1;
}

/**
 * An object that opens with its `content` string, searched for from its brace: a quote, which starts a search for a
 * key, is every few bytes of a JSON text, and a search that keeps failing on it costs more than one on a brace.
 */
const OPENING_CONTENT = '{"content":"';

/**
 * Index of the first `"usage"` key at or after `from` in `block` whose value is an object (not the `null` an OpenAI
 * chunk carries before its usage chunk), or -1.
 */
function usageObject(block: string, from: number): number {
  USAGE_OBJECT.lastIndex = from;
  return USAGE_OBJECT.exec(block)?.index ?? -1;
}

const USAGE_OBJECT = /"usage"\s*:\s*\{/g;

/** A part of a block written differently: its bytes [from, to) replaced by `with`. */
interface Edit {
  from: number;
  to: number;
  with: string;
}

/** `bytes` with its edits (in order, not overlapping) applied. */
function applyEdits(bytes: Buffer, edits: Edit[]): Buffer {
  const parts: Buffer[] = [];
  let kept = 0;
  for (const edit of edits) {
    parts.push(bytes.subarray(kept, edit.from), Buffer.from(edit.with, 'utf8'));
    kept = edit.to;
  }
  parts.push(bytes.subarray(kept));
  return Buffer.concat(parts);
}

/** `key` occurs in s[from, to). */
function within(s: string, key: string, from: number, to: number): boolean {
  const i = s.indexOf(key, from);
  return i >= 0 && i < to;
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
 * The most of a JSON answer the meter keeps to read its usage, the most of one the proxy holds (proxy.ts), and the
 * most of one event of a stream SseMeter carries while it waits for the event's end: far above any text answer (a
 * text model's max_tokens of JSON is a few MB), so only a broken provider reaches it.
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

/**
 * Characters (UTF-16 code units, as JavaScript counts a string's length) of the JSON string value whose UTF-8 bytes,
 * read as latin1, start at `from` (just past its opening quote): a lead byte is one, two for a 4-byte sequence (a
 * surrogate pair); continuation bytes none; an escape one.
 */
function stringUnits(s: string, from: number): number {
  let n = 0;
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      if (c === 34) return n; // closing quote
      if (c === 92) i += s.charCodeAt(i + 1) === 117 ? 5 : 1; // \uXXXX or \x
      n++;
    } else if (c >= 0xc0) n += c >= 0xf0 ? 2 : 1;
  }
  return n;
}

/** Whether the event block[s, e) is `data: [DONE]` (an `id:` line may come first). */
function isDone(block: string, s: number, e: number): boolean {
  // A longer event is content, whatever it says.
  if (e - s > 64) return false;
  for (let i = s; i < e; ) {
    if (block.startsWith('data:', i)) {
      const v = block.charCodeAt(i + 5) === 32 ? i + 6 : i + 5;
      const after = block.charCodeAt(v + 6);
      // Its line ends there, or the answer does (a last event without its line end, at the stream's end).
      return block.startsWith('[DONE]', v) && (after === 10 || after === 13 || v + 6 >= e);
    }
    const lf = block.indexOf('\n', i);
    if (lf < 0 || lf >= e) return false;
    i = lf + 1;
  }
  return false;
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

/** The most an event's carry holds before SseMeter looks for the event's end in a chunk before joining it. */
const JOIN_AT_ONCE_BYTES = 64 * 1024;

/**
 * Whether `chunk` holds a line feed that ends a blank line, the bytes before it read on into `carry` (the chunks
 * before it, however short: a CRLF cut after its CR, chunk after chunk, must not join the carry each time); true as
 * well before the carry's first byte (lastEventEnd then decides).
 */
function blankLineIn(carry: readonly Buffer[], chunk: Buffer): boolean {
  const at = (i: number) => (i >= 0 ? chunk[i] : carriedByte(carry, i));
  for (let lf = chunk.indexOf(10); lf >= 0; lf = chunk.indexOf(10, lf + 1)) {
    const prev = at(lf - 1);
    if (prev === 10 || prev === undefined) return true;
    if (prev === 13) {
      const first = at(lf - 2);
      if (first === 10 || first === undefined) return true;
    }
  }
  return false;
}

/** The byte `i` (negative: -1 is the last) from the end of the chunks of `carry`, or undefined before the first. */
function carriedByte(carry: readonly Buffer[], i: number): number | undefined {
  for (let k = carry.length - 1; k >= 0; k--) {
    const c = carry[k]!;
    if (-i <= c.length) return c[c.length + i];
    i += c.length;
  }
  return undefined;
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

/** Index of the name of the event block[s, e) (its `event:` line's value), or -1 when it has none. */
function eventName(block: string, s: number, e: number): number {
  // Line by line within the event: a search of the block for `event:` would run on through the events after one
  // that has none.
  for (let i = s; i < e; ) {
    if (block.startsWith('event:', i)) return skipSpace(block, i + 6);
    const lf = block.indexOf('\n', i);
    if (lf < 0) return -1;
    i = lf + 1;
  }
  return -1;
}

/** The event name at `at` is `name`. */
function named(block: string, at: number, name: string): boolean {
  if (!block.startsWith(name, at)) return false;
  const c = block.charCodeAt(at + name.length);
  return c === 10 || c === 13;
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
