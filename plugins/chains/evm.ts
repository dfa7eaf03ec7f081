/**
 * SettlementChain over an EVM JSON-RPC node (viem): the escrow's reads (evm-reads.ts), its logs (evm-log-scan.ts)
 * and its charges (evm-charges.ts), each a part of its own over one client. The only settlement code that imports
 * viem (besides dev chains and deploy helpers).
 */
import type { Hex } from 'viem';
import { publicClient } from './clients.js';
import type { Address, ChainConfig, ChainName } from './config.js';
import { ChargeSender } from './evm-charges.js';
import { LogScanner } from './evm-log-scan.js';
import { EscrowReads } from './evm-reads.js';
import {
  SettlementError,
  type BatchReceipt,
  type BlockRef,
  type CallStatus,
  type Charge,
  type EscrowEvent,
  type PendingBatch,
  type PendingWithdrawal,
  type ScanResult,
  type SettlementChain,
} from './port.js';

/** Options of createEvmChain beyond the chain config. */
export interface EvmChainOptions {
  /** Settler private key; default: the env var named by `settler_key_env`. */
  settlerKey?: Hex;
  /** Where settler_key_env is looked up. Default process.env. */
  env?: Record<string, string | undefined>;
  /** Overrides the config's poll_interval_ms. */
  pollIntervalMs?: number;
  /** Fee bumps of a stuck batch before giving up with a timeout. Default 5. */
  maxReplacements?: number;
  /**
   * Called each time fees above max_fee_per_gas hold a batch back: before its first send (the base fee is above the
   * ceiling), or instead of a replacement (a bump would pass it). The settlement wiring counts it in a metric.
   */
  onFeeCapped?: () => void;
}

/** Builds the SettlementChain of one configured chain. */
export function createEvmChain(name: ChainName, config: ChainConfig, opts: EvmChainOptions = {}): SettlementChain {
  return new EvmChain(name, config, opts);
}

class EvmChain implements SettlementChain {
  readonly chainId: number;
  readonly escrow: Address;
  readonly canSettle: boolean;
  private readonly reads: EscrowReads;
  private readonly logs: LogScanner;
  private readonly charges: ChargeSender;

  constructor(
    readonly name: ChainName,
    config: ChainConfig,
    opts: EvmChainOptions,
  ) {
    this.chainId = config.chain_id;
    this.escrow = config.escrow;
    const pollMs = opts.pollIntervalMs ?? config.poll_interval_ms;
    const env = opts.env ?? process.env;
    const key = opts.settlerKey ?? (config.settler_key_env ? env[config.settler_key_env] : undefined);
    if (key !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(key)) {
      throw new SettlementError(
        'not_configured',
        `settler key in ${config.settler_key_env} is not a 32-byte hex key`,
        name,
      );
    }
    const client = publicClient(
      { name, chainId: config.chain_id, rpcUrl: config.rpc_url },
      { pollingInterval: pollMs },
    );
    this.reads = new EscrowReads(client, config.escrow, config.confirmations, pollMs / 2);
    this.logs = new LogScanner(name, config, client);
    this.charges = new ChargeSender(
      name,
      config,
      client,
      this.reads,
      key as Hex | undefined,
      pollMs,
      opts.maxReplacements ?? 5,
      opts.onFeeCapped,
    );
    this.canSettle = this.charges.canSettle;
  }

  balanceOf(account: Address, atBlock?: bigint): Promise<bigint> {
    return this.reads.balanceOf(account, atBlock);
  }

  pendingWithdrawal(account: Address, atBlock?: bigint): Promise<PendingWithdrawal | null> {
    return this.reads.pendingWithdrawal(account, atBlock);
  }

  blockHash(number: bigint): Promise<Hex | null> {
    return this.reads.blockHash(number);
  }

  callStatus(callId: Hex): Promise<CallStatus> {
    return this.reads.callStatus(callId);
  }

  maxCharge(): Promise<bigint> {
    return this.reads.maxCharge();
  }

  withdrawalDelay(): Promise<bigint> {
    return this.reads.withdrawalDelay();
  }

  latestBlock(): Promise<bigint> {
    return this.reads.latestBlock();
  }

  readEvents(fromBlock: bigint, toBlock: bigint): Promise<EscrowEvent[]> {
    return this.logs.readEvents(fromBlock, toBlock);
  }

  scanEvents(fromBlock: bigint, toBlock: bigint, parent: BlockRef | null): Promise<ScanResult> {
    return this.logs.scanEvents(fromBlock, toBlock, parent);
  }

  async charge(charges: readonly Charge[]): Promise<BatchReceipt> {
    return (await this.charges.submitCharges(charges)).wait();
  }

  batchFits(charges: readonly Charge[]): number {
    return this.charges.batchFits(charges);
  }

  submitCharges(charges: readonly Charge[], opts: { signal?: AbortSignal } = {}): Promise<PendingBatch> {
    return this.charges.submitCharges(charges, opts);
  }
}
