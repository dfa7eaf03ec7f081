/**
 * What an EvmChain reads of its escrow and blocks: balances, withdrawals, call statuses, the escrow's settings, block
 * hashes and the head (evm.ts composes it with the log scanner and the charge sender).
 */
import { numberToHex, type Hex, type PublicClient } from 'viem';
import { CALL_STATUS, escrowAbi } from './abi.js';
import type { Address } from './config.js';
import type { CallStatus } from './port.js';

export class EscrowReads {
  /** The head as last read, shared by every batch awaiting its confirmations (one request a poll, not one a batch). */
  private head: { at: number; number: Promise<bigint> } | undefined;

  constructor(
    private readonly client: PublicClient,
    private readonly escrow: Address,
    /** Blocks a read must have under the head, counting its own (config confirmations). */
    private readonly confirmations: number,
    /** How long one head read serves: half the poll interval, ms. */
    private readonly headMaxAgeMs: number,
  ) {}

  balanceOf(account: Address, atBlock?: bigint): Promise<bigint> {
    return this.client.readContract({
      address: this.escrow,
      abi: escrowAbi,
      functionName: 'balanceOf',
      args: [account],
      blockNumber: atBlock,
    });
  }

  async pendingWithdrawal(account: Address, atBlock?: bigint) {
    const [amount, readyAt] = await this.client.readContract({
      address: this.escrow,
      abi: escrowAbi,
      functionName: 'pendingWithdrawal',
      args: [account],
      blockNumber: atBlock,
    });
    return amount === 0n ? null : { amount, readyAt };
  }

  async blockHash(number: bigint): Promise<Hex | null> {
    const block = await this.client.request({ method: 'eth_getBlockByNumber', params: [numberToHex(number), false] });
    return blockHashOf(block);
  }

  async callStatus(callId: Hex): Promise<CallStatus> {
    const s = await this.client.readContract({
      address: this.escrow,
      abi: escrowAbi,
      functionName: 'callStatus',
      args: [callId],
    });
    return s === CALL_STATUS.charged ? 'charged' : s === CALL_STATUS.refused ? 'refused' : 'none';
  }

  maxCharge(): Promise<bigint> {
    return this.client.readContract({ address: this.escrow, abi: escrowAbi, functionName: 'maxCharge' });
  }

  withdrawalDelay(): Promise<bigint> {
    return this.client.readContract({ address: this.escrow, abi: escrowAbi, functionName: 'withdrawalDelay' });
  }

  /** The newest block with its confirmations. */
  async latestBlock(): Promise<bigint> {
    const head = await this.client.getBlockNumber({ cacheTime: 0 });
    const confirmed = head - BigInt(this.confirmations - 1);
    return confirmed < 0n ? 0n : confirmed;
  }

  /** The head, read at most once per half poll interval however many batches ask. */
  headNumber(): Promise<bigint> {
    const now = Date.now();
    if (!this.head || now - this.head.at >= this.headMaxAgeMs) {
      const number = this.client.getBlockNumber({ cacheTime: 0 });
      const head = { at: now, number };
      this.head = head;
      // A failed read is not kept: the next caller asks again.
      number.catch(() => {
        if (this.head === head) this.head = undefined;
      });
    }
    return this.head.number;
  }
}

/** The hash of an eth_getBlockByNumber result; null when the node has no such block. */
export function blockHashOf(block: unknown): Hex | null {
  const hash = (block as { hash?: unknown } | null)?.hash;
  return typeof hash === 'string' && /^0x[0-9a-fA-F]{64}$/.test(hash) ? (hash as Hex) : null;
}
