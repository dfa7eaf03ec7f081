/** Test helpers for what runs in the background: waiting for a condition, running the CLI. */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Poll `check` until it returns a truthy value (settlement and the watcher run in the background). */
export async function until<T>(
  what: string,
  check: () => Promise<T | false | null | undefined>,
  ms = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

const root = fileURLToPath(new URL('../../', import.meta.url));

/** The newest modification time of the TypeScript files under `dir` (0 when there are none). */
function newestSource(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (e.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/** The sources the build compiles (tsconfig.build.json, and contracts/ it imports). */
const SOURCES = ['bin', 'contracts', 'plugins', 'policies', 'pricing'];

/**
 * Whether `file` (under the checkout) was compiled after every TypeScript file under `dirs` was last changed: a
 * compiled file runs the same code as its source and starts in a fraction of the time, and one older than a source
 * edited since must not stand in for it.
 */
export function builtAfterSources(file: string, dirs: readonly string[] = SOURCES): boolean {
  const built = join(root, file);
  return existsSync(built) && statSync(built).mtimeMs >= Math.max(...dirs.map((d) => newestSource(join(root, d))));
}

/**
 * The node arguments that run the farebox command: the compiled dist/bin/cli.js when it is built after every source
 * (npm ci builds it), else bin/cli.ts through tsx. The compiled one spares each run the compiling of the sources.
 */
export const CLI: readonly string[] = builtAfterSources('dist/bin/cli.js')
  ? [join(root, 'dist/bin/cli.js')]
  : ['--import', 'tsx', join(root, 'bin/cli.ts')];

/** Run the farebox command (CLI: built, or from source) with `env` over the test's environment. */
export function runCli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...CLI, ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

/**
 * Run the farebox command's main() in this process, from source, with `env` over the test's environment: its exit
 * code, and its output as the process prints it (a line per message). What only a process shows (the code as the
 * exit status, output drained into a pipe) is for runCli; this spares a Node start per command.
 */
export async function cliHere(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const { main } = await import('../../bin/cli.js');
  let stdout = '';
  let stderr = '';
  const code = await main(
    args,
    { ...process.env, ...env },
    (s) => void (stdout += `${s}\n`),
    (s) => void (stderr += `${s}\n`),
  );
  return { code, stdout, stderr };
}

/** The error `p` rejects with (an SDK's typed error: status, error body, headers); throws when it resolves. */
export async function rejection(p: Promise<unknown>): Promise<Error & Record<string, any>> {
  try {
    await p;
  } catch (err) {
    return err as Error & Record<string, any>;
  }
  throw new Error('expected a rejection');
}
