/**
 * The Keys page: list, create (the key is in the answer to the POST and nowhere else: no redirect, no cache), change a
 * key's limits, and revoke, each change with the same invalidation the CLI publishes, so every gateway instance sees it
 * at once.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { createKey, getKey, keyName, listKeys, revokeKey, type KeyInfo } from '../../accounts/accounts.js';
import {
  parseExpiry,
  parseLimit,
  parseModels,
  parseReset,
  setKeyLimits,
  type KeyLimitsChange,
} from '../../accounts/key-limits.js';
import type { Dashboard } from '../context.js';
import { DashboardError } from '../errors.js';
import { pageOrigin, requireSession, requireStateChange, viewerOf } from '../guard.js';
import { html } from '../html.js';
import { dateValue, DEFAULT_RESET, keysBody, type CreatedKey } from '../pages/keys.js';
import type { Session } from '../sessions.js';

const KEY_ID = /^key_[0-9a-f]{16}$/;

const NOTICES: Record<string, string> = {
  revoked: 'Key revoked: it answers 401 from now on.',
  limits: "Limits saved: the key's next call is held to them, on every gateway instance.",
};

function field(body: Record<string, unknown>, name: string): string {
  const v = body[name];
  return typeof v === 'string' ? v.trim() : '';
}

function refused(what: string, fn: () => void): void {
  try {
    fn();
  } catch (err) {
    throw new DashboardError('invalid_input', { message: `${what} is refused: ${(err as Error).message}.` });
  }
}

/**
 * The limits a form sets (key-limits.ts parse*): an empty field means none (no limit, every model, never expires). A
 * key's form shows its expiry as a day: that day sent back keeps the expiry as it is, so a key expired, or set to
 * expire at another hour by the CLI, can have its other limits changed.
 */
function limitsOf(body: Record<string, unknown>, current: KeyInfo | null): KeyLimitsChange {
  const change: KeyLimitsChange = {};
  const limit = field(body, 'limit');
  const reset = field(body, 'reset');
  const models = field(body, 'models');
  const expires = field(body, 'expires');
  refused('The spend limit', () => {
    change.limit = limit === '' ? null : parseLimit(limit);
  });
  refused('The reset', () => {
    change.reset = reset === '' ? (current?.limit?.reset ?? DEFAULT_RESET) : parseReset(reset);
  });
  refused('The list of allowed models', () => {
    change.models = models === '' ? null : parseModels(models);
  });
  if (!(current?.expires_at && expires === dateValue(current.expires_at))) {
    refused('The expiry', () => {
      change.expiresAt = expires === '' ? null : parseExpiry(expires);
    });
  }
  return change;
}

async function renderKeys(
  d: Dashboard,
  request: FastifyRequest,
  reply: FastifyReply,
  session: Session,
  created: CreatedKey | null,
  status = 200,
) {
  const done = (request.query as { done?: string }).done;
  return d.render(
    reply,
    {
      title: 'Keys',
      active: 'keys',
      viewer: await viewerOf(d, session),
      notice: done && NOTICES[done] ? html`<p class="notice ok" role="status">${NOTICES[done]}</p>` : null,
      body: keysBody({
        base: d.base,
        csrf: session.csrf,
        keys: await listKeys(d.redis, session.account),
        created,
        gatewayUrl: d.settings.gatewayUrl ?? pageOrigin(d, request),
        claudeModels: d.settings.claudeModels,
        modelIds: d.settings.modelIds,
        now: Date.now(),
      }),
    },
    status,
  );
}

/** GET /keys */
export async function keysPage(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  return renderKeys(d, request, reply, await requireSession(d, request), null);
}

/** POST /keys {name, limit, reset, models, expires}: create a key and show it this once. */
export async function createKeyForm(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const body = request.body as Record<string, unknown>;
  const raw = body.name;
  if (typeof raw !== 'string' || raw.trim() === '')
    throw new DashboardError('invalid_input', { message: 'Give the key a name, so you can tell your keys apart.' });
  let name: string;
  try {
    name = keyName(raw);
  } catch (err) {
    throw new DashboardError('invalid_input', { message: `The key's name is refused: ${(err as Error).message}.` });
  }
  const limits = limitsOf(body, null);
  // The reset comes with a limit: a key without one stores none.
  if (limits.limit === null) delete limits.reset;
  const { id, key } = await createKey(d.redis, session.account, { name, ...limits });
  return renderKeys(d, request, reply, session, { id, key, name }, 201);
}

/** POST /keys/:id/limits {limit, reset, models, expires}: change a key's limits; another account's key is unknown. */
export async function keyLimitsForm(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const { id } = request.params as { id: string };
  if (!KEY_ID.test(id)) throw new DashboardError('no_such_key');
  const current = await getKey(d.redis, id, { account: session.account });
  if (!current) throw new DashboardError('no_such_key');
  if (current.revoked_at !== null)
    throw new DashboardError('invalid_input', { message: 'This key is revoked: it answers 401 whatever its limits.' });
  const change = limitsOf(request.body as Record<string, unknown>, current);
  try {
    await setKeyLimits(d.redis, id, change, { account: session.account });
  } catch (err) {
    if (/^no key /.test((err as Error).message)) throw new DashboardError('no_such_key');
    throw err;
  }
  return reply.redirect(`${d.base}/keys?done=limits`, 303);
}

/** POST /keys/:id/revoke */
export async function revokeKeyForm(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const { id } = request.params as { id: string };
  if (!KEY_ID.test(id)) throw new DashboardError('no_such_key');
  try {
    await revokeKey(d.redis, id, { account: session.account });
  } catch (err) {
    if (/^no key /.test((err as Error).message)) throw new DashboardError('no_such_key');
    throw err;
  }
  return reply.redirect(`${d.base}/keys?done=revoked`, 303);
}
