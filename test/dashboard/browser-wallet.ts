/**
 * A browser wallet for tests: an EIP-1193 `window.ethereum` in the page whose requests run in the test's process,
 * signed by a viem local account and sent to the dev chains' JSON-RPC. It starts on a chain the gateway does not
 * bill on (chain id 1), so a page must ask it to switch; `refuseSwitch` makes it decline as a person would (4001).
 * Its errors reach the page as a wallet's do: the node's JSON-RPC code and revert data (`{code: 3, data}` for a
 * revert), under viem's whole, long message.
 */
import type { BrowserContext } from 'playwright-core';
import { createWalletClient, http, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { CHAIN_NAMES, type ChainsConfig } from '../../plugins/chains/config.js';
import { devViemChain } from '../../plugins/chains/dev-chains.js';

/** A test wallet and what it was asked. */
export interface TestWallet {
  address: Hex;
  chainId: number;
  refuseSwitch: boolean;
  /** Every method the page called, in order. */
  calls: string[];
  /** Hashes of the transactions it sent. */
  sent: Hex[];
  /** Runs before each request the page makes; what it throws is the wallet's answer. */
  before?: (method: string, params: unknown[]) => Promise<void>;
}

// EIP-1193 errors carry a numeric code (and data); a function exposed to the page can only return values, so the
// page side turns {error} back into a thrown error with its code and data.
const PROVIDER = `
window.ethereum = {
  isFareboxTestWallet: true,
  async request({ method, params }) {
    const r = await window.__fareboxTestWallet(method, params ?? []);
    if (r.error) {
      const e = new Error(r.error.message);
      e.code = r.error.code;
      if (r.error.data !== undefined) e.data = r.error.data;
      throw e;
    }
    return r.result;
  },
  on() {},
  removeListener() {},
};
`;

/** Install the wallet in every page of `context`. */
export async function installWallet(
  context: BrowserContext,
  privateKey: Hex,
  chains: ChainsConfig,
): Promise<TestWallet> {
  const account = privateKeyToAccount(privateKey);
  const w: TestWallet = { address: account.address, chainId: 1, refuseSwitch: false, calls: [], sent: [] };
  const byId = new Map(CHAIN_NAMES.map((n) => [chains[n].chain_id, n]));
  const client = (chainId: number) => {
    const name = byId.get(chainId);
    if (!name) throw new Error(`not a dev chain: ${chainId}`);
    return createWalletClient({
      account,
      chain: devViemChain(name, chainId, chains[name].rpc_url),
      transport: http(chains[name].rpc_url),
    });
  };
  const handle = async (method: string, params: unknown[]): Promise<unknown> => {
    switch (method) {
      case 'eth_requestAccounts':
      case 'eth_accounts':
        return [account.address];
      case 'eth_chainId':
        return `0x${w.chainId.toString(16)}`;
      case 'wallet_switchEthereumChain': {
        if (w.refuseSwitch) throw Object.assign(new Error('User rejected the request.'), { code: 4001 });
        const id = Number.parseInt((params[0] as { chainId: string }).chainId, 16);
        if (!byId.has(id)) throw Object.assign(new Error('Unrecognized chain ID.'), { code: 4902 });
        w.chainId = id;
        return null;
      }
      case 'personal_sign':
        return account.signMessage({ message: { raw: params[0] as Hex } });
      case 'eth_signTypedData_v4': {
        const typed = JSON.parse(params[1] as string) as {
          domain: Record<string, unknown>;
          types: Record<string, { name: string; type: string }[]>;
          primaryType: string;
          message: Record<string, unknown>;
        };
        const { EIP712Domain: _domain, ...types } = typed.types;
        return account.signTypedData({
          domain: typed.domain,
          types,
          primaryType: typed.primaryType,
          message: typed.message,
        } as Parameters<typeof account.signTypedData>[0]);
      }
      case 'eth_sendTransaction': {
        const tx = params[0] as { to: Hex; data: Hex };
        const hash = await client(w.chainId).sendTransaction({ to: tx.to, data: tx.data });
        w.sent.push(hash);
        return hash;
      }
      default:
        throw Object.assign(new Error(`unsupported method ${method}`), { code: 4200 });
    }
  };
  await context.exposeFunction('__fareboxTestWallet', async (method: string, params: unknown[]) => {
    w.calls.push(method);
    try {
      await w.before?.(method, params);
      return { result: await handle(method, params) };
    } catch (err) {
      // viem wraps the node's error (code, data) in its own; the innermost code and data are the node's.
      let code: number | undefined;
      let data: unknown;
      for (let e = err as { code?: unknown; data?: unknown; cause?: unknown } | undefined; e; e = e.cause as never) {
        if (typeof e.code === 'number') code = e.code;
        if (e.data !== undefined) data = e.data;
      }
      const message = (err as { message?: string }).message ?? String(err);
      return { error: { code: code ?? -32603, message, ...(data === undefined ? {} : { data }) } };
    }
  });
  await context.addInitScript({ content: PROVIDER });
  return w;
}
