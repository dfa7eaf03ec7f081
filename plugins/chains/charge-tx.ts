/**
 * The settler's transaction, built without viem's generic paths: a batch's calldata (~96 bytes per charge, ~20 KB
 * per full batch) is encoded and hashed once per batch, and on that size viem's ABI encoder and its JS keccak
 * (noble, ~12 MB/s here) cost more per settled call than the rest of the settler. The results are byte for byte
 * what viem produces (test/charge-tx.test.ts compares them).
 */
import { createKeccak, type IHasher } from 'hash-wasm';
import { serializeTransaction, toFunctionSelector, type Hex, type TransactionSerializableEIP1559 } from 'viem';
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

/** keccak-256 of a 0x-hex byte string (WebAssembly; the hasher is used synchronously, so one instance serves all). */
export async function keccak256(data: Hex): Promise<Hex> {
  const h = await (hasher ??= createKeccak(256));
  h.init();
  h.update(Buffer.from(data.slice(2), 'hex'));
  return `0x${h.digest('hex')}`;
}

/** A signed EIP-1559 transaction, serialized for eth_sendRawTransaction (what viem's account.signTransaction returns). */
export async function signTransaction(tx: TransactionSerializableEIP1559, privateKey: Hex): Promise<Hex> {
  const signature = await sign({ hash: await keccak256(serializeTransaction(tx)), privateKey });
  return serializeTransaction(tx, signature);
}
