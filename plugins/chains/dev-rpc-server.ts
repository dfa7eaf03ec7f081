/**
 * Serves an in-process EDR provider as JSON-RPC 2.0 over HTTP (single and batch requests),
 * so wallets, the CLI and viem reach the dev chains like any node.
 *
 * Web pages are kept out: a page the developer visits could otherwise drive the chains (the dev keys are public). A
 * request with an Origin is answered only for the allowed origins (the local dashboard's), with CORS headers naming
 * that origin, or for a browser extension (a wallet, which needs no CORS); any other is refused, preflight or not, so
 * even a request that needs no preflight (text/plain) never reaches the chain. Clients outside a browser send no
 * Origin and are answered.
 *
 * Whoever is answered gets a wallet's methods alone (WALLET_METHODS); the test methods that rewrite the chain are
 * served only when the project's own tests ask for them (`testMethods`).
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
 * The methods served to wallets (an EIP-1193 wallet on a custom RPC), viem and the CLI: the Ethereum execution API's
 * `eth_*` methods (ethereum/execution-apis, src/eth) but those that sign on the node, with `net_*` and `web3_*`.
 * Refused, with -32601: EDR's `hardhat_*` and `evm_*`, which rewrite the chain without a signature (an account's code,
 * balance or nonce, time, history: code set on an account makes it an ERC-1271 wallet that accepts any signature), and
 * `eth_sendTransaction`, `eth_sign`, `eth_signTransaction`, `personal_*`, which sign with the node's keys: the dev
 * chains hold none, so they could only sign as an account a test method impersonated. A wallet signs itself and sends
 * `eth_sendRawTransaction`. `debug_*` traces are refused too: no wallet needs them, and they cost the gateway's CPU.
 */
export const WALLET_METHODS: ReadonlySet<string> = new Set([
  'web3_clientVersion',
  'web3_sha3',
  'net_version',
  'net_listening',
  'net_peerCount',
  'eth_chainId',
  'eth_syncing',
  'eth_coinbase',
  'eth_accounts',
  'eth_blockNumber',
  'eth_gasPrice',
  'eth_maxPriorityFeePerGas',
  'eth_feeHistory',
  'eth_blobBaseFee',
  'eth_getBalance',
  'eth_getTransactionCount',
  'eth_getCode',
  'eth_getStorageAt',
  'eth_getProof',
  'eth_call',
  'eth_estimateGas',
  'eth_createAccessList',
  'eth_simulateV1',
  'eth_getBlockByNumber',
  'eth_getBlockByHash',
  'eth_getBlockReceipts',
  'eth_getBlockTransactionCountByNumber',
  'eth_getBlockTransactionCountByHash',
  'eth_getUncleCountByBlockNumber',
  'eth_getUncleCountByBlockHash',
  'eth_getTransactionByHash',
  'eth_getTransactionByBlockNumberAndIndex',
  'eth_getTransactionByBlockHashAndIndex',
  'eth_getTransactionReceipt',
  'eth_getLogs',
  'eth_newFilter',
  'eth_newBlockFilter',
  'eth_newPendingTransactionFilter',
  'eth_getFilterChanges',
  'eth_getFilterLogs',
  'eth_uninstallFilter',
  'eth_sendRawTransaction',
]);

/** Options of serveProvider. */
export interface ServeOptions {
  /**
   * Serve every method the provider knows, the test methods (`hardhat_*`, `evm_*`) included, not only
   * WALLET_METHODS. For the project's own tests: nothing in the environment or a config turns it on.
   */
  testMethods?: boolean;
}

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

async function handleOne(provider: Provider, testMethods: boolean, req: RpcRequest): Promise<Record<string, unknown>> {
  const id = req.id ?? null;
  if (typeof req.method !== 'string') {
    return { jsonrpc: '2.0', id, error: { code: -32600, message: 'invalid request' } };
  }
  if (!testMethods && !WALLET_METHODS.has(req.method)) {
    // -32601 "method not found" (JSON-RPC 2.0, section 5.1): viem and wallets take it for a method the node lacks.
    const message = `method not allowed: ${req.method.slice(0, 64)} (the dev chains serve wallet methods only)`;
    return { jsonrpc: '2.0', id, error: { code: -32601, message } };
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

async function handleHttp(
  provider: Provider,
  origins: ReadonlySet<string>,
  testMethods: boolean,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
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
    send(res, 200, await Promise.all(parsed.map((r) => handleOne(provider, testMethods, r as RpcRequest))));
  } else {
    send(res, 200, await handleOne(provider, testMethods, (parsed ?? {}) as RpcRequest));
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
  opts: ServeOptions = {},
): Promise<{ url: string; server: Server }> {
  const testMethods = opts.testMethods === true;
  const server = createServer((req, res) => {
    handleHttp(provider, origins, testMethods, req, res).catch((err: Error) => {
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
