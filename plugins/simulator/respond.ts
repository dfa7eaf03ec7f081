/**
 * Writing responses on the raw socket with the fault directives applied: one write per body or
 * SSE event (DESIGN.md "Hot path": socket writes dominate), no timers unless a delay is asked.
 */
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

/** Sends a whole JSON body in one write; `hangup` destroys the socket instead of sending it. */
export function sendJson(raw: ServerResponse, status: number, headers: OutgoingHttpHeaders, body: string, hangup = false): void {
  if (hangup) {
    raw.destroy();
    return;
  }
  headers['content-type'] = 'application/json';
  headers['content-length'] = Buffer.byteLength(body);
  raw.writeHead(status, headers);
  raw.end(body);
}

/** Streams `plan` as SSE, honouring hangup_after and chunk_delay_ms. */
export async function sendStream(raw: ServerResponse, headers: OutgoingHttpHeaders, plan: StreamPlan, d: SimDirectives): Promise<void> {
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
