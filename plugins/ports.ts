/**
 * The fixed ports a gateway opens (its API, its metrics, the embedded default's dev chains): a port taken is one line
 * naming what the port is for and the variable or option that moves it, not node's bare `listen EADDRINUSE`.
 */
import { createServer } from 'node:net';

/** What a port is for and what moves it, for the message of a port taken. */
export interface PortUse {
  /** What listens there: "the gateway's API". */
  purpose: string;
  /** The variable or option that moves it: "PORT (config server.port)". */
  movedBy: string;
}

/** The gateway's API port (serve: PORT over the config's server.port). */
export const API_PORT: PortUse = { purpose: "the gateway's API", movedBy: 'PORT (config server.port)' };
/** The metrics port of its own (METRICS_PORT over the config's metrics.port). */
export const METRICS_PORT_USE: PortUse = {
  purpose: 'Prometheus metrics',
  movedBy: 'METRICS_PORT (config metrics.port)',
};
/** The embedded default's four dev chains (FAREBOX_DEV_CHAIN_PORT, the first of four; 8545 unless set). */
export const DEV_CHAIN_PORTS: PortUse = {
  purpose: 'dev chain JSON-RPC, chain_a..chain_d on four ports in a row',
  movedBy: "FAREBOX_DEV_CHAIN_PORT (chain_a's; the others take the next three)",
};

/** `err` if it is not a port taken; else the one-line error saying which port, what for, and what moves it. */
export function portInUse(err: unknown, use: PortUse): unknown {
  const e = err as (NodeJS.ErrnoException & { port?: number; address?: string }) | null;
  if (e?.code !== 'EADDRINUSE') return err;
  const where = e.address ? `${e.address}:${e.port}` : `port ${e.port}`;
  return Object.assign(
    new Error(`${where} is in use (${use.purpose}): set ${use.movedBy} to a free port, or 0 for any`),
    { code: 'EADDRINUSE', port: e.port, cause: err },
  );
}

/** Resolve if `host:port` can be bound now (0: always); else reject as portInUse. Binds and releases it at once. */
export async function checkPortFree(host: string, port: number, use: PortUse): Promise<void> {
  if (port === 0) return;
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen({ port, host, exclusive: true }, () => resolve());
    });
  } catch (err) {
    throw portInUse(err, use);
  }
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}
