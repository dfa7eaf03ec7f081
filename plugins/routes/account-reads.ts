/**
 * GET /v1/calls/{request_id}, GET /v1/balance and GET /v1/key: what a key may read of its account's money and of its
 * own. Plain authenticated routes outside the call path, as the video polls are (video-jobs.ts): no hold, no bill, no
 * upstream, no record.
 *
 * - A call's record, by the request id its answer carried (x-request-id): model, chain, key, usage, price (USD and
 *   atomic units), status (held, pending, settled, failed, free), the settlement transaction once onchain. Another
 *   account's id answers 404 as an unknown or malformed one does, so an answer never tells whether an id exists.
 * - The balance: the `farebox balance --json` document of the key's account (billing/balances.ts builds it for both).
 * - The key: its id, name, limits (accounts/key-limits.ts), what it spent in its current window and in all, and what
 *   it has left: one entry of `farebox key list --json` (accounts.ts getKey).
 *
 * Each read counts against the key's and account's poll limits (`limits.video_polls`, shared with video polls): it
 * needs no funds, so nothing else bounds it; the limit's script and the read go out in the same turn (one round trip).
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Redis } from 'ioredis';
import type { Admission } from '../billing/admission.js';
import { getKey, type KeyIdentity } from '../accounts/accounts.js';
import { accountBalances } from '../billing/balances.js';
import { getOwnCallRecord, type CallRecord } from '../billing/call-records.js';
import type { Call } from '../call.js';
import type { OnRequestHook } from '../phases/identify.js';
import { protocolOfCaller } from '../intake/protocol.js';
import { GatewayError } from '../../policies/errors.js';
import { rateLimitHeaders } from '../../policies/limits.js';
import { formatUsd } from '../../pricing/money.js';

/** What the routes use. */
export interface AccountReadsContext {
  /** Identify's key check (phases/identify.ts authenticate). */
  readonly authenticate: OnRequestHook;
  readonly admission: Admission;
  readonly redis: Redis;
}

// The gateway's request ids (request-ids.ts), and a bare call id: the id a record rebuilt from the escrow's event of
// a call id not of the gateway's form is listed under (settlement/apply-events.ts).
const REQUEST_ID = /^(?:req_[0-9a-f]{32}|0x[0-9a-f]{64})$/;
// How the 429 names what these routes count: they share the video polls' buckets.
const COUNTED = 'video polls and account reads';

/** A call's record as GET /v1/calls/{request_id} answers it. */
export function callView(r: CallRecord) {
  return {
    id: r.call_id,
    // Unknown ('') only on a record rebuilt from the escrow's event after Redis lost the call's writes.
    model: r.model || null,
    key_id: r.key_id || null,
    chain: r.chain,
    status: r.status,
    // Held: the price is not known until the call ends; the hold is the worst case the wallet keeps for it.
    price: r.status === 'held' ? null : r.price,
    price_atomic: r.status === 'held' ? null : r.priceAtomic.toString(),
    hold: formatUsd(r.held),
    hold_atomic: r.held.toString(),
    usage: r.usage,
    ...(r.size === undefined ? {} : { size: r.size }),
    tx: r.tx,
    created_at: r.time,
    ...(r.rebuilt ? { rebuilt: true } : {}),
  };
}

/** GET /v1/calls/{request_id}: the record of one of the account's calls. */
export function retrieveCall(admission: Admission, redis: Redis) {
  return async function retrieveCall(request: FastifyRequest, reply: FastifyReply) {
    const { id } = request.params as { id: string };
    const call: Call = request.farebox;
    const identity = call.identity!;
    // Both sent in this turn: one round trip.
    const [decision, record] = await Promise.all([
      admission.admitPoll(identity, call.protocol, COUNTED),
      REQUEST_ID.test(id) ? getOwnCallRecord(redis, identity.account, id) : null,
    ]);
    if (decision.which !== null) reply.headers(rateLimitHeaders(decision, call.protocol));
    if (record === null) {
      throw new GatewayError('call_not_found', {
        param: 'request_id',
        message: `No call with request id ${JSON.stringify(id.slice(0, 80))}.`,
      });
    }
    // The chain the call was billed on, as every answer about a billed call names it (SPEC "Billing chain selection").
    if (record.chain) reply.header('x-gw-billing-chain', record.chain);
    return reply
      .header('cache-control', 'no-store')
      .type('application/json')
      .send(JSON.stringify(callView(record)));
  };
}

/**
 * A read of the key's own: counted against the poll limits in the same turn as `read`, answered as JSON. Null from
 * `read` means the key resolved a moment ago no longer stands (its account or itself removed, or revoked): a 401.
 */
function ownRead(admission: Admission, read: (identity: KeyIdentity) => Promise<object | null>) {
  return async function ownRead(request: FastifyRequest, reply: FastifyReply) {
    const call: Call = request.farebox;
    const identity = call.identity!;
    const [decision, doc] = await Promise.all([admission.admitPoll(identity, call.protocol, COUNTED), read(identity)]);
    if (decision.which !== null) reply.headers(rateLimitHeaders(decision, call.protocol));
    if (doc === null) throw new GatewayError('invalid_api_key');
    return reply.header('cache-control', 'no-store').type('application/json').send(JSON.stringify(doc));
  };
}

/** GET /v1/balance: the account's balances per chain and its default chain. */
export function retrieveBalance(admission: Admission, redis: Redis) {
  return ownRead(admission, (identity) => accountBalances(redis, identity.account));
}

/** GET /v1/key: the calling key, its limits and its spend, as `farebox key list --json` shows each key. */
export function retrieveKey(admission: Admission, redis: Redis) {
  return ownRead(admission, async (identity) => {
    const key = await getKey(redis, identity.keyId);
    return key?.revoked_at === null ? key : null;
  });
}

/** Register the routes in the gateway's /v1 context. */
export function accountReadRoutes(v1: FastifyInstance, ctx: AccountReadsContext): void {
  // Neither protocol's routes: the caller's SDK picks the shape of their errors, the 401 included.
  const opts = { config: { protocolOf: protocolOfCaller }, onRequest: ctx.authenticate };
  v1.get('/calls/:id', opts, retrieveCall(ctx.admission, ctx.redis));
  v1.get('/balance', opts, retrieveBalance(ctx.admission, ctx.redis));
  v1.get('/key', opts, retrieveKey(ctx.admission, ctx.redis));
}
