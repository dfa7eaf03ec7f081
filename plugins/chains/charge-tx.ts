/**
 * The settler's transaction, built without viem's generic paths: a batch's calldata (~96 bytes per charge, ~20 KB
 * per full batch) is encoded, serialized and hashed once per batch, and on that size viem's ABI encoder, its RLP
 * serializer (hex to bytes and back, twice per signed transaction) and its JS keccak (noble, ~12 MB/s here) cost more
 * per settled call than the rest of the settler. The results are byte for byte what viem produces
 * (test/chains/charge-tx.test.ts compares them).
 */
import { createKeccak, type IHasher } from 'hash-wasm';
import { toFunctionSelector, type Hex, type TransactionSerializableEIP1559 } from 'viem';
import { sign } from 'viem/accounts';
import type { Charge } from './port.js';

const SELECTOR = toFunctionSelector('chargeBatch(bytes32[],address[],uint256[])');
const ZERO_WORD = '0'.repeat(64);

/** A non-negative integer as one 32-byte ABI word (64 hex digits, no 0x). */
function word(n: bigint | number): string {
  const hex = n.toString(16);
  return ZERO_WORD.slice(hex.length) + hex;
}

/**
 * Calldata of `chargeBatch(bytes32[] callIds, address[] accounts, uint256[] amounts)`: the selector, three
 * offsets, then each array as its length and one word per element. Charges must be validated (32-byte call ids,
 * 20-byte accounts, amounts within uint256).
 */
export function encodeChargeBatch(charges: readonly Charge[]): Hex {
  const n = charges.length;
  const arrayWords = 1 + n;
  const parts: string[] = new Array(4 + 3 * arrayWords);
  let i = 0;
  parts[i++] = SELECTOR;
  parts[i++] = word(3 * 32);
  parts[i++] = word((3 + arrayWords) * 32);
  parts[i++] = word((3 + 2 * arrayWords) * 32);
  parts[i++] = word(n);
  for (const c of charges) parts[i++] = c.callId.slice(2).toLowerCase();
  parts[i++] = word(n);
  for (const c of charges) parts[i++] = '000000000000000000000000' + c.account.slice(2).toLowerCase();
  parts[i++] = word(n);
  for (const c of charges) parts[i++] = word(c.amount);
  return parts.join('') as Hex;
}

let hasher: Promise<IHasher> | undefined;

/** keccak-256 of `data` (WebAssembly; the hasher is used synchronously, so one instance serves all). */
async function keccakOf(data: Uint8Array): Promise<Hex> {
  const h = await (hasher ??= createKeccak(256));
  h.init();
  h.update(data);
  return `0x${h.digest('hex')}`;
}

/** keccak-256 of a 0x-hex byte string. */
export function keccak256(data: Hex): Promise<Hex> {
  return keccakOf(Buffer.from(data.slice(2), 'hex'));
}

const EMPTY = Buffer.alloc(0);
const EMPTY_LIST = Buffer.from([0xc0]);

/** An RLP integer: big-endian bytes without leading zeros (0: no bytes). */
function uint(n: bigint | number): Buffer {
  if (n === 0 || n === 0n) return EMPTY;
  const hex = n.toString(16);
  return Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex');
}

/** The RLP header of a string (`base` 0x80) or a list (`base` 0xc0) of `length` bytes. */
function header(base: number, length: number): Buffer {
  if (length <= 55) return Buffer.from([base + length]);
  const len = uint(length);
  return Buffer.concat([Buffer.from([base + 55 + len.length]), len]);
}

/** `item` as an RLP string (a single byte below 0x80 is its own encoding). */
function rlpString(item: Buffer): Buffer[] {
  return item.length === 1 && item[0]! < 0x80 ? [item] : [header(0x80, item.length), item];
}

/**
 * An EIP-1559 transaction (no access list, as the settler sends it), as serializeTransaction encodes it: 0x02, then
 * the RLP list of its fields, and of y parity, r and s when signed.
 */
function serialize(
  tx: TransactionSerializableEIP1559,
  signature?: { r: Hex; s: Hex; yParity?: number; v?: bigint },
): Buffer {
  if (!tx.to || tx.chainId === undefined || tx.nonce === undefined || tx.gas === undefined) {
    throw new Error('a charge transaction needs chainId, nonce, gas and to');
  }
  if (tx.accessList?.length) throw new Error('a charge transaction has no access list');
  // Buffer.from(hex) drops what is not hex without a word: check first.
  if (!/^0x[0-9a-fA-F]{40}$/.test(tx.to)) throw new Error(`to ${tx.to} is not an address`);
  if (tx.data !== undefined && !/^0x(?:[0-9a-fA-F]{2})*$/.test(tx.data)) throw new Error('data is not hex bytes');
  // As viem's assertTransactionEIP1559: a node would refuse these.
  if (tx.chainId <= 0) throw new Error(`chain id ${tx.chainId} is not positive`);
  if ((tx.maxPriorityFeePerGas ?? 0n) > (tx.maxFeePerGas ?? 0n))
    throw new Error('maxPriorityFeePerGas is above maxFeePerGas');
  const fields = [
    uint(tx.chainId),
    uint(tx.nonce),
    uint(tx.maxPriorityFeePerGas ?? 0n),
    uint(tx.maxFeePerGas ?? 0n),
    uint(tx.gas),
    Buffer.from(tx.to.slice(2), 'hex'),
    uint(tx.value ?? 0n),
    Buffer.from((tx.data ?? '0x').slice(2), 'hex'),
  ];
  const parts = fields.flatMap(rlpString);
  parts.push(EMPTY_LIST);
  if (signature) {
    const yParity = signature.yParity ?? (signature.v === 28n ? 1 : 0);
    for (const f of [uint(yParity), uint(BigInt(signature.r)), uint(BigInt(signature.s))]) parts.push(...rlpString(f));
  }
  let length = 0;
  for (const p of parts) length += p.length;
  return Buffer.concat([Buffer.from([0x02]), header(0xc0, length), ...parts]);
}

/** A signed EIP-1559 transaction, serialized for eth_sendRawTransaction (what viem's account.signTransaction returns). */
export async function signTransaction(tx: TransactionSerializableEIP1559, privateKey: Hex): Promise<Hex> {
  const signature = await sign({ hash: await keccakOf(serialize(tx)), privateKey });
  return `0x${serialize(tx, signature).toString('hex')}`;
}
