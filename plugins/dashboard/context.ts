/**
 * What every dashboard route reads, built once at registration and never written by a request: the Redis
 * connection, the settings, the path prefix, the static assets, the allowed origins and the chains.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { Redis } from 'ioredis';
import type { ChainsConfig } from '../chains/config.js';
import type { Assets } from './assets.js';
import { page, type PageInput } from './layout.js';
import type { DashboardSettings } from './options.js';

/** The dashboard as its routes see it. */
export interface Dashboard {
  redis: Redis;
  settings: DashboardSettings;
  /** Path prefix of the plugin ('' at the root). */
  base: string;
  assets: Assets;
  /** Origins the dashboard answers for: the configured ones, else those of the address the server listens on. */
  origins(): readonly string[];
  /** The four chains, or undefined while the embedded default has not published them. */
  chains(): Promise<ChainsConfig | undefined>;
  /** Send a page (HTML, never cached: pages show the account's data and its CSRF token). */
  render(reply: FastifyReply, input: Omit<PageInput, 'base' | 'assets'>, status?: number): FastifyReply;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', '0.0.0.0', '::']);

/** Origins of a server's listening address: loopback (or any address) as both 127.0.0.1 and localhost. */
export function listeningOrigins(app: FastifyInstance): string[] {
  const a = app.server.address();
  if (!a || typeof a !== 'object') return [];
  if (LOOPBACK.has(a.address)) return [`http://127.0.0.1:${a.port}`, `http://localhost:${a.port}`];
  return [`http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`];
}

/** Build the Dashboard of one registration. */
export function createDashboard(
  app: FastifyInstance,
  redis: Redis,
  settings: DashboardSettings,
  base: string,
  assets: Assets,
): Dashboard {
  let derived: string[] | undefined;
  const cssUrl = `${base}/assets/dashboard.css?v=${assets.version}`;
  const jsUrl = `${base}/assets/dashboard.js?v=${assets.version}`;
  return {
    redis,
    settings,
    base,
    assets,
    origins() {
      if (settings.origins) return settings.origins;
      // Known once the server listens; until then (inject() in tests) there is no origin to trust.
      if (!derived?.length) derived = listeningOrigins(app);
      return derived;
    },
    chains: () => settings.chains(redis),
    render(reply, input, status = 200) {
      return reply
        .code(status)
        .header('content-type', 'text/html; charset=utf-8')
        .header('cache-control', 'no-store')
        .send(page({ ...input, base, assets: { css: cssUrl, js: jsUrl } }));
    },
  };
}
