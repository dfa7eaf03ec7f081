/** What the dashboard serves without a session: the live prices (page and JSON) and its two static files. */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { publishPrices } from '../../../pricing/index.js';
import type { Dashboard } from '../context.js';
import { sessionOf, viewerOf } from '../guard.js';
import { pricesBody } from '../pages/prices.js';

/** GET /prices: public; the frame shows the account when a session is there. */
export async function pricesPage(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await sessionOf(d, request);
  return d.render(reply, {
    title: 'Prices',
    active: 'prices',
    viewer: session ? await viewerOf(d, session) : null,
    body: pricesBody({ base: d.base, doc: publishPrices(d.settings.prices), table: d.settings.prices }),
  });
}

/** GET /prices.json: the `farebox prices --json` document. */
export async function pricesJson(d: Dashboard, _request: FastifyRequest, reply: FastifyReply) {
  return reply.header('cache-control', 'public, max-age=60').send(publishPrices(d.settings.prices));
}

// Asset URLs carry their content's hash (?v=): a changed file has a new URL, so a year of caching is safe.
const IMMUTABLE = 'public, max-age=31536000, immutable';

/** GET /assets/dashboard.css */
export async function stylesheet(d: Dashboard, _request: FastifyRequest, reply: FastifyReply) {
  return reply.header('content-type', 'text/css; charset=utf-8').header('cache-control', IMMUTABLE).send(d.assets.css);
}

/** GET /assets/dashboard.js */
export async function script(d: Dashboard, _request: FastifyRequest, reply: FastifyReply) {
  return reply
    .header('content-type', 'text/javascript; charset=utf-8')
    .header('cache-control', IMMUTABLE)
    .send(d.assets.js);
}
