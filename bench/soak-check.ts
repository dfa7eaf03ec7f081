/**
 * The soak's ledger checks, once the load has stopped and settlement has caught up: what callers were answered, the
 * call records in Redis and the escrows' events onchain must tell one story. Each check names what it found wrong;
 * an empty list of findings means nothing was lost, charged twice or left behind.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import {
  countOpenHolds,
  countQueuedDebits,
  getCallRecord,
  listCallRecords,
  type CallRecord,
} from '../plugins/billing/call-records.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from '../plugins/chains/config.js';
import { createEvmChain } from '../plugins/chains/evm.js';
import type { EscrowEvent } from '../plugins/chains/port.js';
import { formatUsd } from '../pricing/index.js';
import type { CallResult, Caller } from './soak-load.js';
import { callIdOf } from '../plugins/request-ids.js';

/** Debits waiting in spool files under `dirs`. */
export function spooledDebits(dirs: readonly string[]): number {
  let n = 0;
  for (const dir of dirs) {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      continue; // not made yet
    }
    for (const name of names) {
      if (!name.includes('.jsonl')) continue;
      try {
        // Every line but the file's header (the Redis it belongs to, plugins/billing/spool.ts) is a debit.
        n += readFileSync(join(dir, name), 'utf8')
          .split('\n')
          .filter((l) => l.trim() && !l.startsWith('{"farebox_spool"')).length;
      } catch {
        // renamed away while read (adopted)
      }
    }
  }
  return n;
}

/** What is still in motion: holds, held and pending amounts, queued and spooled debits. */
export async function inMotion(
  redis: Redis,
  callers: readonly Caller[],
  spoolDirs: readonly string[],
): Promise<string[]> {
  const left: string[] = [];
  const holds = await countOpenHolds(redis);
  if (holds) left.push(`${holds} open holds`);
  for (const chain of CHAIN_NAMES) {
    const queued = await countQueuedDebits(redis, chain);
    if (queued) left.push(`${queued} debits queued on ${chain}`);
  }
  for (const c of callers) {
    for (const chain of CHAIN_NAMES) {
      const w = await readWallet(redis, c.account, chain);
      if (w.held) left.push(`${c.account} ${chain}: held ${formatUsd(w.held)}`);
      if (w.pending) left.push(`${c.account} ${chain}: pending ${formatUsd(w.pending)}`);
    }
  }
  const spooled = spooledDebits(spoolDirs);
  if (spooled) left.push(`${spooled} debits in spool files`);
  return left;
}

/** Wait (at most `timeoutMs`) until nothing is in motion; returns the seconds waited, or what was left. */
export async function waitSettled(
  redis: Redis,
  callers: readonly Caller[],
  spoolDirs: readonly string[],
  timeoutMs: number,
): Promise<{ seconds: number; left: string[] }> {
  const started = Date.now();
  for (;;) {
    let left: string[];
    try {
      left = await inMotion(redis, callers, spoolDirs);
    } catch (err) {
      left = [`Redis: ${(err as Error).message}`];
    }
    if (left.length === 0 || Date.now() - started > timeoutMs) return { seconds: (Date.now() - started) / 1000, left };
    await new Promise((r) => setTimeout(r, 1_000));
  }
}

/** Per (account, chain): the three sums that must agree, in atomic units. */
export interface WalletLedger {
  account: string;
  chain: ChainName;
  deposited: bigint;
  /** deposited - the escrow's balanceOf now. */
  escrowDecrease: bigint;
  /** Sum of the prices of the account's settled records on the chain. */
  settledRecords: bigint;
  /** Sum of the account's Charged events on the chain. */
  chargedEvents: bigint;
  /** The gateway's synced balance (Redis) against balanceOf. */
  synced: bigint;
  balance: bigint;
}

/** The checks' outcome. */
export interface CheckReport {
  /** Everything wrong, one line each: empty when nothing was lost. */
  findings: string[];
  records: number;
  /** Records by status. */
  statuses: Record<string, number>;
  billed: { calls: number; usd: string };
  /** Debits that came after their hold had been released (charged all the same). */
  late: number;
  /** Charged events onchain, and call ids charged more than once. */
  charged: number;
  chargedTwice: number;
  /** Charges the escrow refused (ChargeRefused, ChargeOverCap). */
  refusedOnchain: number;
  wallets: WalletLedger[];
  /** How the calls the caller saw cut short ended in the ledger. */
  cut: { calls: number; free: number; billed: number };
  /** Calls whose charges were checked to be in the order the calls ended. */
  orderChecked: number;
}

/** Ends closer than this may be seen by the caller in another order than the gateway's. */
const ORDER_SLACK_MS = 500;

/** Notes one finding. */
type Say = (finding: string) => void;

/** The call records of the accounts, by escrow call id, with the account each belongs to. */
interface Records {
  byCallId: Map<string, CallRecord>;
  accountOf: Map<CallRecord, string>;
}

async function readRecords(redis: Redis, accounts: readonly string[]): Promise<Records> {
  const byCallId = new Map<string, CallRecord>();
  const accountOf = new Map<CallRecord, string>();
  for (const account of accounts) {
    for (const r of await listCallRecords(redis, account, 10_000_000)) {
      byCallId.set(callIdOf(r.call_id), r);
      accountOf.set(r, account);
    }
  }
  return { byCallId, accountOf };
}

/** The escrows' Charged events: how often each call id was charged, where (block, log), and the sums per wallet. */
interface Charges {
  count: Map<string, number>;
  position: Map<string, bigint>;
  /** Per `<account> <chain>`. */
  sum: Map<string, bigint>;
  total: number;
  refused: number;
}

/** Read every chain's escrow events from its first block, each Charged against the record of its call. */
async function readCharges(chains: ChainsConfig, recs: Records, say: Say): Promise<Charges> {
  const out: Charges = { count: new Map(), position: new Map(), sum: new Map(), total: 0, refused: 0 };
  for (const name of CHAIN_NAMES) {
    const chain = createEvmChain(name, chains[name]);
    const events: EscrowEvent[] = await chain.readEvents(0n, await chain.latestBlock());
    for (const e of events) {
      if (e.kind === 'charged') {
        out.total++;
        out.count.set(e.callId, (out.count.get(e.callId) ?? 0) + 1);
        out.position.set(e.callId, e.blockNumber * 1_000_000n + BigInt(e.logIndex));
        const k = `${e.account.toLowerCase()} ${name}`;
        out.sum.set(k, (out.sum.get(k) ?? 0n) + e.amount);
        const r = recs.byCallId.get(e.callId);
        if (!r) say(`${name}: call id ${e.callId} charged ${formatUsd(e.amount)}, no call record`);
        else if (r.priceAtomic !== e.amount)
          say(`${r.call_id}: charged ${formatUsd(e.amount)} onchain, recorded ${formatUsd(r.priceAtomic)}`);
        else if (r.chain !== name) say(`${r.call_id}: charged on ${name}, recorded on ${r.chain}`);
      } else if (e.kind === 'charge_refused' || e.kind === 'charge_over_cap') {
        out.refused++;
        say(`${name}: the escrow refused call id ${e.callId} (${e.kind}, ${formatUsd(e.amount)})`);
      }
    }
  }
  for (const [id, n] of out.count) if (n > 1) say(`call id ${id} charged ${n} times`);
  return out;
}

/**
 * What callers saw against the records: a 200 has a record; an answer that arrived whole is billed, at the output
 * tokens it carried; a call that failed upstream or was refused costs nothing. Returns how the cut answers ended.
 */
async function checkAnswers(
  redis: Redis,
  results: readonly CallResult[],
  recs: Records,
  say: Say,
): Promise<CheckReport['cut']> {
  const cut = { calls: 0, free: 0, billed: 0 };
  for (const c of results) {
    if (!c.requestId) continue;
    const r = recs.byCallId.get(callIdOf(c.requestId)) ?? (await getCallRecord(redis, c.requestId));
    const when = c.phase === c.endPhase ? c.phase : `${c.phase} to ${c.endPhase}`;
    if (c.status === 200) {
      if (!r) {
        say(`${c.requestId} (${c.outcome}, ${when}): answered 200, no call record`);
      } else if (c.outcome === 'whole') {
        if (r.priceAtomic === 0n)
          say(
            `${c.requestId} (${when}): answered in full, never billed (record ${r.status}${r.released ? `, released ${r.released}` : ''})`,
          );
        else if (r.usage.output_tokens !== c.tokens)
          say(`${c.requestId} (${when}): answered ${c.tokens} output tokens, billed ${r.usage.output_tokens}`);
      } else if (c.outcome === 'cut') {
        cut.calls++;
        if (r.priceAtomic > 0n) cut.billed++;
        else cut.free++;
      }
    } else if (r && r.priceAtomic > 0n && (c.outcome === 'upstream_failed' || c.outcome === 'refused')) {
      say(
        `${c.requestId} (${c.outcome} ${c.status} ${c.code}): charged ${formatUsd(r.priceAtomic)} for a call that failed`,
      );
    }
  }
  return cut;
}

/** Each record's money state: nothing left held or pending, every priced one settled with its transaction. */
function checkRecords(
  records: readonly CallRecord[],
  charges: Charges,
  say: Say,
): Pick<CheckReport, 'statuses' | 'billed' | 'late'> {
  const statuses: Record<string, number> = {};
  let calls = 0;
  let atomic = 0n;
  let late = 0;
  for (const r of records) {
    statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    if (r.late) late++;
    if (r.status === 'held' || r.status === 'pending')
      say(`${r.call_id}: left ${r.status} (${formatUsd(r.priceAtomic || r.held)})`);
    if (r.capped) say(`${r.call_id}: its price was above its hold and cut to it (the worst case was too low)`);
    if (r.priceAtomic === 0n) continue;
    calls++;
    atomic += r.priceAtomic;
    if (r.status === 'failed')
      say(`${r.call_id}: the escrow refused its charge of ${formatUsd(r.priceAtomic)} (tx ${r.tx})`);
    if (r.status === 'settled' && !r.tx) say(`${r.call_id}: settled without a transaction`);
    const n = charges.count.get(callIdOf(r.call_id)) ?? 0;
    if (r.status === 'settled' && n !== 1) say(`${r.call_id}: settled, but charged ${n} times onchain`);
  }
  return { statuses, billed: { calls, usd: formatUsd(atomic) }, late };
}

/**
 * In order: per gateway (a restarted one adopts its spool) and chain, no call charged before one that ended over
 * ORDER_SLACK_MS earlier. Returns how many calls were checked.
 */
function checkOrder(
  results: readonly CallResult[],
  ordered: (c: CallResult) => boolean,
  recs: Records,
  charges: Charges,
  say: Say,
): number {
  const groups = new Map<string, { end: number; at: bigint; id: string }[]>();
  for (const c of results) {
    if (c.outcome !== 'whole' || !c.requestId || !ordered(c)) continue;
    const id = callIdOf(c.requestId);
    const r = recs.byCallId.get(id);
    const at = charges.position.get(id);
    if (!r || at === undefined) continue;
    const k = `${c.gateway.split('#')[0]} ${r.chain}`;
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k)!.push({ end: c.startedAt + c.ms, at, id: c.requestId });
  }
  let checked = 0;
  for (const calls of groups.values()) {
    calls.sort((a, b) => a.end - b.end);
    let latest: { at: bigint; id: string } | undefined;
    for (let i = 0, j = 0; i < calls.length; i++) {
      for (; calls[j]!.end < calls[i]!.end - ORDER_SLACK_MS; j++)
        if (!latest || calls[j]!.at > latest.at) latest = calls[j];
      if (latest && calls[i]!.at < latest.at) say(`${calls[i]!.id}: charged before ${latest.id}, which ended earlier`);
      checked++;
    }
  }
  return checked;
}

/** Check the ledger against what callers saw. `deposits`: atomic units per account and chain. */
export async function checkLedger(opts: {
  redis: Redis;
  chains: ChainsConfig;
  callers: readonly Caller[];
  /** Accounts of the same Redis outside the load (the fuzz's): their charges are known, not checked per call. */
  otherAccounts?: readonly string[];
  deposits: ReadonlyMap<string, Partial<Record<ChainName, bigint>>>;
  results: readonly CallResult[];
  /** Lowest available balance the sampler saw per wallet. */
  minAvailable: ReadonlyMap<string, bigint>;
  /**
   * Calls whose charges must be onchain in the order they ended, per gateway and chain (those that ended while Redis
   * was away: their debits waited in the gateway's spool, which hands them over in order).
   */
  ordered?: (c: CallResult) => boolean;
}): Promise<CheckReport> {
  const { redis } = opts;
  const findings: string[] = [];
  const say: Say = (s) => {
    if (findings.length < 200) findings.push(s);
    else if (findings.length === 200) findings.push('... (more findings left out)');
  };
  const callerAccounts = opts.callers.map((c) => c.account);
  const recs = await readRecords(redis, [...callerAccounts, ...(opts.otherAccounts ?? [])]);
  const records = [...recs.byCallId.values()].filter((r) => callerAccounts.includes(recs.accountOf.get(r)!));
  const charges = await readCharges(opts.chains, recs, say);
  const cut = await checkAnswers(redis, opts.results, recs, say);
  const summary = checkRecords(records, charges, say);
  const orderChecked = opts.ordered ? checkOrder(opts.results, opts.ordered, recs, charges, say) : 0;

  // Per wallet: the escrow's decrease = the settled records = the Charged events; the synced balance = the escrow's.
  const wallets: WalletLedger[] = [];
  for (const c of opts.callers) {
    for (const name of CHAIN_NAMES) {
      const deposited = opts.deposits.get(c.account)?.[name] ?? 0n;
      const balance = await createEvmChain(name, opts.chains[name]).balanceOf(c.account as `0x${string}`);
      const settledRecords = records
        .filter((r) => r.chain === name && r.status === 'settled' && recs.accountOf.get(r) === c.account)
        .reduce((a, r) => a + r.priceAtomic, 0n);
      const w: WalletLedger = {
        account: c.account,
        chain: name,
        deposited,
        escrowDecrease: deposited - balance,
        settledRecords,
        chargedEvents: charges.sum.get(`${c.account} ${name}`) ?? 0n,
        synced: (await readWallet(redis, c.account, name)).synced,
        balance,
      };
      wallets.push(w);
      const where = `${c.account} ${name}`;
      if (w.escrowDecrease !== w.settledRecords || w.settledRecords !== w.chargedEvents) {
        say(
          `${where}: escrow down ${formatUsd(w.escrowDecrease)}, settled records ${formatUsd(w.settledRecords)}, Charged events ${formatUsd(w.chargedEvents)}`,
        );
      }
      if (w.synced !== w.balance) say(`${where}: synced ${formatUsd(w.synced)}, escrow ${formatUsd(w.balance)}`);
      const min = opts.minAvailable.get(where);
      if (min !== undefined && min < 0n) say(`${where}: available fell to ${formatUsd(min)}`);
    }
  }

  const chargedTwice = [...charges.count.values()].filter((n) => n > 1).length;
  return {
    findings,
    records: records.length,
    ...summary,
    charged: charges.total,
    chargedTwice,
    refusedOnchain: charges.refused,
    wallets,
    cut,
    orderChecked,
  };
}
