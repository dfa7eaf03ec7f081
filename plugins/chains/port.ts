/**
 * The SettlementChain port: what billing, the settler and the chain watcher need from one
 * chain's escrow (DESIGN.md "Onchain", STYLE.md "chains behind a narrow port"). No viem here.
 * Money is bigint atomic units (6 decimals). Expected outcomes are results; thrown errors
 * (SettlementError or others) are bugs and infrastructure faults.
 */
import { hash } from 'node:crypto';
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
  | (EventBase & { kind: 'charge_skipped'; callId: Hex; status: 'charged' | 'refused' })
  | (EventBase & { kind: 'withdrawal_requested'; callId: null; readyAt: bigint })
  | (EventBase & { kind: 'withdrawal_cancelled'; callId: null })
  /** `amount` paid of `requested` (less when charges landed during the timelock). */
  | (EventBase & { kind: 'withdrawn'; callId: null; requested: bigint });

/** Kind of an escrow event. */
export type EscrowEventKind = EscrowEvent['kind'];

/** One call to charge. */
export interface Charge {
  /** 32-byte call id (see callIdOf). */
  callId: Hex;
  account: Address;
  amount: bigint;
}

/**
 * What the escrow did with one charge: charged now; refused now (balance too low, the call id
 * is then closed for good); or settled by an earlier batch (already_*), nothing changed.
 */
export type ChargeOutcome = 'charged' | 'refused' | 'already_charged' | 'already_refused';

/** Outcome of one charge of a mined batch. */
export interface ChargeResult extends Charge {
  outcome: ChargeOutcome;
  /** The account's escrow balance when refused now; absent otherwise. */
  balance?: bigint;
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
  /** Resolves once mined and confirmed; re-sends with a higher fee if stuck. */
  wait(): Promise<BatchReceipt>;
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
  /** The account's withdrawal request, or null. */
  pendingWithdrawal(account: Address): Promise<PendingWithdrawal | null>;
  callStatus(callId: Hex): Promise<CallStatus>;
  /** Latest block with the configured confirmations (head - confirmations + 1). */
  latestBlock(): Promise<bigint>;
  /** Escrow events in [fromBlock, toBlock], ordered by block then log index. */
  readEvents(fromBlock: bigint, toBlock: bigint): Promise<EscrowEvent[]>;
  /** Sends one chargeBatch transaction (serialized per settler key: never a nonce clash). */
  submitCharges(charges: readonly Charge[]): Promise<PendingBatch>;
  /** submitCharges, then wait. */
  charge(charges: readonly Charge[]): Promise<BatchReceipt>;
}

/** Codes of SettlementError. */
export type SettlementErrorCode =
  | 'not_configured' // no settler key
  | 'not_settler' // the key lacks the settler role
  | 'invalid_batch' // empty, too large, malformed entries
  | 'reverted' // the batch would revert or did revert onchain
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

const GATEWAY_REQUEST_ID = /^req_[0-9a-f]{32}$/;

/**
 * The escrow call id of a gateway call (x-request-id). A request id of the gateway's own (`req_` and 32 hex digits,
 * newRequestId) is a 128-bit number and that number is the call id: an instance's consecutive calls then share the
 * escrow's status words. Any other string: its sha256, which falls below 2^128 with odds of 2^-128, so the two
 * kinds never meet.
 */
export function callIdOf(requestId: string): Hex {
  if (GATEWAY_REQUEST_ID.test(requestId)) return `0x${'0'.repeat(32)}${requestId.slice(4)}`;
  return `0x${hash('sha256', requestId, 'hex')}`; // one-shot hash: no Hash object
}
