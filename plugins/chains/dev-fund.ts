/**
 * `farebox fund` on dev chains: mint test stablecoin and deposit it into the escrow for an
 * account (DESIGN.md "Operator contract"). Refuses any chain id that is not a dev chain.
 *
 * Every funder signs with the one dev minter key, so their transactions contend for its nonces: in one process
 * fundings of a chain run one at a time; against another process (a second `farebox fund`, a gateway's dashboard)
 * a transaction whose nonce was taken meanwhile is signed again with the next one.
 */
import { BaseError, http, NonceTooLowError, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { escrowAbi, testStablecoinAbi } from './abi.js';
import type { Address, ChainConfig, ChainName } from './config.js';
import { publicClient, walletClient } from './clients.js';
import { DEV_CHAIN_IDS, DEV_KEYS, devTarget } from './dev-chains.js';

/** What mintAndDeposit needs of a chain's config. */
export type FundTarget = Pick<ChainConfig, 'chain_id' | 'rpc_url' | 'stablecoin' | 'escrow'>;

/** Options of mintAndDeposit. */
export interface FundOptions {
  /** Key of a minter of the stablecoin that has approved the escrow. Default: the dev deployer. */
  minterKey?: Hex;
  /** Told each step as it starts (`minting`, `depositing`), for a progress line. */
  onStep?: (step: 'minting' | 'depositing') => void;
}

/** Tries at a transaction whose nonce other processes keep taking. */
const NONCE_ATTEMPTS = 10;

// The funding running last per chain and minter in this process: the next one waits for it.
const running = new Map<string, Promise<unknown>>();

/**
 * Mints `amount` (atomic units) to the minter and deposits it for `account`; returns the
 * account's escrow balance after. The minter (default: the dev deployer) must be a minter
 * of the stablecoin and have approved the escrow (startDevChains does both).
 */
export async function mintAndDeposit(
  chain: FundTarget,
  account: Address,
  amount: bigint,
  opts: FundOptions = {},
): Promise<bigint> {
  const name = (Object.keys(DEV_CHAIN_IDS) as ChainName[]).find((n) => DEV_CHAIN_IDS[n] === chain.chain_id);
  if (!name) throw new Error(`chain id ${chain.chain_id} is not a dev chain: funding mints test tokens only there`);
  if (amount <= 0n) throw new Error('amount must be positive');
  const minterKey = opts.minterKey ?? DEV_KEYS.deployer.privateKey;
  const minter = privateKeyToAccount(minterKey);
  // The URL is part of the key: two dev chain sets in one process share chain ids.
  const key = `${chain.rpc_url} ${minter.address}`;
  const job = (running.get(key) ?? Promise.resolve())
    .catch(() => {})
    .then(() => fund(name, chain, account, amount, minterKey, opts.onStep));
  running.set(key, job);
  try {
    return await job;
  } finally {
    if (running.get(key) === job) running.delete(key);
  }
}

async function fund(
  name: ChainName,
  chain: FundTarget,
  account: Address,
  amount: bigint,
  minterKey: Hex,
  onStep: FundOptions['onStep'],
): Promise<bigint> {
  const target = devTarget(name, chain.chain_id, chain.rpc_url);
  const transport = http(chain.rpc_url);
  const pub = publicClient(target, { transport, pollingInterval: 20 });
  const wallet = walletClient(target, privateKeyToAccount(minterKey), { transport });
  onStep?.('minting');
  await send(pub, 'mint', () =>
    wallet.writeContract({
      address: chain.stablecoin,
      abi: testStablecoinAbi,
      functionName: 'mint',
      args: [wallet.account.address, amount],
    }),
  );
  onStep?.('depositing');
  await send(pub, 'depositFor', () =>
    wallet.writeContract({
      address: chain.escrow,
      abi: escrowAbi,
      functionName: 'depositFor',
      args: [account, amount],
    }),
  );
  return pub.readContract({ address: chain.escrow, abi: escrowAbi, functionName: 'balanceOf', args: [account] });
}

/** Send a transaction (signed with the minter's next nonce at each try) and wait for its success. */
async function send(pub: PublicClient, what: string, write: () => Promise<Hex>): Promise<void> {
  let hash: Hex;
  for (let attempt = 1; ; attempt++) {
    try {
      hash = await write();
      break;
    } catch (err) {
      // Refused for its nonce: another process's transaction took it, and this one was not sent.
      if (!nonceTaken(err) || attempt >= NONCE_ATTEMPTS) throw err;
      await new Promise((r) => setTimeout(r, 10 + Math.random() * 40 * attempt));
    }
  }
  const r = await pub.waitForTransactionReceipt({ hash });
  if (r.status !== 'success') throw new Error(`${what} reverted (tx ${hash})`);
}

function nonceTaken(err: unknown): boolean {
  if (!(err instanceof BaseError)) return false;
  return (
    err.walk((e) => e instanceof NonceTooLowError) !== null ||
    /nonce too low|already known/i.test(`${err.shortMessage} ${err.details}`)
  );
}
