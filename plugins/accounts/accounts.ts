/**
 * Accounts and API keys in Redis. An account is a 0x address (the wallet that funds it). A key is `sk_` plus
 * 32 random bytes (base64url), shown once at creation and stored only as its SHA-256, with an optional name.
 * Their Redis keys are in plugins/store/keys.ts.
 */
import { hash as digest, randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { keys } from '../store/keys.js';
import {
  limitsView,
  spendOf,
  SPEND_FIELDS,
  storedExpiry,
  storedModels,
  type KeyLimitsChange,
  type KeyLimitsView,
} from './key-limits.js';

/** Access states of an account (SPEC: 403 when access is not active). */
export const ACCOUNT_STATUSES = ['active', 'pending', 'suspended'] as const;
/** One access state. */
export type AccountStatus = (typeof ACCOUNT_STATUSES)[number];

/** An account as stored. */
export interface Account {
  address: string;
  status: AccountStatus;
  default_chain: string;
  created_at: number;
}

/** What a valid key resolves to. */
export interface KeyIdentity {
  keyId: string;
  keyHash: string;
  account: string;
  status: AccountStatus;
  defaultChain: string;
  /** The models the key may call (ids and `prefix-*` patterns); null: every model (key-limits.ts). */
  models: readonly string[] | null;
  /** From this time (ms) the key answers 401 key_expired; null: never. */
  expiresAt: number | null;
}

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;

/** Whether `s` is a 0x address. */
export function isAddress(s: string): boolean {
  return ADDRESS.test(s);
}

/** The stored form of an API key (sha256; one-shot, no Hash object: it runs on every call). */
export function hashKey(key: string): string {
  return digest('sha256', key, 'hex');
}

/** Create an account (a random address when none is given); refuses an existing one. */
export async function createAccount(
  redis: Redis,
  opts: { address?: string; status?: AccountStatus; defaultChain?: string } = {},
): Promise<Account> {
  const address = (opts.address ?? `0x${randomBytes(20).toString('hex')}`).toLowerCase();
  if (!isAddress(address)) throw new Error(`not a 0x address: ${opts.address}`);
  const account: Account = {
    address,
    status: opts.status ?? 'active',
    default_chain: opts.defaultChain ?? 'chain_a',
    created_at: Date.now(),
  };
  const created = await redis.hsetnx(keys.account(address), 'created_at', String(account.created_at));
  if (!created) throw new Error(`account ${address} exists already`);
  await redis
    .multi()
    .hset(keys.account(address), { status: account.status, default_chain: account.default_chain })
    .sadd(keys.accounts, address)
    .exec();
  return account;
}

/** The account at `address`, or null. */
export async function getAccount(redis: Redis, address: string): Promise<Account | null> {
  const h = await redis.hgetall(keys.account(address.toLowerCase()));
  if (!h.created_at) return null;
  return {
    address: address.toLowerCase(),
    status: h.status as AccountStatus,
    default_chain: h.default_chain ?? 'chain_a',
    created_at: Number(h.created_at),
  };
}

async function requireAccount(redis: Redis, address: string): Promise<string> {
  const addr = address.toLowerCase();
  if (!isAddress(addr)) throw new Error(`not a 0x address: ${address}`);
  if (!(await redis.exists(keys.account(addr)))) throw new Error(`no account ${addr}`);
  return addr;
}

/** Change an account's access state and tell every instance. */
export async function setAccountStatus(redis: Redis, address: string, status: AccountStatus): Promise<void> {
  if (!ACCOUNT_STATUSES.includes(status)) throw new Error(`status must be one of ${ACCOUNT_STATUSES.join(', ')}`);
  const addr = await requireAccount(redis, address);
  await redis.hset(keys.account(addr), 'status', status);
  await publishInvalidate(redis, keys.account(addr));
}

/** Set the account's default billing chain. */
export async function setDefaultChain(redis: Redis, address: string, chain: string): Promise<void> {
  const addr = await requireAccount(redis, address);
  await redis.hset(keys.account(addr), 'default_chain', chain);
  await publishInvalidate(redis, keys.account(addr));
}

/** Longest key name, in characters. */
export const KEY_NAME_MAX = 64;

/** A key name as stored: trimmed; throws on control characters or more than KEY_NAME_MAX characters. */
export function keyName(name: string): string {
  const trimmed = name.trim();
  // Control characters would forge lines in the CLI's output and the dashboard's CSV.
  if (/[\p{Cc}\p{Cf}]/u.test(trimmed)) throw new Error('a key name cannot hold control characters');
  if ([...trimmed].length > KEY_NAME_MAX) throw new Error(`a key name has at most ${KEY_NAME_MAX} characters`);
  return trimmed;
}

/** Create a key for an account, optionally named and limited; the key itself is returned only here. */
export async function createKey(
  redis: Redis,
  address: string,
  opts: { name?: string } & KeyLimitsChange = {},
): Promise<{ id: string; key: string; account: string }> {
  const name = keyName(opts.name ?? '');
  const account = await requireAccount(redis, address);
  const key = `sk_${randomBytes(32).toString('base64url')}`;
  const id = `key_${randomBytes(8).toString('hex')}`;
  const hash = hashKey(key);
  const fields: Record<string, string> = { id, account, name, created_at: String(Date.now()) };
  if (opts.models) fields.models = opts.models.join(',');
  if (opts.expiresAt) fields.expires_at = String(opts.expiresAt);
  const m = redis.multi();
  // The limit first: the key works once its hash is written, and must not work a moment unlimited.
  if (opts.limit) m.hset(keys.keySpend(id), { l: opts.limit.toString(), r: opts.reset ?? 'never' });
  else if (opts.reset) m.hset(keys.keySpend(id), 'r', opts.reset);
  await m.hset(keys.apiKey(hash), fields).set(keys.apiKeyId(id), hash).sadd(keys.accountKeys(account), id).exec();
  return { id, key, account };
}

/** A key as its owner sees it, with its limits and spend: never the key itself. Times are ms since the epoch. */
export interface KeyInfo extends KeyLimitsView {
  id: string;
  name: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
}

/** The key-hash fields keyInfo reads, in its order. */
const INFO_FIELDS = ['id', 'name', 'created_at', 'last_used_at', 'revoked_at', 'models', 'expires_at'] as const;

function keyInfo(h: (string | null)[], spend: (string | null)[], now: number): KeyInfo {
  const [id, name, created, used, revoked, models, expires] = h;
  return {
    id: id!,
    name: name ?? '',
    created_at: Number(created),
    last_used_at: used ? Number(used) : null,
    revoked_at: revoked ? Number(revoked) : null,
    ...limitsView(storedModels(models), storedExpiry(expires), spendOf(spend, now)),
  };
}

/** Redis's clock in ms: windows of spend are on it (key-limits.ts). */
async function redisMs(redis: Redis): Promise<number> {
  const [s, us] = await redis.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
}

/** The account's keys, newest first, revoked ones included. */
export async function listKeys(redis: Redis, address: string): Promise<KeyInfo[]> {
  const ids = await redis.smembers(keys.accountKeys(address.toLowerCase()));
  const hashes = await Promise.all(ids.map((id) => redis.get(keys.apiKeyId(id))));
  const [now, rows, spends] = await Promise.all([
    redisMs(redis),
    Promise.all(hashes.map((h) => (h ? redis.hmget(keys.apiKey(h), ...INFO_FIELDS) : null))),
    Promise.all(ids.map((id) => redis.hmget(keys.keySpend(id), ...SPEND_FIELDS))),
  ]);
  const out: KeyInfo[] = [];
  rows.forEach((h, i) => {
    if (h?.[0]) out.push(keyInfo(h, spends[i]!, now));
  });
  return out.sort((a, b) => b.created_at - a.created_at || a.id.localeCompare(b.id));
}

/** One key by id (null when unknown), as listKeys shows it. With `account`, only a key of that account. */
export async function getKey(redis: Redis, id: string, opts: { account?: string } = {}): Promise<KeyInfo | null> {
  const hash = await redis.get(keys.apiKeyId(id));
  if (!hash) return null;
  if (opts.account !== undefined && !(await redis.sismember(keys.accountKeys(opts.account.toLowerCase()), id)))
    return null;
  const [now, h, spend] = await Promise.all([
    redisMs(redis),
    redis.hmget(keys.apiKey(hash), ...INFO_FIELDS),
    redis.hmget(keys.keySpend(id), ...SPEND_FIELDS),
  ]);
  return h[0] ? keyInfo(h, spend, now) : null;
}

/**
 * Revoke a key by id; revoked keys answer 401 from then on, on every instance. With `account`, only a key of that
 * account: another's answers as unknown, so no account learns which ids exist. Revoking again keeps the first time.
 */
export async function revokeKey(redis: Redis, id: string, opts: { account?: string } = {}): Promise<void> {
  const hash = await redis.get(keys.apiKeyId(id));
  if (!hash) throw new Error(`no key ${id}`);
  if (opts.account !== undefined && !(await redis.sismember(keys.accountKeys(opts.account.toLowerCase()), id))) {
    throw new Error(`no key ${id}`);
  }
  await redis.hsetnx(keys.apiKey(hash), 'revoked_at', String(Date.now()));
  await publishInvalidate(redis, keys.apiKey(hash));
}

/** Resolve a presented key to its account, or null when unknown or revoked. */
export async function lookupKey(redis: Redis, key: string): Promise<KeyIdentity | null> {
  const keyHash = hashKey(key);
  const [id, account, revoked, models, expires] = await redis.hmget(
    keys.apiKey(keyHash),
    'id',
    'account',
    'revoked_at',
    'models',
    'expires_at',
  );
  if (!id || !account || revoked) return null;
  const [status, defaultChain] = await redis.hmget(keys.account(account), 'status', 'default_chain');
  if (!status) return null;
  return {
    keyId: id,
    keyHash,
    account,
    status: status as AccountStatus,
    defaultChain: defaultChain ?? 'chain_a',
    models: storedModels(models),
    expiresAt: storedExpiry(expires),
  };
}

/** Record a key's last use (callers throttle this). */
export async function touchKey(redis: Redis, keyHash: string, at = Date.now()): Promise<void> {
  await redis.hset(keys.apiKey(keyHash), 'last_used_at', String(at));
}

async function publishInvalidate(redis: Redis, what: string): Promise<void> {
  const prefix = (redis.options.keyPrefix as string | undefined) ?? '';
  await redis.publish(keys.invalidateChannel(prefix), what);
}
