/**
 * viem transport for JSON-RPC over HTTP on an undici keep-alive pool, and JSON-RPC batches on the same pool. viem's
 * own http transport goes through fetch (web streams, an AbortSignal and timing entries per request), which cost more
 * CPU than the watcher's polls and the settler's batches otherwise need. Errors take the
 * http transport's shapes (RpcRequestError for a JSON-RPC error, HttpRequestError for the transport,
 * TimeoutError), so viem maps them to the same error classes, and its retries apply as before.
 */
import { Pool } from 'undici';
import { custom, HttpRequestError, RpcRequestError, TimeoutError, type Transport } from 'viem';

/** One pool per RPC origin, shared by every chain client of the process. */
const pools = new Map<string, Pool>();

function poolFor(origin: string): Pool {
  let pool = pools.get(origin);
  if (!pool) {
    pool = new Pool(origin, { connections: 8, keepAliveTimeout: 30_000 });
    pools.set(origin, pool);
  }
  return pool;
}

/** A JSON-RPC error object. */
export interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

/** One answer of a JSON-RPC batch: its result, or its error. */
export type RpcAnswer = { result: unknown; error?: undefined } | { result?: undefined; error: RpcError };

/** POST `text` to `url`; the status and the body. Transport failures throw viem's TimeoutError or HttpRequestError. */
async function post(
  url: URL,
  text: string,
  body: Record<string, unknown> | Record<string, unknown>[],
  timeout: number,
): Promise<{ status: number; answer: string }> {
  try {
    const res = await poolFor(url.origin).request({
      path: url.pathname + url.search,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: text,
      headersTimeout: timeout,
      bodyTimeout: timeout,
    });
    return { status: res.statusCode, answer: await res.body.text() };
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT')
      throw new TimeoutError({ body, url: url.href });
    throw new HttpRequestError({ body, url: url.href, details: (err as Error).message, cause: err as Error });
  }
}

function parse(answer: string): unknown {
  try {
    return JSON.parse(answer);
  } catch {
    return undefined;
  }
}

/** A transport to `url`; `timeoutMs` bounds each request, headers and body. */
export function rpcTransport(url: string, opts: { timeoutMs?: number; retryCount?: number } = {}): Transport {
  const u = new URL(url);
  const timeout = opts.timeoutMs ?? 10_000;
  let id = 0;
  return custom(
    {
      async request({ method, params }: { method: string; params?: unknown }) {
        const body = { method, params };
        const { status, answer } = await post(
          u,
          JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params }),
          body,
          timeout,
        );
        const json = parse(answer) as { result?: unknown; error?: RpcError } | undefined;
        // As the http transport: a non-2xx answer is a transport error (its JSON-RPC error, if any, as details).
        if (status < 200 || status >= 300 || !json) {
          throw new HttpRequestError({
            body,
            url,
            status,
            details: json?.error ? JSON.stringify(json.error) : answer.slice(0, 500),
          });
        }
        if (json.error) throw new RpcRequestError({ body, error: json.error, url });
        return json.result;
      },
    },
    { key: 'rpc', name: 'JSON-RPC over undici', retryCount: opts.retryCount },
  );
}

/** Thrown by rpcBatch when the node does not answer a batch with an array (some providers refuse batches). */
export class RpcBatchUnsupportedError extends Error {
  override readonly name = 'RpcBatchUnsupportedError';
}

/**
 * Send `calls` as one JSON-RPC batch (one HTTP request, which a load balancer hands to one backend) and return the
 * answers in the order of the calls. Each answer carries its own result or error; a transport failure throws.
 */
export async function rpcBatch(
  url: string,
  calls: readonly { method: string; params: unknown[] }[],
  opts: { timeoutMs?: number } = {},
): Promise<RpcAnswer[]> {
  const u = new URL(url);
  const body = calls.map((c, i) => ({ jsonrpc: '2.0', id: i + 1, method: c.method, params: c.params }));
  const { status, answer } = await post(u, JSON.stringify(body), body, opts.timeoutMs ?? 10_000);
  const json = parse(answer);
  if (status < 200 || status >= 300) throw new HttpRequestError({ body, url, status, details: answer.slice(0, 500) });
  if (!Array.isArray(json))
    throw new RpcBatchUnsupportedError(`${u.origin}: a batch was answered with ${answer.slice(0, 200)}`);
  const byId = new Map<unknown, RpcAnswer>();
  for (const a of json as { id?: unknown; result?: unknown; error?: RpcError }[]) {
    byId.set(a.id, a.error ? { error: a.error } : { result: a.result });
  }
  return body.map(
    (b) => byId.get(b.id) ?? { error: { code: -32603, message: `no answer for ${b.method} in the batch` } },
  );
}
