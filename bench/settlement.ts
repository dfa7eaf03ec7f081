/**
 * The settlement cell of `npm run bench` (alone: BENCH_QUICK=settlement): farebox's gateway and its `farebox settle`
 * process against four dev chains that mine like a real chain, a block every BENCH_SETTLE_BLOCK_MS (2,000) with a
 * batch settled BENCH_SETTLE_CONFIRMATIONS (12) blocks on, in processes of their own. Two phases, each bounded:
 * - live: chat-json calls at the gateway's full rate on BENCH_SETTLE_CONNECTIONS (64) connections for
 *   BENCH_SETTLE_DURATION s (60), spread over the four chains (an account and a key of each chain), then until every
 *   debit queue is empty: does settlement follow the gateway, and how old does the backlog get?
 * - one key: with the settle process stopped, calls on chain_a alone for BENCH_SETTLE_BACKLOG s (30) queue a backlog;
 *   a fresh settle process drains it: the rate one settler key sustains when it has all it can take.
 * Every second it samples each chain's debit queue: its depth and the age of its oldest entry (what the settler's
 * farebox_debit_queue_oldest_seconds reports, every second instead of every 5). Afterwards it reads back from each
 * chain, block by block, the settler key's transactions: their charges (one escrow event each) and their gas.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { createAccount, createKey } from '../plugins/accounts/accounts.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from '../plugins/chains/config.js';
import { DEV_KEYS } from '../plugins/chains/dev-chains.js';
import { mintAndDeposit } from '../plugins/chains/dev-fund.js';
import { DEV_CHAINS_KEY } from '../plugins/serve.js';
import { connectRedis, deleteKeys } from '../plugins/store/redis.js';
import { keys } from '../plugins/store/keys.js';
import { cpuMsOf, readyUrl, spawnNode, stopChild, type Child } from './children.js';
import { runLoad, type LoadResult } from './load.js';
import { requestFor, type Target } from './scenarios.js';
import { round } from './stats.js';

/** What the settlement cell is run with. */
export interface SettlementSettings {
  blockMs: number;
  confirmations: number;
  durationS: number;
  backlogS: number;
  connections: number;
}

/** One second's look at the debit queues. */
export interface QueueSample {
  /** Seconds since the cell's load began. */
  t: number;
  phase: 'live' | 'live drain' | 'backlog' | 'one key';
  /** Per chain: entries in the queue, and the age of the oldest (s; 0 when empty). */
  chains: Record<ChainName, { depth: number; oldestS: number }>;
}

/** The settler key's transactions of one chain in one phase, read back from its blocks. */
export interface ChainSettled {
  /** Calls answered 2xx on this chain's account in the phase. */
  calls: number;
  /** Charges (escrow events) in the settler's transactions, and those transactions. */
  charges: number;
  batches: number;
  reverted: number;
  /** Gas used by those transactions, per charge. */
  gasPerCharge: number | null;
  /** Blocks from the first to the last that held one, and the most charges one held. */
  blocks: number;
  maxChargesPerBlock: number;
  /** Charges over the blocks from the first that held one to the last (at the block time): the rate while batches went out. */
  chargesPerS: number | null;
  /** After the load ended: seconds until this chain's queue was empty (every batch confirmed), or null if it never was. */
  emptyAfterS: number | null;
  /** After the load ended: seconds until the watcher had applied every charge (the account's pending at 0), or null. */
  appliedAfterS: number | null;
  /** Oldest queued debit over the phase (s): the highest, and the median once the first confirmation window passed. */
  oldestMaxS: number;
  oldestMedianS: number;
  /** Largest queue depth seen. */
  depthMax: number;
}

/** What the settlement cell measured. */
export interface SettlementResults {
  settings: SettlementSettings;
  live: { load: LoadResult[]; callsPerS: number; chains: Record<ChainName, ChainSettled> };
  oneKey: { load: LoadResult; backlog: number; drainedS: number | null; chain: ChainSettled };
  /** CPU of the settle process (its settler and watcher) per charge, ms, in each phase. */
  settleCpuMsPerCharge: { live: number | null; oneKey: number | null };
  samples: QueueSample[];
  problems: string[];
}

interface Block {
  number: number;
  charges: number;
  txs: number;
  reverted: number;
  gas: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function rpc<T>(url: string, method: string, params: unknown[]): Promise<T> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = (await res.json()) as { result?: T; error?: { message: string } };
  if (body.error) throw new Error(`${method}: ${body.error.message}`);
  return body.result as T;
}

const head = async (url: string) => Number(BigInt(await rpc<string>(url, 'eth_blockNumber', [])));

/** The settler key's transactions in blocks from..to of one chain, block by block. */
async function settlerBlocks(url: string, escrow: string, from: number, to: number): Promise<Block[]> {
  const settler = DEV_KEYS.settler.address.toLowerCase();
  const out: Block[] = [];
  for (let n = from; n <= to; n++) {
    const block = await rpc<{ transactions: { hash: string; from: string; to: string | null }[] }>(
      url,
      'eth_getBlockByNumber',
      [`0x${n.toString(16)}`, true],
    );
    const b: Block = { number: n, charges: 0, txs: 0, reverted: 0, gas: 0 };
    // The settler's transactions alone (EDR has no eth_getBlockReceipts).
    const mine = block.transactions.filter(
      (tx) => tx.from.toLowerCase() === settler && tx.to?.toLowerCase() === escrow.toLowerCase(),
    );
    type Receipt = { status: string; gasUsed: string; logs: { address: string }[] };
    for (const r of await Promise.all(mine.map((tx) => rpc<Receipt>(url, 'eth_getTransactionReceipt', [tx.hash])))) {
      b.txs++;
      b.gas += Number(BigInt(r.gasUsed));
      if (r.status !== '0x1') b.reverted++;
      // One escrow event per charge (Charged, ChargeRefused, ChargeOverCap or ChargeSkipped); the token's Transfer is not.
      b.charges += r.logs.filter((l) => l.address.toLowerCase() === escrow.toLowerCase()).length;
    }
    out.push(b);
  }
  return out;
}

function median(xs: number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

function settled(
  blocks: Block[],
  blockMs: number,
): Omit<ChainSettled, 'calls' | 'emptyAfterS' | 'appliedAfterS' | 'oldestMaxS' | 'oldestMedianS' | 'depthMax'> {
  const used = blocks.filter((b) => b.txs > 0);
  const charges = used.reduce((n, b) => n + b.charges, 0);
  const gas = used.reduce((n, b) => n + b.gas, 0);
  const first = used[0];
  const last = used.at(-1);
  // By block numbers, not timestamps: a dev chain's block is at least a second after the one before (EDR takes no
  // two blocks of one timestamp), so blocks under a second apart carry timestamps that run ahead of the clock.
  const seconds = first && last ? ((last.number - first.number + 1) * blockMs) / 1000 : 0;
  return {
    charges,
    batches: used.reduce((n, b) => n + b.txs, 0),
    reverted: used.reduce((n, b) => n + b.reverted, 0),
    gasPerCharge: charges ? Math.round(gas / charges) : null,
    blocks: first && last ? last.number - first.number + 1 : 0,
    maxChargesPerBlock: Math.max(0, ...used.map((b) => b.charges)),
    chargesPerS: seconds ? round(charges / seconds, 1) : null,
  };
}

/** Run the settlement cell; its processes are stopped and its Redis keys deleted before it returns. */
export async function runSettlement(opts: {
  redisUrl: string;
  /** dist/bench/server.js */
  server: string;
  loadCore: number;
  serverCore: number;
  settings: SettlementSettings;
  log: (s: string) => void;
}): Promise<SettlementResults> {
  const { redisUrl, server, loadCore, serverCore, settings, log } = opts;
  const { blockMs, confirmations } = settings;
  const prefix = `farebox-bench-settle:${randomBytes(6).toString('hex')}:`;
  const redis = connectRedis({ url: redisUrl, prefix, failFast: true });
  // The cell's gateway funds no account of its own (bench/farebox-target.ts): the cell funds one per chain.
  const env = { ...process.env };
  delete env.FAREBOX_BENCH_ACCOUNT;
  const started: Child[] = [];
  const spawn = (name: string, core: number, args: string[]) => {
    const c = spawnNode(name, core, [], server, args, env);
    started.push(c);
    return c;
  };
  const problems: string[] = [];
  try {
    const sim = spawn('simulator (settlement)', loadCore, ['sim']);
    const simUrl = await readyUrl(sim);
    const chainsChild = spawn('dev chains (settlement)', loadCore, [
      'chains',
      redisUrl,
      prefix,
      String(blockMs),
      String(confirmations),
    ]);
    await readyUrl(chainsChild);
    const startSettle = async () => {
      const c = spawn('farebox settle (settlement)', serverCore, ['settle', redisUrl, prefix]);
      await readyUrl(c);
      return c;
    };
    let settle = await startSettle();
    const fb = spawn('farebox (settlement)', serverCore, ['farebox', simUrl, redisUrl, prefix]);
    const target: Target = { name: 'farebox', url: await readyUrl(fb), pid: fb.pid };
    const chains = JSON.parse((await redis.get(DEV_CHAINS_KEY))!) as ChainsConfig;

    // An account and a key per chain (its default chain), funded there; the deposit counts once confirmed.
    log(`settlement: funding an account on each chain (${confirmations} confirmations of ${blockMs} ms blocks)`);
    const accounts = {} as Record<ChainName, { address: string; key: string }>;
    const DEPOSIT = 1_000_000_000_000n;
    await Promise.all(
      CHAIN_NAMES.map(async (name) => {
        const account = await createAccount(redis, { defaultChain: name });
        const { key } = await createKey(redis, account.address);
        accounts[name] = { address: account.address, key };
        await mintAndDeposit(chains[name], account.address as `0x${string}`, DEPOSIT);
        const deadline = Date.now() + confirmations * blockMs + 60_000;
        while ((await readWallet(redis, account.address, name)).synced < DEPOSIT) {
          if (Date.now() > deadline) throw new Error(`settlement: the deposit on ${name} was not synced in time`);
          await sleep(250);
        }
      }),
    );

    // Each second: every queue's depth and oldest entry.
    const samples: QueueSample[] = [];
    let phase: QueueSample['phase'] = 'live';
    let sampling = true;
    const t0 = Date.now();
    const sampleOnce = async (): Promise<QueueSample> => {
      const rows = await Promise.all(
        CHAIN_NAMES.map(async (name) => {
          const [depth, first] = await Promise.all([
            redis.xlen(keys.debits(name)),
            redis.xrange(keys.debits(name), '-', '+', 'COUNT', 1) as Promise<[string, string[]][]>,
          ]);
          const oldestS = first.length ? Math.max(0, (Date.now() - Number(first[0]![0].split('-')[0])) / 1000) : 0;
          return [name, { depth, oldestS: round(oldestS, 1) }] as const;
        }),
      );
      return {
        t: round((Date.now() - t0) / 1000, 1),
        phase,
        chains: Object.fromEntries(rows) as QueueSample['chains'],
      };
    };
    const sampler = (async () => {
      while (sampling) {
        const next = Date.now() + 1000;
        samples.push(await sampleOnce().catch(() => samples.at(-1)!));
        await sleep(Math.max(0, next - Date.now()));
      }
    })();
    /**
     * Wait until the queues of `names` are empty (every batch confirmed and acknowledged), and their accounts have
     * nothing pending (every charge applied by the watcher); seconds waited for each, per chain (null: not within `ms`).
     */
    const drain = async (names: readonly ChainName[], ms: number) => {
      const from = Date.now();
      const empty: Record<string, number | null> = Object.fromEntries(names.map((n) => [n, null]));
      const applied: Record<string, number | null> = { ...empty };
      const since = () => round((Date.now() - from) / 1000, 1);
      while (Date.now() - from < ms && names.some((n) => empty[n] === null || applied[n] === null)) {
        for (const n of names) {
          if (empty[n] === null && (await redis.xlen(keys.debits(n))) === 0) empty[n] = since();
          if (applied[n] === null && (await readWallet(redis, accounts[n].address, n)).pending === 0n)
            applied[n] = since();
        }
        await sleep(250);
      }
      return { empty, applied };
    };
    const drainMs = (confirmations + 2) * blockMs + 120_000;
    const heads = async () =>
      Object.fromEntries(
        await Promise.all(CHAIN_NAMES.map(async (n) => [n, await head(chains[n].rpc_url)] as const)),
      ) as Record<ChainName, number>;

    // Live: the four chains at once, at the gateway's full rate.
    const per = Math.max(1, Math.floor(settings.connections / CHAIN_NAMES.length));
    log(`settlement: live, ${per * CHAIN_NAMES.length} connections over the four chains for ${settings.durationS} s`);
    const liveFrom = await heads();
    const cpu0 = cpuMsOf(settle.pid);
    const load = await Promise.all(
      CHAIN_NAMES.map((n) =>
        runLoad(requestFor('chat-json', target, simUrl, accounts[n].key), per, settings.durationS),
      ),
    );
    phase = 'live drain';
    const liveEmpty = await drain(CHAIN_NAMES, drainMs);
    const liveCpu = cpuMsOf(settle.pid) - cpu0;
    const liveTo = await heads();
    for (const [i, r] of load.entries())
      if (r.non2xx || r.errors) problems.push(`live ${CHAIN_NAMES[i]}: ${r.non2xx} non-2xx, ${r.errors} errors`);

    // One key: a backlog on chain_a queued with settlement stopped, then drained by a fresh settle process.
    phase = 'backlog';
    await stopChild(settle);
    log(`settlement: one key, ${settings.backlogS} s of calls on chain_a with settlement stopped`);
    const backlogLoad = await runLoad(
      requestFor('chat-json', target, simUrl, accounts.chain_a.key),
      settings.connections,
      settings.backlogS,
    );
    if (backlogLoad.non2xx || backlogLoad.errors)
      problems.push(`backlog: ${backlogLoad.non2xx} non-2xx, ${backlogLoad.errors} errors`);
    const backlog = await redis.xlen(keys.debits('chain_a'));
    phase = 'one key';
    const keyFrom = await head(chains.chain_a.rpc_url);
    const drainStart = Date.now();
    settle = await startSettle();
    const cpu1 = cpuMsOf(settle.pid);
    log(`settlement: one key draining ${backlog} debits on chain_a`);
    const drainFrom = Date.now();
    const keyEmpty = await drain(['chain_a'], drainMs);
    const drainedS =
      keyEmpty.empty.chain_a === null ? null : round(keyEmpty.empty.chain_a + (drainFrom - drainStart) / 1000, 1);
    const keyCpu = cpuMsOf(settle.pid) - cpu1;
    const keyTo = await head(chains.chain_a.rpc_url);
    sampling = false;
    await sampler;

    // Read back from the chains.
    const window = (p: QueueSample['phase'][], name: ChainName) =>
      samples.filter((s) => p.includes(s.phase)).map((s) => s.chains[name]);
    const afterFirstWindow = (p: QueueSample['phase'][], name: ChainName) =>
      samples
        .filter(
          (s) =>
            p.includes(s.phase) &&
            s.t >=
              ((confirmations + 1) * blockMs) / 1000 +
                (p.includes('one key') ? samples.find((x) => x.phase === 'one key')!.t : 0),
        )
        .map((s) => s.chains[name].oldestS);
    const liveChains = {} as Record<ChainName, ChainSettled>;
    let liveCharges = 0;
    for (const [i, name] of CHAIN_NAMES.entries()) {
      const s = settled(
        await settlerBlocks(chains[name].rpc_url, chains[name].escrow, liveFrom[name] + 1, liveTo[name]),
        blockMs,
      );
      liveCharges += s.charges;
      const seen = window(['live', 'live drain'], name);
      liveChains[name] = {
        calls: load[i]!.ok,
        ...s,
        emptyAfterS: liveEmpty.empty[name] ?? null,
        appliedAfterS: liveEmpty.applied[name] ?? null,
        oldestMaxS: Math.max(0, ...seen.map((x) => x.oldestS)),
        oldestMedianS: median(afterFirstWindow(['live'], name)),
        depthMax: Math.max(0, ...seen.map((x) => x.depth)),
      };
    }
    const keyBlocks = settled(
      await settlerBlocks(chains.chain_a.rpc_url, chains.chain_a.escrow, keyFrom + 1, keyTo),
      blockMs,
    );
    const keySeen = window(['one key'], 'chain_a');
    return {
      settings,
      live: {
        load,
        callsPerS: round(
          load.reduce((n, r) => n + r.rps, 0),
          1,
        ),
        chains: liveChains,
      },
      oneKey: {
        load: backlogLoad,
        backlog,
        drainedS,
        chain: {
          calls: backlogLoad.ok,
          ...keyBlocks,
          emptyAfterS: drainedS,
          appliedAfterS:
            keyEmpty.applied.chain_a === null
              ? null
              : round(keyEmpty.applied.chain_a + (drainFrom - drainStart) / 1000, 1),
          oldestMaxS: Math.max(0, ...keySeen.map((x) => x.oldestS)),
          oldestMedianS: median(keySeen.map((x) => x.oldestS)),
          depthMax: Math.max(0, ...keySeen.map((x) => x.depth)),
        },
      },
      settleCpuMsPerCharge: {
        live: liveCharges ? round(liveCpu / liveCharges, 4) : null,
        oneKey: keyBlocks.charges ? round(keyCpu / keyBlocks.charges, 4) : null,
      },
      samples,
      problems,
    };
  } finally {
    await Promise.all(started.map((c) => stopChild(c)));
    await deleteKeys(redis, ['*']).catch((err: Error) => log(`could not delete ${prefix}*: ${err.message}`));
    redis.disconnect();
  }
}

/** The cell as markdown: the two phases per chain, then the queues over time. */
export function settlementMarkdown(r: SettlementResults): string[] {
  const { blockMs, confirmations } = r.settings;
  const fmt = (v: number | null, digits = 0) =>
    v === null ? '-' : v.toLocaleString('en-US', { maximumFractionDigits: digits });
  const row = (name: string, c: ChainSettled) =>
    `| ${name} | ${fmt(c.calls)} | ${fmt(c.charges)} | ${fmt(c.chargesPerS, 1)} | ${fmt(c.batches)} (${c.reverted} reverted) | ${fmt(c.batches ? c.charges / c.batches : null)} | ${fmt(c.maxChargesPerBlock)} | ${fmt(c.gasPerCharge)} | ${fmt(c.oldestMedianS, 1)} / ${fmt(c.oldestMaxS, 1)} | ${fmt(c.depthMax)} | ${fmt(c.emptyAfterS, 1)} / ${fmt(c.appliedAfterS, 1)} |`;
  const head =
    '| chain | calls 2xx | charges onchain | charges/s while sending | batches | charges per batch | most in one block | gas per charge | oldest debit s, median / max | deepest queue | after the load, s: queue empty / charges applied |';
  const lines = [
    `## Settlement: ${blockMs / 1000} s blocks, ${confirmations} confirmations`,
    '',
    `Live: chat-json at the gateway's full rate on ${r.live.load.reduce((n, l) => n + l.connections, 0)} connections for ${r.settings.durationS} s, the four chains at once (an account of each): ${fmt(r.live.callsPerS)} calls/s.`,
    '',
    head,
    '|---|---|---|---|---|---|---|---|---|---|---|',
    ...Object.entries(r.live.chains).map(([n, c]) => row(n, c)),
    '',
    `One key: ${fmt(r.oneKey.backlog)} debits queued on chain_a in ${r.settings.backlogS} s with settlement stopped (${fmt(r.oneKey.load.rps)} calls/s), then drained by a fresh settle process (its start included) in ${fmt(r.oneKey.drainedS, 1)} s (the last batch's ${confirmations} confirmations included).`,
    '',
    head,
    '|---|---|---|---|---|---|---|---|---|---|---|',
    row('chain_a', r.oneKey.chain),
    '',
    `Settle process CPU per charge (settler and watcher): ${fmt(r.settleCpuMsPerCharge.live, 4)} ms live, ${fmt(r.settleCpuMsPerCharge.oneKey, 4)} ms draining one key.`,
    '',
    'Oldest queued debit (s) / queue depth, every 5 s:',
    '',
    '| t s | phase | chain_a | chain_b | chain_c | chain_d |',
    '|---|---|---|---|---|---|',
  ];
  let next = 0;
  for (const s of r.samples) {
    if (s.t < next) continue;
    next = s.t + 5;
    lines.push(
      `| ${Math.round(s.t)} | ${s.phase} | ${CHAIN_NAMES.map((n) => `${s.chains[n].oldestS} / ${s.chains[n].depth}`).join(' | ')} |`,
    );
  }
  if (r.problems.length) lines.push('', ...r.problems.map((p) => `- problem: ${p}`));
  return lines;
}
