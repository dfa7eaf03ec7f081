#!/usr/bin/env node
// Links this checkout's own command as node_modules/.bin/farebox (the documented way to run it in a checkout: that
// folder on PATH, README "The `farebox` command") and the package as node_modules/farebox. npm 11's `npx farebox`
// does not use them in the checkout: it installs a copy into its npx cache. Run by `npm run prepare` (npm ci / install).
import { chmodSync, existsSync, lstatSync, mkdirSync, symlinkSync, unlinkSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const bin = fileURLToPath(new URL('../node_modules/.bin/', import.meta.url));
if (existsSync(fileURLToPath(new URL('../node_modules/', import.meta.url)))) {
  mkdirSync(bin, { recursive: true });
  const link = `${bin}farebox`;
  try {
    if (lstatSync(link)) unlinkSync(link);
  } catch {
    // not there yet
  }
  symlinkSync('../../bin/farebox.js', link);
  const self = fileURLToPath(new URL('../node_modules/farebox', import.meta.url));
  try {
    if (lstatSync(self)) unlinkSync(self);
  } catch {
    // not there yet
  }
  symlinkSync('..', self);
  chmodSync(fileURLToPath(new URL('./farebox.js', import.meta.url)), 0o755);
}
