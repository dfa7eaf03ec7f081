#!/usr/bin/env node
// The `farebox` command: runs the compiled CLI (npm run build, done by npm ci / npm install). npm ci links it as
// node_modules/.bin/farebox (bin/link-self.js).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = new URL('../dist/bin/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('farebox: not built yet; run `npm run build` in the checkout\n');
  process.exit(1);
}
const { run } = await import(cli.href);
// run() lets the output drain before the process ends: no process.exit() here.
await run(process.argv.slice(2));
