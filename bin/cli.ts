/**
 * The `farebox` command (DESIGN "Operator contract"). It works on the same Redis as the server (REDIS_URL,
 * FAREBOX_REDIS_PREFIX, or the redis section of FAREBOX_CONFIG). With --json it prints one JSON document and
 * nothing else on stdout. Every command answers bad input (a missing or malformed flag) with a one-line error and
 * exit code 2, the usage-error convention; any other failure (no such account, Redis away) with exit code 1.
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { Redis } from 'ioredis';
import {
  ACCOUNT_STATUSES,
  createAccount,
  createKey,
  getAccount,
  isAddress,
  keyName,
  revokeKey,
  setAccountStatus,
  setDefaultChain,
  type AccountStatus,
} from '../plugins/accounts/accounts.js';
import { CHAIN_NAMES, chainsConfigSchema, type ChainName, type ChainsConfig } from '../plugins/chains/config.js';
import { connectRedis } from '../plugins/store/redis.js';
import { listUsage } from '../plugins/billing/call-records.js';
import { readWallet } from '../plugins/billing/wallets.js';
import { readAnomalies } from '../plugins/settlement/apply-events.js';
import { endAllSessions } from '../plugins/dashboard/sessions.js';
import { buildPriceTable, formatUsd, parseUsd, publishPrices } from '../pricing/index.js';

/** Bad input (a missing or malformed flag, an unknown command): printed as one line, exit code 2. */
export class UsageError extends Error {}

type Flags = Record<string, string | true>;

/** Split argv into positional words and --flags (`--flag value`, `--flag=value`, bare `--json`). */
export function parseArgs(argv: string[]): { words: string[]; flags: Flags } {
  const words: string[] = [];
  const flags: Flags = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith('--')) {
      words.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    if (eq > 0) {
      flags[a.slice(2, eq)] = a.slice(eq + 1);
    } else if (a === '--json' || i + 1 >= argv.length || argv[i + 1].startsWith('--')) {
      flags[a.slice(2)] = true;
    } else {
      flags[a.slice(2)] = argv[++i];
    }
  }
  return { words, flags };
}

function str(flags: Flags, name: string, required: true): string;
function str(flags: Flags, name: string, required?: false): string | undefined;
function str(flags: Flags, name: string, required = false): string | undefined {
  const v = flags[name];
  if (v === undefined) {
    if (required) throw new UsageError(`--${name} is required`);
    return undefined;
  }
  if (v === true) throw new UsageError(`--${name} needs a value`);
  return v;
}

/** Redis settings of the CLI: the environment over FAREBOX_CONFIG's redis section. */
function openRedis(env: NodeJS.ProcessEnv): Redis {
  let url = 'redis://127.0.0.1:6379';
  let prefix = 'farebox:';
  if (env.FAREBOX_CONFIG) {
    const file = JSON.parse(readFileSync(env.FAREBOX_CONFIG, 'utf8')) as { redis?: { url?: string; prefix?: string } };
    url = file.redis?.url ?? url;
    prefix = file.redis?.prefix ?? prefix;
  }
  return connectRedis({ url: env.REDIS_URL ?? url, prefix: env.FAREBOX_REDIS_PREFIX ?? prefix, failFast: true });
}

/** The FAREBOX_CONFIG file as JSON, or undefined on the embedded default. */
function configFile(env: NodeJS.ProcessEnv): Record<string, unknown> | undefined {
  if (!env.FAREBOX_CONFIG) return undefined;
  return JSON.parse(readFileSync(env.FAREBOX_CONFIG, 'utf8')) as Record<string, unknown>;
}

/** The chains the gateway runs on: from FAREBOX_CONFIG, or the dev chains the embedded default published in Redis. */
async function chainsOf(env: NodeJS.ProcessEnv, redis: Redis): Promise<ChainsConfig> {
  const file = configFile(env);
  if (file) {
    const parsed = chainsConfigSchema.safeParse(file.chains);
    if (!parsed.success) throw new Error('FAREBOX_CONFIG has no valid chains section');
    return parsed.data;
  }
  const { DEV_CHAINS_KEY } = await import('../plugins/serve.js');
  const raw = await redis.get(DEV_CHAINS_KEY);
  if (!raw) throw new Error('no gateway on the embedded default has started on this Redis: run npm start first');
  return JSON.parse(raw) as ChainsConfig;
}

function chainArg(flags: Flags): ChainName {
  const chain = str(flags, 'chain', true);
  if (!(CHAIN_NAMES as readonly string[]).includes(chain))
    throw new UsageError(`--chain must be one of ${CHAIN_NAMES.join(', ')}`);
  return chain as ChainName;
}

/** An address flag (0x and 40 hex digits), lowercased: the one address check of every command. */
function addressArg(flags: Flags, name: string, required: true): string;
function addressArg(flags: Flags, name: string, required?: false): string | undefined;
function addressArg(flags: Flags, name: string, required = false): string | undefined {
  const v = required ? str(flags, name, true) : str(flags, name);
  if (v === undefined) return undefined;
  if (!isAddress(v)) throw new UsageError(`--${name} must be a 0x address (40 hex digits)`);
  return v.toLowerCase();
}

function accountArg(flags: Flags): string {
  return addressArg(flags, 'account', true);
}

/** A progress line for the steps of a long command. */
export interface StatusLine {
  /** Replace the line with this status. */
  show(status: string): void;
  /** Erase the line (before the command's result is printed). */
  clear(): void;
}

/**
 * Progress on stderr while a long command runs, only when stderr is a terminal: one line, redrawn in place with the
 * seconds the step has taken, erased when done. Otherwise nothing, so a pipe or a log gets the result alone. With
 * `lines`, each step is a line of its own instead, for a command whose logs share the terminal (serve).
 */
export function statusLine(stream: NodeJS.WriteStream = process.stderr, opts: { lines?: boolean } = {}): StatusLine {
  if (!stream.isTTY) return { show() {}, clear() {} };
  if (opts.lines) return { show: (status) => void stream.write(`farebox: ${status}...\n`), clear() {} };
  let text = '';
  let since = 0;
  let timer: NodeJS.Timeout | undefined;
  const draw = () => {
    const s = Math.floor((Date.now() - since) / 1000);
    stream.write(`\r\x1b[2K${text}${s > 0 ? ` ${s} s` : ''}`);
  };
  return {
    show(status) {
      text = `farebox: ${status}...`;
      since = Date.now();
      draw();
      timer ??= setInterval(draw, 1_000).unref();
    },
    clear() {
      clearInterval(timer);
      timer = undefined;
      if (text) stream.write('\r\x1b[2K');
      text = '';
    },
  };
}

const HELP = `usage: farebox <command> [options]
  serve                                   run the gateway (PORT, HOST, METRICS_PORT, REDIS_URL, FAREBOX_CONFIG)
  sim [--port N]                          run the simulated upstream providers alone (HOST; FAREBOX_SIM_INSPECT_TOKEN
                                          serves its request log at /__sim/requests to that bearer)
  settle [--metrics-port N] [--json]      settle debits onchain and watch the chains, with no gateway in the process
  account create [--address 0x..] [--status active|pending|suspended] [--json]
  account status --account 0x.. --set active|pending|suspended
  account sign-out --account 0x.. [--json]   end every dashboard session of the account, on every instance
  key create --account 0x.. [--name NAME] [--json]
  key revoke --id ID
  chains [--json]                         the chains: chain id, RPC URL, stablecoin, escrow, events not applied
  fund --account 0x.. --chain chain_a --amount 2.5 [--json]   (dev chains only) mint and deposit test stablecoin
  balance --account 0x.. [--json]         synced escrow balance, held, pending and available per chain
  default-chain --account 0x.. --chain chain_b
  prices [--json]                         the live price table (USD; text per 1,000,000 tokens)
  usage --account 0x.. [--limit N] [--json]   the account's calls, newest first`;

/** Run one command; returns the exit code. Output goes through `out` (stdout) and `err` (stderr). */
export async function main(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  out: (s: string) => void = (s) => process.stdout.write(s + '\n'),
  err: (s: string) => void = (s) => process.stderr.write(s + '\n'),
): Promise<number> {
  const { words, flags } = parseArgs(argv);
  const json = flags.json === true;
  const cmd = words.join(' ');
  let redis: Redis | undefined;
  const db = () => (redis ??= openRedis(env));
  try {
    switch (cmd) {
      case 'serve': {
        // Heavy modules load only for the commands that need them: the CLI's quick commands stay quick.
        const { demoGreeting, serve, tuneHeap } = await import('../plugins/serve.js');
        tuneHeap();
        const status = statusLine(process.stderr, { lines: true });
        const server = await serve(env, { onProgress: (s) => (s === null ? status.clear() : status.show(s)) });
        if (server.config.embedded) {
          const r = db();
          let greeting: string[];
          try {
            greeting = await demoGreeting(r, server.url, server.config.chains!, server.metricsUrl, status.show);
          } finally {
            status.clear();
          }
          for (const line of greeting) out(line);
          await r.quit();
          redis = undefined;
        }
        const stop = () => void server.close().then(() => process.exit(0));
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        return -1; // keep running
      }
      case 'sim': {
        const port = flags.port === undefined ? 8090 : Number(str(flags, 'port'));
        if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError('--port must be a port number');
        const { startSimulator } = await import('../plugins/simulator/index.js');
        const sim = await startSimulator({
          host: env.HOST ?? '127.0.0.1',
          port,
          inspectToken: env.FAREBOX_SIM_INSPECT_TOKEN,
        });
        out(json ? JSON.stringify({ url: sim.url }) : `farebox sim: simulated upstreams at ${sim.url}`);
        const stop = () => void sim.close().then(() => process.exit(0));
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        return -1;
      }
      case 'settle': {
        // Settlement alone: run beside gateways whose config says billing.settler / billing.watcher false.
        const port = flags['metrics-port'] === undefined ? undefined : Number(str(flags, 'metrics-port'));
        if (port !== undefined && (!Number.isInteger(port) || port < 0 || port > 65535))
          throw new UsageError('--metrics-port must be a port number');
        const { startSettleProcess } = await import('../plugins/settlement/settlement.js');
        const { tuneHeap } = await import('../plugins/serve.js');
        tuneHeap();
        let config;
        let runEnv: NodeJS.ProcessEnv = env;
        if (env.FAREBOX_CONFIG) {
          // It calls no provider: their keys need not be on the settle host.
          const providers = (configFile(env)?.providers ?? {}) as Record<string, { key_env?: unknown }>;
          const unused: Record<string, string> = {};
          for (const p of Object.values(providers))
            if (typeof p?.key_env === 'string' && !env[p.key_env]) unused[p.key_env] = 'unused';
          const { loadConfig } = await import('../plugins/config.js');
          config = loadConfig({ ...env, ...unused });
        } else {
          const { embeddedSettleConfig } = await import('../plugins/serve.js');
          ({ config, env: runEnv } = embeddedSettleConfig(await chainsOf(env, db()), env));
          await db().quit();
          redis = undefined;
        }
        const settle = await startSettleProcess(config, runEnv, { metricsPort: port });
        out(
          json
            ? JSON.stringify({ instance: settle.instance, metrics: settle.metricsUrl ?? null })
            : `farebox settle: settling and watching chain_a..chain_d as ${settle.instance}${settle.metricsUrl ? `; metrics at ${settle.metricsUrl}` : ''}`,
        );
        const stop = () => void settle.close().then(() => process.exit(0));
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        return -1;
      }
      case 'account create': {
        const status = str(flags, 'status') as AccountStatus | undefined;
        if (status !== undefined && !ACCOUNT_STATUSES.includes(status))
          throw new UsageError(`--status must be one of ${ACCOUNT_STATUSES.join(', ')}`);
        const account = await createAccount(db(), { address: addressArg(flags, 'address'), status });
        out(json ? JSON.stringify({ account: account.address }) : `account ${account.address} (${account.status})`);
        return 0;
      }
      case 'account status': {
        const status = str(flags, 'set', true) as AccountStatus;
        if (!ACCOUNT_STATUSES.includes(status))
          throw new UsageError(`--set must be one of ${ACCOUNT_STATUSES.join(', ')}`);
        const account = accountArg(flags);
        await setAccountStatus(db(), account, status);
        out(json ? JSON.stringify({ account, status }) : `account ${account} is ${status}`);
        return 0;
      }
      case 'account sign-out': {
        const account = accountArg(flags);
        const ended = await endAllSessions(db(), account);
        out(
          json
            ? JSON.stringify({ account, sessions_ended: ended })
            : `account ${account}: ${ended} dashboard session(s) ended`,
        );
        return 0;
      }
      case 'key create': {
        const account = accountArg(flags);
        const name = str(flags, 'name');
        try {
          if (name !== undefined) keyName(name);
        } catch (e) {
          throw new UsageError(`--name: ${(e as Error).message}`);
        }
        const k = await createKey(db(), account, { name });
        out(json ? JSON.stringify(k) : `key ${k.id} for ${k.account} (shown once): ${k.key}`);
        return 0;
      }
      case 'key revoke': {
        const id = str(flags, 'id', true);
        await revokeKey(db(), id);
        out(json ? JSON.stringify({ id, revoked: true }) : `key ${id} revoked`);
        return 0;
      }
      case 'chains': {
        const chains = await chainsOf(env, db());
        // Events the watcher could not apply (FareboxChainAnomaly), each with its transaction, to settle by hand.
        const anomalies = await Promise.all(CHAIN_NAMES.map((n) => readAnomalies(db(), n)));
        const doc = Object.fromEntries(
          CHAIN_NAMES.map((n, i) => [
            n,
            {
              chain_id: chains[n].chain_id,
              rpc_url: chains[n].rpc_url,
              stablecoin: chains[n].stablecoin,
              escrow: chains[n].escrow,
              anomalies: anomalies[i]!,
            },
          ]),
        );
        if (json) out(JSON.stringify(doc));
        else {
          for (const [n, c] of Object.entries(doc)) {
            out(
              `${n}  chain id ${c.chain_id}  ${c.rpc_url}  stablecoin ${c.stablecoin}  escrow ${c.escrow}${c.anomalies.length ? `  anomalies ${c.anomalies.length}` : ''}`,
            );
          }
        }
        return 0;
      }
      case 'fund': {
        const account = accountArg(flags);
        const chain = chainArg(flags);
        const rawAmount = str(flags, 'amount', true);
        let amount: bigint;
        try {
          amount = parseUsd(rawAmount);
        } catch {
          throw new UsageError('--amount must be a decimal USD amount with at most 6 decimals');
        }
        if (amount <= 0n) throw new UsageError('--amount must be positive');
        const { DEV_CHAIN_IDS } = await import('../plugins/chains/dev-chains.js');
        const chains = await chainsOf(env, db());
        if (chains[chain].chain_id !== DEV_CHAIN_IDS[chain]) {
          throw new Error(
            `${chain} is a configured chain (chain id ${chains[chain].chain_id}): fund mints test stablecoin on the embedded dev chains only`,
          );
        }
        const { fundOnDevChain } = await import('../plugins/serve.js');
        const status = statusLine();
        let balance: bigint;
        try {
          balance = await fundOnDevChain(db(), chains, chain, account, amount, { onProgress: status.show });
        } finally {
          status.clear();
        }
        out(
          json
            ? JSON.stringify({ chain, account, balance: formatUsd(balance) })
            : `${account} holds ${formatUsd(balance)} USD on ${chain}`,
        );
        return 0;
      }
      case 'balance': {
        const account = accountArg(flags);
        const acct = await getAccount(db(), account);
        if (!acct) throw new Error(`no account ${account}`);
        const chains: Record<string, Record<string, string>> = {};
        for (const n of CHAIN_NAMES) {
          const w = await readWallet(db(), account, n);
          chains[n] = {
            balance: formatUsd(w.synced),
            held: formatUsd(w.held),
            pending: formatUsd(w.pending),
            available: formatUsd(w.available < 0n ? 0n : w.available),
          };
        }
        const doc = { account, default_chain: acct?.default_chain ?? 'chain_a', chains };
        if (json) out(JSON.stringify(doc));
        else
          for (const [n, c] of Object.entries(chains))
            out(
              `${n}${n === doc.default_chain ? '*' : ' '} balance ${c.balance}  held ${c.held}  pending ${c.pending}  available ${c.available}`,
            );
        return 0;
      }
      case 'default-chain': {
        const account = accountArg(flags);
        const chain = chainArg(flags);
        await setDefaultChain(db(), account, chain);
        out(json ? JSON.stringify({ account, default_chain: chain }) : `${account} bills on ${chain} by default`);
        return 0;
      }
      case 'prices': {
        const file = configFile(env);
        const { videoFamilies } = await import('../plugins/config.js');
        const doc = publishPrices(
          buildPriceTable(file?.prices ?? {}, 'prices', videoFamilies(Array.isArray(file?.models) ? file.models : [])),
        );
        out(json ? JSON.stringify(doc) : JSON.stringify(doc, null, 2));
        return 0;
      }
      case 'usage': {
        const account = accountArg(flags);
        const limit = flags.limit === undefined ? 100 : Number(str(flags, 'limit'));
        if (!Number.isInteger(limit) || limit < 1) throw new UsageError('--limit must be a positive whole number');
        const records = await listUsage(db(), account, limit);
        if (json) out(JSON.stringify(records));
        else
          for (const r of records)
            out(
              `${r.time}  ${r.call_id}  ${r.model}  ${r.chain}  ${r.price} USD  ${r.status}${r.tx ? `  ${r.tx}` : ''}`,
            );
        return 0;
      }
      case '':
      case 'help':
        out(HELP);
        return cmd === '' ? 2 : 0;
      default:
        throw new UsageError(`unknown command: ${cmd}`);
    }
  } catch (e) {
    err(`farebox: ${(e as Error).message.split('\n')[0]}`);
    return e instanceof UsageError ? 2 : 1;
  } finally {
    if (redis) await redis.quit().catch(() => {});
  }
}

/** Resolves once everything written to `stream` so far has been handed to the OS (or the stream has failed). */
export function drained(stream: NodeJS.WritableStream): Promise<void> {
  // Writes complete in order: the callback of this empty one runs after every earlier write's.
  return new Promise((resolve) => stream.write('', () => resolve()));
}

/**
 * `farebox` as a process: run the command, let its output drain, then end with its exit code. Writes to a pipe are
 * asynchronous: process.exit() with output pending would cut it (`farebox usage --json | jq` got 64 KiB of it).
 * Commands that keep running (serve, sim, settle) leave the process to their signal handlers.
 */
export async function run(argv: string[]): Promise<void> {
  // The reader of a pipe went away (`| head`): nothing more can be said, and it is no error of the command.
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
    process.exit(process.exitCode ?? 0);
  });
  const code = await main(argv);
  if (code < 0) return;
  await Promise.all([drained(process.stdout), drained(process.stderr)]);
  process.exitCode = code;
  // The output is out; a handle left open by a library (a keep-alive socket) must not keep the command alive.
  setTimeout(() => process.exit(code), 1_000).unref();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await run(process.argv.slice(2));
