/**
 * The charges of an EvmChain: Escrow.chargeBatch transactions signed locally with the settler key, one nonce queue
 * per key and chain; each batch watched until mined with its confirmations, replaced with higher fees while stuck,
 * and read back as one outcome per charge.
 */
import { BaseError, decodeErrorResult, parseGwei, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { escrowAbi } from './abi.js';
import { encodeChargeBatch, signTransaction } from './charge-tx.js';
import type { Address, ChainConfig, ChainName } from './config.js';
import { decodeEscrowLog, type RpcLog } from './escrow-logs.js';
import type { EscrowReads } from './evm-reads.js';
import { nonceQueueFor, type NonceQueue } from './nonce-queue.js';
import {
  SettlementError,
  type BatchReceipt,
  type Charge,
  type ChargeResult,
  type EscrowEvent,
  type PendingBatch,
} from './port.js';

/**
 * Most charges in one batch: 96 bytes of calldata each, so a batch of 1,200 is a ~115 KB transaction, under the
 * 128 KB that geth's and reth's pools take (TX_MAX_SIZE, 4 slots of 32 KB), with room. Its gas is bounded apart
 * (gasLimitFor, chains.<name>.max_batch_gas).
 */
export const MAX_CHARGES_PER_BATCH = 1_200;

/** Most gas one transaction may have since EIP-7825 (Osaka): 2^24. */
export const TX_GAS_CAP = 16_777_216;

// Gas bounds of chargeBatch (contracts/Escrow.sol), each above what the costliest case measured on the dev chain:
// a charge ~3,500-4,000 (its calldata, ~0.9-1.5k, one event, the loop) whatever its outcome; a status word the batch
// moves to ~22,100 (a cold SLOAD, an SSTORE from zero); an account charged ~5,000 (its balance slot cold, written);
// the transaction, the escrow's settings and the treasury transfer ~62,000 (~79,000 when the treasury holds none).
const GAS_PER_BATCH = 100_000n;
const GAS_PER_CHARGE = 6_000n;
const GAS_PER_WORD = 25_000n;
const GAS_PER_ACCOUNT = 7_000n;

/**
 * Gas limit of a batch: an upper bound of what it can use, not an estimate, since state can change before mining (a
 * deposit turns cheap refusals into charges). It counts what costs: each charge, each status word the batch moves
 * to (consecutive call ids, the gateway's own, share a word per 128: ~4k gas a charge; each id a word of its own:
 * ~26k) and each account. Only gas used is paid; the limit is what a block must have room for, and what the
 * sender's balance must cover at max_fee_per_gas while the batch is unmined.
 */
export function gasLimitFor(charges: readonly Charge[]): bigint {
  let gas = GAS_PER_BATCH;
  let word: bigint | undefined;
  const accounts = new Set<string>();
  for (const c of charges) {
    gas += GAS_PER_CHARGE;
    const w = BigInt(c.callId) >> 7n;
    if (w !== word) gas += GAS_PER_WORD;
    word = w;
    const a = c.account.toLowerCase();
    if (!accounts.has(a)) {
      accounts.add(a);
      gas += GAS_PER_ACCOUNT;
    }
  }
  return gas;
}

// Replacement must beat the old fees by >= 10% (geth, EDR); 25% leaves room.
const FEE_BUMP_PERCENT = 125n;
const REPLACEMENT_MIN_PERCENT = 110n;
const UINT256_MAX = 2n ** 256n - 1n;

/** Waits `ms`; an abort ends the wait with the signal's reason. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
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

export class ChargeSender {
  readonly canSettle: boolean;
  private readonly escrow: Address;
  private readonly chainId: number;
  private readonly account: PrivateKeyAccount | undefined;
  private readonly settlerKey: Hex | undefined;
  private readonly queue: NonceQueue | undefined;
  /** Settlement fee ceiling, wei (config max_fee_per_gas, gwei). */
  private readonly maxFeePerGas: bigint;
  /** Most gas one batch may have (config max_batch_gas). */
  private readonly maxBatchGas: bigint;
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
    private readonly name: ChainName,
    private readonly config: ChainConfig,
    private readonly client: PublicClient,
    private readonly reads: EscrowReads,
    settlerKey: Hex | undefined,
    private readonly pollMs: number,
    private readonly maxReplacements: number,
    private readonly onFeeCapped: (() => void) | undefined,
  ) {
    this.escrow = config.escrow;
    this.chainId = config.chain_id;
    this.maxFeePerGas = parseGwei(config.max_fee_per_gas);
    this.maxBatchGas = BigInt(Math.min(config.max_batch_gas, TX_GAS_CAP));
    this.settlerKey = settlerKey;
    this.account = settlerKey ? privateKeyToAccount(settlerKey) : undefined;
    this.canSettle = this.account !== undefined;
    const account = this.account;
    this.queue = account
      ? nonceQueueFor(config.chain_id, config.rpc_url, account.address, () =>
          this.client.getTransactionCount({ address: account.address, blockTag: 'pending' }),
        )
      : undefined;
  }

  batchFits(charges: readonly Charge[]): number {
    let gas = GAS_PER_BATCH;
    let word: bigint | undefined;
    const accounts = new Set<string>();
    const most = Math.min(charges.length, MAX_CHARGES_PER_BATCH);
    for (let i = 0; i < most; i++) {
      const c = charges[i]!;
      let next = gas + GAS_PER_CHARGE;
      const w = BigInt(c.callId) >> 7n;
      if (w !== word) next += GAS_PER_WORD;
      const a = c.account.toLowerCase();
      if (!accounts.has(a)) next += GAS_PER_ACCOUNT;
      if (next > this.maxBatchGas) return i;
      gas = next;
      word = w;
      accounts.add(a);
    }
    return most;
  }

  async submitCharges(charges: readonly Charge[], opts: { signal?: AbortSignal } = {}): Promise<PendingBatch> {
    const { account, queue } = this;
    if (!account || !queue) throw new SettlementError('not_configured', 'no settler key configured', this.name);
    this.validate(charges);
    const batch = [...charges];
    const data = encodeChargeBatch(batch);
    const gas = gasLimitFor(batch);
    if (gas > this.maxBatchGas)
      throw new SettlementError('invalid_batch', `gas limit ${gas} > max_batch_gas ${this.maxBatchGas}`, this.name);
    const failuresAtSend = this.failures;
    let tx: InFlight;
    try {
      // Preflight outside the nonce queue so concurrent batches only serialize sign + send.
      const preflight = this.simulateNext ? this.preflight(account.address, data, gas) : undefined;
      const [fees] = await Promise.all([this.feesUnderCap(), preflight]);
      tx = { ...(await this.sendNext(queue, data, gas, fees)), data, gas, fees };
    } catch (err) {
      // Fees above the ceiling say nothing about the batch: the next one need not be simulated for it.
      if (!(err instanceof SettlementError && err.code === 'fee_capped')) this.failed();
      throw err;
    }
    // Watched from now on, awaited or not, so a stuck batch gets replaced either way. A batch mined without a revert
    // shows the role and the token work: the batches after it go unsimulated, unless one failed since it was sent.
    let leftMempool!: () => void;
    const mined = new Promise<void>((resolve) => (leftMempool = resolve));
    const onMined = (ok: boolean) => {
      leftMempool();
      if (ok && this.failures === failuresAtSend) this.simulateNext = false;
    };
    const settled = this.waitForBatch(tx, batch, onMined, opts.signal)
      .catch((err: unknown) => {
        // A stop is no failure of the batch: it stays unacknowledged, watched again by whoever takes it over.
        if (!opts.signal?.aborted) this.failed();
        throw err;
      })
      .finally(leftMempool);
    settled.catch(() => undefined); // reported through wait(); not an unhandled rejection
    return { nonce: tx.nonce, txHash: tx.hashes[0]!, mined, wait: () => settled };
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
    const serializedTransaction = await signTransaction(
      {
        type: 'eip1559',
        chainId: this.chainId,
        nonce,
        to: this.escrow,
        data,
        gas,
        ...fees,
      },
      this.settlerKey!,
    );
    return this.client.request({ method: 'eth_sendRawTransaction', params: [serializedTransaction] });
  }

  /**
   * Polls for a receipt of any of the batch's transactions. While none is mined, re-sends it every replace_after_ms
   * with the same nonce and a higher fee (covers stuck and dropped txs). Once one is mined, only the shared head is
   * polled until the receipt's block has its confirmations; then the block is checked to be still canonical. A
   * receipt whose block was reorganised away is polled for again, as unmined: on the new branch it is mined again,
   * or replaced. Batches of one key wait side by side: many in flight cost one head request a poll, and each keeps
   * what its receipt says (its outcomes, or its revert), not the receipt's logs.
   */
  private async waitForBatch(
    tx: InFlight,
    batch: Charge[],
    onMined: (ok: boolean) => void,
    signal: AbortSignal | undefined,
  ): Promise<BatchReceipt> {
    let replacements = 0;
    let lastError: unknown;
    let deadline = Date.now() + this.config.replace_after_ms;
    let mined: { at: MinedBatch; receipt: BatchReceipt | undefined; error: unknown } | null = null;
    for (;;) {
      signal?.throwIfAborted();
      if (!mined) {
        for (const hash of [...tx.hashes]) {
          const r = await this.receiptOf(hash);
          if (!r) continue;
          try {
            mined = { at: { ...r, logs: [] }, receipt: this.toBatchReceipt(r, batch), error: undefined };
          } catch (err) {
            mined = { at: { ...r, logs: [] }, receipt: undefined, error: err };
          }
          onMined(mined.receipt !== undefined);
          break;
        }
      }
      if (mined) {
        const state = await this.confirmation(mined.at);
        if (state === 'confirmed') {
          if (mined.receipt) return mined.receipt;
          throw mined.error;
        }
        if (state === 'reorged') {
          mined = null;
          deadline = Date.now() + this.config.replace_after_ms;
        }
      } else if (Date.now() >= deadline) {
        if (replacements >= this.maxReplacements) {
          // Its nonce may be a gap now (a node dropped it): the key's next transaction is to fill it.
          this.queue?.resync();
          const msg = `batch ${tx.hashes[0]} (nonce ${tx.nonce}) not mined after ${replacements} replacements`;
          throw new SettlementError('timeout', msg, this.name, { cause: lastError });
        }
        replacements++;
        lastError = await this.replace(tx).catch((err: unknown) => err);
        deadline = Date.now() + this.config.replace_after_ms;
      }
      await sleep(this.pollMs, signal);
    }
  }

  /**
   * Fees for a new batch at or under the ceiling (max_fee_per_gas). While the base fee is above the ceiling nothing
   * could be mined for it: the batch waits, polling, up to replace_after_ms, then fails with fee_capped (the settler
   * retries it later; its debits stay queued). Never pays more than the ceiling.
   */
  private async feesUnderCap(): Promise<Fees> {
    const deadline = Date.now() + this.config.replace_after_ms;
    for (let reported = false; ; ) {
      const { baseFeePerGas, fees } = await this.estimateFees();
      if (baseFeePerGas <= this.maxFeePerGas) return this.capped(fees);
      if (!reported) this.onFeeCapped?.();
      reported = true;
      if (Date.now() >= deadline) {
        const msg = `base fee ${baseFeePerGas} wei above max_fee_per_gas ${this.maxFeePerGas} wei for ${this.config.replace_after_ms} ms: batch not sent`;
        throw new SettlementError('fee_capped', msg, this.name);
      }
      await sleep(this.pollMs);
    }
  }

  /** `fees` with maxFeePerGas at most the ceiling and the tip at most maxFeePerGas. */
  private capped(fees: Fees): Fees {
    const maxFeePerGas = fees.maxFeePerGas < this.maxFeePerGas ? fees.maxFeePerGas : this.maxFeePerGas;
    const maxPriorityFeePerGas = fees.maxPriorityFeePerGas < maxFeePerGas ? fees.maxPriorityFeePerGas : maxFeePerGas;
    return { maxFeePerGas, maxPriorityFeePerGas };
  }

  /** The latest block's base fee, and fees as viem estimates them (1.2 x base fee + the node's suggested tip). */
  private async estimateFees(): Promise<{ baseFeePerGas: bigint; fees: Fees }> {
    const block = await this.client.getBlock({ blockTag: 'latest' });
    const baseFeePerGas = block.baseFeePerGas ?? 0n;
    const fees = await this.client.estimateFeesPerGas({ block } as never);
    return {
      baseFeePerGas,
      fees: { maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas },
    };
  }

  private async replace(tx: InFlight): Promise<undefined> {
    const { fees: now } = await this.estimateFees();
    const next = this.capped({
      maxPriorityFeePerGas: max(
        (tx.fees.maxPriorityFeePerGas * FEE_BUMP_PERCENT) / 100n + 1n,
        now.maxPriorityFeePerGas,
      ),
      maxFeePerGas: max((tx.fees.maxFeePerGas * FEE_BUMP_PERCENT) / 100n + 1n, now.maxFeePerGas),
    });
    // Under the ceiling a bump may fall short of what a node takes as a replacement: then the batch waits as sent.
    if (
      next.maxFeePerGas * 100n < tx.fees.maxFeePerGas * REPLACEMENT_MIN_PERCENT ||
      next.maxPriorityFeePerGas * 100n < tx.fees.maxPriorityFeePerGas * REPLACEMENT_MIN_PERCENT
    ) {
      this.onFeeCapped?.();
      return undefined;
    }
    tx.fees = next;
    try {
      tx.hashes.push(await this.send(tx.nonce, tx.data, tx.gas, tx.fees));
    } catch (err) {
      // "nonce too low" / "already known": one of ours was mined or is pending; keep polling.
      if (!isNonceConsumed(err)) throw err;
    }
    return undefined;
  }

  /**
   * Whether the receipt's block has the configured confirmations and is still the chain's block at its height
   * (`reorged`: it is not). An RPC error reads as `waiting`: the next poll asks again.
   */
  private async confirmation(receipt: MinedBatch): Promise<'confirmed' | 'waiting' | 'reorged'> {
    if (this.config.confirmations <= 1) return 'confirmed';
    try {
      const head = await this.reads.headNumber();
      if (head < receipt.blockNumber + BigInt(this.config.confirmations - 1)) return 'waiting';
      const hash = await this.reads.blockHash(receipt.blockNumber);
      return hash?.toLowerCase() === receipt.blockHash.toLowerCase() ? 'confirmed' : 'reorged';
    } catch {
      return 'waiting';
    }
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
    const events: Extract<
      EscrowEvent,
      { kind: 'charged' | 'charge_refused' | 'charge_over_cap' | 'charge_skipped' }
    >[] = [];
    for (const log of receipt.logs) {
      if (log.address.toLowerCase() !== escrow) continue; // the token's Transfer to the treasury
      const e = decodeEscrowLog(log);
      if (
        e?.kind === 'charged' ||
        e?.kind === 'charge_refused' ||
        e?.kind === 'charge_over_cap' ||
        e?.kind === 'charge_skipped'
      )
        events.push(e);
    }
    // The contract emits exactly one of these per entry, in entry order.
    if (events.length !== batch.length) {
      throw new Error(
        `${this.name}: batch ${receipt.transactionHash} has ${events.length} charge events for ${batch.length} charges`,
      );
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
    return {
      txHash: receipt.transactionHash,
      blockNumber: receipt.blockNumber,
      gasUsed: receipt.gasUsed,
      total,
      results,
    };
  }
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/**
 * The node refused the nonce as taken: mined already, or held in its mempool by another transaction, which a
 * settler of the same key in another process sent on its own count ("replacement transaction underpriced", geth's
 * and EDR's words, when ours does not outbid it).
 */
function isNonceConsumed(err: unknown): boolean {
  const text = err instanceof BaseError ? `${err.shortMessage} ${err.details}` : String(err);
  return /nonce too low|already known|known transaction|nonce has already been used|replacement transaction underpriced/i.test(
    text,
  );
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
