/** Ports for servers a test starts in another process: never the fixed ones (8080, 8545-8548, 9464). */
import { createServer } from 'node:net';

/**
 * An ephemeral port on 127.0.0.1 that was free a moment ago: bound, read, released. Another process may take it
 * before the child binds it; the child then fails to start and says so.
 */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}
