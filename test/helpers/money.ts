/** Test helpers that set up money through the project's own public functions, never through its key layout. */
import type { Redis } from 'ioredis';
import type { ChainName } from '../../plugins/chains/config.js';
import type { HoldInput } from '../../plugins/billing/wallets.js';
import { callIdOf, newRequestId } from '../../plugins/request-ids.js';
import { correctSynced, readCursor } from '../../plugins/settlement/apply-events.js';

/** Set an account's synced escrow balance on `chain`, as the reconciler would (no chain needed). */
export async function setSyncedBalance(redis: Redis, account: string, chain: ChainName, amount: bigint): Promise<void> {
  const cursor = await readCursor(redis, chain);
  const made = await correctSynced(redis, chain, account, cursor?.raw ?? '', amount);
  if (made === null) throw new Error('the cursor moved while the balance was set');
}

/**
 * A hold for the wallet scripts (placeHold, debitHold): `amount` for `account` on chain_a, a fresh request id, a
 * gamma-k3 call of a test key, a minute to live and an hour of retention, each overridden by `o`.
 */
export function holdFor(account: string, amount: bigint, o: Partial<HoldInput> = {}): HoldInput {
  const requestId = o.requestId ?? newRequestId();
  return {
    requestId,
    callId: callIdOf(requestId),
    account,
    chain: 'chain_a',
    amount,
    owner: 'test',
    ttlMs: 60_000,
    model: 'gamma-k3',
    keyId: 'key_test',
    retentionMs: 3_600_000,
    ...o,
  };
}
