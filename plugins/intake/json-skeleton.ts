/**
 * A JSON body parsed for a route that forwards some of its top-level members as the caller's bytes (routes/text.ts:
 * a text call's `messages` and `system`, nearly all of an agent's megabyte). Every other member is parsed exactly, by
 * JSON.parse. A forwarded member is parsed into its skeleton: its arrays, objects, keys, numbers, literals and
 * strings as JSON.parse would give them, except each string of more than SHORT_STRING bytes as written, which is a
 * stand-in: its bytes as written read as latin1 (escapes and UTF-8 not decoded), a slice of the body's text that
 * copies nothing. Strings under a key in EXACT_KEYS are always exact.
 *
 * What reads a skeleton reads only what a stand-in keeps true of its string: it is a string, it is not empty, and it
 * equals no string of SHORT_STRING / 6 characters or fewer (a character is at most 6 bytes as written: `\u0069`). The
 * schemas (policies/schemas.ts) check types and roles; the body's walk (policies/text-bounds.ts bodyFacts) reads keys,
 * short values and the strings under `url` and `data`. Nothing serializes a skeleton: the caller's bytes go upstream.
 *
 * One pass over the text, which is the bytes read as latin1 so that its indexes are the bytes' indexes (a quote or
 * a backslash is never part of a UTF-8 sequence); a string is crossed by searching for its closing quote. The
 * grammar is checked everywhere except inside a stand-in, whose escapes and control characters reach the provider as
 * the caller wrote them; the provider refuses what is not JSON, and a refused call is free.
 */

/**
 * Deepest nesting of arrays and objects a JSON body may have: far above what a request needs (tool schemas nest a
 * dozen levels), far below what a recursive step of the call path (schema checks, rewrite, serialization) could
 * not follow.
 */
export const MAX_JSON_DEPTH = 128;

/** Longest string, in bytes as written, that a skeleton keeps exactly. */
export const SHORT_STRING = 128;

/** Keys whose string values a skeleton keeps exactly at any length: media the bounds read (inline images). */
const EXACT_KEYS: ReadonlySet<string> = new Set(['url', 'data']);

/** One member of a body's top-level object: `"key": value` is text.slice(start, end). */
export interface JsonMember {
  /** The key as written between its quotes (escapes not decoded). */
  readonly key: string;
  /** Index of the key's opening quote. */
  readonly start: number;
  /** Index just past the value (before the comma or brace that follows, whitespace included). */
  readonly end: number;
}

/** Index of the quote that closes the string opened at `open`, or -1 when it is never closed. */
export function closingQuote(text: string, open: number): number {
  let j = open;
  for (;;) {
    j = text.indexOf('"', j + 1);
    if (j < 0) return -1;
    if (text.charCodeAt(j - 1) !== 0x5c) return j;
    // A quote after an odd run of backslashes is escaped.
    let k = j - 2;
    while (text.charCodeAt(k) === 0x5c) k--;
    if ((j - 1 - k) % 2 === 0) return j;
  }
}

/** A body that nests deeper than MAX_JSON_DEPTH. */
export class TooDeep extends Error {}

/**
 * The body's top-level object, with the members named in `skeletal` as skeletons, and its members; null when the
 * body is not an object or a top-level key is written with an escape (the caller then parses it whole). Throws
 * SyntaxError for text that is not JSON, TooDeep past MAX_JSON_DEPTH.
 */
export function parseSkeleton(
  bytes: Buffer,
  text: string,
  ascii: boolean,
  skeletal: ReadonlySet<string>,
): { value: Record<string, unknown>; members: JsonMember[] } | null {
  const p = new Parser(bytes, text, ascii);
  let i = p.ws(0);
  if (text.charCodeAt(i) !== 0x7b) return null;
  const value: Record<string, unknown> = {};
  const members: JsonMember[] = [];
  i = p.ws(i + 1);
  if (text.charCodeAt(i) === 0x7d) {
    p.end(i + 1);
    return { value, members };
  }
  for (;;) {
    if (text.charCodeAt(i) !== 0x22) throw p.error(i);
    const close = p.closeOf(i);
    if (p.escapedBefore(i, close)) return null;
    const key = p.plain(i + 1, close);
    const start = i;
    i = p.ws(close + 1);
    if (text.charCodeAt(i) !== 0x3a) throw p.error(i);
    const from = p.ws(i + 1);
    let v: unknown;
    if (skeletal.has(key)) {
      v = p.value(from, 1, key);
      i = p.pos;
    } else {
      i = p.skip(from, 1);
      v = p.exact(from, i);
    }
    i = p.ws(i);
    define(value, key, v);
    members.push({ key, start, end: i });
    const c = text.charCodeAt(i);
    if (c === 0x2c) {
      i = p.ws(i + 1);
      continue;
    }
    if (c !== 0x7d) throw p.error(i);
    p.end(i + 1);
    return { value, members };
  }
}

/** Set `key` as JSON.parse does: an own data property, `__proto__` included. */
function define(o: Record<string, unknown>, key: string, v: unknown): void {
  if (key === '__proto__')
    Object.defineProperty(o, key, { value: v, writable: true, enumerable: true, configurable: true });
  else o[key] = v;
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

class Parser {
  /** Index just past the last value `value` read. */
  pos = 0;
  /**
   * Index of the first backslash at or after where it was last searched from (the text's length when there is none):
   * strings are met in order, so it is searched for again only once a string opens past it.
   */
  private bs = -1;

  constructor(
    private readonly bytes: Buffer,
    private readonly text: string,
    private readonly ascii: boolean,
  ) {}

  error(at: number): SyntaxError {
    return new SyntaxError(
      at >= this.text.length ? 'Unexpected end of JSON input' : `Unexpected character in JSON at position ${at}`,
    );
  }

  /** Index of the first character at or after `i` that is not JSON whitespace. */
  ws(i: number): number {
    const t = this.text;
    for (;;) {
      const c = t.charCodeAt(i);
      if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
      i++;
    }
  }

  /** Only whitespace from `i` to the end. */
  end(i: number): void {
    const j = this.ws(i);
    if (j < this.text.length) throw this.error(j);
  }

  /** Index of the quote closing the string opened at `open`. */
  closeOf(open: number): number {
    const j = closingQuote(this.text, open);
    if (j < 0) throw this.error(this.text.length);
    return j;
  }

  /** Some backslash lies between `open` and `close`. */
  escapedBefore(open: number, close: number): boolean {
    if (this.bs < open) {
      const b = this.text.indexOf('\\', open);
      this.bs = b < 0 ? this.text.length : b;
    }
    return this.bs < close;
  }

  /** The exact value of the string whose characters as written are text[from, to) and hold no backslash. */
  plain(from: number, to: number): string {
    const t = this.text;
    let high = false;
    for (let k = from; k < to; k++) {
      const c = t.charCodeAt(k);
      if (c < 0x20) throw this.error(k);
      if (c > 0x7f) high = true;
    }
    return high ? this.bytes.toString('utf8', from, to) : t.slice(from, to);
  }

  /** The exact value of the JSON text in bytes [from, to). */
  exact(from: number, to: number): unknown {
    return JSON.parse(this.ascii ? this.text.slice(from, to) : this.bytes.toString('utf8', from, to));
  }

  /** The string opened at `open` (its closing quote at `close`): exact, or a stand-in when long (see the file). */
  string(open: number, close: number, key: string | undefined): string {
    if (close - open - 1 > SHORT_STRING) {
      if (key === undefined || !EXACT_KEYS.has(key)) return this.text.slice(open + 1, close);
      // A long exact string (an inline image, megabytes of base64): JSON.parse's native pass, not a loop here.
      return this.exact(open, close + 1) as string;
    }
    if (this.escapedBefore(open, close)) return this.exact(open, close + 1) as string;
    return this.plain(open + 1, close);
  }

  /** The skeleton of the value at `i` (whitespace skipped), at nesting `depth`; `pos` is left just past it. */
  value(i: number, depth: number, key: string | undefined): unknown {
    const t = this.text;
    const c = t.charCodeAt(i);
    if (c === 0x22) {
      const close = this.closeOf(i);
      this.pos = close + 1;
      return this.string(i, close, key);
    }
    if (c === 0x7b) {
      if (depth + 1 > MAX_JSON_DEPTH) throw new TooDeep();
      const o: Record<string, unknown> = {};
      i = this.ws(i + 1);
      if (t.charCodeAt(i) === 0x7d) {
        this.pos = i + 1;
        return o;
      }
      for (;;) {
        if (t.charCodeAt(i) !== 0x22) throw this.error(i);
        const close = this.closeOf(i);
        const k = this.escapedBefore(i, close) ? (this.exact(i, close + 1) as string) : this.plain(i + 1, close);
        i = this.ws(close + 1);
        if (t.charCodeAt(i) !== 0x3a) throw this.error(i);
        define(o, k, this.value(this.ws(i + 1), depth + 1, k));
        i = this.ws(this.pos);
        const d = t.charCodeAt(i);
        if (d === 0x2c) {
          i = this.ws(i + 1);
          continue;
        }
        if (d !== 0x7d) throw this.error(i);
        this.pos = i + 1;
        return o;
      }
    }
    if (c === 0x5b) {
      if (depth + 1 > MAX_JSON_DEPTH) throw new TooDeep();
      const a: unknown[] = [];
      i = this.ws(i + 1);
      if (t.charCodeAt(i) === 0x5d) {
        this.pos = i + 1;
        return a;
      }
      for (;;) {
        a.push(this.value(i, depth + 1, undefined));
        i = this.ws(this.pos);
        const d = t.charCodeAt(i);
        if (d === 0x2c) {
          i = this.ws(i + 1);
          continue;
        }
        if (d !== 0x5d) throw this.error(i);
        this.pos = i + 1;
        return a;
      }
    }
    return this.scalar(i);
  }

  /** A number, true, false or null at `i`; `pos` is left just past it. */
  private scalar(i: number): unknown {
    const t = this.text;
    if (t.startsWith('true', i)) {
      this.pos = i + 4;
      return true;
    }
    if (t.startsWith('false', i)) {
      this.pos = i + 5;
      return false;
    }
    if (t.startsWith('null', i)) {
      this.pos = i + 4;
      return null;
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(t);
    if (m === null) throw this.error(i);
    this.pos = i + m[0].length;
    return Number(m[0]);
  }

  /**
   * Index just past the value at `i` (at nesting `depth`), its nesting checked; its grammar is JSON.parse's to check
   * (exact) once its end is found.
   */
  skip(i: number, depth: number): number {
    const t = this.text;
    const n = t.length;
    let d = depth;
    for (;;) {
      if (i >= n) throw this.error(n);
      const c = t.charCodeAt(i);
      if (c === 0x22) i = this.closeOf(i) + 1;
      else if (c === 0x7b || c === 0x5b) {
        if (++d > MAX_JSON_DEPTH) throw new TooDeep();
        i++;
      } else if (c === 0x7d || c === 0x5d) {
        if (d === depth) return i;
        d--;
        i++;
      } else if (d === depth && c === 0x2c) return i;
      else i++;
      if (d === depth && (c === 0x7d || c === 0x5d || c === 0x22)) return i;
    }
  }
}
