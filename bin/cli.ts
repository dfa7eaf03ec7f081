/**
 * The `farebox` command (DESIGN "Operator contract"). It works on the same Redis as the server (REDIS_URL,
 * FAREBOX_REDIS_PREFIX, or the redis section of FAREBOX_CONFIG). With --json it prints one JSON document and
 * nothing else on stdout; every command exits non-zero with a one-line error on bad input.
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { Redis } from 'ioredis';
import { ACCOUNT_STATUSES, createAccount, createKey, revokeKey, setAccountStatus, type AccountStatus } from '../plugins/accounts.js';
import { connectRedis } from '../plugins/redis.js';

/** A bad invocation: printed as one line, exit code 2. */
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

const HELP = `usage: farebox <command> [options]
  serve                                   run the gateway (PORT, HOST, REDIS_URL, FAREBOX_CONFIG)
  sim [--port N]                          run the simulated upstream providers alone
  account create [--address 0x..] [--status active|pending|suspended] [--json]
  account status --account 0x.. --set active|pending|suspended
  key create --account 0x.. [--json]
  key revoke --id ID`;

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
        const { demoGreeting, serve } = await import('../plugins/serve.js');
        const server = await serve(env);
        if (server.config.embedded) {
          const r = db();
          for (const line of await demoGreeting(r, server.url)) out(line);
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
        const sim = await startSimulator({ host: env.HOST ?? '127.0.0.1', port });
        out(json ? JSON.stringify({ url: sim.url }) : `farebox sim: simulated upstreams at ${sim.url}`);
        const stop = () => void sim.close().then(() => process.exit(0));
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
        return -1;
      }
      case 'account create': {
        const status = str(flags, 'status') as AccountStatus | undefined;
        if (status !== undefined && !ACCOUNT_STATUSES.includes(status)) throw new UsageError(`--status must be one of ${ACCOUNT_STATUSES.join(', ')}`);
        const account = await createAccount(db(), { address: str(flags, 'address'), status });
        out(json ? JSON.stringify({ account: account.address }) : `account ${account.address} (${account.status})`);
        return 0;
      }
      case 'account status': {
        const status = str(flags, 'set', true) as AccountStatus;
        if (!ACCOUNT_STATUSES.includes(status)) throw new UsageError(`--set must be one of ${ACCOUNT_STATUSES.join(', ')}`);
        const account = str(flags, 'account', true);
        await setAccountStatus(db(), account, status);
        out(json ? JSON.stringify({ account: account.toLowerCase(), status }) : `account ${account.toLowerCase()} is ${status}`);
        return 0;
      }
      case 'key create': {
        const k = await createKey(db(), str(flags, 'account', true));
        out(json ? JSON.stringify(k) : `key ${k.id} for ${k.account} (shown once): ${k.key}`);
        return 0;
      }
      case 'key revoke': {
        const id = str(flags, 'id', true);
        await revokeKey(db(), id);
        out(json ? JSON.stringify({ id, revoked: true }) : `key ${id} revoked`);
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

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then((code) => {
    if (code >= 0) process.exit(code);
  });
}
