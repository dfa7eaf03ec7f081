// The built gateway on another Node line: `farebox serve` (the embedded default) run by the Node binary named in
// FAREBOX_SMOKE_NODE, driven from this process with the official SDKs: a text call, a stream, an image, a video and
// their settlement onchain. `.ci/run` runs it once per supported LTS line other than the one `npm test` ran on;
// without FAREBOX_SMOKE_NODE (`npm test`) it is skipped.
import t, { type Test } from 'tap';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { listUsage } from '../plugins/billing/call-records.js';
import type { Address } from '../plugins/chains/config.js';
import { connectRedis } from '../plugins/store/redis.js';
import { dropPrefix, testPrefix } from './helpers/harness.js';
import { builtAfterSources, until } from './helpers/wait.js';
import { freePort } from './helpers/ports.js';

const NODE = process.env.FAREBOX_SMOKE_NODE;
if (!NODE) {
  t.pass('FAREBOX_SMOKE_NODE unset: no other Node line to try (.ci/run sets it)');
} else {
  t.test(`farebox serve on ${NODE}`, (t) => smoke(t, NODE));
}

async function smoke(t: Test, node: string): Promise<void> {
  const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  t.comment(`farebox serve on Node ${version} (${node})`);
  t.ok(builtAfterSources('dist/bin/cli.js'), 'dist/ is built from these sources (npm ci builds it)');
  const prefix = testPrefix();
  const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const redis = connectRedis({ url: REDIS_URL, prefix });
  const port = await freePort();
  const root = fileURLToPath(new URL('../', import.meta.url));
  const child: ChildProcess = spawn(node, [join(root, 'bin/farebox.js'), 'serve'], {
    env: {
      ...process.env,
      // The test process's loader hooks are this Node's, not the other's.
      NODE_OPTIONS: '',
      FAREBOX_CONFIG: '',
      FAREBOX_REDIS_PREFIX: prefix,
      REDIS_URL,
      HOST: '127.0.0.1',
      PORT: String(port),
      FAREBOX_DEV_CHAIN_PORT: '0',
      METRICS_PORT: '0',
      LOG_LEVEL: 'warn',
    },
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  process.on('exit', () => child.kill('SIGKILL'));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
    await dropPrefix(redis, prefix);
    await redis.quit();
  });

  const greeting = await until(
    'the greeting',
    async () => {
      if (child.exitCode !== null) throw new Error(`serve exited (${child.exitCode}):\n${stdout}\n${stderr}`);
      return /Dashboard/.test(stdout) && /export FAREBOX_KEY=(sk_[A-Za-z0-9_-]+)/.exec(stdout);
    },
    120_000,
  );
  const key = greeting[1]!;
  const account = /Demo account (0x[0-9a-f]{40})/.exec(stdout)?.[1] as Address;
  t.ok(account, 'the demo account named');
  const url = `http://127.0.0.1:${port}`;
  const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });

  const chat = await openai.chat.completions.create({
    model: 'gamma-k3',
    messages: [{ role: 'user', content: 'hello #sim:tokens=12' }],
  });
  t.equal(chat.object, 'chat.completion', 'a text call');
  t.equal(chat.usage?.completion_tokens, 12);

  let text = '';
  const stream = anthropic.messages.stream({
    model: 'alpha-sonnet-4-6',
    max_tokens: 100,
    messages: [{ role: 'user', content: 'stream #sim:tokens=20' }],
  });
  stream.on('text', (d) => (text += d));
  const message = await stream.finalMessage();
  t.equal(message.usage.output_tokens, 20, 'a stream');
  t.ok(text.length > 0);

  const image = await openai.images.generate({ model: 'img-pro', prompt: 'a lighthouse' } as never);
  const png = Buffer.from(image.data![0]!.b64_json!, 'base64');
  t.equal(png.subarray(1, 4).toString(), 'PNG', 'an image');

  const video = await openai.videos.create({ model: 'vidA-v6', prompt: 'waves #sim:render_ms=300', seconds: '4' });
  const done = await until(
    'the video',
    async () => {
      const v = await openai.videos.retrieve(video.id);
      if (v.status === 'failed') throw new Error(`the video failed: ${JSON.stringify(v.error)}`);
      return v.status === 'completed' && v;
    },
    60_000,
    200,
  );
  t.equal(done.status, 'completed', 'a video');
  const mp4 = Buffer.from(await (await openai.videos.downloadContent(video.id)).arrayBuffer());
  t.equal(mp4.subarray(4, 8).toString(), 'ftyp', 'its MP4');

  // Every call charged onchain: settled records, each with its transaction.
  const records = await until(
    'settlement',
    async () => {
      const rs = await listUsage(redis, account);
      return rs.length >= 4 && rs.every((r) => r.status === 'settled') && rs;
    },
    90_000,
    200,
  );
  t.equal(records.length, 4, 'four calls');
  for (const r of records) t.match(r.tx, /^0x[0-9a-f]{64}$/, `${r.model} settled onchain`);
}
