/**
 * SettlementChain over an EVM JSON-RPC node (viem). The only settlement code that imports viem
 * (besides dev chains and deploy helpers). Charges go out as Escrow.chargeBatch transactions
 * signed locally with the settler key, one nonce queue per key and chain.
 */
import {
  BaseError,
  createPublicClient,
  decodeErrorResult,
  defineChain,
  numberToHex,
  type Hex,
  type PublicClient,
} from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { CALL_STATUS, escrowAbi } from './abi.js';
import { encodeChargeBatch, signTransaction } from './charge-tx.js';
import type { Address, ChainConfig, ChainName } from './config.js';
import { decodeEscrowLog, isMoneyEvent, type RpcLog } from './escrow-logs.js';
import { rpcTransport } from './rpc-transport.js';
import { nonceQueueFor, type NonceQueue } from './nonce-queue.js';
import {
  SettlementError,
  type BatchReceipt,
  type CallStatus,
  type Charge,
  type ChargeResult,
  type EscrowEvent,
  type PendingBatch,
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
}

/** Most charges in one batch: its gas limit (gasLimitFor) stays under the EIP-7825 per-tx cap (2^24). */
export const MAX_CHARGES_PER_BATCH = 400;

/**
 * Gas limit of a batch of n charges: an upper bound, not an estimate, since state can change
 * before mining (a deposit turns cheap refusals into charges). Measured: ~4k per charge when
 * call ids are consecutive (the gateway's own: they share status words), ~26k when each takes
 * a status word of its own (~31k with every account cold), ~65k fixed incl. the treasury
 * transfer. Only gas used is paid.
 */
export function gasLimitFor(n: number): bigint {
  return 100_000n + 36_000n * BigInt(n);
}

// Replacement must beat the old fees by >= 10% (geth, EDR); 25% leaves room.
const FEE_BUMP_PERCENT = 125n;
const UINT256_MAX = 2n ** 256n - 1n;
const LOG_RANGE = 2_000n;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Builds the SettlementChain of one configured chain. */
export function createEvmChain(name: ChainName, config: ChainConfig, opts: EvmChainOptions = {}): SettlementChain {
  return new EvmChain(name, config, opts);
}

interface Fees {
  maxFeePerGas: bigint;
  maxPriorityFeePerGas: bigint;
}

// A sent batch: every transaction sent for its nonce (the first, then replacements).
interface InFlight {
  nonce: number;
  hashes: Hex[];
  data: Hex;
  gas: bigint;
  fees: Fees;
}

// What the settler reads of a batch's receipt, from the raw RPC receipt: viem's
// getTransactionReceipt would format every log, and a batch has one or two per charge.
interface MinedBatch {
  transactionHash: Hex;
  blockHash: Hex;
  blockNumber: bigint;
  gasUsed: bigint;
  /** status 0x1 */
  success: boolean;
  logs: readonly RpcLog[];
}

class EvmChain implements SettlementChain {
  readonly chainId: number;
  readonly escrow: Address;
  readonly canSettle: boolean;
  private readonly client: PublicClient;
  private readonly account: PrivateKeyAccount | undefined;
  private readonly settlerKey: Hex | undefined;
  private readonly queue: NonceQueue | undefined;
  private readonly pollMs: number;
  private readonly maxReplacements: number;
  /**
   * Whether the next batch is simulated (preflight) before it is sent: at first, and again once any batch has
   * failed, so that a batch that would revert (settler role revoked, token paused) is refused with its reason before
   * paying gas. While batches mine, the simulation is skipped: it executes the whole batch once more, ~40% of a dev
   * chain's work per charge and an eth_call of ~20 KB on a real chain's RPC. What that costs: when something breaks
   * between two batches, one reverted batch's gas; its retry is simulated.
   */
  private simulateNext = true;
  /** Batches failed so far: a batch sent before a failure does not turn the simulation off when it mines after it. */
  private failures = 0;

  constructor(
    readonly name: ChainName,
    private readonly config: ChainConfig,
    opts: EvmChainOptions,
  ) {
    this.chainId = config.chain_id;
    this.escrow = config.escrow;
    this.pollMs = opts.pollIntervalMs ?? config.poll_interval_ms;
    this.maxReplacements = opts.maxReplacements ?? 5;
    const chain = defineChain({
      id: config.chain_id,
      name,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [config.rpc_url] } },
    });
    this.client = createPublicClient({ chain, transport: rpcTransport(config.rpc_url), pollingInterval: this.pollMs });
    const env = opts.env ?? process.env;
    const key = opts.settlerKey ?? (config.settler_key_env ? env[config.settler_key_env] : undefined);
    if (key !== undefined && !/^0x[0-9a-fA-F]{64}$/.test(key)) {
      throw new SettlementError('not_configured', `settler key in ${config.settler_key_env} is not a 32-byte hex key`, name);
    }
    this.settlerKey = key as Hex | undefined;
    this.account = key ? privateKeyToAccount(key as Hex) : undefined;
    this.canSettle = this.account !== undefined;
    const account = this.account;
    this.queue = account
      ? nonceQueueFor(config.chain_id, config.rpc_url, account.address, () =>
          this.client.getTransactionCount({ address: account.address, blockTag: 'pending' }),
        )
      : undefined;
  }

  balanceOf(account: Address, atBlock?: bigint): Promise<bigint> {
    return this.client.readContract({ address: this.escrow, abi: escrowAbi, functionName: 'balanceOf', args: [account], blockNumber: atBlock });
  }

  async pendingWithdrawal(account: Address) {
    const [amount, readyAt] = await this.client.readContract({
      address: this.escrow,
      abi: escrowAbi,
      functionName: 'pendingWithdrawal',
      args: [account],
    });
    return amount === 0n ? null : { amount, readyAt };
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

  async latestBlock(): Promise<bigint> {
    const head = await this.client.getBlockNumber({ cacheTime: 0 });
    const confirmed = head - BigInt(this.config.confirmations - 1);
    return confirmed < 0n ? 0n : confirmed;
  }

  async readEvents(fromBlock: bigint, toBlock: bigint): Promise<EscrowEvent[]> {
    const events: EscrowEvent[] = [];
    // Public RPCs cap eth_getLogs ranges (often 2k-10k blocks): ask in slices.
    // Raw eth_getLogs + decodeEscrowLog: one Charged log per billed call, viem's formatting is too slow.
    for (let from = fromBlock; from <= toBlock; from += LOG_RANGE) {
      const to = from + LOG_RANGE - 1n < toBlock ? from + LOG_RANGE - 1n : toBlock;
      const logs = await this.client.request({
        method: 'eth_getLogs',
        params: [{ address: this.escrow, fromBlock: numberToHex(from), toBlock: numberToHex(to) }],
      });
      for (const log of logs) {
        if (log.removed) continue;
        const event = decodeEscrowLog(log); // role, cap and ownership events move no money
        if (event && isMoneyEvent(event)) events.push(event);
      }
    }
    return events.sort((a, b) =>
      a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1,
    );
  }

  async charge(charges: readonly Charge[]): Promise<BatchReceipt> {
    return (await this.submitCharges(charges)).wait();
  }

  async submitCharges(charges: readonly Charge[]): Promise<PendingBatch> {
    const { account, queue } = this;
    if (!account || !queue) throw new SettlementError('not_configured', 'no settler key configured', this.name);
    this.validate(charges);
    const batch = [...charges];
    const data = encodeChargeBatch(batch);
    const gas = gasLimitFor(batch.length);
    const failuresAtSend = this.failures;
    let tx: InFlight;
    try {
      // Preflight outside the nonce queue so concurrent batches only serialize sign + send.
      const preflight = this.simulateNext ? this.preflight(account.address, data, gas) : undefined;
      const [fees] = await Promise.all([this.client.estimateFeesPerGas(), preflight]);
      tx = { ...(await this.sendNext(queue, data, gas, fees)), data, gas, fees };
    } catch (err) {
      this.failed();
      throw err;
    }
    // Watched from now on, awaited or not, so a stuck batch gets replaced either way.
    const settled = this.waitForBatch(tx)
      .then((r) => this.toBatchReceipt(r, batch))
      .then(
        (receipt) => {
          if (this.failures === failuresAtSend) this.simulateNext = false;
          return receipt;
        },
        (err: unknown) => {
          this.failed();
          throw err;
        },
      );
    settled.catch(() => undefined); // reported through wait(); not an unhandled rejection
    return { nonce: tx.nonce, txHash: tx.hashes[0]!, wait: () => settled };
  }

  private failed(): void {
    this.failures++;
    this.simulateNext = true;
  }

  // Takes the next nonce and sends; if another sender used the key meanwhile ("nonce too low"),
  // the queue resyncs from the chain and we try again.
  private async sendNext(queue: NonceQueue, data: Hex, gas: bigint, fees: Fees) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await queue.run(async (nonce) => ({ nonce, hashes: [await this.send(nonce, data, gas, fees)] }));
      } catch (err) {
        if (attempt >= 3 || !isNonceConsumed(err)) throw err;
      }
    }
  }

  private validate(charges: readonly Charge[]): void {
    const bad = (m: string) => new SettlementError('invalid_batch', m, this.name);
    if (charges.length === 0) throw bad('empty batch');
    if (charges.length > MAX_CHARGES_PER_BATCH) throw bad(`${charges.length} charges > ${MAX_CHARGES_PER_BATCH}`);
    for (const c of charges) {
      if (!/^0x[0-9a-fA-F]{64}$/.test(c.callId)) throw bad(`call id ${c.callId} is not 32 bytes`);
      if (!/^0x[0-9a-fA-F]{40}$/.test(c.account)) throw bad(`account ${c.account} is not an address`);
      if (c.amount < 0n || c.amount > UINT256_MAX) throw bad(`amount ${c.amount} out of range`);
    }
  }

  // eth_call of the batch (see simulateNext): a revert (missing role, token failure) is reported before paying gas.
  private async preflight(from: Address, data: Hex, gas: bigint): Promise<void> {
    try {
      await this.client.call({ account: from, to: this.escrow, data, gas });
    } catch (err) {
      const revertData = err instanceof BaseError ? revertDataOf(err) : undefined;
      if (revertData === undefined) throw err; // infrastructure, not a revert
      const name = decodeEscrowError(revertData);
      const code = name === 'NotSettler' ? 'not_settler' : name === 'LengthMismatch' ? 'invalid_batch' : 'reverted';
      throw new SettlementError(code, `chargeBatch would revert: ${name ?? revertData}`, this.name, { cause: err });
    }
  }

  private async send(nonce: number, data: Hex, gas: bigint, fees: Fees): Promise<Hex> {
    // Signed with the settler key as account.signTransaction would, on a faster keccak (charge-tx.ts).
    const serializedTransaction = await signTransaction({
      type: 'eip1559',
      chainId: this.chainId,
      nonce,
      to: this.escrow,
      data,
      gas,
      ...fees,
    }, this.settlerKey!);
    return this.client.request({ method: 'eth_sendRawTransaction', params: [serializedTransaction] });
  }

  // Polls for a receipt of any of the batch's transactions. While none is mined, re-sends it
  // every replace_after_ms with the same nonce and a higher fee (covers stuck and dropped txs).
  private async waitForBatch(tx: InFlight): Promise<MinedBatch> {
    let replacements = 0;
    let lastError: unknown;
    let deadline = Date.now() + this.config.replace_after_ms;
    for (;;) {
      let mined = false;
      for (const hash of [...tx.hashes]) {
        const receipt = await this.receiptOf(hash);
        if (!receipt) continue;
        mined = true;
        if (await this.confirmed(receipt)) return receipt;
      }
      if (!mined && Date.now() >= deadline) {
        if (replacements >= this.maxReplacements) {
          const msg = `batch ${tx.hashes[0]} (nonce ${tx.nonce}) not mined after ${replacements} replacements`;
          throw new SettlementError('timeout', msg, this.name, { cause: lastError });
        }
        replacements++;
        lastError = await this.replace(tx).catch((err: unknown) => err);
        deadline = Date.now() + this.config.replace_after_ms;
      }
      await sleep(this.pollMs);
    }
  }

  private async replace(tx: InFlight): Promise<undefined> {
    const now = await this.client.estimateFeesPerGas();
    tx.fees = {
      maxPriorityFeePerGas: max((tx.fees.maxPriorityFeePerGas * FEE_BUMP_PERCENT) / 100n + 1n, now.maxPriorityFeePerGas),
      maxFeePerGas: max((tx.fees.maxFeePerGas * FEE_BUMP_PERCENT) / 100n + 1n, now.maxFeePerGas),
    };
    try {
      tx.hashes.push(await this.send(tx.nonce, tx.data, tx.gas, tx.fees));
    } catch (err) {
      // "nonce too low" / "already known": one of ours was mined or is pending; keep polling.
      if (!isNonceConsumed(err)) throw err;
    }
    return undefined;
  }

  // True once the receipt's block has the configured confirmations and is still canonical.
  private async confirmed(receipt: MinedBatch): Promise<boolean> {
    if (this.config.confirmations <= 1) return true;
    const head = await this.client.getBlockNumber({ cacheTime: 0 });
    if (head < receipt.blockNumber + BigInt(this.config.confirmations - 1)) return false;
    const again = await this.receiptOf(receipt.transactionHash);
    return again?.blockHash === receipt.blockHash;
  }

  // null while not mined, and on any RPC error (the caller polls again).
  private async receiptOf(hash: Hex): Promise<MinedBatch | null> {
    const r = await this.client.request({ method: 'eth_getTransactionReceipt', params: [hash] }).catch(() => null);
    if (!r) return null;
    return {
      transactionHash: r.transactionHash,
      blockHash: r.blockHash,
      blockNumber: BigInt(r.blockNumber),
      gasUsed: BigInt(r.gasUsed),
      success: r.status === '0x1',
      logs: r.logs,
    };
  }

  private toBatchReceipt(receipt: MinedBatch, batch: Charge[]): BatchReceipt {
    if (!receipt.success) {
      throw new SettlementError('reverted', `chargeBatch ${receipt.transactionHash} reverted onchain`, this.name);
    }
    const escrow = this.escrow.toLowerCase();
    const events: Extract<EscrowEvent, { kind: 'charged' | 'charge_refused' | 'charge_over_cap' | 'charge_skipped' }>[] = [];
    for (const log of receipt.logs) {
      if (log.address.toLowerCase() !== escrow) continue; // the token's Transfer to the treasury
      const e = decodeEscrowLog(log);
      if (e?.kind === 'charged' || e?.kind === 'charge_refused' || e?.kind === 'charge_over_cap' || e?.kind === 'charge_skipped') events.push(e);
    }
    // The contract emits exactly one of these per entry, in entry order.
    if (events.length !== batch.length) {
      throw new Error(`${this.name}: batch ${receipt.transactionHash} has ${events.length} charge events for ${batch.length} charges`);
    }
    let total = 0n;
    const results = batch.map((charge, i): ChargeResult => {
      const e = events[i]!;
      if (e.callId.toLowerCase() !== charge.callId.toLowerCase()) {
        throw new Error(`${this.name}: charge event ${i} of ${receipt.transactionHash} is for another call id`);
      }
      switch (e.kind) {
        case 'charged':
          total += charge.amount;
          return { ...charge, outcome: 'charged' };
        case 'charge_refused':
          return { ...charge, outcome: 'refused', balance: e.balance };
        case 'charge_over_cap':
          return { ...charge, outcome: 'over_cap', maxCharge: e.maxCharge };
        case 'charge_skipped':
          return { ...charge, outcome: e.status === 'refused' ? 'already_refused' : 'already_charged' };
      }
    });
    return { txHash: receipt.transactionHash, blockNumber: receipt.blockNumber, gasUsed: receipt.gasUsed, total, results };
  }
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

function isNonceConsumed(err: unknown): boolean {
  const text = err instanceof BaseError ? `${err.shortMessage} ${err.details}` : String(err);
  return /nonce too low|already known|known transaction|nonce has already been used/i.test(text);
}

function revertDataOf(err: BaseError): Hex | undefined {
  const withData = err.walk((e) => typeof e === 'object' && e !== null && 'data' in e) as { data?: unknown } | null;
  const data = withData?.data;
  const hex = typeof data === 'object' && data !== null ? (data as { data?: unknown }).data : data;
  return typeof hex === 'string' && /^0x[0-9a-fA-F]*$/.test(hex) ? (hex as Hex) : undefined;
}

function decodeEscrowError(data: Hex | undefined): string | undefined {
  if (!data || data.length < 10) return undefined;
  try {
    return decodeErrorResult({ abi: escrowAbi, data }).errorName;
  } catch {
    return undefined; // not one of the escrow's errors (e.g. out of gas, a token revert)
  }
}
