/**
 * The Keys page: list, create (the key is in the answer to the POST and nowhere else: no redirect, no cache), and
 * revoke with the same invalidation the CLI publishes, so every gateway instance drops the key at once.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { createKey, keyName, listKeys, revokeKey } from '../../accounts/accounts.js';
import type { Dashboard } from '../context.js';
import { DashboardError } from '../errors.js';
import { pageOrigin, requireSession, requireStateChange, viewerOf } from '../guard.js';
import { html } from '../html.js';
import { keysBody, type CreatedKey } from '../pages/keys.js';
import type { Session } from '../sessions.js';

const KEY_ID = /^key_[0-9a-f]{16}$/;

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
      notice:
        done === 'revoked'
          ? html`<p class="notice ok" role="status">Key revoked: it answers 401 from now on.</p>`
          : null,
      body: keysBody({
        base: d.base,
        csrf: session.csrf,
        keys: await listKeys(d.redis, session.account),
        created,
        gatewayUrl: d.settings.gatewayUrl ?? pageOrigin(d, request),
        claudeModels: d.settings.claudeModels,
      }),
    },
    status,
  );
}

/** GET /keys */
export async function keysPage(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  return renderKeys(d, request, reply, await requireSession(d, request), null);
}

/** POST /keys {name}: create a key and show it this once. */
export async function createKeyForm(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireStateChange(d, request);
  const raw = (request.body as { name?: unknown }).name;
  if (typeof raw !== 'string' || raw.trim() === '')
    throw new DashboardError('invalid_input', { message: 'Give the key a name, so you can tell your keys apart.' });
  let name: string;
  try {
    name = keyName(raw);
  } catch (err) {
    throw new DashboardError('invalid_input', { message: `The key's name is refused: ${(err as Error).message}.` });
  }
  const { id, key } = await createKey(d.redis, session.account, { name });
  return renderKeys(d, request, reply, session, { id, key, name }, 201);
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
