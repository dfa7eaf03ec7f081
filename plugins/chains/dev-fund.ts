/**
 * `farebox fund` on dev chains: mint test stablecoin and deposit it into the escrow for an
 * account (DESIGN.md "Operator contract"). Refuses any chain id that is not a dev chain.
 */
import { createPublicClient, createWalletClient, http, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi, testStablecoinAbi } from './abi.js';
import type { Address, ChainConfig, ChainName } from './config.js';
import { DEV_CHAIN_IDS, DEV_KEYS, devViemChain } from './dev-chains.js';

/** What mintAndDeposit needs of a chain's config. */
export type FundTarget = Pick<ChainConfig, 'chain_id' | 'rpc_url' | 'stablecoin' | 'escrow'>;

/**
 * Mints `amount` (atomic units) to the minter and deposits it for `account`; returns the
 * account's escrow balance after. The minter (default: the dev deployer) must be a minter
 * of the stablecoin and have approved the escrow (startDevChains does both).
 */
export async function mintAndDeposit(
  chain: FundTarget,
  account: Address,
  amount: bigint,
  minterKey: Hex = DEV_KEYS.deployer.privateKey,
): Promise<bigint> {
  const name = (Object.keys(DEV_CHAIN_IDS) as ChainName[]).find((n) => DEV_CHAIN_IDS[n] === chain.chain_id);
  if (!name) throw new Error(`chain id ${chain.chain_id} is not a dev chain: funding mints test tokens only there`);
  if (amount <= 0n) throw new Error('amount must be positive');
  const viemChain = devViemChain(name, chain.chain_id, chain.rpc_url);
  const transport = http(chain.rpc_url);
  const pub = createPublicClient({ chain: viemChain, transport, pollingInterval: 20 });
  const wallet = createWalletClient({ chain: viemChain, transport, account: privateKeyToAccount(minterKey) });
  const mint = await wallet.writeContract({
    address: chain.stablecoin,
    abi: testStablecoinAbi,
    functionName: 'mint',
    args: [wallet.account.address, amount],
  });
  await expectSuccess(pub, mint, 'mint');
  const deposit = await wallet.writeContract({
    address: chain.escrow,
    abi: escrowAbi,
    functionName: 'depositFor',
    args: [account, amount],
  });
  await expectSuccess(pub, deposit, 'depositFor');
  return pub.readContract({ address: chain.escrow, abi: escrowAbi, functionName: 'balanceOf', args: [account] });
}

async function expectSuccess(pub: PublicClient, hash: Hex, what: string): Promise<void> {
  const r = await pub.waitForTransactionReceipt({ hash });
  if (r.status !== 'success') throw new Error(`${what} reverted (tx ${hash})`);
}
