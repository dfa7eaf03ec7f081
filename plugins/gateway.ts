/**
 * farebox: the gateway as a Fastify plugin (the package's default export).
 *
 *   app.register(farebox, { config })
 *
 * It serves the spec's endpoints under /v1 in its own encapsulated context, so the host app's routes and hooks
 * are untouched. One call: identify (request id, key -> account) -> police (validate, route, rewrite) ->
 * gate (billing) -> proxy (stream through a meter) -> settle (billing, when the response closes).
 */
import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import replyFrom from '@fastify/reply-from';
import type { Redis } from 'ioredis';
import { KeyResolver, presentedKey } from './auth.js';
import type { CallContext, CallObserver } from './call.js';
import { buildConfig, type FareboxConfig } from './config.js';
import { GatewayError, isRetryable, renderError, type Protocol } from './errors.js';
import { proxyCall } from './proxy.js';
import { closeRedis, connectRedis, redisAnswers } from './redis.js';
import { ModelCatalog, type TextEndpoint } from '../policies/models.js';
import { rewriteChat, rewriteMessages } from '../policies/rewrite.js';
import { chatBody, countTokensBody, messagesBody, parseBody } from '../policies/schemas.js';

/** Options of the plugin. */
export interface FareboxOptions {
  /** A validated config (buildConfig/loadConfig), or a raw one validated here. */
  config: FareboxConfig | unknown;
  /** A Redis connection to use instead of opening one from config.redis (the caller closes it). */
  redis?: Redis;
  /** Billing's view of each call; none = calls are not billed. */
  observer?: CallObserver;
}

function protocolOf(url: string): Protocol {
  return url.includes('/v1/messages') ? 'anthropic' : 'openai';
}

function newRequestId(): string {
  return `req_${randomUUID().replace(/-/g, '')}`;
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
  const observer = opts.observer;

  app.addHook('onClose', async () => {
    await keys.close();
    if (!opts.redis) await closeRedis(redis);
  });

  await app.register(replyFrom, {
    disableRequestLogging: true,
    undici: { connections: 256, pipelining: 1, keepAliveTimeout: 30_000 },
  });

  app.decorate('farebox', { config, redis, catalog });

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
        request.farebox = call;
        reply.header('x-request-id', call.id);
      });

      v1.setErrorHandler((err, request, reply) => sendError(request, reply, err));
      v1.setNotFoundHandler((request, reply) => sendError(request, reply, new GatewayError('not_found')));

      const authenticate = async (request: FastifyRequest) => {
        const identity = await keys.resolve(presentedKey(request.headers));
        request.farebox.identity = identity;
      };

      const bodyLimit = config.server.body_limit;

      /** Police a text call, gate it, and follow it to its end. */
      const textRoute = (endpoint: TextEndpoint, path: string) => {
        v1.post(path, { bodyLimit, onRequest: authenticate }, async (request, reply) => {
          const call = request.farebox;
          call.endpoint = endpoint;
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

          const billed = endpoint !== 'count_tokens' && observer !== undefined;
          if (billed) await observer.gate(call, reply);
          reply.raw.once('close', () => {
            call.clientAborted = !reply.raw.writableFinished;
            if (call.clientAborted && call.upstream && !call.upstream.destroyed) call.upstream.destroy();
            if (billed) void observer.settle(call);
          });
          return proxyCall(request, reply, call);
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

declare module 'fastify' {
  interface FastifyInstance {
    farebox: { config: FareboxConfig; redis: Redis; catalog: ModelCatalog };
  }
}

// Not wrapped with fastify-plugin on purpose: the gateway's hooks, parsers and handlers stay in its own context.
export default farebox;
export { farebox };
export { buildConfig, loadConfig, type FareboxConfig } from './config.js';
export { GatewayError, ERROR_CODES } from './errors.js';
