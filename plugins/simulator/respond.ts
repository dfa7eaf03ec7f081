/**
 * Writing responses on the raw socket with the fault directives applied: one write per body or
 * SSE event (DESIGN.md "Hot path": socket writes dominate), no timers unless a delay is asked;
 * files (video downloads) with byte ranges.
 */
import { createReadStream } from 'node:fs';
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SimDirectives } from './directives.js';

const SSE_HEADERS: OutgoingHttpHeaders = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
};

/** A stream: events before the content, content chunks (counted by hangup_after), events after. */
export interface StreamPlan {
  head: string[];
  chunks: string[];
  tail: string[];
}

/** Destroys the socket once what was written has reached the kernel, so the client gets it first. */
function hangUp(raw: ServerResponse): void {
  const socket = raw.socket;
  if (socket === null || socket.destroyed) return;
  socket.write('', () => socket.destroy());
}

function drained(raw: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => () => {
      raw.off('drain', onDrain);
      raw.off('close', onClose);
      resolve(ok);
    };
    const onDrain = done(true);
    const onClose = done(false);
    raw.once('drain', onDrain);
    raw.once('close', onClose);
  });
}

/** Slices of a JSON body sent `#sim:chunk_delay_ms` apart (bytes). */
const JSON_SLICE = 16 * 1024;

/**
 * Sends a whole JSON body in one write; `hangup` destroys the socket instead of sending it; `gapMs` (chunk_delay_ms)
 * sends it in 16 KiB slices that far apart, as a body that trickles in.
 */
export async function sendJson(
  raw: ServerResponse,
  status: number,
  headers: OutgoingHttpHeaders,
  body: string,
  hangup = false,
  gapMs = 0,
): Promise<void> {
  if (hangup) {
    raw.destroy();
    return;
  }
  headers['content-type'] = 'application/json';
  const bytes = Buffer.from(body);
  headers['content-length'] = bytes.length;
  raw.writeHead(status, headers);
  if (gapMs <= 0) {
    raw.end(bytes);
    return;
  }
  for (let at = 0; at < bytes.length; at += JSON_SLICE) {
    if (at > 0) await sleep(gapMs);
    if (raw.destroyed) return;
    raw.write(bytes.subarray(at, at + JSON_SLICE));
  }
  raw.end();
}

/** Streams `plan` as SSE, honouring hangup_after and chunk_delay_ms. */
export async function sendStream(
  raw: ServerResponse,
  headers: OutgoingHttpHeaders,
  plan: StreamPlan,
  d: SimDirectives,
): Promise<void> {
  raw.writeHead(200, { ...SSE_HEADERS, ...headers });
  for (const e of plan.head) raw.write(e);
  const { chunks } = plan;
  // hangup_after beyond the content still drops the connection before the closing events.
  const hang = d.hangupAfter === undefined ? -1 : Math.min(d.hangupAfter, chunks.length);
  const gap = d.chunkDelayMs ?? 0;
  for (let i = 0; i < chunks.length; i++) {
    if (i === hang) return hangUp(raw);
    if (gap > 0 && i > 0) await sleep(gap);
    if (raw.destroyed) return;
    if (!raw.write(chunks[i]) && !(await drained(raw))) return;
  }
  if (hang === chunks.length) return hangUp(raw);
  if (raw.destroyed) return;
  for (const e of plan.tail) raw.write(e);
  raw.end();
}

/**
 * Sends a whole body in one write; `hangupAfter` (bytes) writes only that much of it after the full
 * headers, then destroys the socket, so the client sees a body cut short of its content-length.
 */
export function sendBody(
  raw: ServerResponse,
  status: number,
  headers: OutgoingHttpHeaders,
  body: Buffer | string,
  hangupAfter?: number,
): void {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  headers['content-length'] = bytes.length;
  raw.writeHead(status, headers);
  if (hangupAfter === undefined) {
    raw.end(bytes);
    return;
  }
  raw.write(bytes.subarray(0, hangupAfter));
  hangUp(raw);
}

/** An inclusive byte range of a resource. */
export interface ByteRange {
  start: number;
  end: number;
}

/**
 * The one range a `Range` header asks of a resource of `size` bytes (RFC 9110 14.1.2): undefined when
 * the whole resource is to be sent (no header, another unit, several ranges), 'unsatisfiable' for 416.
 */
export function parseRange(header: string | undefined, size: number): ByteRange | 'unsatisfiable' | undefined {
  if (header === undefined) return undefined;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (m === null) return undefined;
  const [, first, last] = m;
  if (first === '' && last === '') return undefined;
  if (first === '') {
    // bytes=-N: the last N bytes.
    const n = Number(last);
    if (n === 0 || size === 0) return 'unsatisfiable';
    return { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(first);
  const end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
  if (start >= size || end < start) return 'unsatisfiable';
  return { start, end };
}

/**
 * Sends a file with byte-range support: 200 with `accept-ranges: bytes`, 206 with `content-range` for a
 * satisfiable Range, 416 otherwise. `hangupAfter` (bytes) cuts the body short and destroys the socket.
 */
export function sendFile(
  raw: ServerResponse,
  file: { path: string; size: number; type: string },
  rangeHeader: string | undefined,
  headers: OutgoingHttpHeaders,
  hangupAfter?: number,
): void {
  const range = parseRange(rangeHeader, file.size);
  headers['accept-ranges'] = 'bytes';
  if (range === 'unsatisfiable') {
    headers['content-range'] = `bytes */${file.size}`;
    headers['content-length'] = 0;
    raw.writeHead(416, headers);
    raw.end();
    return;
  }
  const { start, end } = range ?? { start: 0, end: file.size - 1 };
  headers['content-type'] = file.type;
  headers['content-length'] = end - start + 1;
  if (range !== undefined) headers['content-range'] = `bytes ${start}-${end}/${file.size}`;
  raw.writeHead(range === undefined ? 200 : 206, headers);
  const last = hangupAfter === undefined ? end : Math.min(end, start + hangupAfter - 1);
  if (raw.req.method === 'HEAD' || last < start) {
    if (hangupAfter === undefined) raw.end();
    else hangUp(raw);
    return;
  }
  const stream = createReadStream(file.path, { start, end: last });
  stream.on('error', () => raw.destroy());
  raw.on('close', () => stream.destroy());
  // pipe, not pipeline: no per-request AbortController (DESIGN.md "Hot path").
  stream.pipe(raw, { end: false });
  stream.on('end', () => (hangupAfter === undefined ? raw.end() : hangUp(raw)));
}
