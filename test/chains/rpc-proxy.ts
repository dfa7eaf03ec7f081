/**
 * A JSON-RPC proxy in front of a dev chain that plays what real nodes and providers do to the watcher: eth_getLogs
 * range and result limits (worded as reth and Infura word them), a lagging backend behind a load balancer (blocks
 * and logs above its head missing, answered without an error as older clients do, while eth_blockNumber comes from
 * an up-to-date backend), and no support for batches.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

interface Req {
  jsonrpc: '2.0';
  id: unknown;
  method: string;
  params?: unknown[];
}

/** A running proxy; its knobs take effect on the next request. */
export interface RpcProxy {
  url: string;
  /** eth_getLogs refuses ranges wider than this many blocks. */
  maxRange?: number;
  /** eth_getLogs refuses answers of more logs than this. */
  maxResults?: number;
  /** Answer eth_getLogs and eth_getBlockByNumber as a backend whose head is this block. */
  lagHead?: bigint;
  /** Answer a batch with one error object. */
  refuseBatches?: boolean;
  /** Methods asked, in order ('batch' marks each batch). */
  seen: string[];
  close(): Promise<void>;
}

async function body(req: IncomingMessage): Promise<string> {
  let s = '';
  for await (const chunk of req) s += chunk;
  return s;
}

/** Start a proxy to the JSON-RPC endpoint `target` on 127.0.0.1 (an ephemeral port). */
export async function startRpcProxy(target: string): Promise<RpcProxy> {
  const forward = async (r: Req): Promise<{ result?: unknown; error?: unknown }> => {
    const res = await fetch(target, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(r),
    });
    return (await res.json()) as { result?: unknown; error?: unknown };
  };
  const answer = async (r: Req): Promise<object> => {
    proxy.seen.push(r.method);
    const out = (x: { result?: unknown; error?: unknown }) => ({ jsonrpc: '2.0', id: r.id, ...x });
    if (r.method === 'eth_getLogs') {
      const f = (r.params?.[0] ?? {}) as { fromBlock?: string; toBlock?: string };
      const from = BigInt(f.fromBlock ?? '0x0');
      const to = BigInt(f.toBlock ?? '0x0');
      if (proxy.maxRange !== undefined && to - from + 1n > BigInt(proxy.maxRange)) {
        return out({ error: { code: -32602, message: `query exceeds max block range ${proxy.maxRange}` } });
      }
      const got = await forward(r);
      if (!Array.isArray(got.result)) return out(got);
      let logs = got.result as { blockNumber: string }[];
      if (proxy.lagHead !== undefined) logs = logs.filter((l) => BigInt(l.blockNumber) <= proxy.lagHead!);
      if (proxy.maxResults !== undefined && logs.length > proxy.maxResults) {
        const message = `query returned more than ${proxy.maxResults} results. Try with this block range [${f.fromBlock}, ${f.toBlock}].`;
        return out({
          error: { code: -32005, message, data: { from: f.fromBlock, to: f.toBlock, limit: proxy.maxResults } },
        });
      }
      return out({ result: logs });
    }
    if (r.method === 'eth_getBlockByNumber' && proxy.lagHead !== undefined) {
      const tag = r.params?.[0];
      if (typeof tag === 'string' && tag.startsWith('0x') && BigInt(tag) > proxy.lagHead) return out({ result: null });
    }
    return out(await forward(r));
  };
  const server = createServer((req, res) => {
    void (async () => {
      const parsed = JSON.parse(await body(req)) as Req | Req[];
      let reply: unknown;
      if (Array.isArray(parsed)) {
        proxy.seen.push('batch');
        reply = proxy.refuseBatches
          ? { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'batch requests are not supported' } }
          : await Promise.all(parsed.map(answer));
      } else {
        reply = await answer(parsed);
      }
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(reply));
    })().catch((err: Error) => {
      res.statusCode = 500;
      res.end(err.message);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const proxy: RpcProxy = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen: [],
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  return proxy;
}
