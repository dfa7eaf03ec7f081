/**
 * The benchmark's server processes: each pinned to a core with taskset, given an IPC channel so that it exits
 * when the benchmark goes away (even on SIGKILL: the channel closes) and can report its heap after a GC.
 * Memory and CPU are read from /proc/<pid>.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';

/**
 * Preloaded in every child (`--import data:`): answer {type:'mem'} with memoryUsage() at rest, and exit when the
 * parent's channel closes. Plain JS so it also runs inside the peer gateway's own script.
 * At rest: full GCs 100 ms apart until RSS falls by less than 0.5 MiB (at most 6). One GC right after load leaves
 * old-space pages of dead objects committed (measured: 36.2 MiB after one GC, 31.2 after the second, 30.7 after the
 * third, with 26.7 MiB live), and V8 returns freed pages to the OS after its GC, so one GC read a sawtooth's phase.
 */
const PROBE =
  'data:text/javascript,' +
  encodeURIComponent(
    "process.on('message',async(m)=>{if(m&&m.type==='mem'){let u=process.memoryUsage(),gcs=0;" +
      'for(let last=Infinity;gcs<6&&last-u.rss>=524288;gcs++){last=u.rss;globalThis.gc?.();await new Promise((r)=>setTimeout(r,100));u=process.memoryUsage();}' +
      "process.send({type:'mem',...u,gcs});}});" +
      "process.on('disconnect',()=>process.kill(process.pid,'SIGTERM'));",
  );

/** A running child server. */
export interface Child {
  name: string;
  pid: number;
  proc: ChildProcess;
  /** Last lines of stdout+stderr, for error messages. */
  tail: string[];
}

const children = new Set<Child>();

/** Spawn `node [nodeArgs] script [args]` pinned to `cores` (a core, or a taskset list such as "0-1"). */
export function spawnNode(
  name: string,
  cores: number | string,
  nodeArgs: string[],
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Child {
  const proc = spawn(
    'taskset',
    ['-c', String(cores), process.execPath, '--expose-gc', `--import=${PROBE}`, ...nodeArgs, script, ...args],
    {
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      env,
    },
  );
  if (proc.pid === undefined) throw new Error(`${name}: spawn failed`);
  const child: Child = { name, pid: proc.pid, proc, tail: [] };
  const keep = (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) child.tail.push(line.slice(0, 500));
    if (child.tail.length > 40) child.tail.splice(0, child.tail.length - 40);
  };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  children.add(child);
  proc.once('exit', () => children.delete(child));
  return child;
}

function exited(child: Child, timeoutMs: number): Promise<boolean> {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.proc.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** Wait for the child's first stdout line that is JSON with a `url`. */
export function readyUrl(child: Child, timeoutMs = 30_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => fail(new Error(`${child.name}: not ready after ${timeoutMs} ms`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      buf += chunk.toString('utf8');
      for (const line of buf.split('\n').slice(0, -1)) {
        try {
          const msg = JSON.parse(line) as { url?: string };
          if (typeof msg.url === 'string') return done(msg.url);
        } catch {
          // not our line
        }
      }
    };
    const onExit = () => fail(new Error(`${child.name} exited before it was ready:\n${child.tail.join('\n')}`));
    const cleanup = () => {
      clearTimeout(timer);
      child.proc.stdout!.off('data', onData);
      child.proc.off('exit', onExit);
    };
    const done = (url: string) => {
      cleanup();
      resolve(url);
    };
    const fail = (err: Error) => {
      cleanup();
      reject(err);
    };
    child.proc.stdout!.on('data', onData);
    child.proc.once('exit', onExit);
  });
}

/** Wait until a TCP connection to 127.0.0.1:port is accepted. */
export async function waitForPort(child: Child, port: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.proc.exitCode !== null)
      throw new Error(`${child.name} exited before it was ready:\n${child.tail.join('\n')}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${child.name}: port ${port} not open after ${timeoutMs} ms`);
}

/** A port free right now on 127.0.0.1. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/** Stop one child: SIGTERM, then SIGKILL after `graceMs`. */
export async function stopChild(child: Child, graceMs = 5000): Promise<void> {
  if (child.proc.exitCode !== null || child.proc.signalCode !== null) return;
  child.proc.kill('SIGTERM');
  if (!(await exited(child, graceMs))) {
    child.proc.kill('SIGKILL');
    await exited(child, 2000);
  }
}

/** Stop every child still running. */
export async function stopAll(): Promise<void> {
  await Promise.all([...children].map((c) => stopChild(c)));
}

/** Last resort on process exit (synchronous): SIGKILL whatever is left. */
export function killAllNow(): void {
  for (const c of children) {
    try {
      c.proc.kill('SIGKILL');
    } catch {
      // gone already
    }
  }
}

/** VmRSS and VmHWM (peak) of a process, in KiB. */
export function memOf(pid: number): { rssKiB: number; hwmKiB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
  return { rssKiB: field('VmRSS'), hwmKiB: field('VmHWM') };
}

/** Reset a process's VmHWM to its current RSS (proc(5), clear_refs "5"), so a peak is read for one span only. */
export function resetPeakRss(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

const TICKS_PER_S = 100; // USER_HZ on Linux (getconf CLK_TCK)

/** CPU time (user + system) of a process and its threads, in ms (proc(5), /proc/<pid>/stat fields 14 and 15). */
export function cpuMsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name may hold spaces: fields are counted after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS_PER_S;
}

/**
 * Busy time of one core since boot, in ms: user, nice, system, irq, softirq and steal of its line in /proc/stat
 * (proc(5)); steal is time the hypervisor gave to another guest.
 */
export function coreBusyMsOf(core: number): number {
  const line = readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`cpu${core} `));
  if (!line) throw new Error(`/proc/stat has no line for cpu${core}`);
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  return ((user! + nice! + system! + irq! + softirq! + (steal ?? 0)) * 1000) / TICKS_PER_S;
}

/**
 * Time the main thread of `pid` spent runnable but waiting for a core, in ms: how much other processes held
 * it back (proc(5) and the kernel's sched-stats doc: /proc/<pid>/schedstat, second field, ns).
 */
export function runWaitMsOf(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[1]) / 1e6;
}

/** Send `message` over the child's IPC channel and wait for the reply of type `replyType`. */
export function ask<T>(
  child: Child,
  message: { type: string } & Record<string, unknown>,
  replyType: string,
  timeoutMs = 10_000,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.proc.off('message', onMessage);
      reject(new Error(`${child.name}: no ${replyType} reply within ${timeoutMs} ms`));
    }, timeoutMs);
    const onMessage = (m: unknown) => {
      if ((m as { type?: string } | null)?.type !== replyType) return;
      clearTimeout(timer);
      child.proc.off('message', onMessage);
      resolve(m as T);
    };
    child.proc.on('message', onMessage);
    child.proc.send(message);
  });
}

/** The child's heap and RSS at rest, after full GCs until RSS stops falling (the preloaded probe), in bytes. */
export function memAfterGc(child: Child): Promise<NodeJS.MemoryUsage & { gcs: number }> {
  return ask<NodeJS.MemoryUsage & { gcs: number }>(child, { type: 'mem' }, 'mem');
}

/** Pin this process (all its threads) to `core`. */
export function pinSelf(core: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('taskset', ['-a', '-cp', String(core), String(process.pid)], { stdio: 'ignore' });
    p.once('error', reject);
    p.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`taskset exited ${code}`))));
  });
}

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.once('error', reject);
    p.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} exited ${code}`))));
  });
}

/** The pid of the Redis server behind `redisUrl` when it listens on this machine, else null. */
export async function localRedisPid(redisUrl: string): Promise<number | null> {
  const u = new URL(redisUrl);
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname)) return null;
  const listening = await run('ss', ['-ltnpH', `sport = :${u.port || '6379'}`]);
  const pid = /pid=(\d+)/.exec(listening)?.[1];
  return pid ? Number(pid) : null;
}

/**
 * Pin the Redis server behind `redisUrl` (all its threads) to `core` when it runs on this machine, so it does not
 * take the measured server's core; resolves with a function that puts its old CPU mask back, or with null when
 * Redis is elsewhere or cannot be pinned (the report then says so).
 */
export async function pinLocalRedis(redisUrl: string, core: number): Promise<(() => Promise<void>) | null> {
  try {
    const pid = await localRedisPid(redisUrl);
    if (pid === null) return null;
    const mask = /affinity mask: ([0-9a-f]+)/.exec(await run('taskset', ['-p', String(pid)]))?.[1];
    if (!mask) return null;
    await run('taskset', ['-a', '-cp', String(core), String(pid)]);
    return async () => {
      await run('taskset', ['-a', '-p', mask, String(pid)]).catch(() => {});
    };
  } catch {
    return null;
  }
}
