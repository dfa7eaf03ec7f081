/**
 * An account's balances on every chain and its default chain: the one document `farebox balance --json`, the
 * dashboard's balances.json and `GET /v1/balance` print, built here alone so the three cannot drift.
 *
 * Each amount twice: a USD decimal string with 6 decimals (DESIGN "Operator contract") and the bigint atomic amount as
 * a string, exact for a program that adds them. `available` is never below 0: a wallet committed past its balance (a
 * late debit, wallets.ts) has nothing available, not a debt to spend.
 */
import type { Redis } from 'ioredis';
import { getAccount } from '../accounts/accounts.js';
import { CHAIN_NAMES, type ChainName } from '../chains/config.js';
import { formatUsd } from '../../pricing/money.js';
import { readWallet } from './wallets.js';

/** One wallet as the document shows it. */
export interface ChainBalance {
  /** The synced escrow balance. */
  balance: string;
  /** Holds of calls running. */
  held: string;
  /** Debits not yet charged onchain. */
  pending: string;
  /** What a new call may hold: balance - requested withdrawal - pending - held, at least 0. */
  available: string;
  balance_atomic: string;
  held_atomic: string;
  pending_atomic: string;
  available_atomic: string;
}

/** The document of one account. */
export interface AccountBalances {
  account: string;
  default_chain: string;
  chains: Record<ChainName, ChainBalance>;
}

/** The balances of `account` (any case), or null when there is no such account. Its reads go out in one turn. */
export async function accountBalances(redis: Redis, account: string): Promise<AccountBalances | null> {
  const [acct, wallets] = await Promise.all([
    getAccount(redis, account),
    Promise.all(CHAIN_NAMES.map((n) => readWallet(redis, account, n))),
  ]);
  if (!acct) return null;
  const chains = {} as Record<ChainName, ChainBalance>;
  CHAIN_NAMES.forEach((n, i) => {
    const w = wallets[i];
    const available = w.available < 0n ? 0n : w.available;
    chains[n] = {
      balance: formatUsd(w.synced),
      held: formatUsd(w.held),
      pending: formatUsd(w.pending),
      available: formatUsd(available),
      balance_atomic: w.synced.toString(),
      held_atomic: w.held.toString(),
      pending_atomic: w.pending.toString(),
      available_atomic: available.toString(),
    };
  });
  return { account: acct.address, default_chain: acct.default_chain, chains };
}
