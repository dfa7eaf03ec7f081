/**
 * The viem clients of a chain, made here only: its viem Chain (id, name and RPC URL; farebox sets fees, gas and
 * nonces itself, so no chain presets) and its clients, over the project's RPC transport (rpc-transport.ts) unless a
 * caller passes another.
 */
import {
  createPublicClient,
  createWalletClient,
  defineChain,
  type Chain,
  type PrivateKeyAccount,
  type PublicClient,
  type Transport,
  type WalletClient,
} from 'viem';
import { rpcTransport } from './rpc-transport.js';

/** The chain a client talks to. */
export interface ClientTarget {
  /** Shown in viem's errors. */
  name: string;
  chainId: number;
  rpcUrl: string;
  /** A dev chain (viem's `testnet` flag). */
  testnet?: boolean;
}

/** How a client reaches its node. */
export interface ClientOptions {
  /** Pause between polls when waiting (receipts, blocks), ms; viem's default otherwise. */
  pollingInterval?: number;
  /** Bound on each RPC request, ms (rpcTransport; 10 s by default). */
  timeoutMs?: number;
  /** Retries of a failed request (rpcTransport; viem's default of 3 otherwise). */
  retryCount?: number;
  /** Another transport than rpcTransport (the dev tools use viem's http). */
  transport?: Transport;
}

/** The viem Chain of a target. */
export function viemChain(t: ClientTarget): Chain {
  return defineChain({
    id: t.chainId,
    name: t.name,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [t.rpcUrl] } },
    ...(t.testnet ? { testnet: true } : {}),
  });
}

function transportOf(t: ClientTarget, opts: ClientOptions): Transport {
  return opts.transport ?? rpcTransport(t.rpcUrl, { timeoutMs: opts.timeoutMs, retryCount: opts.retryCount });
}

/** A client for reads (and for sending raw, already signed transactions). */
export function publicClient(t: ClientTarget, opts: ClientOptions = {}): PublicClient {
  return createPublicClient({
    chain: viemChain(t),
    transport: transportOf(t, opts),
    pollingInterval: opts.pollingInterval,
  });
}

/** A client that signs with `account` and sends. */
export function walletClient(
  t: ClientTarget,
  account: PrivateKeyAccount,
  opts: ClientOptions = {},
): WalletClient<Transport, Chain, PrivateKeyAccount> {
  return createWalletClient({
    chain: viemChain(t),
    transport: transportOf(t, opts),
    account,
    pollingInterval: opts.pollingInterval,
  });
}
