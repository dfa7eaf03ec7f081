/**
 * Serves an in-process EDR provider as JSON-RPC 2.0 over HTTP (single and batch requests),
 * so wallets, the CLI and viem reach the dev chains like any node.
 *
 * Web pages are kept out: a page the developer visits could otherwise drive the chains (the dev keys are public). A
 * request with an Origin is answered only for the allowed origins (the local dashboard's), with CORS headers naming
 * that origin, or for a browser extension (a wallet, which needs no CORS); any other is refused, preflight or not, so
 * even a request that needs no preflight (text/plain) never reaches the chain. Clients outside a browser send no
 * Origin and are answered.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Provider } from '@nomicfoundation/edr';

interface RpcRequest {
  jsonrpc?: string;
  id?: unknown;
  method?: unknown;
  params?: unknown;
}

interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

const MAX_BODY = 16 * 1024 * 1024;

/**
 * EDR reports reverts as `{code: -32000|-32603, message: 'VM Exception ... reverted with ...',
 * data: {message, data: '0x<revert data>'}}`. Clients (viem included) decode custom errors
 * from the geth shape: `{code: 3, message: 'execution reverted', data: '0x<revert data>'}`.
 */
export function rewriteRevertError(error: RpcError): RpcError {
  const nested = error.data as { data?: unknown } | undefined;
  const revert = typeof nested === 'object' && nested !== null ? nested.data : undefined;
  if (typeof revert !== 'string' || !/^0x[0-9a-fA-F]*$/.test(revert)) return error;
  return { code: 3, message: 'execution reverted', data: revert };
}

async function handleOne(provider: Provider, req: RpcRequest): Promise<Record<string, unknown>> {
  const id = req.id ?? null;
  if (typeof req.method !== 'string') {
    return { jsonrpc: '2.0', id, error: { code: -32600, message: 'invalid request' } };
  }
  try {
    const res = await provider.handleRequest(
      JSON.stringify({ jsonrpc: '2.0', id: 1, method: req.method, params: req.params ?? [] }),
    );
    const data = (typeof res.data === 'string' ? JSON.parse(res.data) : res.data) as {
      result?: unknown;
      error?: RpcError;
    };
    if (data.error) return { jsonrpc: '2.0', id, error: rewriteRevertError(data.error) };
    return { jsonrpc: '2.0', id, result: data.result ?? null };
  } catch (err) {
    return { jsonrpc: '2.0', id, error: { code: -32603, message: (err as Error).message } };
  }
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new Error('body too large');
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** Origins of browser extensions: wallets call the chain from there, and no web page can take such an origin. */
const EXTENSION_ORIGIN = /^(chrome-extension|moz-extension|safari-web-extension):\/\/[^/]+$/;

async function handleHttp(provider: Provider, origins: ReadonlySet<string>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const origin = req.headers.origin;
  if (origin !== undefined) {
    res.setHeader('vary', 'origin');
    if (origins.has(origin)) {
      res.setHeader('access-control-allow-origin', origin);
      res.setHeader('access-control-allow-methods', 'POST, OPTIONS');
      res.setHeader('access-control-allow-headers', 'content-type');
      res.setHeader('access-control-max-age', '600');
      if (req.method === 'OPTIONS') {
        res.writeHead(204).end();
        return;
      }
    } else if (!EXTENSION_ORIGIN.test(origin)) {
      send(res, 403, { jsonrpc: '2.0', id: null, error: { code: -32600, message: `origin ${origin} is not allowed` } });
      return;
    }
  }
  if (req.method !== 'POST') {
    send(res, 405, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'use POST' } });
    return;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readBody(req));
  } catch {
    send(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } });
    return;
  }
  if (Array.isArray(parsed)) {
    send(res, 200, await Promise.all(parsed.map((r) => handleOne(provider, r as RpcRequest))));
  } else {
    send(res, 200, await handleOne(provider, (parsed ?? {}) as RpcRequest));
  }
}

/**
 * Starts an HTTP JSON-RPC server for `provider`; port 0 picks a free port. `origins` are the web origins it answers
 * (with CORS), read at each request: the caller may fill the set once it knows them.
 */
export async function serveProvider(
  provider: Provider,
  host: string,
  port: number,
  origins: ReadonlySet<string> = new Set(),
): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    handleHttp(provider, origins, req, res).catch((err: Error) => {
      if (!res.headersSent) send(res, 500, { jsonrpc: '2.0', id: null, error: { code: -32603, message: err.message } });
      else res.destroy();
    });
  });
  // Clients keep connections alive; close() must not wait on them.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const addr = server.address() as AddressInfo;
  const hostPart = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return { url: `http://${hostPart}:${addr.port}`, server };
}
