/**
 * Decoder of the escrow's events (contracts/Escrow.sol) straight from raw JSON-RPC logs: money events, and the
 * admin events (roles, ownership, the charge cap) the watcher reports. The chain watcher reads one Charged log per
 * billed call and the settler one charge event per charge, so this replaces viem's formatLog + parseEventLogs
 * there: selector lookup, hex slicing, and a cache of checksummed addresses (keccak once per distinct address).
 */
import { getAddress, toEventSelector, type AbiEvent } from 'viem';
import { CALL_STATUS, escrowAbi } from './abi.js';
import type { Address } from './config.js';
import type { EscrowAdminEvent, EscrowEvent, Hex } from './port.js';

/** A log as eth_getLogs and eth_getTransactionReceipt return it (the fields read here). */
export interface RpcLog {
  address: string;
  topics: readonly string[];
  data: string;
  /** Hex quantities; null only for pending logs. */
  blockNumber: string | null;
  /** Read by the watcher's scan (the log's block must be the one it checked); not by the decoder. */
  blockHash?: string | null;
  logIndex: string | null;
  transactionHash: string | null;
  removed?: boolean;
}

// One entry per money event: its ABI inputs as "type[ indexed]" (checked against escrowAbi at
// load, so a changed event fails loudly instead of being misread) and how to build the record.
// Arguments: block number, log index, tx hash, topics (t[0] is the selector), data.
// Records are single literals in readEvents' key order: spreading a shared base costs
// microseconds per log on Node 20.
type Build = (
  blockNumber: bigint,
  logIndex: number,
  txHash: Hex,
  t: readonly string[],
  data: string,
) => EscrowEvent | EscrowAdminEvent;
const LAYOUTS: Record<string, { inputs: string; build: Build }> = {
  Deposited: {
    inputs: 'address indexed,address indexed,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'deposited',
      callId: null,
      account: addressOf(t[1]!),
      from: addressOf(t[2]!),
      amount: word(data, 0),
    }),
  },
  Charged: {
    inputs: 'bytes32 indexed,address indexed,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'charged',
      callId: bytes32Of(t[1]!),
      account: addressOf(t[2]!),
      amount: word(data, 0),
    }),
  },
  ChargeRefused: {
    inputs: 'bytes32 indexed,address indexed,uint256,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'charge_refused',
      callId: bytes32Of(t[1]!),
      account: addressOf(t[2]!),
      amount: word(data, 0),
      balance: word(data, 1),
    }),
  },
  ChargeSkipped: {
    inputs: 'bytes32 indexed,address indexed,uint256,uint8',
    build: (blockNumber, logIndex, txHash, t, data) => {
      const status = word(data, 1);
      if (status > 255n) throw new Error(`status word ${status} is not a uint8`);
      return {
        blockNumber,
        logIndex,
        txHash,
        kind: 'charge_skipped',
        callId: bytes32Of(t[1]!),
        account: addressOf(t[2]!),
        amount: word(data, 0),
        // Anything but refused reads as charged (the contract emits 1 or 2).
        status: Number(status) === CALL_STATUS.refused ? 'refused' : 'charged',
      };
    },
  },
  ChargeOverCap: {
    inputs: 'bytes32 indexed,address indexed,uint256,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'charge_over_cap',
      callId: bytes32Of(t[1]!),
      account: addressOf(t[2]!),
      amount: word(data, 0),
      maxCharge: word(data, 1),
    }),
  },
  WithdrawalRequested: {
    inputs: 'address indexed,uint256,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'withdrawal_requested',
      callId: null,
      account: addressOf(t[1]!),
      amount: word(data, 0),
      readyAt: word(data, 1),
    }),
  },
  WithdrawalCancelled: {
    inputs: 'address indexed,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'withdrawal_cancelled',
      callId: null,
      account: addressOf(t[1]!),
      amount: word(data, 0),
    }),
  },
  Withdrawn: {
    inputs: 'address indexed,uint256,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'withdrawn',
      callId: null,
      account: addressOf(t[1]!),
      amount: word(data, 0),
      requested: word(data, 1),
    }),
  },
  // Admin events: no money moves; the watcher reports them.
  SettlerProposed: {
    inputs: 'address indexed,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'settler_proposed',
      settler: addressOf(t[1]!),
      readyAt: word(data, 0),
    }),
  },
  SettlerProposalCancelled: {
    inputs: 'address indexed',
    build: (blockNumber, logIndex, txHash, t) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'settler_proposal_cancelled',
      settler: addressOf(t[1]!),
    }),
  },
  SettlerUpdated: {
    inputs: 'address indexed,bool',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'settler_updated',
      settler: addressOf(t[1]!),
      enabled: bool(data, 0),
    }),
  },
  TreasuryProposed: {
    inputs: 'address indexed,uint256',
    build: (blockNumber, logIndex, txHash, t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'treasury_proposed',
      treasury: addressOf(t[1]!),
      readyAt: word(data, 0),
    }),
  },
  TreasuryProposalCancelled: {
    inputs: 'address indexed',
    build: (blockNumber, logIndex, txHash, t) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'treasury_proposal_cancelled',
      treasury: addressOf(t[1]!),
    }),
  },
  TreasuryUpdated: {
    inputs: 'address indexed,address indexed',
    build: (blockNumber, logIndex, txHash, t) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'treasury_updated',
      previous: addressOf(t[1]!),
      treasury: addressOf(t[2]!),
    }),
  },
  MaxChargeProposed: {
    inputs: 'uint256,uint256',
    build: (blockNumber, logIndex, txHash, _t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'max_charge_proposed',
      maxCharge: word(data, 0),
      readyAt: word(data, 1),
    }),
  },
  MaxChargeProposalCancelled: {
    inputs: 'uint256',
    build: (blockNumber, logIndex, txHash, _t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'max_charge_proposal_cancelled',
      maxCharge: word(data, 0),
    }),
  },
  MaxChargeUpdated: {
    inputs: 'uint256,uint256',
    build: (blockNumber, logIndex, txHash, _t, data) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'max_charge_updated',
      previous: word(data, 0),
      maxCharge: word(data, 1),
    }),
  },
  OwnershipTransferStarted: {
    inputs: 'address indexed,address indexed',
    build: (blockNumber, logIndex, txHash, t) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'ownership_transfer_started',
      owner: addressOf(t[1]!),
      pendingOwner: addressOf(t[2]!),
    }),
  },
  OwnershipTransferred: {
    inputs: 'address indexed,address indexed',
    build: (blockNumber, logIndex, txHash, t) => ({
      blockNumber,
      logIndex,
      txHash,
      kind: 'ownership_transferred',
      previous: addressOf(t[1]!),
      owner: addressOf(t[2]!),
    }),
  },
};

const MONEY_KINDS = new Set<string>([
  'deposited',
  'charged',
  'charge_refused',
  'charge_over_cap',
  'charge_skipped',
  'withdrawal_requested',
  'withdrawal_cancelled',
  'withdrawn',
]);

/** Whether a decoded record is a money event (the apply script's input) rather than an admin event. */
export function isMoneyEvent(e: EscrowEvent | EscrowAdminEvent): e is EscrowEvent {
  return MONEY_KINDS.has(e.kind);
}

interface Decoder {
  name: string;
  /** Topic count, selector included. */
  topics: number;
  /** Length of the data hex string, 0x included. */
  dataChars: number;
  build: Build;
}

/** topic0 (lowercase hex) -> decoder of that event: every event of the escrow. */
const DECODERS = new Map<string, Decoder>();
const abiEvents = (escrowAbi as readonly { type: string }[]).filter((x): x is AbiEvent => x.type === 'event');
for (const [name, { inputs, build }] of Object.entries(LAYOUTS)) {
  const event = abiEvents.find((x) => x.name === name);
  const actual = event?.inputs.map((i) => `${i.type}${i.indexed ? ' indexed' : ''}`).join(',');
  if (!event || actual !== inputs) {
    throw new Error(`escrow-logs: event ${name} is (${actual}) in escrowAbi, the decoder expects (${inputs})`);
  }
  const indexed = event.inputs.filter((i) => i.indexed).length;
  const words = event.inputs.length - indexed; // every non-indexed input is one static word
  DECODERS.set(toEventSelector(event), { name, topics: 1 + indexed, dataChars: 2 + 64 * words, build });
}

const TOPIC = /^0x[0-9a-fA-F]{64}$/;
const HEX = /^0x[0-9a-fA-F]*$/;
const QUANTITY = /^0x[0-9a-fA-F]{1,16}$/;
const ADDRESS_PAD = '0x000000000000000000000000';

/**
 * The escrow event of a raw log (money or admin: isMoneyEvent tells), or null when it is none of the escrow's.
 * Throws on a malformed log of an escrow event (topic count, data length, non-hex, missing position).
 * Does not look at `removed` or `address`: callers filter those.
 */
export function decodeEscrowLog(log: RpcLog): EscrowEvent | EscrowAdminEvent | null {
  const topic0 = log.topics[0];
  if (topic0 === undefined) return null;
  const d = DECODERS.get(topic0.toLowerCase());
  if (d === undefined) return null;
  // No closures per log: under tsx (bench, tests) each one costs a defineProperty of its name.
  const { topics, data, blockNumber, logIndex, transactionHash } = log;
  if (topics.length !== d.topics) throw malformed(d, log, `${topics.length} topics, expected ${d.topics}`);
  if (data.length !== d.dataChars || !HEX.test(data)) {
    throw malformed(d, log, `data is not ${(d.dataChars - 2) / 64} words of hex`);
  }
  if (blockNumber == null || !QUANTITY.test(blockNumber)) throw malformed(d, log, `block number ${blockNumber}`);
  if (logIndex == null || !QUANTITY.test(logIndex)) throw malformed(d, log, `log index ${logIndex}`);
  // The tx hash is passed through, never parsed: its shape is enough (a hex check is a measurable cost here).
  if (transactionHash?.length !== 66 || !transactionHash.startsWith('0x')) {
    throw malformed(d, log, `transaction hash ${transactionHash}`);
  }
  try {
    return d.build(BigInt(blockNumber), Number(logIndex), transactionHash as Hex, topics, data);
  } catch (err) {
    throw malformed(d, log, (err as Error).message);
  }
}

function malformed(d: Decoder, log: RpcLog, why: string): Error {
  return new Error(`malformed ${d.name} log (tx ${log.transactionHash}, log index ${log.logIndex}): ${why}`);
}

// uint256 data word i (data is validated hex of the right length).
function word(data: string, i: number): bigint {
  return BigInt(`0x${data.slice(2 + 64 * i, 66 + 64 * i)}`);
}

// ABI bool data word i: 0 or 1, anything else is malformed.
function bool(data: string, i: number): boolean {
  const v = word(data, i);
  if (v > 1n) throw new Error(`bool word ${v} is not 0 or 1`);
  return v === 1n;
}

function bytes32Of(topic: string): Hex {
  if (!TOPIC.test(topic)) throw new Error(`topic ${topic} is not 32 bytes of hex`);
  return topic as Hex;
}

// lowercase 40-hex -> viem's checksummed form (wallet keys in Redis are built from it).
// Bounded: cleared past the cap rather than evicted one by one.
const ADDRESS_CACHE_MAX = 10_000;
const checksummed = new Map<string, Address>();

// Validation: the padding here, the 40 hex digits by getAddress on a cache miss.
function addressOf(topic: string): Address {
  if (topic.length !== 66 || !topic.startsWith(ADDRESS_PAD)) {
    throw new Error(`address topic ${topic} is not a padded address`);
  }
  const lower = topic.slice(26).toLowerCase();
  let address = checksummed.get(lower);
  if (address === undefined) {
    if (checksummed.size >= ADDRESS_CACHE_MAX) checksummed.clear();
    address = getAddress(`0x${lower}`);
    checksummed.set(lower, address);
  }
  return address;
}
