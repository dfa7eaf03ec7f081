/**
 * farebox: the gateway as a Fastify plugin (the package's default export).
 *
 *   app.register(farebox, { config })
 *
 * It serves the spec's endpoints under /v1 in its own encapsulated context, so the host app's routes and hooks
 * are untouched. One call: identify (request id, key -> account) -> police (validate, route, rewrite) ->
 * gate (billing) -> proxy (stream through a meter) -> settle (billing, when the response closes).
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import { KeyResolver, presentedKey } from './accounts/key-resolver.js';
import { Billing, inputTokensBound } from './billing/billing.js';
import { newRequestId, type CallContext, type CallObserver } from './call.js';
import { CHAIN_NAMES } from './chains/config.js';
import { buildConfig, type FareboxConfig } from './config.js';
import { GatewayError, isRetryable, renderError, type Protocol } from '../policies/errors.js';
import { createMetrics, initSeries, type Metrics } from './metrics/metrics.js';
import { serveMetrics } from './metrics/metrics-route.js';
import { proxyCall, Upstreams } from './upstream/proxy.js';
import { RateLimiter, rateLimitedError } from './billing/rate-limit.js';
import { closeRedis, connectRedis, redisAnswers } from './store/redis.js';
import { Settlement } from './settlement/settlement.js';
import { checkClientRule } from '../policies/client-rules.js';
import { classifyClient } from '../policies/clients.js';
import { rateLimitHeaders, UNLIMITED, type Decision } from '../policies/limits.js';
import { ModelCatalog, type TextEndpoint } from '../policies/catalog.js';
import { rewriteChat, rewriteMessages } from '../policies/rewrite.js';
import { chatBody, countTokensBody, messagesBody, parseBody } from '../policies/schemas.js';

/** Options of the plugin. */
export interface FareboxOptions {
  /** A validated config (buildConfig/loadConfig), or a raw one validated here. */
  config: FareboxConfig | unknown;
  /** A Redis connection to use instead of opening one from config.redis (the caller closes it). */
  redis?: Redis;
  /**
   * Billing's view of each call. Default: billing on the configured chains (none configured = calls are not
   * billed, for tests of the proxy alone). `false` turns billing off.
   */
  observer?: CallObserver | false;
  /** Where settler keys and provider keys are read. Default process.env. */
  env?: Record<string, string | undefined>;
  /** Metrics registry to use (default: a new one per plugin instance). */
  metrics?: Metrics;
}

function protocolOf(url: string): Protocol {
  return url.includes('/v1/messages') ? 'anthropic' : 'openai';
}

/** Any error thrown on the call path, as the GatewayError the caller sees. */
export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err;
  const e = err as { code?: string; statusCode?: number; name?: string; message?: string };
  switch (e.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new GatewayError('request_too_large', { cause: err });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new GatewayError('invalid_request', { message: 'Content-Type must be application/json.', cause: err });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new GatewayError('invalid_json', { cause: err });
  }
  if (e.name === 'MaxRetriesPerRequestError' || /ECONNREFUSED|Connection is closed|Stream isn't writeable/.test(e.message ?? '')) {
    return new GatewayError('service_unavailable', { cause: err });
  }
  if (e.statusCode === 400) return new GatewayError('invalid_request', { cause: err });
  return new GatewayError('internal_error', { cause: err });
}

function sendError(request: FastifyRequest, reply: FastifyReply, err: unknown): void {
  const ge = toGatewayError(err);
  const call = request.farebox as CallContext | null;
  if (ge.status >= 500) request.log.error({ err: ge.cause ?? err, requestId: call?.id }, ge.message);
  reply.code(ge.status).header('content-type', 'application/json');
  if (ge.headers) reply.headers(ge.headers);
  if (!isRetryable(ge.status)) reply.header('x-should-retry', 'false');
  reply.send(renderError(ge, call?.protocol ?? protocolOf(request.url)));
}

const farebox: FastifyPluginAsync<FareboxOptions> = async (app, opts) => {
  const config = (opts.config as FareboxConfig).providers && Object.isFrozen(opts.config)
    ? (opts.config as FareboxConfig)
    : buildConfig(opts.config);
  const redis = opts.redis ?? connectRedis({ ...config.redis, failFast: true });
  if (!opts.redis) {
    let lastLog = 0;
    redis.on('error', (err: Error) => {
      // ioredis repeats the error on every reconnect attempt: log it at most every 10 s.
      if (Date.now() - lastLog > 10_000) {
        lastLog = Date.now();
        app.log.error({ err }, 'redis connection');
      }
    });
  }
  const keys = new KeyResolver(redis);
  keys.listen((err) => app.log.warn({ err }, 'key invalidation channel'));
  const catalog = new ModelCatalog(config);
  const metrics = opts.metrics ?? createMetrics();
  const limiter = new RateLimiter(redis, config.limits);
  const upstreams = new Upstreams();
  // From the start of close(): proxied answers ask keep-alive callers to close (RFC 9112 9.6), else an open
  // socket would hold the server's close for its keep-alive timeout.
  app.addHook('preClose', async () => {
    upstreams.closing = true;
  });
  if (config.chains) initSeries(metrics, CHAIN_NAMES, config.models.map((m) => m.id));
  const log = app.log;

  // Billing: the funds gate and settlement on the call path; the settler and the chain watcher beside it, unless
  // this instance leaves them to others (`farebox settle`, plugins/settlement.ts).
  const billing = opts.observer === undefined && config.chains
    ? new Billing(redis, config.prices, {
      retentionMs: config.billing.retention_days * 86_400_000,
      holdGraceMs: config.billing.hold_grace_ms,
      instanceTimeoutMs: config.billing.instance_timeout_ms,
    }, metrics, log)
    : undefined;
  const observer: CallObserver | undefined = opts.observer === false ? undefined : (opts.observer ?? billing);
  const settlement = billing && config.chains
    ? new Settlement(redis, config.chains, config.billing, billing.instance, metrics, log, opts.env ?? process.env)
    : undefined;
  app.addHook('onReady', async () => {
    // Heartbeats well inside the timeout, so a live instance is never taken for dead.
    billing?.start(Math.min(5_000, Math.max(250, Math.floor(config.billing.instance_timeout_ms / 3))));
    await settlement?.start();
  });

  // Settlements still running at shutdown finish before Redis closes (else their holds would only expire).
  const settling = new Set<Promise<void>>();
  app.addHook('onClose', async () => {
    await Promise.allSettled([...settling]);
    await settlement?.stop();
    await billing?.stop();
    await keys.close();
    await upstreams.close();
    if (!opts.redis) await closeRedis(redis);
  });

  if (config.metrics.enabled) await serveMetrics(app, metrics, { ...config.metrics, host: config.server.host }, opts.env ?? process.env);

  await app.register(
    async (v1: FastifyInstance) => {
      v1.decorateRequest('farebox', null as unknown as CallContext);

      // Small JSON bodies are read whole and parsed once (we rewrite them anyway); the byte size bounds input tokens.
      v1.removeContentTypeParser('application/json');
      v1.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: config.server.body_limit }, (req, body, done) => {
        const buf = body as Buffer;
        req.farebox.bodyBytes = buf.length;
        try {
          done(null, JSON.parse(buf.toString('utf8')));
        } catch (err) {
          done(new GatewayError('invalid_json', { cause: err }), undefined);
        }
      });

      v1.addHook('onRequest', async (request, reply) => {
        const call: CallContext = {
          id: newRequestId(),
          protocol: protocolOf(request.url),
          startedAt: process.hrtime.bigint(),
          bodyBytes: 0,
          clientAborted: false,
        };
        call.endpoint = (request.routeOptions.config as { endpoint?: TextEndpoint }).endpoint;
        request.farebox = call;
        reply.header('x-request-id', call.id);
        // The Anthropic SDK reads its own request-id header (error.requestID, message._request_id).
        if (call.protocol === 'anthropic') reply.header('request-id', call.id);
        // One listener per call: metrics for every answer (refusals included), then the route's own end of call.
        reply.raw.once('close', () => {
          call.ended = true;
          call.clientAborted = !reply.raw.writableFinished;
          if (call.clientAborted) call.abortUpstream?.();
          const route = call.endpoint ?? 'other';
          metrics.requests.inc({ route, model: call.route?.model.id ?? 'none', status: String(reply.statusCode) });
          metrics.requestDuration.observe({ route }, Number(process.hrtime.bigint() - call.startedAt) / 1e9);
          call.onEnd?.();
        });
      });

      v1.setErrorHandler((err, request, reply) => {
        const ge = toGatewayError(err);
        // Refusals are errors before the upstream was called; upstream failures have their own metric.
        if ((request.farebox as CallContext | null)?.upstreamStatus === undefined) metrics.rejections.inc({ code: ge.code });
        sendError(request, reply, ge);
      });
      v1.setNotFoundHandler((request, reply) => sendError(request, reply, new GatewayError('not_found')));

      const authenticate = async (request: FastifyRequest) => {
        const identity = await keys.resolve(presentedKey(request.headers));
        request.farebox.identity = identity;
        // SPEC Authentication 4: access not active -> 403 (a revoked key stays 401, above).
        if (identity.status !== 'active') throw new GatewayError('access_not_active', { message: `Access is ${identity.status} for this account.` });
      };

      const bodyLimit = config.server.body_limit;

      /** Police a text call, gate it, and follow it to its end. */
      const textRoute = (endpoint: TextEndpoint, path: string) => {
        v1.post(path, { bodyLimit, onRequest: authenticate, config: { endpoint } }, async (request, reply) => {
          const call = request.farebox;
          if (endpoint === 'chat_completions') {
            const parsed = parseBody(chatBody, request.body);
            call.route = catalog.route(endpoint, parsed.model);
            call.rewrite = rewriteChat(parsed, call.route);
          } else {
            const parsed = endpoint === 'messages' ? parseBody(messagesBody, request.body) : parseBody(countTokensBody, request.body);
            call.route = catalog.route(endpoint, parsed.model);
            call.rewrite = endpoint === 'messages'
              ? rewriteMessages(parsed as ReturnType<typeof messagesBody.parse>, call.route)
              : { body: { ...parsed, model: call.route.upstreamModel }, maxOutputTokens: 0, stream: false, callerWantsUsage: true };
          }
          if (call.rewrite.clampedTo !== undefined) reply.header('x-gw-clamped-max-tokens', String(call.rewrite.clampedTo));

          // Client and family rules (SPEC "Client and model-family rules"), before any money is held.
          const client = classifyClient(request.headers, config.clients);
          call.client = client.name;
          const refusal = checkClientRule(endpoint, call.route.model.family, client.class);
          if (refusal) throw new GatewayError('unsupported_client', { message: refusal.message });

          call.upstreamBody = JSON.stringify(call.rewrite.body);
          const family = call.route.model.family;
          call.inputBound = inputTokensBound(call.upstreamBody, call.route.model.context_window);
          const tokens = endpoint === 'count_tokens' ? 0 : call.inputBound + call.rewrite.maxOutputTokens;
          const limitInput = { keyId: call.identity!.keyId, account: call.identity!.account, family, tokens };
          const billed = endpoint !== 'count_tokens' && observer !== undefined;
          let limit: Decision = UNLIMITED;
          if (billed && observer.decidesLimits) {
            // One Redis script decides the rate limits and places the hold: a call refused by either holds nothing
            // and is charged to no limit.
            const prepared = limiter.prepare(limitInput);
            const out = await observer.gate(call, reply, prepared ?? undefined);
            if (prepared && out) limit = limiter.decide(prepared, out);
            if (!limit.allowed) {
              reply.removeHeader('x-gw-billing-chain');
              throw rateLimitedError(limit, call.protocol);
            }
          } else {
            limit = await limiter.check(limitInput);
            if (!limit.allowed) throw rateLimitedError(limit, call.protocol);
            if (billed) {
              try {
                await observer.gate(call, reply);
              } catch (err) {
                // A call the funds gate refuses generates nothing: give its token estimate back (the request counts).
                if (tokens > 0) {
                  limiter.adjust(limitInput, 0).catch((e) => log.warn({ err: e, requestId: call.id }, 'rate-limit refund failed'));
                }
                throw err;
              }
            }
          }
          if (limit.which !== null) reply.headers(rateLimitHeaders(limit, call.protocol));
          call.onEnd = () => {
            if (billed) {
              // With the hold script deciding the limits, the settle script corrects the token estimate, in the same
              // step as the settlement and so once; otherwise a script of its own does, after it.
              const inSettle = observer.decidesLimits === true && tokens > 0;
              const correct = inSettle ? (t: number) => limiter.prepareAdjust(limitInput, t) : undefined;
              const done = observer.settle(call, correct).then(() => {
                if (!inSettle && call.billedTokens !== undefined && tokens > 0) {
                  return limiter.adjust(limitInput, call.billedTokens);
                }
              }).catch((err) => log.warn({ err, requestId: call.id }, 'after-call accounting failed'));
              settling.add(done);
              void done.finally(() => settling.delete(done));
            }
          };
          // The caller left while the hold was being placed: release it now, and call no upstream.
          if (call.ended) {
            call.onEnd();
            return reply.send();
          }
          metrics.overhead.observe({ route: endpoint }, Number(process.hrtime.bigint() - call.startedAt) / 1e9);
          return proxyCall(upstreams, reply, call, metrics);
        });
      };
      textRoute('messages', '/messages');
      textRoute('count_tokens', '/messages/count_tokens');
      textRoute('chat_completions', '/chat/completions');

      v1.get('/health', async (_request, reply) => {
        const ok = await redisAnswers(redis);
        reply.code(ok ? 200 : 503);
        return { status: ok ? 'ok' : 'unavailable', redis: ok ? 'ok' : 'unreachable' };
      });
    },
    { prefix: '/v1' },
  );
};


// Not wrapped with fastify-plugin on purpose: the gateway's hooks, parsers and handlers stay in its own context.
export default farebox;
export { farebox };
export { buildConfig, loadConfig, type FareboxConfig } from './config.js';
export { GatewayError, ERROR_CODES } from '../policies/errors.js';
