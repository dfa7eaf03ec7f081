/**
 * Deploys Escrow against any JSON-RPC node, for an existing stablecoin (USDC on real networks).
 *
 *   FAREBOX_DEPLOYER_KEY=0x... node --import tsx deploy/deploy-escrow.ts \
 *     --rpc-url https://mainnet.base.org --stablecoin 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913 \
 *     --treasury 0x... --settler 0x... --timelock 86400 --role-delay 259200 --max-charge 100 [--owner 0x...]
 *
 * --timelock: seconds a withdrawal waits (> 0: calls in flight must still settle). --role-delay: seconds a new
 * settler, treasury or charge cap waits after its announcement; longer than --timelock, so callers can leave first.
 * --max-charge: the most one charge may take, in USD (6 decimals at most); a larger charge is refused.
 *
 * Prints one JSON document: the chain config fields to paste (chain_id, escrow, deploy_block).
 * The owner defaults to the deployer; pass a multisig for production.
 */
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { createPublicClient, createWalletClient, defineChain, http, isAddress, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { testStablecoinAbi } from '../plugins/chains/abi.js';
import type { Address } from '../plugins/chains/config.js';
import { deployEscrowContract } from '../plugins/chains/deploy.js';
import { parseUsd } from '../pricing/money.js';

/** Inputs of deployEscrow. */
export interface DeployEscrowInput {
  rpcUrl: string;
  stablecoin: Address;
  treasury: Address;
  settler: Address;
  /** Withdrawal timelock in seconds (> 0). */
  timelock: bigint;
  /** Role timelock in seconds (> timelock). */
  roleDelay: bigint;
  /** Per-charge cap in atomic units (> 0). */
  maxCharge: bigint;
  deployerKey: Hex;
  /** Default: the deployer's address. */
  owner?: Address;
}

/** What deployEscrow produced: the fields of the chain's config entry. */
export interface DeployEscrowResult {
  chain_id: number;
  stablecoin: Address;
  escrow: Address;
  deploy_block: number;
  tx: Hex;
}

/** Deploys Escrow after checking the stablecoin exists and has 6 decimals (farebox money is 6-decimal). */
export async function deployEscrow(input: DeployEscrowInput): Promise<DeployEscrowResult> {
  for (const [k, v] of Object.entries({
    stablecoin: input.stablecoin,
    treasury: input.treasury,
    settler: input.settler,
  })) {
    if (!isAddress(v, { strict: false })) throw new Error(`${k}: not an address: ${v}`);
  }
  // The contract refuses these too; checked here so nothing is sent (or paid for) in vain.
  if (input.timelock <= 0n) throw new Error('timelock must be > 0 seconds: calls in flight settle during it');
  if (input.roleDelay <= input.timelock)
    throw new Error(`role delay (${input.roleDelay} s) must be longer than the timelock (${input.timelock} s)`);
  if (input.maxCharge <= 0n) throw new Error('max charge must be > 0');
  const probe = createPublicClient({ transport: http(input.rpcUrl) });
  const chainId = await probe.getChainId();
  const chain = defineChain({
    id: chainId,
    name: `chain ${chainId}`,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [input.rpcUrl] } },
  });
  const pub = createPublicClient({ chain, transport: http(input.rpcUrl), pollingInterval: 1_000 });
  const decimals = await pub
    .readContract({ address: input.stablecoin, abi: testStablecoinAbi, functionName: 'decimals' })
    .catch(() => undefined);
  if (decimals !== 6)
    throw new Error(`stablecoin ${input.stablecoin} on chain ${chainId}: decimals ${decimals}, expected 6`);
  const account = privateKeyToAccount(input.deployerKey);
  const wallet = createWalletClient({ chain, transport: http(input.rpcUrl), account });
  const d = await deployEscrowContract(wallet, pub, {
    stablecoin: input.stablecoin,
    owner: input.owner ?? account.address,
    treasury: input.treasury,
    settler: input.settler,
    withdrawalDelay: input.timelock,
    roleDelay: input.roleDelay,
    maxCharge: input.maxCharge,
  });
  return {
    chain_id: chainId,
    stablecoin: input.stablecoin,
    escrow: d.address,
    deploy_block: Number(d.blockNumber),
    tx: d.txHash,
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'rpc-url': { type: 'string' },
      stablecoin: { type: 'string' },
      treasury: { type: 'string' },
      settler: { type: 'string' },
      timelock: { type: 'string' },
      'role-delay': { type: 'string' },
      'max-charge': { type: 'string' },
      owner: { type: 'string' },
    },
  });
  const missing = ['rpc-url', 'stablecoin', 'treasury', 'settler', 'timelock', 'role-delay', 'max-charge'].filter(
    (k) => !values[k as keyof typeof values],
  );
  if (missing.length) throw new Error(`missing --${missing.join(', --')}`);
  const key = process.env.FAREBOX_DEPLOYER_KEY;
  if (!key || !/^0x[0-9a-fA-F]{64}$/.test(key))
    throw new Error('set FAREBOX_DEPLOYER_KEY to the deployer private key (0x + 64 hex)');
  if (!/^\d+$/.test(values.timelock!)) throw new Error('--timelock: whole seconds');
  if (!/^\d+$/.test(values['role-delay']!)) throw new Error('--role-delay: whole seconds');
  let maxCharge: bigint;
  try {
    maxCharge = parseUsd(values['max-charge']!);
  } catch {
    throw new Error('--max-charge: a USD amount with at most 6 decimals');
  }
  const result = await deployEscrow({
    rpcUrl: values['rpc-url']!,
    stablecoin: values.stablecoin as Address,
    treasury: values.treasury as Address,
    settler: values.settler as Address,
    timelock: BigInt(values.timelock!),
    roleDelay: BigInt(values['role-delay']!),
    maxCharge,
    deployerKey: key as Hex,
    owner: values.owner as Address | undefined,
  });
  process.stdout.write(JSON.stringify(result) + '\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err: Error) => {
    process.stderr.write(`deploy-escrow: ${err.message}\n`);
    process.exit(1);
  });
}
