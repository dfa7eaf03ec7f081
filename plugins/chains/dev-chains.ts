/**
 * Four in-process dev EVM chains (EDR 0.13, one EdrContext), each served as JSON-RPC over
 * HTTP with TestStablecoin and Escrow deployed at start (DESIGN.md "Onchain": embedded default).
 *
 * | chain   | chain id | default URL            |
 * |---------|----------|------------------------|
 * | chain_a | 31337001 | http://127.0.0.1:8545  |
 * | chain_b | 31337002 | http://127.0.0.1:8546  |
 * | chain_c | 31337003 | http://127.0.0.1:8547  |
 * | chain_d | 31337004 | http://127.0.0.1:8548  |
 *
 * Accounts are the well-known Hardhat/Anvil dev mnemonic ("test test ... junk"), 10,000 ETH
 * each: #0 deployer/owner/minter, #1 settler, #2 treasury, #3..#7 callers. Same deployer
 * and nonces on every chain, so the contracts have the same addresses on all four.
 */
import type { EdrContext, Provider } from '@nomicfoundation/edr';
import type { Server } from 'node:http';
import { http, maxUint256, type Chain, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { loadArtifacts } from '../../contracts/compile.js';
import { testStablecoinAbi } from './abi.js';
import { publicClient, viemChain, walletClient, type ClientTarget } from './clients.js';
import { CHAIN_NAMES, type Address, type ChainConfig, type ChainName } from './config.js';
import { deployEscrowContract, deployStablecoin } from './deploy.js';
import { serveProvider } from './dev-rpc-server.js';

/** A dev key pair. */
export interface DevKey {
  privateKey: Hex;
  address: Address;
}

/** Well-known dev keys (public: never use them on a real network). */
export const DEV_KEYS = {
  deployer: {
    privateKey: '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80',
    address: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
  },
  settler: {
    privateKey: '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d',
    address: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8',
  },
  treasury: {
    privateKey: '0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a',
    address: '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC',
  },
  callers: [
    {
      privateKey: '0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6',
      address: '0x90F79bf6EB2c4f870365E785982E1f101E93b906',
    },
    {
      privateKey: '0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a',
      address: '0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65',
    },
    {
      privateKey: '0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba',
      address: '0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc',
    },
    {
      privateKey: '0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e',
      address: '0x976EA74026E726554dB657fA54763abd0C3a0aa9',
    },
    {
      privateKey: '0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356',
      address: '0x14dC79964da2C08b23698B3D3cc7Ca32193d9955',
    },
  ],
} as const satisfies { deployer: DevKey; settler: DevKey; treasury: DevKey; callers: readonly DevKey[] };

/** Chain ids of the dev chains. */
export const DEV_CHAIN_IDS: Record<ChainName, number> = {
  chain_a: 31337001,
  chain_b: 31337002,
  chain_c: 31337003,
  chain_d: 31337004,
};

/** Default HTTP port of chain_a; chain_b..d use the next three. */
export const DEV_BASE_PORT = 8545;
/** Env var name the dev chains' settler_key_env points at (see DEV_KEYS.settler). */
export const DEV_SETTLER_KEY_ENV = 'FAREBOX_DEV_SETTLER_KEY';

const BLOCK_GAS_LIMIT = 60_000_000n;
const ETH = 10n ** 18n;

/** Options of startDevChains. */
export interface DevChainsOptions {
  host?: string;
  /** Port of chain_a (chain_b..d: +1..+3); 0 = an ephemeral port each. Default 8545. */
  basePort?: number;
  /** Escrow withdrawal timelock in seconds. Default 3600. */
  withdrawalDelay?: bigint;
  /** Escrow role timelock in seconds (settlers, treasury, cap). Default: twice the withdrawal timelock. */
  roleDelay?: bigint;
  /** Escrow per-charge cap in atomic units. Default DEV_MAX_CHARGE. */
  maxCharge?: bigint;
  /** Web origins the JSON-RPC answers, with CORS (the local dashboard's); others are refused. Default none. */
  origins?: readonly string[];
  /**
   * Serve the test methods over JSON-RPC (`hardhat_*`, `evm_*`: set code, balances, time, mine, snapshot), not only
   * wallets' methods. Set by the project's tests alone: `farebox serve` and the plugin never do, whatever their
   * environment or config, because any client the JSON-RPC answers could then rewrite the chain.
   */
  testMethods?: boolean;
  /**
   * Mine a block every this many ms (interval mining, as a real chain: transactions wait in the mempool for the next
   * block, and a sender's batches can wait side by side) instead of a block per transaction (automine, the default:
   * each receipt at once, and a nonce gap refused). The contracts are deployed under automine first.
   */
  blockTimeMs?: number;
  /** Blocks a log or receipt needs, in the chains' config (1, included, by default). */
  confirmations?: number;
}

/** The dev escrows' per-charge cap: 1,000 USD. */
export const DEV_MAX_CHARGE = 1_000_000_000n;
/** The dev chains' settlement fee ceiling, gwei: far above their base fee (1 gwei at genesis, falling). */
export const DEV_MAX_FEE_PER_GAS = '100';

/** A running dev chain: its chain config, its name and the in-process EDR provider. */
export type DevChain = ChainConfig & { name: ChainName; provider: Provider };

/** The four running dev chains. */
export interface DevChains {
  chains: Record<ChainName, DevChain>;
  keys: typeof DEV_KEYS;
  /** Replace the web origins the chains' JSON-RPC answers (known once the gateway listens). */
  allowOrigins(origins: readonly string[]): void;
  /** Stops the HTTP servers (the EVM state is dropped with them). */
  close(): Promise<void>;
}

type Edr = typeof import('@nomicfoundation/edr');

// Loaded when dev chains start, not when this module is imported: the native module adds ~13 MiB to a process, and
// a gateway on remote chains (or a CLI command) imports this file only for its constants.
let edrModule: Promise<Edr> | undefined;
let context: Promise<EdrContext> | undefined;

// EDR: "Creates a new EdrContext instance. Should only be called once!" -> one per process.
function edrContext(edr: Edr): Promise<EdrContext> {
  context ??= (async () => {
    const ctx = new edr.EdrContext();
    await ctx.registerProviderFactory(edr.L1_CHAIN_TYPE, edr.l1ProviderFactory());
    return ctx;
  })();
  return context;
}

async function createDevProvider(chainId: number): Promise<Provider> {
  const edr = await (edrModule ??= import('@nomicfoundation/edr'));
  const { ContractDecoder, L1_CHAIN_TYPE, MineOrdering, l1GenesisState, l1HardforkToString } = edr;
  const hardfork = edr.SpecId.Osaka; // mainnet's current fork: includes the EIP-7825 per-tx gas cap (2^24).
  const ctx = await edrContext(edr);
  const funded = [DEV_KEYS.deployer, DEV_KEYS.settler, DEV_KEYS.treasury, ...DEV_KEYS.callers].map((k) => ({
    address: Buffer.from(k.address.slice(2), 'hex'),
    balance: 10_000n * ETH,
  }));
  return ctx.createProvider(
    L1_CHAIN_TYPE,
    {
      allowBlocksWithSameTimestamp: false,
      allowUnlimitedContractSize: false,
      // eth_call/estimateGas fail with the revert data; a reverted tx is still mined (status 0), like a real node.
      bailOnCallFailure: true,
      bailOnTransactionFailure: false,
      chainId: BigInt(chainId),
      coinbase: Buffer.from('c014ba5ec014ba5ec014ba5ec014ba5ec014ba5e', 'hex'),
      defaultTransactionGasLimit: 16_000_000n,
      genesisState: [...l1GenesisState(hardfork), ...funded],
      hardfork: l1HardforkToString(hardfork),
      initialBaseFeePerGas: 1_000_000_000n,
      minGasPrice: 0n,
      // Automine: one block per tx, receipts at once. It rejects out-of-order nonces. (blockTimeMs: switched to
      // interval mining once the contracts are deployed.)
      mining: { autoMine: true, blockGasLimit: BLOCK_GAS_LIMIT, memPool: { order: MineOrdering.Priority } },
      network: { genesisBlockGasLimit: BLOCK_GAS_LIMIT },
      networkId: BigInt(chainId),
      observability: {},
      ownedAccounts: [],
      precompileOverrides: [],
    },
    { enable: false, decodeConsoleLogInputsCallback: () => [], printLineCallback: () => {} },
    { subscriptionCallback: () => {} },
    new ContractDecoder(),
  );
}

/** viem chain definition for a dev chain. */
export function devViemChain(name: ChainName, chainId: number, rpcUrl: string): Chain {
  return viemChain(devTarget(name, chainId, rpcUrl));
}

/** A dev chain, as the client factory takes it. */
export function devTarget(name: ChainName, chainId: number, rpcUrl: string): ClientTarget {
  return { name: `farebox dev ${name}`, chainId, rpcUrl, testnet: true };
}

// Fresh chain, known deployer: nonces, gas and fees are fixed instead of asked for (4x fewer round trips).
const DEPLOY_FEES = { maxFeePerGas: 10_000_000_000n, maxPriorityFeePerGas: 1_000_000_000n };

async function deployDev(
  name: ChainName,
  rpcUrl: string,
  delays: { withdrawalDelay: bigint; roleDelay: bigint; maxCharge: bigint },
) {
  const target = devTarget(name, DEV_CHAIN_IDS[name], rpcUrl);
  const transport = http(rpcUrl);
  const pub = publicClient(target, { transport, pollingInterval: 10 });
  const wallet = walletClient(target, privateKeyToAccount(DEV_KEYS.deployer.privateKey), { transport });
  const token = await deployStablecoin(wallet, pub, DEV_KEYS.deployer.address, {
    nonce: 0,
    gas: 3_000_000n,
    ...DEPLOY_FEES,
  });
  const escrow = await deployEscrowContract(
    wallet,
    pub,
    {
      stablecoin: token.address,
      owner: DEV_KEYS.deployer.address,
      treasury: DEV_KEYS.treasury.address,
      settler: DEV_KEYS.settler.address,
      ...delays,
    },
    { nonce: 1, gas: 3_000_000n, ...DEPLOY_FEES },
  );
  // Standing approval lets mintAndDeposit fund an account in two txs (mint, depositFor).
  const hash = await wallet.writeContract({
    address: token.address,
    abi: testStablecoinAbi,
    functionName: 'approve',
    args: [escrow.address, maxUint256],
    nonce: 2,
    gas: 100_000n,
    ...DEPLOY_FEES,
  });
  const receipt = await pub.waitForTransactionReceipt({ hash });
  if (receipt.status !== 'success') throw new Error(`${name}: approve reverted`);
  return { stablecoin: token.address, escrow: escrow.address, deployBlock: token.blockNumber };
}

/** Switch a provider from automine to a block every `ms` (EDR's evm_setAutomine and evm_setIntervalMining). */
async function mineEvery(provider: Provider, ms: number): Promise<void> {
  for (const [method, params] of [
    ['evm_setAutomine', [false]],
    ['evm_setIntervalMining', [ms]],
  ] as const) {
    const res = await provider.handleRequest(JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }));
    const data = (typeof res.data === 'string' ? JSON.parse(res.data) : res.data) as { error?: { message: string } };
    if (data.error) throw new Error(`${method}: ${data.error.message}`);
  }
}

/** Starts the four dev chains, deploys the contracts on each, and serves them over HTTP. */
export async function startDevChains(opts: DevChainsOptions = {}): Promise<DevChains> {
  const blockTimeMs = opts.blockTimeMs;
  if (blockTimeMs !== undefined && (!Number.isInteger(blockTimeMs) || blockTimeMs < 1))
    throw new Error('blockTimeMs: a positive integer');
  const host = opts.host ?? '127.0.0.1';
  const basePort = opts.basePort ?? DEV_BASE_PORT;
  const withdrawalDelay = opts.withdrawalDelay ?? 3600n;
  const delays = {
    withdrawalDelay,
    roleDelay: opts.roleDelay ?? 2n * withdrawalDelay,
    maxCharge: opts.maxCharge ?? DEV_MAX_CHARGE,
  };
  await loadArtifacts(); // compile once before the four deploys race for it
  const servers: Server[] = [];
  const origins = new Set(opts.origins ?? []);
  const close = async () => {
    await Promise.all(
      servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.close(() => resolve());
            s.closeAllConnections();
          }),
      ),
    );
  };
  // allSettled: on a failure (e.g. a port in use) every server that did start is closed.
  const started = await Promise.allSettled(
    CHAIN_NAMES.map(async (name, i): Promise<DevChain> => {
      const chainId = DEV_CHAIN_IDS[name];
      const provider = await createDevProvider(chainId);
      const { url, server } = await serveProvider(provider, host, basePort === 0 ? 0 : basePort + i, origins, {
        testMethods: opts.testMethods,
      });
      servers.push(server);
      const d = await deployDev(name, url, delays);
      if (blockTimeMs !== undefined) await mineEvery(provider, blockTimeMs);
      return {
        name,
        provider,
        chain_id: chainId,
        rpc_url: url,
        stablecoin: d.stablecoin,
        escrow: d.escrow,
        settler_key_env: DEV_SETTLER_KEY_ENV,
        // One block by default: a dev chain has no reorgs but the ones a test makes.
        confirmations: opts.confirmations ?? 1,
        max_fee_per_gas: DEV_MAX_FEE_PER_GAS,
        max_log_range: 2_000,
        max_batch_gas: 16_777_216,
        deploy_block: Number(d.deployBlock),
        replace_after_ms: 10_000,
        // A quarter block under interval mining: a receipt is seen soon after its block, without polling idle blocks.
        poll_interval_ms: blockTimeMs === undefined ? 25 : Math.max(25, Math.round(blockTimeMs / 4)),
      };
    }),
  );
  const failed = started.find((r) => r.status === 'rejected');
  if (failed) {
    await close();
    throw failed.reason;
  }
  const chains = Object.fromEntries(
    started.map((r) => (r as PromiseFulfilledResult<DevChain>).value).map((c) => [c.name, c]),
  ) as Record<ChainName, DevChain>;
  const allowOrigins = (list: readonly string[]) => {
    origins.clear();
    for (const o of list) origins.add(o);
  };
  return { chains, keys: DEV_KEYS, allowOrigins, close };
}
