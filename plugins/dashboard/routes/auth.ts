/**
 * Sign-in, sign-up and sign-out. A first sign-in opens the account with the status the operator chose (signup:
 * open -> active, review -> pending) or is refused (closed) with nothing created.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { createAccount, getAccount, type Account } from '../../accounts/accounts.js';
import { CHAIN_NAMES } from '../../chains/config.js';
import { keys } from '../../store/keys.js';
import { chainReader } from '../chain-reads.js';
import type { Dashboard } from '../context.js';
import { DashboardError } from '../errors.js';
import { checkSameSite, requireStateChange, sessionOf } from '../guard.js';
import { signInBody, signupClosedBody } from '../pages/sign-in.js';
import { createSession, endSession, SESSION_COOKIE } from '../sessions.js';
import { issueSignIn, SIGN_IN_COOKIE, SIGN_IN_TTL_MS, verifySignIn } from '../sign-in.js';

/** Sign-in messages one client IP may ask for in a minute. */
export const SIGN_INS_PER_MINUTE = 30;

function cookiePath(d: Dashboard): string {
  return d.base || '/';
}

/** GET / : the Keys page when signed in, else the sign-in page. */
export async function home(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  return reply.redirect(`${d.base}/${(await sessionOf(d, request)) ? 'keys' : 'sign-in'}`, 303);
}

/** GET /sign-in */
export async function signInPage(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  if (await sessionOf(d, request)) return reply.redirect(`${d.base}/keys`, 303);
  const chains = await d.chains();
  const list = chains
    ? CHAIN_NAMES.map((name) => ({ name, chain_id: chains[name].chain_id, rpc_url: chains[name].rpc_url }))
    : [];
  return d.render(reply, {
    title: 'Sign in',
    body: signInBody({ base: d.base, signup: d.settings.signup, ready: Boolean(chains) }),
    data: { chains: list },
  });
}

/** GET /signup-closed: what a new wallet sees when sign-ups are closed. */
export async function signupClosedPage(d: Dashboard, _request: FastifyRequest, reply: FastifyReply) {
  return d.render(reply, { title: 'Sign-ups are closed', body: signupClosedBody(d.base) }, 403);
}

async function chainIds(d: Dashboard): Promise<number[]> {
  const chains = await d.chains();
  if (!chains)
    throw new DashboardError('chain_unavailable', {
      message: 'The gateway has not published its chains yet: start it, then sign in.',
    });
  return chainReader(chains).chainIds();
}

/** POST /auth/nonce {address, chainId}: a sign-in message for the wallet to sign, bound to this browser. */
export async function issueNonce(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const origin = checkSameSite(d, request, true)!;
  const rate = keys.dashRate(request.ip);
  const [[, n]] = (await d.redis.multi().incr(rate).expire(rate, 60, 'NX').exec()) as [[unknown, number]];
  if (n > SIGN_INS_PER_MINUTE) throw new DashboardError('too_many_sign_ins');
  const body = (request.body ?? {}) as { address?: unknown; chainId?: unknown };
  const { message, bindingToken } = await issueSignIn(d.redis, {
    address: body.address,
    chainId: body.chainId,
    origin,
    uri: `${origin}${d.base}/`,
    chainIds: await chainIds(d),
  });
  reply.setCookie(SIGN_IN_COOKIE, bindingToken, {
    path: cookiePath(d),
    httpOnly: true,
    sameSite: 'strict',
    secure: d.settings.secureCookie,
    maxAge: SIGN_IN_TTL_MS / 1000,
  });
  return reply.header('cache-control', 'no-store').send({ message });
}

async function accountFor(d: Dashboard, address: string): Promise<Account | null> {
  const existing = await getAccount(d.redis, address);
  if (existing || d.settings.signup === 'closed') return existing;
  try {
    return await createAccount(d.redis, { address, status: d.settings.signup === 'open' ? 'active' : 'pending' });
  } catch {
    // Two sign-ins of a new wallet at once: the other made it.
    return getAccount(d.redis, address);
  }
}

/** POST /auth/verify {message, signature}: the signed message in, a session cookie out. */
export async function verify(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const origin = checkSameSite(d, request, true)!;
  const body = (request.body ?? {}) as { message?: unknown; signature?: unknown };
  const chains = await d.chains();
  const ids = await chainIds(d);
  const address = await verifySignIn(d.redis, {
    message: body.message,
    signature: body.signature,
    bindingToken: request.cookies[SIGN_IN_COOKIE],
    origin,
    chainIds: ids,
    checkContract: (chainId, addr, message, signature) =>
      chainReader(chains!)
        .checkContractSignature(chainId, addr, message, signature)
        .catch((err: unknown) => {
          throw new DashboardError('chain_unavailable', {
            message:
              "The signature is not an EOA's, and the chain that would check a contract wallet's did not answer; try again.",
            cause: err,
          });
        }),
  });
  reply.clearCookie(SIGN_IN_COOKIE, { path: cookiePath(d) });
  const account = await accountFor(d, address);
  if (!account) {
    const err = new DashboardError('signup_closed');
    return reply
      .code(err.status)
      .send({ error: { code: err.code, message: err.message }, redirect: `${d.base}/signup-closed` });
  }
  const ttl = d.settings.sessionTtlMs;
  const { token } = await createSession(d.redis, account.address, ttl);
  reply.setCookie(SESSION_COOKIE, token, {
    path: cookiePath(d),
    httpOnly: true,
    sameSite: 'lax',
    secure: d.settings.secureCookie,
    maxAge: Math.floor(ttl / 1000),
  });
  return reply
    .header('cache-control', 'no-store')
    .send({ account: account.address, status: account.status, redirect: `${d.base}/keys` });
}

/** POST /sign-out: ends the session (on the server: the cookie alone no longer opens anything). */
export async function signOut(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  await endSession(d.redis, session);
  reply.clearCookie(SESSION_COOKIE, { path: cookiePath(d) });
  return reply.redirect(`${d.base}/sign-in`, 303);
}
