/**
 * The dashboard's two static files, served by the plugin itself: the stylesheet and the browser script. The script
 * is TypeScript (browser/dashboard-client.ts); the build compiles it beside this module, and a checkout run from
 * source (tsx) transpiles it once at start with the TypeScript compiler it has as a dev dependency.
 */
import { hash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { STYLES } from './styles.js';

/** The stylesheet and the script, with a version for their URLs (they are cached for a year). */
export interface Assets {
  css: string;
  js: string;
  version: string;
}

async function browserScript(): Promise<string> {
  try {
    const built = await readFile(new URL('./browser/dashboard-client.js', import.meta.url), 'utf8');
    return built.replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const source = await readFile(new URL('./browser/dashboard-client.ts', import.meta.url), 'utf8');
  const { default: ts } = await import('typescript');
  return ts.transpileModule(source, {
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  }).outputText;
}

let loaded: Promise<Assets> | undefined;

/** The assets, read (and transpiled when run from source) once per process. */
export function loadAssets(): Promise<Assets> {
  loaded ??= (async () => {
    const js = await browserScript();
    return { css: STYLES, js, version: hash('sha256', STYLES + js, 'hex').slice(0, 12) };
  })();
  loaded.catch(() => {
    loaded = undefined;
  });
  return loaded;
}
