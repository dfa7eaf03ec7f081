/**
 * What the dashboard reads from the chains: the stablecoin's EIP-712 domain and whether it takes EIP-3009
 * authorizations, an account's withdrawal request and the escrow's timelock, the wallet's own token balance, and
 * smart-contract wallet signatures (ERC-1271, ERC-6492). Reads are bounded in time: a page shows "unavailable"
 * rather than wait for a chain.
 */
import {
  BaseError,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  type Hex,
  type PublicClient,
} from 'viem';
import { verifySiweMessage } from 'viem/siwe';
import { escrowAbi, testStablecoinAbi } from '../chains/abi.js';
import { CHAIN_NAMES, type Address, type ChainName, type ChainsConfig } from '../chains/config.js';
import { publicClient } from '../chains/clients.js';

/** A requested withdrawal: `readyAt` in unix seconds. */
export interface WithdrawalRequest {
  amount: bigint;
  readyAt: bigint;
}

/** Chain reads of one set of chains. */
export class ChainReader {
  private readonly clients = new Map<ChainName, PublicClient>();
  private readonly domains = new Map<ChainName, Promise<{ name: string; version: string }>>();
  private readonly authorization = new Map<ChainName, Promise<boolean>>();
  private readonly delays = new Map<ChainName, Promise<bigint>>();

  constructor(
    readonly chains: ChainsConfig,
    private readonly timeoutMs = 5_000,
  ) {}

  /** The chain name of a chain id, if the gateway bills on it. */
  nameOf(chainId: number): ChainName | undefined {
    return CHAIN_NAMES.find((n) => this.chains[n].chain_id === chainId);
  }

  /** Chain ids of the four chains, chain_a first. */
  chainIds(): number[] {
    return CHAIN_NAMES.map((n) => this.chains[n].chain_id);
  }

  private client(name: ChainName): PublicClient {
    let c = this.clients.get(name);
    if (!c) {
      const cfg = this.chains[name];
      c = publicClient(
        { name, chainId: cfg.chain_id, rpcUrl: cfg.rpc_url },
        { timeoutMs: this.timeoutMs, retryCount: 0 },
      );
      this.clients.set(name, c);
    }
    return c;
  }

  // A failed read is forgotten, so the next page asks again.
  private cached<T>(map: Map<ChainName, Promise<T>>, name: ChainName, read: () => Promise<T>): Promise<T> {
    let p = map.get(name);
    if (!p) {
      p = read();
      map.set(name, p);
      p.catch(() => map.delete(name));
    }
    return p;
  }

  /** The stablecoin's EIP-712 domain name and version (USDC: "USD Coin", "2"). */
  tokenDomain(name: ChainName): Promise<{ name: string; version: string }> {
    return this.cached(this.domains, name, async () => {
      const token = this.chains[name].stablecoin;
      const c = this.client(name);
      const [n, v] = await Promise.all([
        c.readContract({ address: token, abi: testStablecoinAbi, functionName: 'name' }),
        c.readContract({ address: token, abi: testStablecoinAbi, functionName: 'version' }),
      ]);
      return { name: n, version: v };
    });
  }

  /** Whether the stablecoin takes EIP-3009 authorizations (it answers authorizationState). */
  supportsAuthorization(name: ChainName): Promise<boolean> {
    return this.cached(this.authorization, name, async () => {
      try {
        await this.client(name).readContract({
          address: this.chains[name].stablecoin,
          abi: testStablecoinAbi,
          functionName: 'authorizationState',
          args: ['0x0000000000000000000000000000000000000001', `0x${'00'.repeat(32)}`],
        });
        return true;
      } catch (err) {
        // A revert (or no answer data) says the function is not there; a chain that does not answer says nothing.
        const absent =
          err instanceof BaseError &&
          err.walk((e) => e instanceof ContractFunctionRevertedError || e instanceof ContractFunctionZeroDataError) !==
            null;
        if (absent) return false;
        throw err;
      }
    });
  }

  /** Seconds between a withdrawal request and the earliest withdrawal. */
  withdrawalDelay(name: ChainName): Promise<bigint> {
    return this.cached(this.delays, name, () =>
      this.client(name).readContract({
        address: this.chains[name].escrow,
        abi: escrowAbi,
        functionName: 'withdrawalDelay',
      }),
    );
  }

  /** The account's withdrawal request on a chain, or null. */
  async withdrawalRequest(name: ChainName, account: Address): Promise<WithdrawalRequest | null> {
    const [amount, readyAt] = await this.client(name).readContract({
      address: this.chains[name].escrow,
      abi: escrowAbi,
      functionName: 'pendingWithdrawal',
      args: [account],
    });
    return amount === 0n ? null : { amount, readyAt };
  }

  /** The stablecoin the wallet itself holds on a chain (not yet deposited). */
  tokenBalance(name: ChainName, account: Address): Promise<bigint> {
    return this.client(name).readContract({
      address: this.chains[name].stablecoin,
      abi: testStablecoinAbi,
      functionName: 'balanceOf',
      args: [account],
    });
  }

  /** Whether a contract wallet accepts `signature` for the sign-in message (false on a chain the gateway does not know). */
  async checkContractSignature(chainId: number, address: Hex, message: string, signature: Hex): Promise<boolean> {
    const name = this.nameOf(chainId);
    if (!name) return false;
    return verifySiweMessage(this.client(name), { message, signature, address });
  }
}

/** One reader per chains config, so clients and cached reads are shared by every request. */
const readers = new WeakMap<ChainsConfig, ChainReader>();

/** The ChainReader of a chains config. */
export function chainReader(chains: ChainsConfig): ChainReader {
  let r = readers.get(chains);
  if (!r) {
    r = new ChainReader(chains);
    readers.set(chains, r);
  }
  return r;
}
