/**
 * Deploy helpers for TestStablecoin and Escrow (viem), shared by the dev chains and
 * deploy/deploy-escrow.ts. Artifacts come from contracts/compile.ts (compiled from source).
 */
import type { Account, Chain, Hex, PublicClient, Transport, WalletClient } from 'viem';
import { loadArtifacts } from '../../contracts/compile.js';
import type { Address } from './config.js';

/** A wallet client with its signing account attached. */
export type DeployerClient = WalletClient<Transport, Chain, Account>;

/** Constructor arguments of Escrow. */
export interface EscrowParams {
  stablecoin: Address;
  owner: Address;
  treasury: Address;
  /** Initial settler; the zero address for none. */
  settler: Address;
  /** Seconds between requestWithdrawal and withdraw (> 0). */
  withdrawalDelay: bigint;
  /** Seconds between proposing a settler, treasury or cap and its effect (> withdrawalDelay). */
  roleDelay: bigint;
  /** Most one charge may take, in atomic units (> 0). */
  maxCharge: bigint;
}

/** Transaction fields to fix instead of asking the node (saves round trips on dev chains). */
export interface TxOverrides {
  nonce?: number;
  gas?: bigint;
  maxFeePerGas?: bigint;
  maxPriorityFeePerGas?: bigint;
}

/** Result of a contract deployment. */
export interface Deployed {
  address: Address;
  txHash: Hex;
  blockNumber: bigint;
}

async function deploy(
  wallet: DeployerClient,
  pub: PublicClient,
  contract: 'TestStablecoin' | 'Escrow',
  args: readonly unknown[],
  tx: TxOverrides,
): Promise<Deployed> {
  const artifact = (await loadArtifacts())[contract];
  const txHash = await wallet.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode, args, ...tx });
  const receipt = await pub.waitForTransactionReceipt({ hash: txHash });
  if (receipt.status !== 'success' || !receipt.contractAddress) {
    throw new Error(`deploying ${contract} failed in tx ${txHash}`);
  }
  return { address: receipt.contractAddress, txHash, blockNumber: receipt.blockNumber };
}

/** Deploys TestStablecoin with `owner` as owner and first minter. */
export function deployStablecoin(
  wallet: DeployerClient,
  pub: PublicClient,
  owner: Address,
  tx: TxOverrides = {},
): Promise<Deployed> {
  return deploy(wallet, pub, 'TestStablecoin', [owner], tx);
}

/** Deploys Escrow for one stablecoin. */
export function deployEscrowContract(
  wallet: DeployerClient,
  pub: PublicClient,
  p: EscrowParams,
  tx: TxOverrides = {},
): Promise<Deployed> {
  const args = [p.stablecoin, p.owner, p.treasury, p.settler, p.withdrawalDelay, p.roleDelay, p.maxCharge];
  return deploy(wallet, pub, 'Escrow', args, tx);
}
