/**
 * Dashboard sessions in Redis. The browser holds a random token in an HttpOnly cookie; Redis holds only its SHA-256,
 * with the account, the session's CSRF token and its end, and expires it then. Deleting the record ends the
 * session at once, on every instance.
 */
import { hash, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { keys } from '../store/keys.js';

/** Name of the session cookie. */
export const SESSION_COOKIE = 'farebox_session';

/** A signed-in browser. */
export interface Session {
  /** SHA-256 of the cookie's token: the record's name. */
  id: string;
  account: string;
  /** The token every state change must carry (forms: `_csrf`; the browser script: `x-csrf-token`). */
  csrf: string;
  createdAt: number;
  expiresAt: number;
}

const TOKEN = /^[A-Za-z0-9_-]{43}$/;

function tokenId(token: string): string {
  return hash('sha256', token, 'hex');
}

/** Start a session for `account`; returns the cookie's token (shown to no one else) and the session. */
export async function createSession(
  redis: Redis,
  account: string,
  ttlMs: number,
  now = Date.now(),
): Promise<{ token: string; session: Session }> {
  const token = randomBytes(32).toString('base64url');
  const session: Session = {
    id: tokenId(token),
    account,
    csrf: randomBytes(32).toString('base64url'),
    createdAt: now,
    expiresAt: now + ttlMs,
  };
  const listed = keys.dashSessions(account);
  await redis
    .multi()
    .hset(keys.dashSession(session.id), {
      account,
      csrf: session.csrf,
      created_at: String(now),
      expires_at: String(session.expiresAt),
    })
    .pexpire(keys.dashSession(session.id), ttlMs)
    .sadd(listed, session.id)
    // Every session lasts ttlMs: the list lives as long as the newest.
    .pexpire(listed, ttlMs)
    .exec();
  await pruneSessions(redis, account);
  return { token, session };
}

/** The live session of a cookie token, or null (unknown, ended, expired or malformed). */
export async function readSession(redis: Redis, token: string | undefined, now = Date.now()): Promise<Session | null> {
  if (!token || !TOKEN.test(token)) return null;
  const id = tokenId(token);
  const h = await redis.hgetall(keys.dashSession(id));
  if (!h.account || !h.csrf) return null;
  const expiresAt = Number(h.expires_at);
  if (!(expiresAt > now)) return null;
  return { id, account: h.account, csrf: h.csrf, createdAt: Number(h.created_at), expiresAt };
}

/** End one session. */
export async function endSession(redis: Redis, session: Pick<Session, 'id' | 'account'>): Promise<void> {
  await redis.multi().del(keys.dashSession(session.id)).srem(keys.dashSessions(session.account), session.id).exec();
}

/** End every session of an account (an operator's lever, and "sign out everywhere"); returns how many there were. */
export async function endAllSessions(redis: Redis, account: string): Promise<number> {
  const addr = account.toLowerCase();
  const ids = await redis.smembers(keys.dashSessions(addr));
  if (ids.length === 0) return 0;
  const results = await redis
    .multi()
    .del(...ids.map((id) => keys.dashSession(id)))
    .del(keys.dashSessions(addr))
    .exec();
  return Number(results?.[0]?.[1] ?? 0);
}

// Sessions that expired stay listed until an account's next sign-in drops them here.
async function pruneSessions(redis: Redis, account: string): Promise<void> {
  const ids = await redis.smembers(keys.dashSessions(account));
  const alive = await Promise.all(ids.map((id) => redis.exists(keys.dashSession(id))));
  const gone = ids.filter((_, i) => alive[i] === 0);
  if (gone.length) await redis.srem(keys.dashSessions(account), ...gone);
}
