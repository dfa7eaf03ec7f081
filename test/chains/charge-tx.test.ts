import t from 'tap';
import { randomBytes } from 'node:crypto';
import {
  encodeFunctionData,
  getAddress,
  keccak256 as viemKeccak,
  parseTransaction,
  recoverTransactionAddress,
  type Hex,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi } from '../../plugins/chains/abi.js';
import { encodeChargeBatch, keccak256, signTransaction } from '../../plugins/chains/charge-tx.js';
import type { Charge } from '../../plugins/chains/port.js';

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

t.test(
  'edge fields: zero nonce and fees, 55/56-byte data, both y parities, r or s with leading zero bytes',
  async (t) => {
    const key = hex(32);
    const account = privateKeyToAccount(key);
    const seen = { parity0: false, parity1: false, shortRS: false };
    let mismatches = 0;
    let i = 0;
    // At least 200 signatures, and on until an r or s below 2^248 (a leading zero byte, trimmed in the encoding) came:
    // about 1 signature in 128 has one, so 5,000 never miss it in practice.
    for (; i < 5_000 && (i < 200 || !seen.shortRS); i++) {
      const tx = {
        type: 'eip1559' as const,
        chainId: [1, 31_337_001, 8453][i % 3]!,
        nonce: i % 7 === 0 ? 0 : i,
        to: hex(20),
        data: (i % 4 === 0 ? '0x' : hex([1, 55, 56, 300][i % 4]!)) as Hex,
        gas: i % 5 === 0 ? 0n : 21_000n + BigInt(i),
        maxFeePerGas: i % 6 === 0 ? 0n : 2n ** 64n + BigInt(i),
        maxPriorityFeePerGas: i % 2 || i % 6 === 0 ? 0n : 127n,
      };
      const ours = await signTransaction(tx, key);
      if (ours !== (await account.signTransaction(tx))) mismatches++;
      const parsed = parseTransaction(ours);
      if (parsed.yParity === 0) seen.parity0 = true;
      if (parsed.yParity === 1) seen.parity1 = true;
      if (parsed.r!.length < 66 || parsed.s!.length < 66 || /^0x00/.test(parsed.r!) || /^0x00/.test(parsed.s!))
        seen.shortRS = true;
    }
    t.equal(mismatches, 0, `all ${i} byte for byte as viem signs them`);
    t.ok(seen.parity0 && seen.parity1, 'both y parities');
    t.ok(seen.shortRS, 'an r or s with a leading zero byte');
    const base = { type: 'eip1559' as const, chainId: 1, nonce: 1, to: hex(20), data: '0x' as Hex, gas: 21_000n };
    await t.rejects(
      signTransaction({ ...base, maxFeePerGas: 1n, maxPriorityFeePerGas: 2n }, key),
      /above maxFeePerGas/,
    );
    await t.rejects(
      signTransaction({ ...base, chainId: 0, maxFeePerGas: 1n, maxPriorityFeePerGas: 1n }, key),
      /not positive/,
    );
    await t.rejects(signTransaction({ ...base, to: '0x1234', maxFeePerGas: 1n }, key), /not an address/);
    await t.rejects(signTransaction({ ...base, data: '0xabc', maxFeePerGas: 1n }, key), /not hex bytes/);
  },
);
