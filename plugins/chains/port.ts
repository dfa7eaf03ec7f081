/**
 * The SettlementChain port: what billing, the settler and the chain watcher need from one
 * chain's escrow (DESIGN.md "Onchain", STYLE.md "chains behind a narrow port"). No viem here.
 * Money is bigint atomic units (6 decimals). Expected outcomes are results; thrown errors
 * (SettlementError or others) are bugs and infrastructure faults.
 */
import type { Address, ChainName } from './config.js';

/** A 0x-prefixed hex string. */
export type Hex = `0x${string}`;

/** Fields of every escrow event record. `callId` is null for events without one. */
interface EventBase {
  account: Address;
  amount: bigint;
  callId: Hex | null;
  blockNumber: bigint;
  logIndex: number;
  txHash: Hex;
}

/** One escrow event, decoded (contracts/Escrow.sol events, snake_case kinds). */
export type EscrowEvent =
  | (EventBase & { kind: 'deposited'; callId: null; from: Address })
  | (EventBase & { kind: 'charged'; callId: Hex })
  | (EventBase & { kind: 'charge_refused'; callId: Hex; balance: bigint })
  /** Refused: `amount` is above the escrow's per-charge cap (the call id is closed as refused). */
  | (EventBase & { kind: 'charge_over_cap'; callId: Hex; maxCharge: bigint })
  | (EventBase & { kind: 'charge_skipped'; callId: Hex; status: 'charged' | 'refused' })
  | (EventBase & { kind: 'withdrawal_requested'; callId: null; readyAt: bigint })
  | (EventBase & { kind: 'withdrawal_cancelled'; callId: null })
  /** `amount` paid of `requested` (less when charges landed during the timelock). */
  | (EventBase & { kind: 'withdrawn'; callId: null; requested: bigint });

/** Kind of an escrow event. */
export type EscrowEventKind = EscrowEvent['kind'];

/** Position fields of every escrow log record. */
interface LogPosition {
  blockNumber: bigint;
  logIndex: number;
  txHash: Hex;
}

/**
 * An escrow event that moves no money: roles, ownership, the charge cap. The watcher counts and logs them: a
 * proposal is a change to who can take callers' money, announced roleDelay before it can apply.
 */
export type EscrowAdminEvent = LogPosition &
  (
    | { kind: 'settler_proposed'; settler: Address; readyAt: bigint }
    | { kind: 'settler_proposal_cancelled'; settler: Address }
    | { kind: 'settler_updated'; settler: Address; enabled: boolean }
    | { kind: 'treasury_proposed'; treasury: Address; readyAt: bigint }
    | { kind: 'treasury_proposal_cancelled'; treasury: Address }
    | { kind: 'treasury_updated'; previous: Address; treasury: Address }
    | { kind: 'max_charge_proposed'; maxCharge: bigint; readyAt: bigint }
    | { kind: 'max_charge_proposal_cancelled'; maxCharge: bigint }
    | { kind: 'max_charge_updated'; previous: bigint; maxCharge: bigint }
    | { kind: 'ownership_transfer_started'; owner: Address; pendingOwner: Address }
    | { kind: 'ownership_transferred'; previous: Address; owner: Address }
  );

/** Kind of an escrow admin event. */
export type EscrowAdminEventKind = EscrowAdminEvent['kind'];

/** A block as the node that answered had it. */
export interface BlockRef {
  number: bigint;
  hash: Hex;
}

/**
 * What scanEvents read. `to` is where the scan stopped: the requested end, or short of it when the node's log range
 * limit made it read less (the caller scans on from `to.number + 1`). Expected failures are results: the node that
 * answered has not reached the range's end yet (`node_behind`: retry later), or the block the caller scanned last is
 * no longer the node's block at that height (`reorged`: a reorganisation deeper than the confirmations).
 */
export type ScanResult =
  | {
      ok: true;
      events: EscrowEvent[];
      admin: EscrowAdminEvent[];
      to: BlockRef;
      /** eth_getLogs range in blocks after this scan, and how many times it was halved during it. */
      span: number;
      splits: number;
    }
  | { ok: false; reason: 'node_behind'; block: bigint; detail: string }
  | { ok: false; reason: 'reorged'; block: bigint; expected: Hex; found: Hex };

/** One call to charge. */
export interface Charge {
  /** 32-byte call id (callIdOf, request-ids.ts). */
  callId: Hex;
  account: Address;
  amount: bigint;
}

/**
 * What the escrow did with one charge: charged now; refused now (balance too low), or over_cap (above the escrow's
 * per-charge cap), either closing the call id for good; or settled by an earlier batch (already_*), nothing changed
 * (an earlier over_cap reads as already_refused).
 */
export type ChargeOutcome = 'charged' | 'refused' | 'over_cap' | 'already_charged' | 'already_refused';

/** Outcome of one charge of a mined batch. */
export interface ChargeResult extends Charge {
  outcome: ChargeOutcome;
  /** The account's escrow balance when refused now; absent otherwise. */
  balance?: bigint;
  /** The escrow's per-charge cap when over_cap; absent otherwise. */
  maxCharge?: bigint;
}

/** A mined (and confirmed) charge batch, results in the order the charges were given. */
export interface BatchReceipt {
  txHash: Hex;
  blockNumber: bigint;
  gasUsed: bigint;
  /** Sum moved to the treasury by this batch. */
  total: bigint;
  results: ChargeResult[];
}

/** A charge batch sent to the chain, not yet confirmed. */
export interface PendingBatch {
  nonce: number;
  /** Hash of the first transaction sent (replacements may follow). */
  txHash: Hex;
  /** Resolves once mined and confirmed; re-sends with a higher fee if stuck; rejects when it reverted. */
  wait(): Promise<BatchReceipt>;
  /**
   * Resolves once a transaction of the batch is mined (confirmed or not, reverted or not), or the batch failed
   * unmined; never rejects. Absent: known only through wait().
   */
  mined?: Promise<void>;
}

/** A requested withdrawal, payable from `readyAt` (unix seconds). */
export interface PendingWithdrawal {
  amount: bigint;
  readyAt: bigint;
}

/** Settlement status of a call id in the escrow. */
export type CallStatus = 'none' | 'charged' | 'refused';

/** One chain's escrow, as seen by the gateway. */
export interface SettlementChain {
  readonly name: ChainName;
  readonly chainId: number;
  readonly escrow: Address;
  /** Whether a settler key is configured (else submitCharges throws not_configured). */
  readonly canSettle: boolean;
  /** Escrow balance of `account` at the latest block, or at block `atBlock`. */
  balanceOf(account: Address, atBlock?: bigint): Promise<bigint>;
  /** The account's withdrawal request (at the latest block, or at `atBlock`), or null. */
  pendingWithdrawal(account: Address, atBlock?: bigint): Promise<PendingWithdrawal | null>;
  /** The hash of the node's block at height `number`, or null when it has none there. */
  blockHash(number: bigint): Promise<Hex | null>;
  callStatus(callId: Hex): Promise<CallStatus>;
  /** The escrow's per-charge cap now (a hold above it could never be charged in one charge). */
  maxCharge(): Promise<bigint>;
  /** Seconds between a withdrawal request and the earliest withdraw: how long a debit may wait for its charge. */
  withdrawalDelay(): Promise<bigint>;
  /** Latest block with the configured confirmations (head - confirmations + 1). */
  latestBlock(): Promise<bigint>;
  /** Escrow money events in [fromBlock, toBlock], ordered by block then log index. */
  readEvents(fromBlock: bigint, toBlock: bigint): Promise<EscrowEvent[]>;
  /**
   * Escrow events from `fromBlock` on, at most up to `toBlock`, checked for the watcher: the node that answered had
   * the range's last block, and `parent` (the last block scanned before, when known) is still the node's block at
   * its height. Reads as many blocks as the node's eth_getLogs limits allow in one request.
   */
  scanEvents(fromBlock: bigint, toBlock: bigint, parent: BlockRef | null): Promise<ScanResult>;
  /**
   * How many of `charges`, from the first, one batch can carry (its gas bound under the chain's max_batch_gas, its
   * size under nodes' limits); absent: all of them.
   */
  batchFits?(charges: readonly Charge[]): number;
  /**
   * Sends one chargeBatch transaction (serialized per settler key: never a nonce clash; batches of one key may be in
   * flight side by side, on consecutive nonces). `signal` stops watching it (its wait() rejects): a stopping settler
   * leaves it unacknowledged, for whoever takes its debits over.
   */
  submitCharges(charges: readonly Charge[], opts?: { signal?: AbortSignal }): Promise<PendingBatch>;
  /** submitCharges, then wait. */
  charge(charges: readonly Charge[]): Promise<BatchReceipt>;
}

/** Codes of SettlementError. */
export type SettlementErrorCode =
  | 'not_configured' // no settler key
  | 'not_settler' // the key lacks the settler role
  | 'invalid_batch' // empty, too large, malformed entries
  | 'reverted' // the batch would revert or did revert onchain
  | 'fee_capped' // the base fee stayed above max_fee_per_gas: not sent, the debits wait
  | 'timeout'; // not mined in time even after replacements

/** An infrastructure or configuration fault of a chain operation. */
export class SettlementError extends Error {
  override readonly name = 'SettlementError';
  constructor(
    readonly code: SettlementErrorCode,
    message: string,
    readonly chain: ChainName,
    options?: { cause?: unknown },
  ) {
    super(`${chain}: ${message}`, options);
  }
}
