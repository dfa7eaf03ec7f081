/**
 * The gateway's configuration: one zod schema, read once from FAREBOX_CONFIG (a JSON file) plus the
 * environment, validated, then frozen. No config file = the embedded default (simulated upstreams).
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { CHAIN_NAMES, chainsConfigSchema, type ChainsConfig } from './chains/config.js';
import { modelSchema, providerSchema, type ModelConfig, type ProviderConfig } from '../policies/catalog.js';
import { buildSignatures, clientSignatureSchema, type ClientSignature } from '../policies/clients.js';
import type { ReasoningLevel } from '../policies/families.js';
import { limitsConfigSchema, type LimitsConfig } from '../policies/limits.js';
import { buildPriceTable, isVideoFamily, lookupRates, pricesConfigSchema, type PriceTable } from '../pricing/index.js';
import { modelIssues, PROTOCOL_NAMES, servesKind } from './upstream/protocols/registry.js';

export type { ModelConfig, ProviderConfig } from '../policies/catalog.js';

const serverSchema = z
  .strictObject({
    port: z.number().int().min(0).max(65535).default(8080),
    host: z.string().min(1).default('127.0.0.1'),
    /** Request bodies up to this many bytes (Claude Code sends 80 KB and more). */
    body_limit: z
      .number()
      .int()
      .positive()
      .default(32 * 1024 * 1024),
    /**
     * A request's headers must have arrived this long after its first byte (or after the connection opened): a client
     * that trickles them is cut (`farebox serve`; a host app sets its own server's, README "Slow clients").
     */
    headers_timeout_ms: z.number().int().positive().default(10_000),
    /**
     * A whole request, its body included, must have arrived this long after its first byte, however steadily it
     * trickles. Only receiving is bounded: an answer streams for as long as it takes.
     */
    request_timeout_ms: z.number().int().positive().default(60_000),
    /** An idle keep-alive connection closes after this: keep it above the idle timeout of a load balancer in front. */
    keep_alive_timeout_ms: z.number().int().positive().default(72_000),
    /** Most connections open at once; more are closed as they come (0 = no cap). Keep it under the fd limit. */
    max_connections: z.number().int().min(0).default(0),
    /**
     * Calls still running this long after the gateway starts to stop (SIGTERM, or app.close() in a host app) are cut
     * (their connections closed) and debited for what they delivered. Keep it a few seconds under the orchestrator's
     * grace before its kill: a killed instance's calls go free.
     */
    shutdown_grace_ms: z.number().int().positive().default(20_000),
    /**
     * Behind a load balancer or reverse proxy, who may set X-Forwarded-For (Fastify's trustProxy): true (any hop),
     * or the proxies' addresses and CIDRs (a list, or one comma-separated string). The client address it yields keys
     * the dashboard's sign-in rate limit; left false behind a proxy, every caller shares the proxy's.
     */
    trust_proxy: z.union([z.boolean(), z.string().min(1), z.array(z.string().min(1)).min(1)]).default(false),
  })
  .refine((s) => s.headers_timeout_ms <= s.request_timeout_ms, {
    path: ['headers_timeout_ms'],
    message: 'must not be above server.request_timeout_ms (the headers are part of the request)',
  });

const redisSchema = z.strictObject({
  url: z
    .string()
    .regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL')
    .default('redis://127.0.0.1:6379'),
  /** Prefix of every key, so several deployments (or tests) share one Redis. */
  prefix: z.string().default('farebox:'),
});

const billingSchema = z.strictObject({
  /**
   * Call records (usage records) are kept this long after their call. At most 100 years, a bound with room: the
   * scripts compute the record's TTL in ms as a Lua number, and from 1e17 ms (~1.2 billion days) Redis passes it to
   * PEXPIRE in exponent form, which it refuses, failing every hold.
   */
  retention_days: z.number().positive().max(36_500).default(30),
  /** A hold lives this long past its owner's last renewal (at least three heartbeats). */
  hold_grace_ms: z.number().int().positive().default(60_000),
  /**
   * An instance silent this long is dead; any other instance releases its holds. At least 1 s: instances beat every
   * third of it (250 ms at the least), and a timeout near one beat would take live instances for dead.
   */
  instance_timeout_ms: z.number().int().min(1_000).default(30_000),
  /**
   * Where debits wait while Redis is away (plugins/billing/spool.ts): a folder that outlives the process (a persistent
   * volume in production), of this user and 0700 (another owner, or group or others with write rights, is refused at
   * start). Default: farebox-spool-<uid>/<redis server>-<prefix>-<hash> under the system's temporary folder.
   */
  spool_dir: z.string().min(1).optional(),
  /** Most debits one instance keeps waiting; past it a delivered call is not charged (farebox_debits_lost_total). */
  spool_max: z.number().int().positive().default(100_000),
  /** Whether this instance charges debits onchain (any number of instances may). */
  settler: z.boolean().default(true),
  /** Whether this instance follows the escrow events and reconciles balances. */
  watcher: z.boolean().default(true),
  /**
   * Most debits in one charge batch (a batch also stops where its gas bound would pass the chain's max_batch_gas).
   * At most 1,200: a ~115 KB transaction, under the 128 KB nodes' pools take.
   */
  batch_size: z.number().int().min(1).max(1_200).default(1_000),
  /**
   * Charge batches per chain sent and not yet confirmed at once (each on the next nonce of the settler key). A chain
   * settles up to batches_in_flight x batch_size charges per confirmation window.
   */
  batches_in_flight: z.number().int().min(1).max(1_000).default(128),
  /**
   * Of those, how many may wait unmined at once: a node keeps only a few transactions of one sender in its mempool
   * (geth guarantees 16 slots of 32 KB; a full batch takes 4). A chain settles up to batches_unmined x batch_size
   * charges per block.
   */
  batches_unmined: z.number().int().min(1).max(1_000).default(8),
  /** How long the settler waits to fill a batch. */
  batch_wait_ms: z.number().int().min(0).default(250),
  /** Debits another instance took but left unacknowledged this long are taken over. */
  claim_idle_ms: z.number().int().positive().default(60_000),
  /** How often the reconciler compares synced balances with the chain. */
  reconcile_interval_ms: z.number().int().positive().default(60_000),
  /**
   * Admission stops placing holds on a chain whose oldest unsettled debit is this fraction of its escrow's
   * withdrawal delay old, and resumes once it is under half of that (plugins/billing/admission.ts has why 0.5).
   */
  backlog_stop_ratio: z.number().gt(0).max(1).default(0.5),
  /** How often each gateway reads the chains' oldest debits and the escrows' terms (one Redis round trip). */
  backlog_check_ms: z.number().int().min(50).default(1_000),
});

/** Video jobs (plugins/jobs/): how long one may render, how its upstream job is followed, how long it is answered. */
const videosSchema = z.strictObject({
  /**
   * A job still rendering this long after its submit is failed and its hold released; the hold itself expires then
   * (it belongs to the job, and no instance renews it). Providers render in about 1 to 5 minutes.
   */
  deadline_ms: z.number().int().positive().default(3_600_000),
  /** The first upstream poll of a job comes this long after its submit; each next one waits 1.5x longer, up to poll_max_ms. */
  poll_initial_ms: z.number().int().positive().default(2_000),
  poll_max_ms: z.number().int().positive().default(15_000),
  /** Whether this instance may hold the poller's lease (one instance follows every upstream job at a time). */
  poller: z.boolean().default(true),
  /** A job is answered this long after it ended, and as long as its MP4 is downloadable if that is longer. */
  record_days: z.number().positive().max(3650).default(7),
});

/** Where /metrics listens unless configured: the port Prometheus exporters conventionally take. */
export const DEFAULT_METRICS_PORT = 9464;

const metricsSchema = z.strictObject({
  /** Serve GET /metrics at all. */
  enabled: z.boolean().default(true),
  /**
   * Port of the metrics server of its own, on server.host (0 = ephemeral). Absent: 9464, or ephemeral when server.port
   * is 0 (tests and tools), so that such gateways side by side do not contend for 9464.
   */
  port: z.number().int().min(0).max(65535).optional(),
  /** Serve /metrics on the gateway's own port instead: that port is public, so token_env is then required. */
  on_api_port: z.boolean().default(false),
  /** Name of an env var holding a bearer token the scraper must send. */
  token_env: z
    .string()
    .regex(/^[A-Z_][A-Z0-9_]*$/)
    .optional(),
});

/** A web origin (scheme, host, port) as the dashboard's options and config take it, normalised by URL. */
export const originSchema = z
  .url({ protocol: /^https?$/ })
  .refine((u) => {
    const x = new URL(u);
    return x.pathname === '/' && !x.search && !x.hash && !x.username;
  }, 'an origin: scheme, host and port, no path')
  .transform((u) => new URL(u).origin);

/** Where `farebox serve` mounts the dashboard unless the config says otherwise. */
export const DEFAULT_DASHBOARD_PATH = '/dashboard';

/** The caller's dashboard (plugins/dashboard/): where `farebox serve` mounts it and who may sign up. */
const dashboardSchema = z.strictObject({
  /** Whether `farebox serve` registers it. */
  enabled: z.boolean().default(true),
  /** Path prefix it is served under. */
  path: z
    .string()
    .regex(/^(\/[A-Za-z0-9._~-]+)+$/, 'a path such as /dashboard')
    .default(DEFAULT_DASHBOARD_PATH),
  /** Public origins of the dashboard (sign-in messages name them); absent = the address the server listens on. */
  origins: z.array(originSchema).min(1).optional(),
  /**
   * A wallet signing in for the first time: open = an active account, review = a pending one (the operator activates
   * it), closed = refused. Absent = open on the embedded default, review otherwise.
   */
  signup: z.enum(['open', 'review', 'closed']).optional(),
  /** Secure session cookie; absent = on, except on the embedded default (plain http on loopback). */
  secure_cookie: z.boolean().optional(),
  /** A session ends this long after sign-in. */
  session_ttl_hours: z.number().positive().max(720).default(24),
  /** Gateway origin (and path, without /v1) shown in the keys' snippets; absent = the dashboard's origin. */
  gateway_url: z.url({ protocol: /^https?$/ }).optional(),
  /** Block explorer per chain: a settlement links to `<url>/tx/<hash>`. */
  explorers: z.partialRecord(z.enum(CHAIN_NAMES), z.url({ protocol: /^https?$/ })).default({}),
});

/** The dashboard's public URL, from its first configured origin and its path; undefined without origins or when off. */
export function dashboardUrlOf(config: Pick<FareboxConfig, 'dashboard'>): string | undefined {
  const d = config.dashboard;
  return d.enabled && d.origins ? `${d.origins[0]}${d.path}/` : undefined;
}

const imagesSchema = z.strictObject({
  /** How long a `response_format: url` image stays served (its URL's life), ms. One hour, as OpenAI's image URLs. */
  url_ttl_ms: z
    .number()
    .int()
    .positive()
    .max(7 * 86_400_000)
    .default(3_600_000),
  /**
   * Most bytes of url images Redis holds at once, all instances together: past it, url calls get a 503 (and cost
   * nothing) until images expire. Redis holds the money state too: keep this well under its maxmemory.
   */
  store_max_bytes: z
    .number()
    .int()
    .positive()
    .default(256 * 1024 * 1024),
  /** Origin the image URLs name (https://gateway.example.com); absent: the origin the call came in on. */
  public_url: z
    .url({ protocol: /^https?$/ })
    .transform((u) => u.replace(/\/+$/, ''))
    .optional(),
});

/** The whole configuration as written in a FAREBOX_CONFIG file. */
export const configSchema = z
  .strictObject({
    server: serverSchema.prefault({}),
    redis: redisSchema.prefault({}),
    /** A provider's `protocol` names one of the registry's (an unknown name is refused with the known ones listed). */
    providers: z.record(z.string().min(1), providerSchema.extend({ protocol: z.enum(PROTOCOL_NAMES) })),
    models: z.array(modelSchema).min(1),
    /** Price overrides, in the shape of `farebox prices --json`. */
    prices: pricesConfigSchema.prefault({}),
    limits: limitsConfigSchema.prefault({}),
    /** Client signatures added before the built-in ones (policies/clients.ts). */
    clients: z.array(clientSignatureSchema).default([]),
    /** The four settlement chains; absent only on the embedded default, which starts dev chains. */
    chains: chainsConfigSchema.optional(),
    billing: billingSchema.prefault({}),
    videos: videosSchema.prefault({}),
    metrics: metricsSchema.prefault({}),
    dashboard: dashboardSchema.prefault({}),
    /** Image endpoints: where url images live and for how long. */
    images: imagesSchema.prefault({}),
  })
  .superRefine((cfg, ctx) => {
    // Metrics show what every account spends and how often each model is called: never public by accident.
    if (cfg.metrics.on_api_port && !cfg.metrics.token_env) {
      ctx.addIssue({
        code: 'custom',
        path: ['metrics', 'token_env'],
        message: 'required with metrics.on_api_port: the API port is public, so /metrics there needs a bearer token',
      });
    }
    if (cfg.metrics.on_api_port && cfg.metrics.port !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['metrics', 'port'],
        message: 'a port of its own and metrics.on_api_port exclude each other',
      });
    }
    const seen = new Set<string>();
    cfg.models.forEach((m, i) => {
      if (seen.has(m.id))
        ctx.addIssue({ code: 'custom', path: ['models', i, 'id'], message: `duplicate model id ${m.id}` });
      seen.add(m.id);
      for (const key of ['provider', 'chat_provider'] as const) {
        const name = (m as { provider: string; chat_provider?: string })[key];
        if (name === undefined) continue;
        const provider = cfg.providers[name];
        if (!provider) {
          ctx.addIssue({ code: 'custom', path: ['models', i, key], message: `unknown provider ${name}` });
        } else if (!servesKind(provider.protocol, m.kind)) {
          ctx.addIssue({
            code: 'custom',
            path: ['models', i, key],
            message: `${m.kind} models are not served through the ${provider.protocol} protocol of ${name}`,
          });
        }
      }
      // Settings the model's protocol refuses (another protocol's, or a value its upstream does not take).
      const protocol = cfg.providers[m.provider]?.protocol;
      if (protocol !== undefined)
        for (const issue of modelIssues(protocol, m))
          ctx.addIssue({ code: 'custom', path: ['models', i, issue.field], message: issue.message });
    });
  });

/** Video model id -> the family its config gives it: pricing takes a video model's durations from its family. */
export function videoFamilies(models: readonly unknown[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of models) {
    const { kind, id, family } = (m ?? {}) as { kind?: unknown; id?: unknown; family?: unknown };
    // A model as written may leave out its kind, which then follows from its family (policies/catalog.ts).
    const video = kind === 'video' || (kind === undefined && typeof family === 'string' && isVideoFamily(family));
    if (video && typeof id === 'string' && typeof family === 'string') out[id] = family;
  }
  return out;
}

/** Configuration as written (input of the schema). */
export type ConfigInput = z.input<typeof configSchema>;
type Parsed = z.output<typeof configSchema>;

/** The validated, frozen configuration the gateway runs on. */
export interface FareboxConfig {
  readonly server: Parsed['server'];
  readonly redis: Parsed['redis'];
  readonly providers: Readonly<Record<string, ProviderConfig>>;
  readonly models: readonly ModelConfig[];
  /** The live price table: defaults with the config's overrides. */
  readonly prices: PriceTable;
  readonly limits: LimitsConfig;
  /** Client signatures, the operator's first. */
  readonly clients: readonly ClientSignature[];
  readonly chains: ChainsConfig | undefined;
  readonly billing: Parsed['billing'];
  readonly videos: Parsed['videos'];
  /** `port` is where the metrics server of its own listens; undefined with `on_api_port`. */
  readonly metrics: Parsed['metrics'];
  readonly dashboard: Parsed['dashboard'];
  readonly images: Parsed['images'];
  /** True when running on the embedded default (simulated upstreams). */
  readonly embedded: boolean;
}

/** A configuration error that names the field at fault. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

function formatIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** Environment variables the gateway reads; anything else in the environment is ignored. */
export interface ConfigEnv {
  PORT?: string;
  HOST?: string;
  REDIS_URL?: string;
  FAREBOX_REDIS_PREFIX?: string;
  /** The metrics server's port (0 = ephemeral). */
  METRICS_PORT?: string;
  [name: string]: string | undefined;
}

/**
 * The environment over a config read by `farebox serve`: PORT, HOST, METRICS_PORT, REDIS_URL and FAREBOX_REDIS_PREFIX
 * win.
 */
export function withEnvironment(input: unknown, env: ConfigEnv): unknown {
  if (!input || typeof input !== 'object' || Array.isArray(input)) return input;
  const raw = { ...(input as Record<string, unknown>) } as Record<string, unknown> & {
    server?: Record<string, unknown>;
    redis?: Record<string, unknown>;
    metrics?: Record<string, unknown>;
  };
  if (env.PORT !== undefined || env.HOST !== undefined) {
    raw.server = { ...(raw.server ?? {}) };
    if (env.PORT !== undefined) raw.server.port = Number(env.PORT);
    if (env.HOST !== undefined) raw.server.host = env.HOST;
  }
  if (env.METRICS_PORT !== undefined) raw.metrics = { ...(raw.metrics ?? {}), port: Number(env.METRICS_PORT) };
  if (env.REDIS_URL !== undefined || env.FAREBOX_REDIS_PREFIX !== undefined) {
    raw.redis = { ...(raw.redis ?? {}) };
    if (env.REDIS_URL !== undefined) raw.redis.url = env.REDIS_URL;
    if (env.FAREBOX_REDIS_PREFIX !== undefined) raw.redis.prefix = env.FAREBOX_REDIS_PREFIX;
  }
  return raw;
}

/**
 * Validate a configuration object as given, resolve provider keys from `env`, freeze. The environment's PORT, HOST
 * and REDIS_URL do not apply here: a config given explicitly (the plugin's option) is what runs; loadConfig puts them
 * over a config file for `farebox serve`.
 */
export function buildConfig(input: unknown, env: ConfigEnv = process.env, embedded = false): FareboxConfig {
  const raw = structuredClone(input);
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) throw new ConfigError(`invalid config: ${formatIssues(parsed.error)}`);
  const data = parsed.data;
  const providers: Record<string, ProviderConfig> = {};
  for (const [name, p] of Object.entries(data.providers)) {
    const key = env[p.key_env];
    if (!key)
      throw new ConfigError(`invalid config: providers.${name}.key_env: environment variable ${p.key_env} is not set`);
    providers[name] = { ...p, name, key };
  }
  let prices: PriceTable;
  try {
    prices = buildPriceTable(data.prices, 'prices', videoFamilies(data.models));
  } catch (err) {
    throw new ConfigError(`invalid config: ${(err as Error).message}`);
  }
  data.models.forEach((m, i) => {
    let kind: string | undefined;
    try {
      kind = lookupRates(prices, m.id).kind;
    } catch {
      // no price at all
    }
    if (kind !== m.kind) {
      throw new ConfigError(
        `invalid config: models.${i}.id: ${m.id} has no ${m.kind} price (add it under prices.${m.kind})`,
      );
    }
  });
  let clients: readonly ClientSignature[];
  try {
    clients = buildSignatures(data.clients);
  } catch (err) {
    throw new ConfigError(`invalid config: clients: ${(err as Error).message}`);
  }
  const config: FareboxConfig = deepFreeze({
    server: data.server,
    redis: data.redis,
    providers,
    models: data.models,
    prices,
    limits: data.limits,
    clients,
    chains: data.chains,
    billing: data.billing,
    videos: data.videos,
    metrics: metricsOf(data),
    dashboard: data.dashboard,
    images: data.images,
    embedded,
  });
  built.add(config);
  return config;
}

/** Configs buildConfig made: passed again (the plugin's option), they are not validated twice. */
const built = new WeakSet<object>();

/** Whether `value` is a config buildConfig returned, not a raw one that merely looks like it. */
export function isBuiltConfig(value: unknown): value is FareboxConfig {
  return typeof value === 'object' && value !== null && built.has(value);
}

/** The metrics section with its port resolved: the port of its own unless served on the API port. */
function metricsOf(data: Parsed): Parsed['metrics'] {
  const m = data.metrics;
  if (m.on_api_port) return m;
  return { ...m, port: m.port ?? (data.server.port === 0 ? 0 : DEFAULT_METRICS_PORT) };
}

/** Read FAREBOX_CONFIG (a JSON file) if set, else the embedded default routed to `simulatorUrl`. */
export function loadConfig(env: ConfigEnv = process.env, simulatorUrl?: string): FareboxConfig {
  const file = env.FAREBOX_CONFIG;
  if (!file) {
    if (!simulatorUrl) throw new ConfigError('the embedded default needs the simulator URL');
    return buildConfig(
      withEnvironment(embeddedDefault(simulatorUrl), env),
      { ...env, FAREBOX_SIM_KEY: 'sim-key' },
      true,
    );
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read FAREBOX_CONFIG ${file}: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`FAREBOX_CONFIG ${file} is not valid JSON: ${(err as Error).message}`);
  }
  const config = buildConfig(withEnvironment(json, env), env, false);
  // A gateway without chains could not bill: only the plugin's tests run one.
  if (!config.chains) throw new ConfigError('invalid config: chains: the four settlement chains are required');
  return config;
}

const ALPHA_LEVELS: ReasoningLevel[] = ['low', 'medium', 'high'];
const ALPHA_TOP_LEVELS: ReasoningLevel[] = ['low', 'medium', 'high', 'xhigh', 'max'];
const BETA_LEVELS: ReasoningLevel[] = ['low', 'medium', 'high', 'xhigh', 'max'];

/** The embedded default: every model id of the spec, routed to the simulator at `simulatorUrl`. */
export function embeddedDefault(simulatorUrl: string): ConfigInput {
  // Each context window is that of the provider model the id stands for, which the simulator enforces
  // (simulator/models.ts): a window here below the provider's would let a call bill more input than its hold covers.
  const alpha = (
    id: string,
    max_tokens: number,
    temperature: boolean,
    reasoning_levels: ReasoningLevel[],
    context_window: number,
  ) => ({
    id,
    family: 'alpha' as const,
    provider: 'sim-anthropic',
    chat_provider: 'sim-anthropic-openai',
    max_tokens,
    temperature,
    reasoning_levels,
    context_window,
  });
  const openai = (
    id: string,
    family: 'beta' | 'gamma',
    provider: string,
    max_tokens: number,
    temperature: boolean,
    reasoning_levels: ReasoningLevel[],
    context_window: number,
  ) => ({ id, family, provider, max_tokens, temperature, reasoning_levels, context_window });
  return {
    providers: {
      'sim-anthropic': { protocol: 'anthropic', base_url: simulatorUrl, key_env: 'FAREBOX_SIM_KEY' },
      // Anthropic's OpenAI-compatible endpoint serves alpha models on chat completions.
      'sim-anthropic-openai': {
        protocol: 'openai',
        base_url: `${simulatorUrl}/v1`,
        key_env: 'FAREBOX_SIM_KEY',
        max_tokens_field: 'max_tokens',
      },
      'sim-openai': { protocol: 'openai', base_url: `${simulatorUrl}/v1`, key_env: 'FAREBOX_SIM_KEY' },
      'sim-open-weights': {
        protocol: 'openai',
        base_url: `${simulatorUrl}/v1`,
        key_env: 'FAREBOX_SIM_KEY',
        max_tokens_field: 'max_tokens',
      },
      'sim-gemini': { protocol: 'gemini', base_url: `${simulatorUrl}/v1beta`, key_env: 'FAREBOX_SIM_KEY' },
    },
    models: [
      alpha('alpha-fable-5', 32_000, false, ALPHA_TOP_LEVELS, 1_000_000),
      alpha('alpha-haiku-4-5', 64_000, true, ALPHA_LEVELS, 200_000),
      alpha('alpha-opus-4-6', 32_000, true, ALPHA_LEVELS, 1_000_000),
      alpha('alpha-opus-4-7', 32_000, false, ALPHA_TOP_LEVELS, 1_000_000),
      alpha('alpha-opus-4-8', 32_000, false, ALPHA_TOP_LEVELS, 1_000_000),
      alpha('alpha-opus-5', 64_000, false, ALPHA_TOP_LEVELS, 1_000_000),
      alpha('alpha-sonnet-4-6', 64_000, true, ALPHA_LEVELS, 1_000_000),
      alpha('alpha-sonnet-5', 64_000, false, ALPHA_TOP_LEVELS, 1_000_000),
      openai('beta-5.6-sol', 'beta', 'sim-openai', 128_000, false, BETA_LEVELS, 1_050_000),
      openai('beta-5.6-mini', 'beta', 'sim-openai', 128_000, false, BETA_LEVELS, 1_050_000),
      openai('beta-5.5', 'beta', 'sim-openai', 128_000, true, ['low', 'medium', 'high'], 1_050_000),
      openai('gamma-k3', 'gamma', 'sim-open-weights', 32_768, true, [], 1_048_576),
      openai('gamma-q3', 'gamma', 'sim-open-weights', 32_768, true, [], 262_144),
      // Both image protocols run on the default: img-pro on Gemini generateContent, img-2 on the OpenAI Images API
      // (gpt-image-2: any ratio, the three classes), so every size and ratio of the spec is served on both.
      { id: 'img-pro', family: 'img', provider: 'sim-gemini', upstream_model: 'gemini-3-pro-image-preview' },
      { id: 'img-2', family: 'img', provider: 'sim-openai', upstream_model: 'gpt-image-2' },
      // Video models: the simulator's OpenAI Videos API, and its Gemini long-running operations for vidC.
      { id: 'vidA-v6', family: 'vidA', provider: 'sim-openai' },
      { id: 'vidB-2.5', family: 'vidB', provider: 'sim-openai', max_references: 30, last_reference: true },
      { id: 'vidB-2.1', family: 'vidB', provider: 'sim-openai' },
      { id: 'vidC-3', family: 'vidC', provider: 'sim-gemini' },
    ],
  };
}
