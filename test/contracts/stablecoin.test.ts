import t from 'tap';
import {
  BaseError,
  ContractFunctionRevertedError,
  createPublicClient,
  createWalletClient,
  hashDomain,
  http,
  maxUint256,
  type Hex,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi, testStablecoinAbi as abi } from '../../plugins/chains/abi.js';
import type { Address } from '../../plugins/chains/config.js';
import { devViemChain, startDevChains, type DevKey } from '../../plugins/chains/dev-chains.js';
import { callIdOf } from '../../plugins/request-ids.js';

const dc = await startDevChains({ basePort: 0 });
t.teardown(() => dc.close());

const c = dc.chains.chain_b;
const { deployer: owner, callers } = dc.keys;
const [alice, bob, carol] = callers;
const chain = devViemChain('chain_b', c.chain_id, c.rpc_url);
const transport = http(c.rpc_url);
const pub = createPublicClient({ chain, transport, pollingInterval: 10 });
const wallet = (k: DevKey) => createWalletClient({ chain, transport, account: privateKeyToAccount(k.privateKey) });
const token = c.stablecoin;
const domain = { name: 'Test USD Coin', version: '2', chainId: c.chain_id, verifyingContract: token } as const;
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

async function mined(hash: Promise<Hex>) {
  const receipt = await pub.waitForTransactionReceipt({ hash: await hash });
  if (receipt.status !== 'success') throw new Error(`tx ${receipt.transactionHash} reverted`);
  return receipt;
}
async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    const r = err instanceof BaseError ? err.walk((e) => e instanceof ContractFunctionRevertedError) : null;
    if (r instanceof ContractFunctionRevertedError) return r.data?.errorName ?? 'unknown revert';
    throw err;
  }
  return 'not refused';
}
const balance = (a: Address) => pub.readContract({ address: token, abi, functionName: 'balanceOf', args: [a] });
const allowance = (o: Address, s: Address) =>
  pub.readContract({ address: token, abi, functionName: 'allowance', args: [o, s] });
const mint = (k: DevKey, to: Address, v: bigint) =>
  wallet(k).writeContract({ address: token, abi, functionName: 'mint', args: [to, v] });
function split(sig: Hex) {
  return {
    r: `0x${sig.slice(2, 66)}` as Hex,
    s: `0x${sig.slice(66, 130)}` as Hex,
    v: parseInt(sig.slice(130, 132), 16),
  };
}
const now = async () => (await pub.getBlock()).timestamp;

const authTypes = (primary: 'TransferWithAuthorization' | 'ReceiveWithAuthorization') => ({
  [primary]: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
});
async function authorize(
  k: DevKey,
  primaryType: 'TransferWithAuthorization' | 'ReceiveWithAuthorization',
  m: { to: Address; value: bigint; validAfter: bigint; validBefore: bigint; nonce: Hex },
) {
  const sig = await wallet(k).signTypedData({
    domain,
    types: authTypes(primaryType),
    primaryType,
    message: { from: k.address, ...m },
  });
  const { r, s, v } = split(sig);
  return [k.address, m.to, m.value, m.validAfter, m.validBefore, m.nonce, v, r, s] as const;
}

t.test('metadata: 6 decimals and the USDC EIP-712 domain', async (t) => {
  t.equal(await pub.readContract({ address: token, abi, functionName: 'decimals' }), 6);
  t.equal(await pub.readContract({ address: token, abi, functionName: 'symbol' }), 'tUSDC');
  t.equal(await pub.readContract({ address: token, abi, functionName: 'version' }), '2');
  t.equal(
    await pub.readContract({ address: token, abi, functionName: 'DOMAIN_SEPARATOR' }),
    hashDomain({
      domain: { ...domain, chainId: BigInt(c.chain_id) },
      types: {
        EIP712Domain: [
          { name: 'name', type: 'string' },
          { name: 'version', type: 'string' },
          { name: 'chainId', type: 'uint256' },
          { name: 'verifyingContract', type: 'address' },
        ],
      },
    }),
  );
});

t.test('mint is restricted to minters the owner sets', async (t) => {
  t.equal(await refusal(mint(alice, alice.address, 1n)), 'NotMinter');
  t.equal(
    await refusal(
      wallet(alice).writeContract({ address: token, abi, functionName: 'setMinter', args: [alice.address, true] }),
    ),
    'NotOwner',
  );
  const supply = await pub.readContract({ address: token, abi, functionName: 'totalSupply' });
  await mined(mint(owner, alice.address, 10_000_000n));
  t.equal(await balance(alice.address), 10_000_000n);
  t.equal((await pub.readContract({ address: token, abi, functionName: 'totalSupply' })) - supply, 10_000_000n);
  await mined(
    wallet(owner).writeContract({ address: token, abi, functionName: 'setMinter', args: [bob.address, true] }),
  );
  await mined(mint(bob, bob.address, 1n));
  await mined(
    wallet(owner).writeContract({ address: token, abi, functionName: 'setMinter', args: [bob.address, false] }),
  );
  t.equal(await refusal(mint(bob, bob.address, 1n)), 'NotMinter', 'minter role revoked');
});

t.test('ERC-20 transfer, approve, transferFrom and their refusals', async (t) => {
  await mined(
    wallet(alice).writeContract({ address: token, abi, functionName: 'transfer', args: [bob.address, 1_000n] }),
  );
  t.equal(await balance(bob.address), 1_001n);
  t.equal(
    await refusal(
      wallet(carol).writeContract({ address: token, abi, functionName: 'transfer', args: [bob.address, 1n] }),
    ),
    'InsufficientBalance',
  );
  await mined(
    wallet(alice).writeContract({ address: token, abi, functionName: 'approve', args: [carol.address, 500n] }),
  );
  await mined(
    wallet(carol).writeContract({
      address: token,
      abi,
      functionName: 'transferFrom',
      args: [alice.address, carol.address, 200n],
    }),
  );
  t.equal(await allowance(alice.address, carol.address), 300n, 'allowance spent');
  t.equal(
    await refusal(
      wallet(carol).writeContract({
        address: token,
        abi,
        functionName: 'transferFrom',
        args: [alice.address, carol.address, 301n],
      }),
    ),
    'InsufficientAllowance',
  );
  await mined(
    wallet(alice).writeContract({ address: token, abi, functionName: 'approve', args: [carol.address, maxUint256] }),
  );
  await mined(
    wallet(carol).writeContract({
      address: token,
      abi,
      functionName: 'transferFrom',
      args: [alice.address, carol.address, 1n],
    }),
  );
  t.equal(await allowance(alice.address, carol.address), maxUint256, 'infinite allowance is not decremented');
});

t.test('EIP-2612 permit sets the allowance by signature, once, before its deadline', async (t) => {
  const nonce = await pub.readContract({ address: token, abi, functionName: 'nonces', args: [alice.address] });
  const deadline = (await now()) + 3600n;
  const types = {
    Permit: [
      { name: 'owner', type: 'address' },
      { name: 'spender', type: 'address' },
      { name: 'value', type: 'uint256' },
      { name: 'nonce', type: 'uint256' },
      { name: 'deadline', type: 'uint256' },
    ],
  };
  const sign = (value: bigint, n: bigint, d: bigint) =>
    wallet(alice).signTypedData({
      domain,
      types,
      primaryType: 'Permit',
      message: { owner: alice.address, spender: c.escrow, value, nonce: n, deadline: d },
    });
  const { r, s, v } = split(await sign(777n, nonce, deadline));
  const permit = (args: readonly [Address, Address, bigint, bigint, number, Hex, Hex], by = bob) =>
    wallet(by).writeContract({ address: token, abi, functionName: 'permit', args });
  await mined(permit([alice.address, c.escrow, 777n, deadline, v, r, s]));
  t.equal(await allowance(alice.address, c.escrow), 777n, 'relayed permit set the allowance');
  t.equal(await pub.readContract({ address: token, abi, functionName: 'nonces', args: [alice.address] }), nonce + 1n);
  t.equal(
    await refusal(permit([alice.address, c.escrow, 777n, deadline, v, r, s])),
    'InvalidSignature',
    'replay refused',
  );
  t.equal(
    await refusal(permit([alice.address, c.escrow, 778n, deadline, v, r, s])),
    'InvalidSignature',
    'altered value refused',
  );
  const past = (await now()) - 1n;
  const expired = split(await sign(1n, nonce + 1n, past));
  t.equal(await refusal(permit([alice.address, c.escrow, 1n, past, expired.v, expired.r, expired.s])), 'PermitExpired');
  // The escrow can now pull what the permit allowed.
  await mined(
    wallet(alice).writeContract({ address: c.escrow, abi: escrowAbi, functionName: 'deposit', args: [777n] }),
  );
  t.equal(await allowance(alice.address, c.escrow), 0n);
});

t.test('EIP-3009 transferWithAuthorization: anyone relays, once, inside its validity window', async (t) => {
  const start = await now();
  const nonce = callIdOf('twa-1');
  const args = await authorize(alice, 'TransferWithAuthorization', {
    to: carol.address,
    value: 50n,
    validAfter: 0n,
    validBefore: start + 3600n,
    nonce,
  });
  const carolBefore = await balance(carol.address);
  t.equal(
    await pub.readContract({ address: token, abi, functionName: 'authorizationState', args: [alice.address, nonce] }),
    false,
  );
  await mined(wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args }));
  t.equal((await balance(carol.address)) - carolBefore, 50n);
  t.equal(
    await pub.readContract({ address: token, abi, functionName: 'authorizationState', args: [alice.address, nonce] }),
    true,
  );
  t.equal(
    await refusal(wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args })),
    'AuthorizationAlreadyUsed',
  );
  const early = await authorize(alice, 'TransferWithAuthorization', {
    to: carol.address,
    value: 1n,
    validAfter: start + 3600n,
    validBefore: start + 7200n,
    nonce: callIdOf('twa-2'),
  });
  t.equal(
    await refusal(
      wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args: early }),
    ),
    'AuthorizationNotYetValid',
  );
  const late = await authorize(alice, 'TransferWithAuthorization', {
    to: carol.address,
    value: 1n,
    validAfter: 0n,
    validBefore: start - 1n,
    nonce: callIdOf('twa-3'),
  });
  t.equal(
    await refusal(
      wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args: late }),
    ),
    'AuthorizationExpired',
  );
  // High-s twin of a valid signature (EIP-2 malleability) is refused.
  const fresh = await authorize(alice, 'TransferWithAuthorization', {
    to: carol.address,
    value: 1n,
    validAfter: 0n,
    validBefore: start + 3600n,
    nonce: callIdOf('twa-4'),
  });
  const highS = `0x${(SECP256K1_N - BigInt(fresh[8])).toString(16).padStart(64, '0')}` as Hex;
  const twin = [...fresh.slice(0, 6), fresh[6] === 27 ? 28 : 27, fresh[7], highS] as unknown as typeof fresh;
  t.equal(
    await refusal(
      wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args: twin }),
    ),
    'InvalidSignature',
  );
});

t.test('EIP-3009 receiveWithAuthorization: only the payee may submit it', async (t) => {
  const validBefore = (await now()) + 3600n;
  const args = await authorize(alice, 'ReceiveWithAuthorization', {
    to: carol.address,
    value: 5n,
    validAfter: 0n,
    validBefore,
    nonce: callIdOf('rwa-1'),
  });
  t.equal(
    await refusal(wallet(bob).writeContract({ address: token, abi, functionName: 'receiveWithAuthorization', args })),
    'CallerNotPayee',
  );
  t.equal(
    await refusal(wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args })),
    'InvalidSignature',
    'a receive authorization is not a transfer authorization',
  );
  const before = await balance(carol.address);
  await mined(wallet(carol).writeContract({ address: token, abi, functionName: 'receiveWithAuthorization', args }));
  t.equal((await balance(carol.address)) - before, 5n);
});

t.test('EIP-3009 cancelAuthorization voids an unused authorization', async (t) => {
  const nonce = callIdOf('cancel-1');
  const validBefore = (await now()) + 3600n;
  const args = await authorize(alice, 'TransferWithAuthorization', {
    to: carol.address,
    value: 9n,
    validAfter: 0n,
    validBefore,
    nonce,
  });
  const cancelSig = split(
    await wallet(alice).signTypedData({
      domain,
      types: {
        CancelAuthorization: [
          { name: 'authorizer', type: 'address' },
          { name: 'nonce', type: 'bytes32' },
        ],
      },
      primaryType: 'CancelAuthorization',
      message: { authorizer: alice.address, nonce },
    }),
  );
  const cancelArgs = [alice.address, nonce, cancelSig.v, cancelSig.r, cancelSig.s] as const;
  t.equal(
    await refusal(
      wallet(bob).writeContract({
        address: token,
        abi,
        functionName: 'cancelAuthorization',
        args: [bob.address, nonce, cancelSig.v, cancelSig.r, cancelSig.s],
      }),
    ),
    'InvalidSignature',
    "cannot cancel someone else's authorization",
  );
  await mined(
    wallet(bob).writeContract({ address: token, abi, functionName: 'cancelAuthorization', args: cancelArgs }),
  );
  t.equal(
    await pub.readContract({ address: token, abi, functionName: 'authorizationState', args: [alice.address, nonce] }),
    true,
  );
  t.equal(
    await refusal(wallet(bob).writeContract({ address: token, abi, functionName: 'transferWithAuthorization', args })),
    'AuthorizationAlreadyUsed',
  );
  t.equal(
    await refusal(
      wallet(bob).writeContract({ address: token, abi, functionName: 'cancelAuthorization', args: cancelArgs }),
    ),
    'AuthorizationAlreadyUsed',
  );
});
