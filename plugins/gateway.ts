/**
 * farebox: the gateway as a Fastify plugin (the package's default export).
 *
 *   app.register(farebox)               // the environment (FAREBOX_CONFIG), else the embedded default
 *   app.register(farebox, { config })   // a config of its own
 *
 * It serves the spec's endpoints under /v1 in its own encapsulated context, so the host app's routes and hooks are
 * untouched. Every call runs the same phases (plugins/phases/), in the order the route below lists them:
 *   identify (request id; key -> account) -> police (endpoint schema, model route, rewrite, client rule) ->
 *   gate (quote; rate limits and hold in one script) -> prepare (where the endpoint has it: work only a held call may
 *   cost, such as decoding reference images) -> forward (upstream, metered) -> finish (debit, when the response
 *   closes).
 * The endpoints are modules (plugins/routes/) that declare what differs: schema, rewrite, quote, prepare, forward,
 * bill.
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import multipart from '@fastify/multipart';
import type { Redis } from 'ioredis';
import { KeyResolver } from './accounts/key-resolver.js';
import { Admission } from './billing/admission.js';
import { Billing } from './billing/billing.js';
import { RateLimiter } from './billing/rate-limit.js';
import type { Call } from './call.js';
import { CHAIN_NAMES } from './chains/config.js';
import {
  buildConfig,
  ConfigError,
  dashboardUrlOf,
  isBuiltConfig,
  loadConfig,
  type ConfigEnv,
  type FareboxConfig,
} from './config.js';
import { startEmbedded, type Embedded } from './embedded.js';
import { VideoJobs } from './jobs/video-jobs.js';
import { bodyError, parseJsonBody } from './intake/json-body.js';
import { closeUnreadUpload, isMultipartRequest, registerMultipart } from './intake/multipart.js';
import { protocolOf } from './intake/protocol.js';
import { createMetrics, initSeries, type Metrics } from './metrics/metrics.js';
import { serveMetrics } from './metrics/metrics-route.js';
import { answerExpectation } from './phases/client-errors.js';
import { Finisher, NO_PRICE } from './phases/finish.js';
import { forwardCall } from './phases/forward.js';
import { gateCall } from './phases/gate.js';
import { authenticate, identifyCall } from './phases/identify.js';
import { policeCall } from './phases/police.js';
import { prepareCall } from './phases/prepare.js';
import { runPhases } from './phases/run-phases.js';
import {
  accountReadRoutes,
  ENDPOINTS,
  healthRoute,
  imageContentRoute,
  imageUrlOrigin,
  modelsRoutes,
  videoJobRoutes,
  type Endpoint,
} from './routes/index.js';
import { Settlement } from './settlement/settlement.js';
import { ImageStore } from './store/image-store.js';
import {
  checkDatabase,
  closeRedis,
  connectRedis,
  logRedisErrors,
  RedisDatabaseMissing,
  redisUnavailable,
} from './store/redis.js';
import { Upstreams } from './upstream/pools.js';
import { catalogUpstream } from './upstream/protocols/registry.js';
import { ModelCatalog } from '../policies/catalog.js';
import { GatewayError, isRetryable, renderError } from '../policies/errors.js';

/** Options of the plugin; every one is optional. */
export interface FareboxOptions {
  /**
   * A validated config (buildConfig/loadConfig) or a raw one, validated here. Absent: FAREBOX_CONFIG from `env`,
   * else the embedded default (simulated upstreams and dev chains, started with the plugin, closed with the app).
   */
  config?: FareboxConfig | unknown;
  /** An ioredis connection to use instead of opening one from config.redis (the caller closes it). */
  redis?: Redis;
  /** Where provider keys, settler keys and FAREBOX_CONFIG are read. Default process.env. */
  env?: ConfigEnv;
  /** Metrics registry to use (createMetrics). Default: a new one per plugin instance. */
  metrics?: Metrics;
}

const OPTION_NAMES = new Set(['config', 'redis', 'env', 'metrics']);
// Fastify's own register options arrive beside ours.
const FASTIFY_OPTIONS = new Set(['prefix', 'logLevel', 'logSerializers']);

/** Refuse options a registration cannot run with, naming the option (a TypeError later would not). */
export function checkOptions(opts: unknown): FareboxOptions {
  if (opts === undefined || opts === null) return {};
  if (typeof opts !== 'object' || Array.isArray(opts)) throw new ConfigError('farebox options must be an object');
  const o = opts as Record<string, unknown>;
  for (const name of Object.keys(o)) {
    if (!OPTION_NAMES.has(name) && !FASTIFY_OPTIONS.has(name))
      throw new ConfigError(`farebox option ${name}: unknown option (config, redis, env, metrics)`);
  }
  if (
    'config' in o &&
    o.config !== undefined &&
    (o.config === null || typeof o.config !== 'object' || Array.isArray(o.config))
  ) {
    throw new ConfigError(
      'farebox option config: must be a config object (see deploy/farebox.example.json) or left out',
    );
  }
  if (o.redis !== undefined) {
    const r = o.redis as { sendCommand?: unknown; duplicate?: unknown; options?: unknown };
    if (
      !r ||
      typeof r !== 'object' ||
      typeof r.sendCommand !== 'function' ||
      typeof r.duplicate !== 'function' ||
      typeof r.options !== 'object'
    ) {
      throw new ConfigError('farebox option redis: must be an ioredis connection');
    }
  }
  if (o.env !== undefined) {
    if (!o.env || typeof o.env !== 'object' || Array.isArray(o.env))
      throw new ConfigError('farebox option env: must be an object of environment variables');
    for (const [k, v] of Object.entries(o.env)) {
      if (v !== undefined && typeof v !== 'string') throw new ConfigError(`farebox option env: ${k} must be a string`);
    }
  }
  if (o.metrics !== undefined) {
    const m = o.metrics as { registry?: { metrics?: unknown } };
    if (!m || typeof m !== 'object' || typeof m.registry?.metrics !== 'function')
      throw new ConfigError('farebox option metrics: must come from createMetrics()');
  }
  return o as FareboxOptions;
}

/** Any error thrown on the call path, as the GatewayError the caller sees. */
export function toGatewayError(err: unknown, contentType = 'application/json'): GatewayError {
  if (err instanceof GatewayError) return err;
  const e = err as { code?: string; statusCode?: number; name?: string; message?: string };
  const refused = bodyError(e, contentType);
  if (refused) return refused;
  if (redisUnavailable(err)) return new GatewayError('service_unavailable', { cause: err });
  if (e.statusCode === 400) return new GatewayError('invalid_request', { cause: err });
  return new GatewayError('internal_error', { cause: err });
}

function sendError(request: FastifyRequest, reply: FastifyReply, err: unknown): void {
  const ge = toGatewayError(err);
  const call = request.farebox as Call | null;
  if (ge.status >= 500) request.log.error({ err: ge.cause ?? err, requestId: call?.id }, ge.message);
  reply.code(ge.status).header('content-type', 'application/json');
  if (ge.headers) reply.headers(ge.headers);
  if (!isRetryable(ge.status)) reply.header('x-should-retry', 'false');
  reply.send(renderError(ge, call?.protocol ?? protocolOf(request.url)));
}

/** The config of a registration: the option, else FAREBOX_CONFIG, else the embedded default (started here). */
async function configOf(
  app: FastifyInstance,
  opts: FareboxOptions,
  env: ConfigEnv,
): Promise<{ config: FareboxConfig; env: ConfigEnv; embedded?: Embedded }> {
  if (opts.config !== undefined) {
    const config = isBuiltConfig(opts.config) ? opts.config : buildConfig(opts.config, env);
    return { config, env };
  }
  if (env.FAREBOX_CONFIG) return { config: loadConfig(env), env };
  const embedded = await startEmbedded(env);
  app.addHook('onClose', () => embedded.close());
  return { config: embedded.config, env: embedded.env, embedded };
}

const farebox: FastifyPluginAsync<FareboxOptions> = async (app, options) => {
  const opts = checkOptions(options);
  const { config, env, embedded } = await configOf(app, opts, opts.env ?? process.env);
  const metrics = opts.metrics ?? createMetrics();
  let redis: Redis;
  let closeMetrics: (() => Promise<void>) | undefined;
  try {
    // Its port of its own first: taken, the registration fails before a connection of ours is open.
    if (config.metrics.enabled)
      closeMetrics = await serveMetrics(app, metrics, { ...config.metrics, host: config.server.host }, env);
    redis = opts.redis ?? connectRedis({ ...config.redis, failFast: true });
    if (!opts.redis) {
      logRedisErrors(redis, (err) => app.log.error({ err }, 'redis connection'));
      // A database the server lacks stops the registration; a Redis out of reach does not (calls get 503s until
      // it is back).
      await checkDatabase(redis).catch((err: unknown) => {
        if (err instanceof RedisDatabaseMissing) {
          redis.disconnect();
          throw err;
        }
      });
    }
  } catch (err) {
    // What the embedded default wrote for this start goes with it (its dev-chains record, a mark it set).
    await closeMetrics?.();
    await embedded?.abandon().catch(() => {});
    throw err;
  }
  // An Expect Node cannot meet gets our 417, with a request id, instead of Node's bare one (unless the host app
  // answers it itself).
  if (app.server.listenerCount('checkExpectation') === 0) app.server.on('checkExpectation', answerExpectation);
  const log = app.log;
  const catalog = new ModelCatalog(config, catalogUpstream);
  const upstreams = new Upstreams();
  const images = {
    store: new ImageStore(redis, { ttlMs: config.images.url_ttl_ms, maxBytes: config.images.store_max_bytes }),
    origin: imageUrlOrigin(config),
  };
  let cut: NodeJS.Timeout | undefined;
  app.addHook('preClose', async () => {
    // From the start of close(): proxied answers ask keep-alive callers to close (RFC 9112 9.6), else an open
    // socket would hold the server's close for its keep-alive timeout.
    upstreams.closing = true;
    // Calls still running when the shutdown grace is over are cut (their connections closed) and debited for what
    // they delivered, as any caller who leaves is: a kill by the orchestrator would leave their holds to be released,
    // free. Nothing is kept per call for it: a collection of live calls made every call's objects outlive a
    // scavenge. An HTTP/2 server (a host app's) has no closeAllConnections: its sessions close as the host app's do.
    cut = setTimeout(
      () => (app.server as { closeAllConnections?: () => void }).closeAllConnections?.(),
      config.server.shutdown_grace_ms,
    );
    cut.unref();
  });
  if (config.chains)
    initSeries(
      metrics,
      CHAIN_NAMES,
      config.models.map((m) => m.id),
    );

  // Heartbeats (and hold renewals) well inside the timeout, so a live instance is never taken for dead; a hold lives
  // at least three heartbeats past its last renewal, so one missed beat never lets it expire.
  const heartbeatMs = Math.min(5_000, Math.max(250, Math.floor(config.billing.instance_timeout_ms / 3)));
  // Billing on the configured chains; none configured (only a test of the proxy alone runs so): calls are not billed.
  let billing: Billing | undefined;
  try {
    billing = config.chains
      ? new Billing(
          redis,
          {
            retentionMs: config.billing.retention_days * 86_400_000,
            holdTtlMs: Math.max(config.billing.hold_grace_ms, 3 * heartbeatMs),
            instanceTimeoutMs: config.billing.instance_timeout_ms,
            // No spool_dir: a folder named by the connection's Redis and prefix (billing/spool.ts).
            spool: { dir: config.billing.spool_dir, maxEntries: config.billing.spool_max },
          },
          metrics,
          log,
        )
      : undefined;
  } catch (err) {
    // A spool folder refused (SpoolFolderRefused, naming it): the registration fails, leaving no connection of ours open.
    if (!opts.redis) redis.disconnect();
    throw err;
  }
  const keys = new KeyResolver(redis);
  keys.listen((err) => log.warn({ err }, 'key invalidation channel'));
  const admission = new Admission(
    new RateLimiter(redis, config.limits),
    billing,
    log,
    redis,
    {
      stopRatio: config.billing.backlog_stop_ratio,
      checkMs: config.billing.backlog_check_ms,
      dashboardUrl: dashboardUrlOf(config),
    },
    metrics,
  );
  const finisher = new Finisher(admission, config.prices, log, metrics);
  const videos = new VideoJobs({ redis, config, upstreams, admission, metrics, log, instance: billing?.instance });
  // The settler and the chain watcher beside the call path, unless this instance leaves them to others
  // (`farebox settle`, plugins/settlement/settlement.ts).
  const settlement =
    billing && config.chains
      ? new Settlement(redis, config.chains, config.billing, billing.instance, metrics, log, env)
      : undefined;
  app.addHook('onReady', async () => {
    billing?.start(heartbeatMs);
    await admission.start();
    await settlement?.start();
    videos.start();
  });
  // Debits still running at shutdown finish before Redis closes (else their holds would only expire).
  app.addHook('onClose', async () => {
    clearTimeout(cut);
    admission.stop();
    await videos.stop();
    await finisher.drained();
    await settlement?.stop();
    await billing?.stop();
    await keys.close();
    await upstreams.close();
    if (!opts.redis) await closeRedis(redis);
  });

  await app.register(
    async (v1: FastifyInstance) => {
      v1.decorateRequest('farebox', null as unknown as Call);
      v1.removeContentTypeParser('application/json');
      v1.addContentTypeParser(
        'application/json',
        { parseAs: 'buffer', bodyLimit: config.server.body_limit },
        parseJsonBody,
      );

      v1.addHook('onRequest', identifyCall(metrics, finisher.finish));
      v1.setErrorHandler((err, request, reply) => {
        const ge = toGatewayError(
          err,
          request.routeOptions.config.endpoint?.body === 'multipart' ? 'multipart/form-data' : undefined,
        );
        // Refusals are errors before the upstream was called; upstream failures have their own metric.
        if ((request.farebox as Call | null)?.exchange === undefined) metrics.rejections.inc({ code: ge.code });
        // Stopping: as proxied answers do, so the caller's keep-alive socket does not hold the server's close.
        if (upstreams.closing) reply.header('connection', 'close');
        // An upload refused before it was read to its end: its connection is closed behind the answer.
        if (isMultipartRequest(request)) closeUnreadUpload(request, reply);
        // An error answer delivers nothing: on a billed route it costs nothing, and says so.
        const endpoint = request.routeOptions.config.endpoint;
        if (endpoint !== undefined && endpoint.billed !== false) reply.header('x-gw-price', NO_PRICE);
        sendError(request, reply, ge);
      });
      v1.setNotFoundHandler((request, reply) => sendError(request, reply, new GatewayError('not_found')));

      const identify = authenticate(keys);
      const police = policeCall({
        catalog,
        clients: config.clients,
        videos: config.videos,
        imageUrls: images.origin !== null,
      });
      const gate = gateCall(admission, config.prices, finisher.finish);
      const prepare = prepareCall({ metrics }, finisher.finish);
      const forward = forwardCall({ upstreams, metrics, images, videos, prices: config.prices });
      // The phases of a call, in order: identify (the v1 onRequest hook above, then the key), then police, gate,
      // prepare and forward in the route's handler (runPhases), each a function of plugins/phases/.
      const handler = runPhases(police, gate, prepare, forward);
      const route = (context: FastifyInstance, endpoint: Endpoint) =>
        context.route({
          method: endpoint.method,
          url: endpoint.path,
          bodyLimit: config.server.body_limit,
          config: { endpoint },
          onRequest: identify,
          handler,
        });
      const multipart = (e: Endpoint) => e.body === 'multipart' || e.body === 'json-or-multipart';
      for (const endpoint of ENDPOINTS) if (!multipart(endpoint)) route(v1, endpoint);
      // Multipart endpoints (image edits, video submits) in a context of their own: @fastify/multipart's parser and
      // hooks run on their calls only, not on every text call.
      await v1.register(async (media: FastifyInstance) => {
        await registerMultipart(media);
        for (const endpoint of ENDPOINTS) if (multipart(endpoint)) route(media, endpoint);
      });
      healthRoute(v1, redis);
      imageContentRoute(v1, images.store);
      videoJobRoutes(v1, { authenticate: identify, videos, admission, upstreams });
      modelsRoutes(v1, {
        authenticate: identify,
        catalog,
        models: config.models,
        prices: config.prices,
        endpoints: ENDPOINTS,
      });
      accountReadRoutes(v1, { authenticate: identify, admission, redis });
    },
    { prefix: '/v1' },
  );
};

// Not wrapped with fastify-plugin on purpose: the gateway's hooks, parsers and handlers stay in its own context.
export default farebox;
export { farebox };
export { buildConfig, loadConfig, type FareboxConfig } from './config.js';
export { GatewayError, ERROR_CODES } from '../policies/errors.js';
export { checkTimeoutsAfterReads, fareboxServerOptions } from './phases/client-errors.js';
