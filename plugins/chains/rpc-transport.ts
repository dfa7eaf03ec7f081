/**
 * viem transport for JSON-RPC over HTTP on an undici keep-alive pool. viem's own http transport goes through
 * fetch (web streams, an AbortSignal and timing entries per request), which cost more CPU than the watcher's polls
 * and the settler's batches otherwise need. Errors take the
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

/** A transport to `url`; `timeoutMs` bounds each request, headers and body. */
export function rpcTransport(url: string, opts: { timeoutMs?: number; retryCount?: number } = {}): Transport {
  const u = new URL(url);
  const path = u.pathname + u.search;
  const timeout = opts.timeoutMs ?? 10_000;
  let id = 0;
  return custom(
    {
      async request({ method, params }: { method: string; params?: unknown }) {
        const body = { method, params };
        const text = JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params });
        let status: number;
        let answer: string;
        try {
          const res = await poolFor(u.origin).request({
            path,
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: text,
            headersTimeout: timeout,
            bodyTimeout: timeout,
          });
          status = res.statusCode;
          answer = await res.body.text();
        } catch (err) {
          const code = (err as { code?: string }).code;
          if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') throw new TimeoutError({ body, url });
          throw new HttpRequestError({ body, url, details: (err as Error).message, cause: err as Error });
        }
        let json: { result?: unknown; error?: { code: number; message: string; data?: unknown } } | undefined;
        try {
          json = JSON.parse(answer) as typeof json;
        } catch {
          json = undefined;
        }
        // As the http transport: a non-2xx answer is a transport error (its JSON-RPC error, if any, as details).
        if (status < 200 || status >= 300 || !json) {
          throw new HttpRequestError({ body, url, status, details: json?.error ? JSON.stringify(json.error) : answer.slice(0, 500) });
        }
        if (json.error) throw new RpcRequestError({ body, error: json.error, url });
        return json.result;
      },
    },
    { key: 'rpc', name: 'JSON-RPC over undici', retryCount: opts.retryCount },
  );
}
