/**
 * The dashboard plugin's options, validated once at registration: explicit options over the config's `dashboard`
 * section over the defaults. A bad option fails registration with a message naming it.
 */
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { CHAIN_NAMES, type ChainName, type ChainsConfig } from '../chains/config.js';
import { claudeCodeModelEnv } from '../../policies/claude-code-models.js';
import {
  buildConfig,
  embeddedDefault,
  isBuiltConfig,
  loadConfig,
  originSchema,
  type FareboxConfig,
} from '../config.js';
import { DEFAULT_PRICE_TABLE, type PriceTable } from '../../pricing/index.js';
import { keys } from '../store/keys.js';
import type { RedisOptions } from '../store/redis.js';

/** Who may open an account by signing in: open = active at once, review = pending, closed = refused. */
export type Signup = 'open' | 'review' | 'closed';

/** Options of the dashboard plugin; every one is optional. */
export interface DashboardOptions {
  /** A validated config (buildConfig/loadConfig) or a raw one; default: FAREBOX_CONFIG, else the embedded default. */
  config?: FareboxConfig | unknown;
  /** A Redis connection to use (the caller closes it); default: one opened from the config. */
  redis?: Redis;
  /** Where FAREBOX_CONFIG, REDIS_URL and FAREBOX_REDIS_PREFIX are read without `config`. Default process.env. */
  env?: Record<string, string | undefined>;
  /** Public origins of the dashboard, such as https://gateway.example.com; default: the address it listens on. */
  origins?: string[];
  /** What a first sign-in does. Default: the config's, else open on the embedded default and review otherwise. */
  signup?: Signup;
  /** Mark the session cookie Secure. Default: on, except on the embedded default. */
  secureCookie?: boolean;
  /** How long a session lasts, in ms. Default: the config's session_ttl_hours (24 h). */
  sessionTtlMs?: number;
  /** The gateway's base URL shown in the keys' snippets (no /v1). Default: the dashboard's origin. */
  gatewayUrl?: string;
  /** Block explorer per chain (settlements link to `<url>/tx/<hash>`). */
  explorers?: Partial<Record<ChainName, string>>;
  /** Show "fund with test USD" (dev chains only). Default: on the embedded default. */
  devFund?: boolean;
}

/** The dashboard's settings after validation. */
export interface DashboardSettings {
  redis: Redis | undefined;
  redisOptions: RedisOptions;
  prices: PriceTable;
  /** The four chains, or undefined when none is known yet (embedded default before a gateway published them). */
  chains: (redis: Redis) => Promise<ChainsConfig | undefined>;
  origins: readonly string[] | undefined;
  signup: Signup;
  secureCookie: boolean;
  sessionTtlMs: number;
  gatewayUrl: string | undefined;
  /** Claude Code's model variables for the models the gateway serves, shown with its snippet. */
  claudeModels: readonly (readonly [string, string])[];
  /** The ids of the models the gateway serves (config `models`), offered for a key's allow-list. */
  modelIds: readonly string[];
  explorers: Readonly<Partial<Record<ChainName, string>>>;
  devFund: boolean;
}

// Options Fastify itself passes to every plugin, beside the plugin's own.
const FASTIFY_OPTIONS = ['prefix', 'logLevel', 'logSerializers'];

const httpUrl = z.url({ protocol: /^https?$/ });

const optionsSchema = z.object({
  origins: z.array(originSchema).min(1).optional(),
  signup: z.enum(['open', 'review', 'closed']).optional(),
  secureCookie: z.boolean().optional(),
  sessionTtlMs: z
    .number()
    .int()
    .min(60_000)
    .max(30 * 86_400_000)
    .optional(),
  gatewayUrl: httpUrl.transform((u) => u.replace(/\/+$/, '')).optional(),
  explorers: z
    .partialRecord(
      z.enum(CHAIN_NAMES),
      httpUrl.transform((u) => u.replace(/\/+$/, '')),
    )
    .optional(),
  devFund: z.boolean().optional(),
});

/** A registration error naming the option at fault. */
export class DashboardOptionError extends Error {
  override readonly name = 'DashboardOptionError';
}

function fail(option: string, reason: string): never {
  throw new DashboardOptionError(`farebox dashboard: option ${option}: ${reason}`);
}

function configOf(opts: DashboardOptions, env: Record<string, string | undefined>): FareboxConfig | undefined {
  if (opts.config !== undefined) {
    if (isBuiltConfig(opts.config)) return opts.config;
    try {
      return buildConfig(opts.config, env);
    } catch (err) {
      fail('config', (err as Error).message);
    }
  }
  if (env.FAREBOX_CONFIG) {
    try {
      return loadConfig(env);
    } catch (err) {
      fail('config (from FAREBOX_CONFIG)', (err as Error).message);
    }
  }
  return undefined;
}

/** Validate the options; throws DashboardOptionError naming the first bad one. */
export function resolveOptions(input: unknown): DashboardSettings {
  if (input === null || typeof input !== 'object') fail('(all)', 'expected an object');
  const opts = input as DashboardOptions & Record<string, unknown>;
  for (const name of Object.keys(opts)) {
    if (![...FASTIFY_OPTIONS, 'config', 'redis', 'env', ...Object.keys(optionsSchema.shape)].includes(name))
      fail(name, 'unknown option');
  }
  if (opts.env !== undefined && (opts.env === null || typeof opts.env !== 'object'))
    fail('env', 'expected an object of environment variables');
  if (opts.redis !== undefined && typeof (opts.redis as { hgetall?: unknown })?.hgetall !== 'function')
    fail('redis', 'expected an ioredis connection');
  const parsed = optionsSchema.safeParse(opts);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    fail(issue.path.map(String).join('.') || '(all)', issue.message);
  }
  const o = parsed.data;
  const env = opts.env ?? process.env;
  const config = configOf(opts, env);
  const embedded = config ? config.embedded : true;
  const section = config?.dashboard;
  let redisOptions: RedisOptions;
  let chains: DashboardSettings['chains'];
  if (config) {
    redisOptions = { url: config.redis.url, prefix: config.redis.prefix, failFast: true };
    const known = config.chains;
    chains = async () => known;
  } else {
    // No config: the embedded default, as the CLI finds it (its Redis from the environment, its chains published there).
    redisOptions = {
      url: env.REDIS_URL ?? 'redis://127.0.0.1:6379',
      prefix: env.FAREBOX_REDIS_PREFIX ?? 'farebox:',
      failFast: true,
    };
    let found: ChainsConfig | undefined;
    chains = async (redis) => {
      if (!found) {
        const text = await redis.get(keys.devChains);
        found = text ? (JSON.parse(text) as ChainsConfig) : undefined;
      }
      return found;
    };
  }
  // Only ids matter here; the embedded default's address is not used.
  const modelIds = Object.freeze(
    (config?.models ?? (embeddedDefault('http://127.0.0.1').models as { id: string }[])).map((m) => m.id),
  );
  return {
    redis: opts.redis,
    redisOptions,
    prices: config?.prices ?? DEFAULT_PRICE_TABLE,
    chains,
    origins: o.origins ?? section?.origins,
    signup: o.signup ?? section?.signup ?? (embedded ? 'open' : 'review'),
    secureCookie: o.secureCookie ?? section?.secure_cookie ?? !embedded,
    sessionTtlMs: o.sessionTtlMs ?? Math.round((section?.session_ttl_hours ?? 24) * 3_600_000),
    gatewayUrl: o.gatewayUrl ?? section?.gateway_url?.replace(/\/+$/, ''),
    claudeModels: claudeCodeModelEnv(modelIds),
    modelIds,
    explorers: Object.freeze({ ...stripSlashes(section?.explorers ?? {}), ...(o.explorers ?? {}) }),
    devFund: o.devFund ?? embedded,
  };
}

function stripSlashes(m: Partial<Record<ChainName, string>>): Partial<Record<ChainName, string>> {
  const out: Partial<Record<ChainName, string>> = {};
  for (const [k, v] of Object.entries(m)) if (v) out[k as ChainName] = v.replace(/\/+$/, '');
  return out;
}
