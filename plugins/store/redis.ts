/**
 * The one Redis connection a gateway instance uses: the commands of one event-loop turn leave in one socket write
 * (without that Redis spent 3x the CPU per call), every key under the deployment's prefix.
 */
import { Redis, type Cluster } from 'ioredis';

/** Options of a Redis connection. */
export interface RedisOptions {
  url: string;
  prefix: string;
  /** Fail commands at once while disconnected instead of queueing them (the request path wants a fast 503). */
  failFast?: boolean;
}

/** Open a Redis connection with the gateway's settings. */
export function connectRedis(opts: RedisOptions): Redis {
  const redis = new Redis(opts.url, {
    keyPrefix: opts.prefix,
    maxRetriesPerRequest: opts.failFast ? 1 : 20,
    enableOfflineQueue: true,
    lazyConnect: false,
  });
  coalesceWrites(redis);
  return guardDatabase(redis);
}

/** Connections closed because the server refused their database: the server's refusal. */
const missingDatabase = new WeakMap<Redis, Error>();

/**
 * ioredis selects the URL's database when it connects and, if the server refuses (an index it lacks: `/11` on a
 * server of 2 databases; an ACL without SELECT; a proxy that has no databases), only emits an error and goes on in
 * database 0: another deployment's keys. A connection from connectRedis (and its duplicates) is closed instead,
 * before any command is sent, and the refusal is emitted as its error (logged where errors are); checkDatabase says
 * why at start.
 */
function guardDatabase(redis: Redis): Redis {
  const select = redis.select.bind(redis) as (db: number | string) => Promise<'OK'>;
  (redis as { select: unknown }).select = (db: number | string) =>
    select(db).catch((err: Error) => {
      // The server's answer (a ReplyError), not a connection lost meanwhile, which reconnects and selects again.
      if (err.name !== 'ReplyError') throw err;
      missingDatabase.set(redis, err);
      redis.disconnect();
      if (redis.listenerCount('error') > 0) redis.emit('error', err);
      return 'OK';
    });
  const duplicate = redis.duplicate.bind(redis);
  redis.duplicate = (override) => guardDatabase(duplicate(override));
  return redis;
}

/** The server has no database of the connection's index (checkDatabase). */
export class RedisDatabaseMissing extends Error {
  override readonly name = 'RedisDatabaseMissing';
}

/**
 * Resolve once the connection answers on its URL's database; reject with one line naming REDIS_URL and the index
 * (RedisDatabaseMissing) when the server has no such database, or with the error of a Redis out of reach. Run at
 * start, before any key is read or written.
 */
export async function checkDatabase(redis: Redis): Promise<void> {
  // Database 0 is never selected: nothing to check, and no wait on a Redis out of reach.
  if (!redis.options.db) return;
  try {
    await redis.ping();
  } catch (err) {
    const refused = missingDatabase.get(redis);
    if (!refused) throw err;
    const db = redis.options.db ?? 0;
    throw new RedisDatabaseMissing(
      /DB index|invalid DB/i.test(refused.message)
        ? `REDIS_URL (config redis.url) names database ${db}, which ${redisIdentity(redis).replace(/\/\d+$/, '')} does not have (${refused.message}): use an index the server has`
        : `REDIS_URL (config redis.url) names database ${db}, which ${redisIdentity(redis).replace(/\/\d+$/, '')} refused (${refused.message}): use a database this connection may select, or 0`,
    );
  }
}

/** A cluster or sentinel seed as ioredis takes it: `{ host, port }`, a URL, `"host:port"` or a port. */
type Seed = { host?: string; port?: number | string } | string | number;

/** `host:port` of a seed, with ioredis's defaults; a URL's credentials are left out. */
function seedAddress(seed: Seed, defaultPort: number): string {
  let host: string | undefined;
  let port: number | string | undefined;
  if (typeof seed === 'number' || (typeof seed === 'string' && /^\d+$/.test(seed))) {
    port = seed;
  } else if (typeof seed === 'string') {
    const url = new URL(seed.includes('://') ? seed : `redis://${seed}`);
    host = url.hostname;
    port = url.port;
  } else {
    host = seed.host;
    port = seed.port;
  }
  return hostPort(host || '127.0.0.1', Number(port || defaultPort));
}

function hostPort(host: string, port: number): string {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return `${h.includes(':') ? `[${h}]` : h}:${port}`;
}

/**
 * Which Redis a connection writes to, as its options name it (never its credentials): `redis://host:port/db`,
 * `unix:<path>?db=N`, `sentinel://<master>@<sentinels, sorted>/db` or `cluster://<seed nodes, sorted>`. It is known
 * without reaching Redis, and stays the same across Redis restarts (a run_id would not), so debits spooled while
 * Redis is away can name it. Two spellings of one server (localhost, 127.0.0.1) are two identities.
 */
export function redisIdentity(redis: Redis | Cluster): string {
  if ((redis as Cluster).isCluster) {
    const seeds = ((redis as unknown as { startupNodes?: Seed[] }).startupNodes ?? []).map((s) => seedAddress(s, 6379));
    return `cluster://${[...new Set(seeds)].sort().join(',')}`;
  }
  const o = (redis as Redis).options;
  const db = o.db ?? 0;
  if (o.sentinels?.length) {
    const seeds = o.sentinels.map((s) => seedAddress(s as Seed, 26379));
    return `sentinel://${o.name ?? ''}@${[...new Set(seeds)].sort().join(',')}/${db}`;
  }
  if (o.path) return `unix:${o.path}?db=${db}`;
  return `redis://${hostPort(o.host ?? '127.0.0.1', o.port ?? 6379)}/${db}`;
}

/** Sockets whose writes coalesceWrites already wraps. */
const patched = new WeakSet<object>();

/**
 * Send the commands written in one turn of the event loop in one socket write: each new socket is corked at the
 * first write of a turn and uncorked on setImmediate, after the turn's I/O callbacks. Redis then reads them at once
 * (one read per turn instead of one per command costs it far less CPU), as with ioredis's enableAutoPipelining,
 * which allocates a Pipeline object per turn whose garbage survives young-generation GCs. Commands keep their
 * order; a socket that closes while corked loses its buffered writes, and ioredis resends the commands still
 * awaiting replies once it has reconnected, as for any connection lost.
 */
function coalesceWrites(redis: Redis): void {
  redis.on('connect', () => {
    const stream = redis.stream;
    if (patched.has(stream)) return;
    patched.add(stream);
    const write = stream.write;
    let corked = false;
    const flush = () => {
      corked = false;
      stream.uncork();
    };
    stream.write = function (this: typeof stream, ...args: Parameters<typeof write>): boolean {
      if (!corked) {
        corked = true;
        stream.cork();
        setImmediate(flush);
      }
      return write.apply(this, args);
    } as typeof write;
  });
}

/**
 * Log a connection's errors through `log`, at most once every `everyMs`: ioredis repeats the error at every reconnect
 * attempt, and prints `[ioredis] Unhandled error event` lines of its own on a connection nobody listens to.
 */
export function logRedisErrors(redis: Redis, log: (err: Error) => void, everyMs = 10_000): Redis {
  let last = 0;
  redis.on('error', (err: Error) => {
    const now = Date.now();
    if (now - last < everyMs) return;
    last = now;
    log(err);
  });
  return redis;
}

/** A Redis command given up by its caller before Redis answered (the connection may have died unanswered). */
export class RedisUnanswered extends Error {
  override readonly name = 'RedisUnanswered';
}

/** Error replies of a Redis that is loading, busy, out of memory or failing over: the command may pass later. */
const NOT_SERVING = /^(LOADING|BUSY|READONLY|OOM|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|NOSCRIPT)\b/;
/** ioredis's errors for a connection that is lost, refused or closed, or a command it timed out. */
const CONNECTION_LOST =
  /ECONNREFUSED|ECONNRESET|Connection is closed|Stream isn't writeable|Command timed out|None of startup nodes is available/;
const CONNECTION_ERRORS = new Set(['MaxRetriesPerRequestError', 'ClusterAllFailedError', 'RedisUnanswered']);
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * Whether an error is Redis out of reach (a lost or refused connection, retries exhausted, a command timed out or
 * given up) or not serving for now (loading, busy, failing over): the command may pass if sent again later, and a
 * caller is told the service is unavailable. Any other error reply is Redis refusing the command itself (a script's
 * own error), which a retry only repeats; any other error is not Redis's.
 */
export function redisUnavailable(err: unknown): boolean {
  const e = err as { name?: string; message?: string; code?: string } | null;
  if (!e || typeof e !== 'object') return false;
  if (e.name === 'ReplyError') return NOT_SERVING.test(e.message ?? '');
  return CONNECTION_ERRORS.has(e.name ?? '') || SOCKET_CODES.has(e.code ?? '') || CONNECTION_LOST.test(e.message ?? '');
}

/**
 * What a stopping process still asks of Redis (a lease handed over, its instance's entry removed, idle consumers
 * pruned): only while the connection is up, and for at most `ms`, undefined otherwise or on an error. A Redis that is
 * away would hold the shutdown through every retry of the command; what is skipped expires or is swept by itself.
 */
export async function ifAnswering<T>(redis: Redis, ms: number, run: () => Promise<T>): Promise<T | undefined> {
  if (redis.status !== 'ready') return undefined;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([run().catch(() => undefined), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether Redis answers a PING within `timeoutMs`. */
export async function redisAnswers(redis: Redis, timeoutMs = 500): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([
      redis.ping().then(
        (r) => r === 'PONG',
        () => false,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Close a connection: QUIT when connected (pending replies arrive), else drop it (QUIT would wait for a reconnect). */
export async function closeRedis(redis: Redis): Promise<void> {
  if (redis.status === 'ready') {
    await redis.quit().catch(() => redis.disconnect());
  } else {
    redis.disconnect();
  }
}

/** Delete every key matching each pattern under the connection's prefix (SCAN, never KEYS). */
export async function deleteKeys(redis: Redis, patterns: readonly string[]): Promise<void> {
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  // SCAN's pattern is not prefixed by ioredis: scan on a connection without a prefix, with it spelled out.
  const raw = redis.duplicate({ keyPrefix: '' });
  try {
    for (const pattern of patterns) {
      let cursor = '0';
      do {
        const [next, keys] = await raw.scan(cursor, 'MATCH', prefix + pattern, 'COUNT', 1000);
        cursor = next;
        if (keys.length) await raw.del(...keys);
      } while (cursor !== '0');
    }
  } finally {
    await closeRedis(raw);
  }
}
