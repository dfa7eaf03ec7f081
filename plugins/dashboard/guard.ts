/**
 * The checks in front of the dashboard's routes: the session of a request (and its account, for the page frame),
 * where a request comes from, and the CSRF token every state change carries. A state change needs all three: a
 * live session, no other site's Origin (nor Sec-Fetch-Site: cross-site), and the session's token in the form
 * (`_csrf`) or header (`x-csrf-token`).
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { getAccount } from '../accounts/accounts.js';
import type { Dashboard } from './context.js';
import { DashboardError } from './errors.js';
import type { Viewer } from './layout.js';
import { readSession, SESSION_COOKIE, type Session } from './sessions.js';

const sessions = new WeakMap<FastifyRequest, Session | null>();

/** The request's live session, or null; read once per request. */
export async function sessionOf(d: Dashboard, request: FastifyRequest): Promise<Session | null> {
  if (sessions.has(request)) return sessions.get(request)!;
  const s = await readSession(d.redis, request.cookies[SESSION_COOKIE]);
  sessions.set(request, s);
  return s;
}

/** The signed-in account as the page frame shows it (an account gone since sign-in shows as suspended). */
export async function viewerOf(d: Dashboard, session: Session): Promise<Viewer> {
  const account = await getAccount(d.redis, session.account);
  return { account: session.account, csrf: session.csrf, status: account?.status ?? 'suspended' };
}

/** The request's session; throws not_signed_in. */
export async function requireSession(d: Dashboard, request: FastifyRequest): Promise<Session> {
  const s = await sessionOf(d, request);
  if (!s) throw new DashboardError('not_signed_in');
  return s;
}

function header(request: FastifyRequest, name: string): string | undefined {
  const v = request.headers[name];
  return typeof v === 'string' ? v : undefined;
}

/**
 * Refuse a request another site made: an Origin outside the dashboard's, or Sec-Fetch-Site cross-site. With
 * `required`, the Origin must be there (the sign-in calls: the message names the origin the page came from).
 * Returns the request's origin when it sent one.
 */
export function checkSameSite(d: Dashboard, request: FastifyRequest, required = false): string | undefined {
  const origin = header(request, 'origin');
  if (header(request, 'sec-fetch-site') === 'cross-site') throw new DashboardError('cross_site');
  if (origin === undefined) {
    if (required)
      throw new DashboardError('cross_site', {
        message:
          'The request did not say which page sent it (no Origin header): sign in from the dashboard page itself.',
      });
    return undefined;
  }
  if (!d.origins().includes(origin)) {
    throw new DashboardError('cross_site', {
      message:
        d.origins().length === 0
          ? "The dashboard does not know its own address yet: set the dashboard's `origins` option."
          : `This dashboard answers for ${d.origins().join(', ')}, not ${origin}.`,
    });
  }
  return origin;
}

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The session of a state change, its origin and CSRF token checked; throws not_signed_in, cross_site or csrf_failed. */
export async function requireStateChange(d: Dashboard, request: FastifyRequest): Promise<Session> {
  checkSameSite(d, request);
  const session = await requireSession(d, request);
  const body = request.body as Record<string, unknown> | undefined;
  const token = header(request, 'x-csrf-token') ?? (typeof body?._csrf === 'string' ? body._csrf : undefined);
  if (!token || !sameToken(token, session.csrf)) throw new DashboardError('csrf_failed');
  return session;
}

/** The origin a page is shown under: the request's Host when it is one of the dashboard's, else the first. */
export function pageOrigin(d: Dashboard, request: FastifyRequest): string {
  const origins = d.origins();
  const host = header(request, 'host');
  return origins.find((o) => new URL(o).host === host) ?? origins[0] ?? `http://${host ?? '127.0.0.1'}`;
}
