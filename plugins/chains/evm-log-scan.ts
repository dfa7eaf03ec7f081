/**
 * The escrow's logs of an EvmChain, range by range (eth_getLogs): every money event of a span of blocks, or a scan
 * that also proves the range's blocks are the chain's (scanEvents). The range shrinks on a node's limits and grows
 * back. Requests go as one JSON-RPC batch, so one backend answers all of a scan.
 */
import { BaseError, numberToHex, TimeoutError, type PublicClient } from 'viem';
import type { ChainConfig, ChainName } from './config.js';
import { decodeEscrowLog, isMoneyEvent, type RpcLog } from './escrow-logs.js';
import { blockHashOf } from './evm-reads.js';
import type { BlockRef, EscrowAdminEvent, EscrowEvent, ScanResult } from './port.js';
import { rpcBatch, RpcBatchUnsupportedError, type RpcAnswer } from './rpc-transport.js';

/** Successful eth_getLogs requests at one range before it doubles again (towards max_log_range). */
const GROW_AFTER = 8;

/**
 * An eth_getLogs refusal that a smaller range cures. Providers word it their own way: "query returned more than
 * 10000 results" (Infura, geth), "Log response size exceeded" (Alchemy), "query exceeds max block range 100000" and
 * "query exceeds max results 20000" (reth), "eth_getLogs is limited to 1024 block range", "eth_getLogs range is too
 * large, max is 1k blocks", "ranges over 10000 blocks are not supported", "block range is too wide",
 * "exceed maximum block range", "block range is bigger than maxBlockRange", "query timeout exceeded".
 */
const RANGE_LIMIT =
  /more than \d+ results|response size|query exceeds max|max(imum)? block range|block range (is )?(too|bigger|greater|limit)|range (is )?too (large|wide|big)|ranges over|limited to (a )?[\d,]+ ?(k )?(block|range)|too many (results|logs|blocks)|max(imum)? results|query timeout|result window/i;
/** Rate limits look alike ("limit exceeded") but a smaller range does not cure them. */
const RATE_LIMIT = /rate.?limit|too many requests|requests per|capacity|credits|compute units|throughput/i;
/**
 * The node has not reached a block of the request: "block range extends beyond current head block" (geth and most
 * clients now), "block N is beyond the latest block M of this node", "header not found", "unknown block".
 */
const BEYOND_HEAD =
  /beyond (the )?(current )?head|beyond the latest|extends beyond|header not found|unknown block|block not found|not (yet )?available|future block|after (the )?latest|greater than (the )?(latest|current|head)/i;

export class LogScanner {
  /** eth_getLogs range now: halved on a node's range or result limit, doubled back after GROW_AFTER successes. */
  private span: number;
  private spanSuccesses = 0;
  /** The node refused a JSON-RPC batch once: requests go one by one from then on. */
  private batchUnsupported = false;

  constructor(
    private readonly name: ChainName,
    private readonly config: ChainConfig,
    private readonly client: PublicClient,
  ) {
    this.span = config.max_log_range;
  }

  async readEvents(fromBlock: bigint, toBlock: bigint): Promise<EscrowEvent[]> {
    const events: EscrowEvent[] = [];
    // Raw eth_getLogs + decodeEscrowLog: one Charged log per billed call, viem's formatting is too slow.
    for (let from = fromBlock; from <= toBlock; ) {
      const end = this.rangeEnd(from, toBlock);
      let logs: RpcAnswer | undefined;
      try {
        [logs] = await this.request([this.getLogs(from, end)]);
      } catch (err) {
        if (err instanceof TimeoutError && this.shrink()) continue; // as in scanEvents
        throw err;
      }
      if (logs!.error) {
        if (this.shrinkOn(logs!.error.message)) continue;
        throw rpcFailure(this.name, 'eth_getLogs', logs!.error);
      }
      this.grew();
      for (const log of logs!.result as RpcLog[]) {
        if (log.removed) continue;
        const event = decodeEscrowLog(log);
        if (event && isMoneyEvent(event)) events.push(event);
      }
      from = end + 1n;
    }
    return events.sort(byPosition);
  }

  async scanEvents(fromBlock: bigint, toBlock: bigint, parent: BlockRef | null): Promise<ScanResult> {
    let splits = 0;
    for (;;) {
      const end = this.rangeEnd(fromBlock, toBlock);
      // One batch (one HTTP request, so one backend behind a load balancer): the parent block, the logs and the
      // range's last block all come from the node that answered. A lagging backend answers eth_getLogs for blocks
      // it lacks with nothing at all on some clients: its missing last block is what tells.
      const calls = [
        this.getLogs(fromBlock, end),
        { method: 'eth_getBlockByNumber', params: [numberToHex(end), false] },
      ];
      if (parent) calls.push({ method: 'eth_getBlockByNumber', params: [numberToHex(parent.number), false] });
      let answers: RpcAnswer[];
      try {
        answers = await this.request(calls);
      } catch (err) {
        // A range too heavy for the node to answer in time is a range limit too.
        if (err instanceof TimeoutError && this.shrink()) {
          splits++;
          continue;
        }
        throw err;
      }
      const [logs, last, above] = answers as [RpcAnswer, RpcAnswer, RpcAnswer | undefined];
      const behind = (block: bigint, detail: string): ScanResult => ({
        ok: false,
        reason: 'node_behind',
        block,
        detail,
      });
      for (const [a, what] of [
        [logs, 'eth_getLogs'],
        [last, 'eth_getBlockByNumber'],
        [above, 'eth_getBlockByNumber'],
      ] as const) {
        if (a?.error && BEYOND_HEAD.test(a.error.message)) return behind(end, `${what}: ${a.error.message}`);
      }
      if (logs.error) {
        if (this.shrinkOn(logs.error.message)) {
          splits++;
          continue;
        }
        throw rpcFailure(this.name, 'eth_getLogs', logs.error);
      }
      for (const a of [last, above]) if (a?.error) throw rpcFailure(this.name, 'eth_getBlockByNumber', a.error);
      if (parent) {
        const found = blockHashOf(above!.result);
        if (found === null) return behind(parent.number, `block ${parent.number} unknown to the node`);
        if (found.toLowerCase() !== parent.hash.toLowerCase()) {
          return { ok: false, reason: 'reorged', block: parent.number, expected: parent.hash, found };
        }
      }
      const hash = blockHashOf(last.result);
      if (hash === null) return behind(end, `block ${end} unknown to the node`);
      this.grew();
      const events: EscrowEvent[] = [];
      const admin: EscrowAdminEvent[] = [];
      for (const log of logs.result as RpcLog[]) {
        if (log.removed) continue;
        const at = log.blockNumber === null ? null : BigInt(log.blockNumber);
        if (at === null || at < fromBlock || at > end)
          throw new Error(`${this.name}: eth_getLogs returned a log of block ${at} for ${fromBlock}..${end}`);
        // A log of the last block from another block at that height: the node moved under the request.
        if (at === end && log.blockHash && log.blockHash.toLowerCase() !== hash.toLowerCase()) {
          return behind(end, `log of block ${end} is from ${log.blockHash}, the block is ${hash}`);
        }
        const e = decodeEscrowLog(log);
        if (e === null) continue;
        if (isMoneyEvent(e)) events.push(e);
        else admin.push(e);
      }
      events.sort(byPosition);
      admin.sort(byPosition);
      return { ok: true, events, admin, to: { number: end, hash }, span: this.span, splits };
    }
  }

  private getLogs(from: bigint, to: bigint) {
    return {
      method: 'eth_getLogs',
      params: [{ address: this.config.escrow, fromBlock: numberToHex(from), toBlock: numberToHex(to) }],
    };
  }

  /** Last block of the next eth_getLogs range from `from`: the current span, at most `to`. */
  private rangeEnd(from: bigint, to: bigint): bigint {
    const end = from + BigInt(this.span) - 1n;
    return end < to ? end : to;
  }

  /** Halve the span after a range-limit refusal `message`; false when that is no range limit or the span is 1. */
  private shrinkOn(message: string): boolean {
    return RANGE_LIMIT.test(message) && !RATE_LIMIT.test(message) && this.shrink();
  }

  private shrink(): boolean {
    if (this.span <= 1) return false;
    this.span = Math.max(1, Math.floor(this.span / 2));
    this.spanSuccesses = 0;
    return true;
  }

  /** One more request answered at this span: grows it back after GROW_AFTER of them. */
  private grew(): void {
    if (this.span >= this.config.max_log_range || ++this.spanSuccesses < GROW_AFTER) return;
    this.span = Math.min(this.config.max_log_range, this.span * 2);
    this.spanSuccesses = 0;
  }

  /**
   * Answers to `calls`, in order, each its result or its JSON-RPC error: as one batch, or one by one once the node
   * has refused a batch (then the answers may come from different backends). Transport failures throw.
   */
  private async request(calls: readonly { method: string; params: unknown[] }[]): Promise<RpcAnswer[]> {
    if (!this.batchUnsupported) {
      try {
        return await rpcBatch(this.config.rpc_url, calls);
      } catch (err) {
        if (!(err instanceof RpcBatchUnsupportedError)) throw err;
        this.batchUnsupported = true;
      }
    }
    const answers: RpcAnswer[] = [];
    for (const c of calls) {
      try {
        answers.push({
          result: await this.client.request({ method: c.method, params: c.params } as never, { retryCount: 0 }),
        });
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        if (typeof code !== 'number' || !(err instanceof BaseError)) throw err; // transport, not a JSON-RPC error
        answers.push({ error: { code, message: `${err.shortMessage} ${err.details ?? ''}` } });
      }
    }
    return answers;
  }
}

function byPosition(
  a: { blockNumber: bigint; logIndex: number },
  b: { blockNumber: bigint; logIndex: number },
): number {
  return a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1;
}

function rpcFailure(chain: string, method: string, error: { code: number; message: string }): Error {
  return new Error(`${chain}: ${method} failed: ${error.message} (code ${error.code})`);
}
