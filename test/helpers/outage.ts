/** A TCP relay to Redis that can be taken down and brought back, for Redis outages seen by one client only. */
import net from 'node:net';

/** A relay's controls. */
export interface OutageRelay {
  /** redis://127.0.0.1:<port> of the relay, under the target's path and credentials. */
  readonly url: string;
  /** Cut every connection and refuse new ones, as a Redis that went away. */
  down(): void;
  /** Accept connections again. */
  up(): void;
  close(): Promise<void>;
}

/** Start a relay to `target` (REDIS_URL by default). */
export async function outageRelay(
  target = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'),
): Promise<OutageRelay> {
  const sockets = new Set<net.Socket>();
  let isDown = false;
  const server = net.createServer((client) => {
    if (isDown) {
      client.destroy();
      return;
    }
    const upstream = net.connect(Number(target.port || 6379), target.hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    for (const s of [client, upstream]) {
      s.on('error', () => {});
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    down() {
      isDown = true;
      for (const s of sockets) s.destroy();
    },
    up() {
      isDown = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
