/**
 * The part of autocannon 8 the benchmark uses, typed here (it ships no types). `Client` and its events are
 * autocannon's lib/httpClient.js: one per connection; `pipelinedRequests.peek()` is the request in flight.
 */
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events';

  /** One connection of the load generator (lib/httpClient.js). */
  export interface Client extends EventEmitter {
    /** Requests in flight on this connection, oldest first; startTime is process.hrtime() at write. */
    pipelinedRequests: { peek(): { startTime: [number, number] } | undefined };
    on(event: 'request', listener: () => void): this;
    on(event: 'headers' | 'body', listener: (arg: unknown) => void): this;
    /** Duration is in ms with sub-ms precision (process.hrtime since the request was written). */
    on(event: 'response', listener: (status: number, bytes: number, durationMs: number) => void): this;
    on(event: 'connError' | 'timeout', listener: (err?: Error) => void): this;
  }

  /** Options of a run (autocannon README, "API"). */
  export interface Options {
    url: string;
    method?: 'GET' | 'POST';
    headers?: Record<string, string>;
    /** Sent as is: a Buffer is not copied per request. */
    body?: string | Buffer;
    connections?: number;
    pipelining?: number;
    /** Seconds. */
    duration?: number;
    /** Total responses, instead of a duration. */
    amount?: number;
    /** Per-request timeout, seconds. */
    timeout?: number;
    setupClient?: (client: Client) => void;
  }

  /** The aggregate result; only the counters the benchmark reads. */
  export interface Result {
    errors: number;
    timeouts: number;
    non2xx: number;
    resets: number;
  }

  /** A running load. */
  export interface Instance extends EventEmitter {
    stop(): void;
  }

  /** Start a load; `done` gets the aggregate result. */
  function autocannon(opts: Options, done: (err: Error | null, result: Result) => void): Instance;
  export default autocannon;
}
