/**
 * The soak's own Redis: a `redis-server` on a port of its own with AOF on every write (as deploy/redis.conf runs it
 * in production), in a temporary folder, so that stopping it and starting it again on the same port and folder keeps
 * its data as a production restart does. The shared Redis on 6379 is never touched.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createConnection, createServer } from 'node:net';

/** A private Redis that can be stopped and started again on the same port and data folder. */
export interface PrivateRedis {
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  /** The server's pid while it runs, else null. */
  pid(): number | null;
  /** SIGTERM (Redis writes its AOF and exits), and wait for the exit. */
  stop(): Promise<void>;
  /** Start it again on the same port and folder; resolves once it answers PING. */
  start(): Promise<void>;
  /** Stop it for good (the folder is the caller's). */
  close(): Promise<void>;
}

/** A port below Linux's ephemeral range (32768..), free now: outgoing connections never hold it while Redis is away. */
async function quietPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error('no free port for the private Redis');
}

/** Whether Redis on `port` answers PING. */
function pings(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection(port, '127.0.0.1');
    const done = (ok: boolean) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1_000, () => done(false));
    s.once('error', () => done(false));
    s.once('connect', () => s.write('PING\r\n'));
    s.once('data', (d) => done(d.toString().startsWith('+PONG')));
  });
}

/** Start a private Redis with AOF (appendfsync always) in `dir`. */
export async function startPrivateRedis(dir: string): Promise<PrivateRedis> {
  const port = await quietPort();
  let proc: ChildProcess | undefined;
  const tail: string[] = [];
  const start = async () => {
    // setpriv --pdeathsig: the server dies with this process, even when it is killed.
    const p = spawn(
      'setpriv',
      [
        '--pdeathsig',
        'KILL',
        'redis-server',
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
        '--save',
        '',
        '--daemonize',
        'no',
        '--loglevel',
        'warning',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    for (const s of [p.stdout!, p.stderr!]) {
      s.on('data', (d: Buffer) => {
        tail.push(...d.toString().split('\n').filter(Boolean));
        tail.splice(0, Math.max(0, tail.length - 20));
      });
    }
    proc = p;
    for (let i = 0; i < 300; i++) {
      if (p.exitCode !== null) throw new Error(`redis-server exited ${p.exitCode}:\n${tail.join('\n')}`);
      if (await pings(port)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`redis-server on ${port} did not answer in 30 s:\n${tail.join('\n')}`);
  };
  const stop = async () => {
    const p = proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  await start();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    pid: () => (proc && proc.exitCode === null && proc.signalCode === null ? (proc.pid ?? null) : null),
    stop,
    start,
    close: stop,
  };
}
