#!/usr/bin/env node
// Makes `npx farebox ...` run this checkout's own command: npm exec looks the package up in node_modules and its
// bin in node_modules/.bin, and links neither for the package itself. Run by `npm run prepare` (npm ci / install).
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
