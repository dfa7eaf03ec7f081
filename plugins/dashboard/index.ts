/**
 * The caller's dashboard as a Fastify plugin of its own, over the same Redis state as the CLI and the gateway:
 *
 *   app.register(dashboard, { prefix: '/dashboard', config })
 *
 * Wallet sign-in (EIP-4361), keys, wallets and deposits, the default chain, usage, and the public live prices.
 * Server-rendered HTML, one stylesheet and one small script of its own, a strict Content-Security-Policy. Routes
 * are relative to the prefix the host registers it under (farebox serve: /dashboard).
 */
import cookie from '@fastify/cookie';
import formbody from '@fastify/formbody';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { closeRedis, connectRedis } from '../store/redis.js';
import { loadAssets } from './assets.js';
import { createDashboard, type Dashboard } from './context.js';
import { DashboardError, toDashboardError } from './errors.js';
import { sessionOf, viewerOf } from './guard.js';
import { resolveOptions, type DashboardOptions } from './options.js';
import { errorBody } from './pages/sign-in.js';
import { home, issueNonce, signInPage, signOut, signupClosedPage, verify } from './routes/auth.js';
import { createKeyForm, keyLimitsForm, keysPage, revokeKeyForm } from './routes/keys.js';
import { pricesJson, pricesPage, script, stylesheet } from './routes/public.js';
import { usageCsvExport, usagePage } from './routes/usage.js';
import {
  balancesJson,
  defaultChainForm,
  depositTransaction,
  fundForm,
  prepareDeposit,
  walletsPage,
  withdrawalTransaction,
} from './routes/wallets.js';

export type { DashboardOptions, Signup } from './options.js';
export { DashboardOptionError } from './options.js';
export { DASHBOARD_ERRORS } from './errors.js';
export { endAllSessions } from './sessions.js';

/**
 * The page's own script and stylesheet only; no inline script or style, no other origin; forms post only here; no
 * framing. `img-src data:` is for the empty favicon.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

/** Largest form or JSON body a dashboard route reads. */
export const BODY_LIMIT = 65_536;

type Handler = (d: Dashboard, request: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

function wantsJson(request: FastifyRequest): boolean {
  return (
    /application\/json/.test(String(request.headers.accept ?? '')) ||
    /application\/json/.test(String(request.headers['content-type'] ?? ''))
  );
}

/** Answer an error: JSON for the browser script's calls, a page for forms and links. */
async function sendError(d: Dashboard, request: FastifyRequest, reply: FastifyReply, err: unknown): Promise<unknown> {
  const e = toDashboardError(err);
  if (e.status >= 500) request.log.error({ err: e.cause ?? err }, `dashboard: ${e.message}`);
  if (wantsJson(request))
    return reply
      .code(e.status)
      .header('cache-control', 'no-store')
      .send({ error: { code: e.code, message: e.message } });
  if (e.code === 'not_signed_in' && request.method === 'GET') return reply.redirect(`${d.base}/sign-in`, 303);
  // The frame shows who is signed in, unless Redis (the likely fault) cannot say.
  const session = await sessionOf(d, request).catch(() => null);
  const viewer = session ? await viewerOf(d, session).catch(() => null) : null;
  const title = e.status === 404 ? 'Not found' : e.status >= 500 ? 'Something failed' : 'Refused';
  return d.render(
    reply,
    { title, viewer, body: errorBody({ base: d.base, message: e.message, signedIn: Boolean(viewer) }) },
    e.status,
  );
}

function routes(app: FastifyInstance, d: Dashboard): void {
  const get = (path: string, h: Handler) => app.get(path, (request, reply) => h(d, request, reply));
  const post = (path: string, h: Handler) =>
    app.post(path, { bodyLimit: BODY_LIMIT }, (request, reply) => h(d, request, reply));
  get('/', home);
  get('/sign-in', signInPage);
  get('/signup-closed', signupClosedPage);
  post('/auth/nonce', issueNonce);
  post('/auth/verify', verify);
  post('/sign-out', signOut);
  get('/keys', keysPage);
  post('/keys', createKeyForm);
  post('/keys/:id/limits', keyLimitsForm);
  post('/keys/:id/revoke', revokeKeyForm);
  get('/wallets', walletsPage);
  get('/wallets/balances.json', balancesJson);
  post('/wallets/default-chain', defaultChainForm);
  post('/wallets/fund', fundForm);
  post('/wallets/deposit/prepare', prepareDeposit);
  post('/wallets/deposit/transaction', depositTransaction);
  post('/wallets/withdrawal', withdrawalTransaction);
  get('/usage', usagePage);
  get('/usage.csv', usageCsvExport);
  get('/prices', pricesPage);
  get('/prices.json', pricesJson);
  get('/assets/dashboard.css', stylesheet);
  get('/assets/dashboard.js', script);
}

/** The dashboard plugin (its own encapsulated context; register it under any prefix). */
const dashboard: FastifyPluginAsync<DashboardOptions> = async (app, opts) => {
  const settings = resolveOptions(opts ?? {});
  const redis = settings.redis ?? connectRedis(settings.redisOptions);
  if (!settings.redis) {
    let lastLog = 0;
    redis.on('error', (err: Error) => {
      // ioredis repeats the error on every reconnect attempt: log it at most every 10 s.
      if (Date.now() - lastLog > 10_000) {
        lastLog = Date.now();
        app.log.error({ err }, 'dashboard: redis connection');
      }
    });
    app.addHook('onClose', async () => closeRedis(redis));
  }
  const d = createDashboard(app, redis, settings, app.prefix, await loadAssets());

  // A host app may have registered these already; in this context they are then inherited.
  if (!app.hasRequestDecorator('cookies')) await app.register(cookie);
  if (!app.hasContentTypeParser('application/x-www-form-urlencoded'))
    await app.register(formbody, { bodyLimit: BODY_LIMIT });

  app.addHook('preValidation', async (request) => {
    if (request.method === 'POST' && (request.body === null || typeof request.body !== 'object')) request.body = {};
  });
  app.addHook('onSend', async (_request, reply, payload) => {
    reply.header('content-security-policy', CONTENT_SECURITY_POLICY);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('x-frame-options', 'DENY');
    reply.header('referrer-policy', 'same-origin');
    reply.header('cross-origin-opener-policy', 'same-origin');
    return payload;
  });
  app.setErrorHandler((err, request, reply) => sendError(d, request, reply, err));
  // At the root a host app's own 404 handler stays in charge.
  if (app.prefix)
    app.setNotFoundHandler((request, reply) => sendError(d, request, reply, new DashboardError('not_found')));
  routes(app, d);
};

export default dashboard;
