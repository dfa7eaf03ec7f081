/** Test helpers that set up money through the project's own public functions, never through its key layout. */
import type { Redis } from 'ioredis';
import type { ChainName } from '../../plugins/chains/config.js';
import { correctSynced, readCursor } from '../../plugins/settlement/apply-events.js';

/** Set an account's synced escrow balance on `chain`, as the reconciler would (no chain needed). */
export async function setSyncedBalance(redis: Redis, account: string, chain: ChainName, amount: bigint): Promise<void> {
  const cursor = await readCursor(redis, chain);
  const made = await correctSynced(redis, chain, account, cursor?.raw ?? '', amount);
  if (made === null) throw new Error('the cursor moved while the balance was set');
}
