/**
 * The `farebox` command (DESIGN "Operator contract"). It works on the same Redis as the server (REDIS_URL,
 * FAREBOX_REDIS_PREFIX, or the redis section of FAREBOX_CONFIG). Without --json it prints for a person (listings as
 * tables under a header); with --json one JSON document and nothing else on stdout. Every command answers bad input
 * (a missing or malformed flag) with a one-line error and exit code 2, the usage-error convention; any other failure
 * (no such account, Redis away) with one line naming what failed and what to do, and exit code 1.
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { Redis } from 'ioredis';
// Light at load (no viem, zod or ioredis): every other module is imported by the command that needs it, so `farebox
// help` and `prices` start in a fraction of a second (test/cli/cli-human.test.ts times them), and a Redis command
// such as `key list` loads the Redis client and its own modules, not the gateway's.
import {
  ACCOUNT_STATUSES,
  isAddress,
  keyName,
  type AccountStatus,
  type KeyInfo,
} from '../plugins/accounts/accounts.js';
import {
  describeLimit,
  parseExpiry,
  parseLimit,
  parseModels,
  parseReset,
  type KeyLimitsChange,
} from '../plugins/accounts/key-limits.js';
import type { ChainName, ChainsConfig } from '../plugins/chains/config.js';

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
    } else if (a === '--json' || a === '--help' || i + 1 >= argv.length || argv[i + 1].startsWith('--')) {
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

/** Where the CLI's Redis is: the environment over FAREBOX_CONFIG's redis section. */
function redisSettings(env: NodeJS.ProcessEnv): { url: string; prefix: string } {
  let url = 'redis://127.0.0.1:6379';
  let prefix = 'farebox:';
  const file = configFile(env) as { redis?: { url?: string; prefix?: string } } | undefined;
  url = file?.redis?.url ?? url;
  prefix = file?.redis?.prefix ?? prefix;
  return { url: env.REDIS_URL ?? url, prefix: env.FAREBOX_REDIS_PREFIX ?? prefix };
}

/** A URL as it may be printed: without a password. */
export function shownUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.href.replace(/\/$/, '');
  } catch {
    return url;
  }
}

/** The FAREBOX_CONFIG file as JSON, or undefined on the embedded default. */
function configFile(env: NodeJS.ProcessEnv): Record<string, unknown> | undefined {
  if (!env.FAREBOX_CONFIG) return undefined;
  let text: string;
  try {
    text = readFileSync(env.FAREBOX_CONFIG, 'utf8');
  } catch (e) {
    throw new Error(`cannot read FAREBOX_CONFIG ${env.FAREBOX_CONFIG}: ${(e as NodeJS.ErrnoException).code ?? e}`);
  }
  try {
    return JSON.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`FAREBOX_CONFIG ${env.FAREBOX_CONFIG} is not JSON: ${(e as Error).message}`);
  }
}

/** The chains the gateway runs on: from FAREBOX_CONFIG, or the dev chains the embedded default published in Redis. */
async function chainsOf(env: NodeJS.ProcessEnv, redis: Redis): Promise<ChainsConfig> {
  const file = configFile(env);
  if (file) {
    const { chainsConfigSchema } = await import('../plugins/chains/config.js');
    const parsed = chainsConfigSchema.safeParse(file.chains);
    if (!parsed.success) throw new Error(`FAREBOX_CONFIG ${env.FAREBOX_CONFIG} has no valid chains section`);
    return parsed.data;
  }
  // keys.devChains: what plugins/embedded.ts publishes (DEV_CHAINS_KEY), named without loading it.
  const { keys } = await import('../plugins/store/keys.js');
  const raw = await redis.get(keys.devChains);
  if (!raw)
    throw new Error(
      "no gateway on the embedded default is running on this Redis, so there are no dev chains: start one with `npm start` (or set FAREBOX_CONFIG to your gateway's config)",
    );
  return JSON.parse(raw) as ChainsConfig;
}

/** The four chain names (chains/config.ts, which loads viem: only for the commands that name a chain). */
async function chainNames(): Promise<readonly ChainName[]> {
  return (await import('../plugins/chains/config.js')).CHAIN_NAMES;
}

async function chainArg(flags: Flags): Promise<ChainName> {
  const chain = str(flags, 'chain', true);
  const names = await chainNames();
  if (!(names as readonly string[]).includes(chain)) throw new UsageError(`--chain must be one of ${names.join(', ')}`);
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

/** The limit flags of `key create` and `key update` (--limit, --reset, --models, --expires), checked. */
function limitsArgs(flags: Flags): KeyLimitsChange {
  const change: KeyLimitsChange = {};
  const parse = <T>(name: string, read: (v: string) => T): T | undefined => {
    const v = str(flags, name);
    if (v === undefined) return undefined;
    try {
      return read(v);
    } catch (e) {
      throw new UsageError(`--${name}: ${(e as Error).message}`);
    }
  };
  const limit = parse('limit', parseLimit);
  if (limit !== undefined) change.limit = limit;
  const reset = parse('reset', parseReset);
  if (reset !== undefined) change.reset = reset;
  const models = parse('models', parseModels);
  if (models !== undefined) change.models = models;
  const expires = parse('expires', (v) => parseExpiry(v));
  if (expires !== undefined) change.expiresAt = expires;
  return change;
}

/** A key's limits and spend in one line, for `key create` and `key update`. */
function limitsLine(k: KeyInfo): string {
  const limit = k.limit
    ? `limit ${describeLimit(BigInt(k.limit.amount_atomic), k.limit.reset)}, ${k.limit.left} USD left` +
      (k.limit.resets_at === null ? '' : ` until ${when(k.limit.resets_at)}`)
    : 'no spend limit';
  const models = k.models ? `models ${k.models.join(', ')}` : 'every model';
  const expires = k.expires_at === null ? 'no expiry' : `expires ${when(k.expires_at)}`;
  return `${limit}; ${models}; ${expires}`;
}

/**
 * Rows as lines of a table under `header`, columns two spaces apart, each as wide as its widest cell; columns whose
 * index is in `right` (amounts, counts) align right. Cells are one-line strings (key names hold no control characters).
 */
export function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  right: readonly number[] = [],
): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (right.includes(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** A time of the CLI's tables: ISO 8601 to the second, UTC. */
function when(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Whether `url` answers a JSON-RPC call: null when it does, else what went wrong (ECONNREFUSED, HTTP 502, ...). */
async function rpcFault(url: string): Promise<string | null> {
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      signal: AbortSignal.timeout(5_000),
    });
    await res.body?.cancel();
    return res.ok ? null : `HTTP ${res.status}`;
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    return err.cause?.code ?? err.cause?.message ?? err.message;
  }
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

const HELP = `usage: farebox <command> [options]      (--json: one JSON document on stdout, for scripts)
  serve                                   run the gateway (PORT, HOST, METRICS_PORT, REDIS_URL, FAREBOX_CONFIG)
  sim [--port N]                          run the simulated upstream providers alone (HOST; FAREBOX_SIM_INSPECT_TOKEN
                                          serves its request log at /__sim/requests to that bearer)
  settle [--metrics-port N] [--json]      settle debits onchain and watch the chains, with no gateway in the process
  account create [--address 0x..] [--status active|pending|suspended] [--json]
  account status --account 0x.. --set active|pending|suspended [--json]
  account sign-out --account 0x.. [--json]   end every dashboard session of the account, on every instance
  key create --account 0x.. [--name NAME] [LIMITS] [--json]   the key is shown only here
  key update --id ID LIMITS [--json]      change a key's limits; what is not given stays
  key list --account 0x.. [--json]        the account's keys: id, name, limits, spend, last used, status
  key revoke --id ID [--json]
    LIMITS: --limit USD|none  spend limit, held calls counted (402 key_limit_exceeded past it)
            --reset daily|weekly|monthly|never  when the limit's window starts again, at 00:00 UTC (Mondays,
                      the 1st; default never); a change starts the window it names
            --models ID,PREFIX-*,..|none  the models the key may call (403 model_not_allowed for others)
            --expires 2027-01-01[T12:00:00Z]|never  from then the key answers 401 key_expired
  chains [--json]                         the chains: chain id, RPC URL, stablecoin, escrow, events not applied
  fund --account 0x.. --chain chain_a --amount 2.5 [--json]   (dev chains only) mint and deposit test stablecoin
  balance --account 0x.. [--json]         synced escrow balance, held, pending and available per chain (USD)
  default-chain --account 0x.. --chain chain_b [--json]
  prices [--json]                         the live price table (USD; text per 1,000,000 tokens)
  usage --account 0x.. [--limit N] [--json]   the account's calls, newest first, with their token counts
  help                                    this text
Redis: REDIS_URL, FAREBOX_REDIS_PREFIX, or FAREBOX_CONFIG's redis section (default redis://127.0.0.1:6379).`;

/** Column titles of the usage counts in `farebox usage`, in USAGE_FIELDS order. */
const USAGE_COLUMNS: Record<string, string> = {
  input_tokens: 'input',
  output_tokens: 'output',
  cache_read_tokens: 'cache read',
  cache_write_5m_tokens: 'cache write 5m',
  cache_write_1h_tokens: 'cache write 1h',
  images: 'images',
  video_seconds: 'video s',
};

/** Run one command; returns the exit code. Output goes through `out` (stdout) and `err` (stderr). */
export async function main(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
  out: (s: string) => void = (s) => process.stdout.write(s + '\n'),
  err: (s: string) => void = (s) => process.stderr.write(s + '\n'),
): Promise<number> {
  const { words, flags } = parseArgs(argv);
  const json = flags.json === true;
  if (flags.help !== undefined || words.includes('-h')) {
    out(HELP);
    return 0;
  }
  const cmd = words.join(' ');
  let redis: Redis | undefined;
  let opening: Promise<Redis> | undefined;
  let redisAt = '';
  let redisFault: Error | undefined;
  // One connection, opened by the first step that needs it (steps may ask at once).
  const db = (): Promise<Redis> =>
    (opening ??= import('../plugins/store/redis.js').then(({ connectRedis }) => {
      const at = redisSettings(env);
      redisAt = shownUrl(at.url);
      redis = connectRedis({ url: at.url, prefix: at.prefix, failFast: true });
      // Kept for the error line (and no "[ioredis] Unhandled error event" on stderr while it retries).
      redis.on('error', (e: Error) => (redisFault = e));
      return redis;
    }));
  const closeDb = async () => {
    await redis?.quit();
    redis = undefined;
    opening = undefined;
  };
  try {
    switch (cmd) {
      case 'serve': {
        // Heavy modules load only for the commands that need them: the CLI's quick commands stay quick.
        const { demoGreeting, serve, tuneHeap } = await import('../plugins/serve.js');
        tuneHeap();
        const status = statusLine(process.stderr, { lines: true });
        const server = await serve(env, { onProgress: (s) => (s === null ? status.clear() : status.show(s)) });
        if (server.config.embedded) {
          const r = await db();
          let greeting: string[];
          try {
            greeting = await demoGreeting(r, server.url, server.config.chains!, server.metricsUrl, status.show);
          } finally {
            status.clear();
          }
          for (const line of greeting) out(line);
          await closeDb();
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
          ({ config, env: runEnv } = embeddedSettleConfig(await chainsOf(env, await db()), env));
          await closeDb();
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
        const address = addressArg(flags, 'address');
        const { createAccount } = await import('../plugins/accounts/accounts.js');
        const account = await createAccount(await db(), { address, status });
        out(json ? JSON.stringify({ account: account.address }) : `account ${account.address} (${account.status})`);
        return 0;
      }
      case 'account status': {
        const status = str(flags, 'set', true) as AccountStatus;
        if (!ACCOUNT_STATUSES.includes(status))
          throw new UsageError(`--set must be one of ${ACCOUNT_STATUSES.join(', ')}`);
        const account = accountArg(flags);
        const { setAccountStatus } = await import('../plugins/accounts/accounts.js');
        await setAccountStatus(await db(), account, status);
        out(json ? JSON.stringify({ account, status }) : `account ${account} is ${status}`);
        return 0;
      }
      case 'account sign-out': {
        const account = accountArg(flags);
        const { endAllSessions } = await import('../plugins/dashboard/sessions.js');
        const ended = await endAllSessions(await db(), account);
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
        const limits = limitsArgs(flags);
        const { createKey, getKey } = await import('../plugins/accounts/accounts.js');
        const r = await db();
        const k = await createKey(r, account, { name, ...limits });
        const info = (await getKey(r, k.id))!;
        if (json) out(JSON.stringify({ ...k, ...info }));
        else {
          out(`key ${k.id} for ${k.account} (${limitsLine(info)}); the key, shown only this once:`);
          out(k.key);
        }
        return 0;
      }
      case 'key update': {
        const id = str(flags, 'id', true);
        const change = limitsArgs(flags);
        if (Object.keys(change).length === 0)
          throw new UsageError('key update: give at least one of --limit, --reset, --models, --expires');
        const { getKey } = await import('../plugins/accounts/accounts.js');
        const { setKeyLimits } = await import('../plugins/accounts/key-limits.js');
        const r = await db();
        await setKeyLimits(r, id, change);
        const info = (await getKey(r, id))!;
        out(json ? JSON.stringify(info) : `key ${id}: ${limitsLine(info)}`);
        return 0;
      }
      case 'key list': {
        const account = accountArg(flags);
        const { getAccount, listKeys } = await import('../plugins/accounts/accounts.js');
        const r = await db();
        if (!(await getAccount(r, account))) throw new Error(`no account ${account}`);
        const list = await listKeys(r, account);
        // The dashboard's key list, as its API gives it (times in ms since the epoch, null when none).
        if (json) out(JSON.stringify({ account, keys: list }));
        else {
          const now = Date.now();
          const rows = list.map((k) => [
            k.id,
            k.name || '-',
            k.limit ? describeLimit(BigInt(k.limit.amount_atomic), k.limit.reset) : '-',
            k.spent.window,
            k.limit ? k.limit.left : '-',
            k.models ? k.models.join(',') : 'all',
            when(k.created_at),
            k.last_used_at === null ? '-' : when(k.last_used_at),
            k.revoked_at !== null
              ? `revoked ${when(k.revoked_at)}`
              : k.expires_at === null
                ? 'active'
                : `${k.expires_at <= now ? 'expired' : 'expires'} ${when(k.expires_at)}`,
          ]);
          const header = ['id', 'name', 'limit', 'spent', 'left', 'models', 'created', 'last used', 'status'];
          for (const line of table(header, rows, [3, 4])) out(line);
        }
        return 0;
      }
      case 'key revoke': {
        const id = str(flags, 'id', true);
        const { revokeKey } = await import('../plugins/accounts/accounts.js');
        await revokeKey(await db(), id);
        out(json ? JSON.stringify({ id, revoked: true }) : `key ${id} revoked`);
        return 0;
      }
      case 'chains': {
        const names = await chainNames();
        const chains = await chainsOf(env, await db());
        // Events the watcher could not apply (FareboxChainAnomaly), each with its transaction, to settle by hand.
        const { readAnomalies } = await import('../plugins/settlement/apply-events.js');
        const anomalies = await Promise.all(names.map(async (n) => readAnomalies(await db(), n)));
        const doc = Object.fromEntries(
          names.map((n, i) => [
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
          const rows = Object.entries(doc).map(([n, c]) => [
            n,
            String(c.chain_id),
            shownUrl(c.rpc_url),
            c.stablecoin,
            c.escrow,
            String(c.anomalies.length),
          ]);
          for (const line of table(['chain', 'chain id', 'RPC URL', 'stablecoin', 'escrow', 'anomalies'], rows, [1, 5]))
            out(line);
          if (anomalies.some((a) => a.length)) out('anomalies: events not applied; `farebox chains --json` lists them');
        }
        return 0;
      }
      case 'fund': {
        const account = accountArg(flags);
        const chain = await chainArg(flags);
        const rawAmount = str(flags, 'amount', true);
        const { formatUsd, parseUsd } = await import('../pricing/money.js');
        let amount: bigint;
        try {
          amount = parseUsd(rawAmount);
        } catch {
          throw new UsageError('--amount must be a decimal USD amount with at most 6 decimals');
        }
        if (amount <= 0n) throw new UsageError('--amount must be positive');
        const { DEV_CHAIN_IDS } = await import('../plugins/chains/dev-chains.js');
        const chains = await chainsOf(env, await db());
        if (chains[chain].chain_id !== DEV_CHAIN_IDS[chain]) {
          throw new Error(
            `${chain} is a configured chain (chain id ${chains[chain].chain_id}): fund mints test stablecoin on the embedded dev chains only`,
          );
        }
        // The dev chains run inside the gateway: a stopped one leaves their URLs in Redis and nothing behind them.
        const rpc = chains[chain].rpc_url;
        const stopped = (fault: string) =>
          new Error(
            `fund: ${chain}'s RPC at ${shownUrl(rpc)} does not answer (${fault}); the dev chains run inside the gateway: start it with \`npm start\` (or \`farebox serve\`), then run fund again`,
          );
        const before = await rpcFault(rpc);
        if (before) throw stopped(before);
        const { fundOnDevChain } = await import('../plugins/serve.js');
        const status = statusLine();
        let balance: bigint;
        try {
          balance = await fundOnDevChain(await db(), chains, chain, account, amount, { onProgress: status.show });
        } catch (e) {
          const fault = await rpcFault(rpc);
          throw fault ? stopped(fault) : e;
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
        // The document GET /v1/balance and the dashboard answer too (billing/balances.ts).
        const { accountBalances } = await import('../plugins/billing/balances.js');
        const doc = await accountBalances(await db(), account);
        if (!doc) throw new Error(`no account ${account}`);
        if (json) out(JSON.stringify(doc));
        else {
          const rows = Object.entries(doc.chains).map(([n, c]) => [
            n === doc.default_chain ? `${n} *` : n,
            c.balance,
            c.held,
            c.pending,
            c.available,
          ]);
          out(`account ${account}, USD (* the default chain)`);
          for (const line of table(['chain', 'balance', 'held', 'pending', 'available'], rows, [1, 2, 3, 4])) out(line);
        }
        return 0;
      }
      case 'default-chain': {
        const account = accountArg(flags);
        const chain = await chainArg(flags);
        const { setDefaultChain } = await import('../plugins/accounts/accounts.js');
        await setDefaultChain(await db(), account, chain);
        out(json ? JSON.stringify({ account, default_chain: chain }) : `${account} bills on ${chain} by default`);
        return 0;
      }
      case 'prices': {
        const file = configFile(env);
        const { buildPriceTable, publishPrices } = await import('../pricing/index.js');
        // The config module (zod, the whole catalogue) only for a config whose models may name video families.
        const models = Array.isArray(file?.models) ? file.models : [];
        const families = models.length ? (await import('../plugins/config.js')).videoFamilies(models) : {};
        const doc = publishPrices(buildPriceTable(file?.prices ?? {}, 'prices', families));
        if (json) out(JSON.stringify(doc));
        else {
          const sections: [string, string[], string[][]][] = [
            [
              'text models, USD per 1,000,000 tokens (cache writes: 1.25x input for 5 minutes, 2x for 1 hour)',
              ['model', 'input', 'output', 'cache read'],
              Object.entries(doc.text).map(([m, r]) => [m, r.input, r.output, r.cache_read]),
            ],
            [
              'image models, USD per image',
              ['model', '1K', '2K', '4K'],
              Object.entries(doc.image).map(([m, r]) => [m, r['1K'], r['2K'], r['4K']]),
            ],
            [
              'video models, USD per clip',
              ['model', 'seconds', 'price'],
              Object.entries(doc.video).flatMap(([m, clips]) => Object.entries(clips).map(([s, p]) => [m, s, p])),
            ],
          ];
          sections.forEach(([title, header, rows], i) => {
            if (i > 0) out('');
            out(title);
            for (const line of table(header, rows, header.map((_, j) => j).slice(1))) out(line);
          });
        }
        return 0;
      }
      case 'usage': {
        const account = accountArg(flags);
        const limit = flags.limit === undefined ? 100 : Number(str(flags, 'limit'));
        if (!Number.isInteger(limit) || limit < 1) throw new UsageError('--limit must be a positive whole number');
        const { listUsage } = await import('../plugins/billing/call-records.js');
        const records = await listUsage(await db(), account, limit);
        if (json) out(JSON.stringify(records));
        else {
          // The counts any listed call has (input and output always): a text-only list shows no image column.
          const counts = Object.keys(USAGE_COLUMNS).filter(
            (f) => f === 'input_tokens' || f === 'output_tokens' || records.some((r) => (r.usage[f] ?? 0) > 0),
          );
          const sized = records.some((r) => r.size);
          const header = [
            'time',
            'call',
            'model',
            'chain',
            ...counts.map((f) => USAGE_COLUMNS[f]!),
            ...(sized ? ['size'] : []),
            'price USD',
            'status',
            'tx',
          ];
          const rows = records.map((r) => [
            r.time.replace(/\.\d{3}Z$/, 'Z'),
            r.call_id,
            r.model || '-',
            r.chain,
            ...counts.map((f) => String(r.usage[f] ?? 0)),
            ...(sized ? [r.size ?? '-'] : []),
            r.price,
            r.rebuilt ? `${r.status} (rebuilt)` : r.status,
            r.tx ?? '-',
          ]);
          const right = [...counts.keys()].map((i) => i + 4);
          right.push(4 + counts.length + (sized ? 1 : 0));
          for (const line of table(header, rows, right)) out(line);
        }
        return 0;
      }
      case '':
      case 'help':
        out(HELP);
        return cmd === '' ? 2 : 0;
      default:
        throw new UsageError(`unknown command: ${cmd} (\`farebox help\` lists the commands)`);
    }
  } catch (e) {
    err(`farebox: ${errorLine(e as Error, redisFault, redisAt)}`);
    return e instanceof UsageError ? 2 : 1;
  } finally {
    if (redis) await redis.quit().catch(() => {});
  }
}

/** The one line a failure prints: what failed and what to do, for the failures a new user meets first. */
function errorLine(e: Error, redisFault: Error | undefined, redisAt: string): string {
  // ioredis gives up with "Reached the max retries per request limit" and names no server.
  if (redisFault && (e.name === 'MaxRetriesPerRequestError' || /Connection is closed/.test(e.message))) {
    const why = (redisFault as NodeJS.ErrnoException).code ?? redisFault.message.split('\n')[0];
    return `cannot reach Redis at ${redisAt} (${why}): start Redis there, or point REDIS_URL (or FAREBOX_CONFIG's redis.url) at yours`;
  }
  return e.message.split('\n')[0]!;
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
