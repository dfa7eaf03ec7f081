import t from 'tap';
import { randomBytes } from 'node:crypto';
import { encodeFunctionData, getAddress, keccak256 as viemKeccak, parseTransaction, recoverTransactionAddress, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi } from '../plugins/chains/abi.js';
import { encodeChargeBatch, keccak256, signTransaction } from '../plugins/chains/charge-tx.js';
import type { Charge } from '../plugins/chains/port.js';

const hex = (n: number) => `0x${randomBytes(n).toString('hex')}` as Hex;
const UINT256_MAX = 2n ** 256n - 1n;

function batch(n: number): Charge[] {
  return Array.from({ length: n }, (_, i) => ({
    // Upper-case call ids and checksummed accounts too: both reach the settler in either case.
    callId: (i % 2 ? hex(32).toUpperCase().replace('0X', '0x') : hex(32)) as Hex,
    account: i % 3 ? hex(20) : getAddress(hex(20)),
    amount: [0n, 1n, 999_999n, 2n ** 128n + 7n, UINT256_MAX][i % 5]!,
  }));
}

t.test('chargeBatch calldata is what viem encodes, for 1 to 400 charges and edge amounts', async (t) => {
  for (const n of [1, 2, 5, 64, 200, 400]) {
    const b = batch(n);
    const viem = encodeFunctionData({
      abi: escrowAbi,
      functionName: 'chargeBatch',
      args: [b.map((c) => c.callId), b.map((c) => c.account), b.map((c) => c.amount)],
    });
    t.equal(encodeChargeBatch(b), viem.toLowerCase(), `${n} charges`);
  }
});

t.test('keccak256 matches viem on empty, short and batch-sized input', async (t) => {
  for (const data of ['0x', hex(1), hex(135), hex(136), hex(137), hex(19_300)] as Hex[]) {
    t.equal(await keccak256(data), viemKeccak(data), `${(data.length - 2) / 2} bytes`);
  }
});

t.test("a signed transaction is byte for byte what viem's account signs, and recovers to the settler", async (t) => {
  const key = hex(32);
  const account = privateKeyToAccount(key);
  for (const n of [1, 200]) {
    const tx = {
      type: 'eip1559' as const,
      chainId: 31_337,
      nonce: 7 + n,
      to: hex(20),
      data: encodeChargeBatch(batch(n)),
      gas: 100_000n + 36_000n * BigInt(n),
      maxFeePerGas: 3_000_000_000n,
      maxPriorityFeePerGas: 1_000_000_000n,
    };
    const ours = await signTransaction(tx, key);
    t.equal(ours, await account.signTransaction(tx), `${n} charges`);
    t.equal(await recoverTransactionAddress({ serializedTransaction: ours as `0x02${string}` }), account.address);
    t.match(parseTransaction(ours), { nonce: tx.nonce, data: tx.data, chainId: tx.chainId });
  }
});
