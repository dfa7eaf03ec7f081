/**
 * The project's Lua scripts, each run as one RESP command encoded straight into one Buffer.
 *
 * ioredis's defineCommand builds every command as a chain of string concatenations (about 100 short-lived string
 * pieces for a hold of 25 arguments) plus a closure per run, the largest source of garbage on the call path. Here
 * the keys (under the connection's prefix) and
 * arguments become one string of RESP bulk strings, written once into a Buffer.
 *
 * As ioredis does: EVALSHA, except the first time a script goes out on a socket (EVAL with the source, which loads
 * it, so the EVALSHAs queued behind it find it); a NOSCRIPT reply (Redis restarted, SCRIPT FLUSH) marks the socket
 * as not loaded and the command is sent once more, as EVAL. Commands are still ioredis Commands: the offline
 * queue, replies, and resending after a reconnect (a new socket, so EVAL again) are ioredis's.
 */
import { createHash } from 'node:crypto';
import { Command, type Redis } from 'ioredis';

/** Decimal digits of a non-negative integer. */
function digits(n: number): number {
  let d = 1;
  while (n >= 10) {
    n = Math.floor(n / 10);
    d++;
  }
  return d;
}

/** Write the decimal digits of `n` (a non-negative integer) at `off`; returns the offset after them. */
function writeDecimal(buf: Buffer, off: number, n: number): number {
  const end = off + digits(n);
  for (let i = end - 1; i >= off; i--) {
    buf[i] = 48 + (n % 10);
    n = Math.floor(n / 10);
  }
  return end;
}

/** Write `<marker><n>\r\n` (`*` array length, `$` bulk length); returns the offset after it. */
function writeHeader(buf: Buffer, off: number, marker: number, n: number): number {
  buf[off] = marker;
  return crlf(buf, writeDecimal(buf, off + 1, n));
}

/** Write `\r\n` at `off`. */
function crlf(buf: Buffer, off: number): number {
  buf[off] = 13;
  buf[off + 1] = 10;
  return off + 2;
}

/** Write `s` (`len` UTF-8 bytes) at `off`; returns the offset after it. */
function writeString(buf: Buffer, off: number, s: string, len: number): number {
  return off + buf.write(s, off, len, 'utf8');
}

/** Bytes of a bulk string of `len` bytes: `$<len>\r\n<bytes>\r\n`. */
function bulkSize(len: number): number {
  return 1 + digits(len) + 2 + len + 2;
}

/** A Lua script, run with keys and arguments on any connection. */
export class LuaScript {
  readonly sha: string;
  /** `$7\r\nevalsha\r\n$40\r\n<sha>\r\n` and `$4\r\neval\r\n$<n>\r\n<source>\r\n`. */
  private readonly evalshaHead: Buffer;
  private readonly evalHead: Buffer;
  /** Sockets this script went out on (as EVAL): Redis has it there. */
  private readonly loaded = new WeakSet<object>();

  constructor(readonly lua: string) {
    this.sha = createHash('sha1').update(lua).digest('hex');
    this.evalshaHead = Buffer.from(`$7\r\nevalsha\r\n$40\r\n${this.sha}\r\n`, 'latin1');
    this.evalHead = Buffer.from(`$4\r\neval\r\n$${Buffer.byteLength(lua)}\r\n${lua}\r\n`, 'utf8');
  }

  /** Run the script: `keys` under the connection's keyPrefix, then `args` (numbers as decimal strings). */
  run<T>(redis: Redis, keys: readonly string[], args: readonly (string | number)[]): Promise<T> {
    const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
    const first = new ScriptCommand(this, prefix, keys, args);
    redis.sendCommand(first);
    return (first.promise as Promise<T>).catch((err: Error) => {
      if (!String(err?.message).includes('NOSCRIPT')) throw err;
      if (first.socket) this.loaded.delete(first.socket);
      const again = new ScriptCommand(this, prefix, keys, args);
      redis.sendCommand(again);
      return again.promise as Promise<T>;
    });
  }

  /** The whole command as it goes out on `socket`. */
  encode(socket: object, prefix: string, keys: readonly string[], args: readonly (string | number)[]): Buffer {
    let head = this.evalshaHead;
    if (!this.loaded.has(socket)) {
      this.loaded.add(socket);
      head = this.evalHead;
    }
    const count = 3 + keys.length + args.length;
    // Keys and arguments are nearly always ASCII: then a string's length is its size, and the bulk strings are
    // built as one JS string written in one call (each Buffer write or byteLength is a call into C++, and ~25 of
    // them per run cost more than the rest of the encoding). One byteLength of the whole tells whether it holds.
    let text = `$${digits(keys.length)}\r\n${keys.length}\r\n`;
    for (let i = 0; i < keys.length; i++) text += `$${prefix.length + keys[i]!.length}\r\n${prefix}${keys[i]}\r\n`;
    for (let i = 0; i < args.length; i++) {
      const a = args[i]!;
      const v = typeof a === 'string' ? a : String(a);
      text += `$${v.length}\r\n${v}\r\n`;
    }
    const textBytes = Buffer.byteLength(text, 'utf8');
    if (textBytes !== text.length) return this.encodeUtf8(head, count, prefix, keys, args);
    // A slice of Node's shared pool, cheaper than a buffer of its own: the command is written to the socket in the
    // same tick, so a slice keeps its pool alive no longer than the queues hold the command.
    const buf = Buffer.allocUnsafe(1 + digits(count) + 2 + head.length + textBytes);
    let off = writeHeader(buf, 0, 0x2a, count);
    off += head.copy(buf, off);
    buf.write(text, off, textBytes, 'latin1');
    return buf;
  }

  /** encode() where a key or argument is not ASCII: sizes in UTF-8 bytes, string by string. */
  private encodeUtf8(
    head: Buffer,
    count: number,
    prefix: string,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Buffer {
    const prefixBytes = Buffer.byteLength(prefix);
    const keyLens = new Array<number>(keys.length);
    const argStrs = new Array<string>(args.length);
    const argLens = new Array<number>(args.length);
    let size = 1 + digits(count) + 2 + head.length + bulkSize(digits(keys.length));
    for (let i = 0; i < keys.length; i++) {
      keyLens[i] = prefixBytes + Buffer.byteLength(keys[i]!);
      size += bulkSize(keyLens[i]!);
    }
    for (let i = 0; i < args.length; i++) {
      const a = args[i]!;
      argStrs[i] = typeof a === 'string' ? a : String(a);
      argLens[i] = Buffer.byteLength(argStrs[i]!);
      size += bulkSize(argLens[i]!);
    }
    const buf = Buffer.allocUnsafeSlow(size);
    let off = writeHeader(buf, 0, 0x2a, count);
    off += head.copy(buf, off);
    off = writeHeader(buf, off, 0x24, digits(keys.length));
    off = writeDecimal(buf, off, keys.length);
    off = crlf(buf, off);
    for (let i = 0; i < keys.length; i++) {
      off = writeHeader(buf, off, 0x24, keyLens[i]!);
      off = writeString(buf, off, prefix, prefixBytes);
      off = writeString(buf, off, keys[i]!, keyLens[i]! - prefixBytes);
      off = crlf(buf, off);
    }
    for (let i = 0; i < args.length; i++) {
      off = writeHeader(buf, off, 0x24, argLens[i]!);
      off = writeString(buf, off, argStrs[i]!, argLens[i]!);
      off = crlf(buf, off);
    }
    return buf;
  }
}

/** One run of a script: encoded when ioredis writes it, for the socket it writes it to. */
class ScriptCommand extends Command {
  /** The socket the command last went out on. */
  socket: object | undefined;

  constructor(
    private readonly script: LuaScript,
    private readonly prefix: string,
    private readonly scriptKeys: readonly string[],
    private readonly scriptArgs: readonly (string | number)[],
  ) {
    super('evalsha', [], { replyEncoding: 'utf8' });
  }

  override toWritable(socket: object): Buffer {
    this.socket = socket;
    return this.script.encode(socket, this.prefix, this.scriptKeys, this.scriptArgs);
  }
}
