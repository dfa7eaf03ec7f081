/**
 * An incremental JSON scanner for large answers (image answers carry megabytes of base64 in one string): it walks
 * the structure as chunks arrive, never building the document. At the start of each value it asks its handler
 * what to do with it: `stream` a string's content out in pieces (slices of the input where the string has no escape),
 * `capture` a small value (a string's content, or the JSON text of anything else, up to a bound), or `skip` it.
 * Long strings are crossed with Buffer.indexOf, not byte by byte.
 */
import { StringDecoder } from 'node:string_decoder';

/** Where a value sits: object keys and array indices from the root. */
export type JsonPath = readonly (string | number)[];

/** What the scanner does with one value. */
export type Take = 'stream' | 'capture' | 'skip';

/** The kind of a value, known from its first character. */
export type ValueKind = 'string' | 'object' | 'array' | 'primitive';

/** What a scan reports to. */
export interface ScanHandler {
  /** What to do with the value that starts at `path`; values inside a captured one are not asked about. */
  take(path: JsonPath, kind: ValueKind): Take;
  /** A piece of a streamed string's content, escapes resolved. */
  piece?(piece: Buffer): void;
  /** The streamed string ended. */
  stringEnd?(): void;
  /** A captured value: a string's content, or another value's JSON text; `whole` is false when cut at the bound. */
  captured?(path: JsonPath, value: string, whole: boolean): void;
}

const enum S {
  Value,
  ArrayFirst,
  ObjectFirst,
  ObjectKey,
  Colon,
  After,
  String,
  Primitive,
  Done,
  Error,
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

const ESCAPES: Record<number, string> = {
  0x22: '"',
  0x5c: '\\',
  0x2f: '/',
  0x62: '\b',
  0x66: '\f',
  0x6e: '\n',
  0x72: '\r',
  0x74: '\t',
};

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function endsPrimitive(c: number): boolean {
  return c === 0x2c || c === 0x7d || c === 0x5d || isSpace(c);
}

interface Frame {
  readonly array: boolean;
  key: string | number;
}

/** Scans one JSON document fed in chunks. */
export class JsonScanner {
  private state = S.Value;
  private readonly stack: Frame[] = [];
  /** The string being read: an object key, or a value and what is done with it. */
  private strKey = false;
  private strTake: Take = 'skip';
  private strText = '';
  private strCut = false;
  private strPath: JsonPath = [];
  private readonly decoder = new StringDecoder('utf8');
  /** An escape cut by a chunk's end (the backslash and what followed it). */
  private escape = '';
  /** Raw capture of a non-string value: its depth, path, the text so far, where it starts in the current chunk. */
  private capDepth = -1;
  private capPath: JsonPath = [];
  private capText = '';
  private capFrom = 0;
  private capCut = false;
  /** Positions of the next quote and backslash in the current chunk (-2: not looked for yet). */
  private nextQuote = -2;
  private nextBackslash = -2;
  /** Why the document is not JSON, once it is not. */
  error: string | null = null;

  constructor(
    private readonly handler: ScanHandler,
    /** Longest captured value kept, in characters. */
    private readonly maxCapture = 64 * 1024,
  ) {}

  /** Whether one whole JSON value has been read. */
  get complete(): boolean {
    return this.state === S.Done;
  }

  /** Scan the next chunk of the document. */
  write(chunk: Buffer): void {
    this.nextQuote = -2;
    this.nextBackslash = -2;
    this.capFrom = 0;
    const n = chunk.length;
    let i = 0;
    while (i < n) {
      const state = this.state;
      if (state === S.String) {
        i = this.readString(chunk, i);
        continue;
      }
      if (state === S.Primitive) {
        let j = i;
        while (j < n && !endsPrimitive(chunk[j]!)) j++;
        if (j === n) {
          i = n;
          break;
        }
        this.valueDone(chunk, j);
        i = j;
        continue;
      }
      const c = chunk[i]!;
      if (isSpace(c)) {
        i++;
        continue;
      }
      if (state === S.Error) return;
      i = this.structural(chunk, c, i);
    }
    if (this.capDepth >= 0) this.capAppend(chunk, n);
  }

  /** The document ended: true when it was one whole JSON value. */
  end(): boolean {
    if (this.state === S.Primitive && this.stack.length === 0) {
      // A bare primitive at the top ends with the document.
      this.state = S.Done;
    }
    return this.state === S.Done;
  }

  private fail(why: string): number {
    this.state = S.Error;
    this.error ??= why;
    return Number.MAX_SAFE_INTEGER;
  }

  private path(): JsonPath {
    return this.stack.map((f) => f.key);
  }

  /** One structural character at `i`; returns where to go on. */
  private structural(chunk: Buffer, c: number, i: number): number {
    switch (this.state) {
      case S.Done:
        return this.fail('text after the JSON value');
      case S.Colon:
        if (c !== 0x3a) return this.fail('expected ":"');
        this.state = S.Value;
        return i + 1;
      case S.ObjectFirst:
      case S.ObjectKey:
        if (c === 0x7d && this.state === S.ObjectFirst) return this.close(chunk, i, false);
        if (c !== QUOTE) return this.fail('expected a key');
        this.beginString(true, 'skip');
        return i + 1;
      case S.After: {
        const top = this.stack[this.stack.length - 1];
        if (top === undefined) return this.fail('text after the JSON value');
        if (c === 0x2c) {
          if (top.array) {
            (top.key as number)++;
            this.state = S.Value;
          } else {
            this.state = S.ObjectKey;
          }
          return i + 1;
        }
        if (c === 0x7d || c === 0x5d) return this.close(chunk, i, c === 0x5d);
        return this.fail('expected "," or the end of a container');
      }
      case S.ArrayFirst:
        if (c === 0x5d) return this.close(chunk, i, true);
        this.state = S.Value;
        return this.startValue(c, i);
      default:
        return this.startValue(c, i);
    }
  }

  private startValue(c: number, i: number): number {
    const kind: ValueKind = c === 0x7b ? 'object' : c === 0x5b ? 'array' : c === QUOTE ? 'string' : 'primitive';
    const path = this.capDepth >= 0 ? null : this.path();
    const take = path === null ? 'skip' : this.handler.take(path, kind);
    if (kind === 'string') {
      this.beginString(false, take);
      if (path !== null) this.strPath = path;
      return i + 1;
    }
    if (take === 'capture' && path !== null) {
      this.capDepth = this.stack.length;
      this.capPath = path;
      this.capText = '';
      this.capCut = false;
      this.capFrom = i;
    }
    if (kind === 'primitive') {
      this.state = S.Primitive;
      return i;
    }
    this.stack.push({ array: kind === 'array', key: kind === 'array' ? 0 : '' });
    this.state = kind === 'array' ? S.ArrayFirst : S.ObjectFirst;
    return i + 1;
  }

  private close(chunk: Buffer, i: number, array: boolean): number {
    const top = this.stack.pop();
    if (top === undefined || top.array !== array) return this.fail('mismatched bracket');
    this.valueDone(chunk, i + 1);
    return i + 1;
  }

  /** A value ended just before `end` (an index of the current chunk). */
  private valueDone(chunk: Buffer, end: number): void {
    if (this.capDepth === this.stack.length) {
      this.capAppend(chunk, end);
      this.capDepth = -1;
      this.handler.captured?.(this.capPath, this.capText, !this.capCut);
      this.capText = '';
    }
    this.state = this.stack.length === 0 ? S.Done : S.After;
  }

  private capAppend(chunk: Buffer, end: number): void {
    if (this.capCut || end <= this.capFrom) return;
    const room = this.maxCapture - this.capText.length;
    const text = chunk.toString('utf8', this.capFrom, Math.min(end, this.capFrom + room));
    this.capText += text;
    if (end - this.capFrom > room) this.capCut = true;
  }

  private beginString(key: boolean, take: Take): void {
    this.state = S.String;
    this.strKey = key;
    this.strTake = key ? 'capture' : take;
    this.strText = '';
    this.strCut = false;
  }

  /** Content of the string between `from` and `to` (no escapes in it). */
  private content(chunk: Buffer, from: number, to: number): void {
    if (to <= from) return;
    if (this.strTake === 'stream') {
      this.handler.piece?.(chunk.subarray(from, to));
    } else if (this.strTake === 'capture') {
      this.addText(this.decoder.write(chunk.subarray(from, to)));
    }
  }

  private addText(text: string): void {
    if (this.strCut) return;
    const room = this.maxCapture - this.strText.length;
    if (text.length > room) {
      this.strText += text.slice(0, room);
      this.strCut = true;
    } else {
      this.strText += text;
    }
  }

  /** An escape's text: what it stands for. */
  private escaped(seq: string): string | null {
    if (seq.length < 2) return null;
    const c = seq.charCodeAt(1);
    if (c !== 0x75) return ESCAPES[c] ?? '';
    if (seq.length < 6) return null;
    const code = Number.parseInt(seq.slice(2, 6), 16);
    return Number.isNaN(code) ? '' : String.fromCharCode(code);
  }

  private emitEscape(text: string): void {
    if (this.strTake === 'stream') this.handler.piece?.(Buffer.from(text, 'utf8'));
    else if (this.strTake === 'capture') this.addText(this.decoder.end() + text);
  }

  /** Read string content from `i`; returns where to go on. */
  private readString(chunk: Buffer, i: number): number {
    const n = chunk.length;
    if (this.escape !== '') {
      // Complete an escape cut by the previous chunk's end.
      while (i < n) {
        this.escape += String.fromCharCode(chunk[i++]!);
        const text = this.escaped(this.escape);
        if (text !== null) {
          this.emitEscape(text);
          this.escape = '';
          break;
        }
      }
      if (this.escape !== '') return n;
    }
    for (;;) {
      if (this.nextQuote !== -1 && this.nextQuote < i) this.nextQuote = chunk.indexOf(QUOTE, i);
      if (this.nextBackslash !== -1 && this.nextBackslash < i) this.nextBackslash = chunk.indexOf(BACKSLASH, i);
      const q = this.nextQuote;
      const b = this.nextBackslash;
      if (b !== -1 && (q === -1 || b < q)) {
        this.content(chunk, i, b);
        // An escape: \x, or \uXXXX.
        const len = chunk[b + 1] === 0x75 ? 6 : 2;
        if (b + len > n) {
          this.escape = chunk.toString('latin1', b, n);
          return n;
        }
        const text = this.escaped(chunk.toString('latin1', b, b + len));
        this.emitEscape(text ?? '');
        i = b + len;
        continue;
      }
      if (q === -1) {
        this.content(chunk, i, n);
        return n;
      }
      this.content(chunk, i, q);
      this.stringDone(chunk, q);
      return q + 1;
    }
  }

  private stringDone(chunk: Buffer, quote: number): void {
    if (this.strKey) {
      this.addText(this.decoder.end());
      this.stack[this.stack.length - 1]!.key = this.strText;
      this.strText = '';
      this.state = S.Colon;
      return;
    }
    if (this.strTake === 'stream') {
      this.handler.stringEnd?.();
    } else if (this.strTake === 'capture') {
      this.addText(this.decoder.end());
      this.handler.captured?.(this.strPath, this.strText, !this.strCut);
      this.strText = '';
    }
    this.valueDone(chunk, quote + 1);
  }
}
