// The README's video example, run as pasted (against a gateway on the embedded default's models and dev chains):
// the clip completes, downloads as an MP4 of the size and length asked, and is charged the published price.
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { listUsage } from '../../plugins/billing/call-records.js';
import { parseUsd, publishPrices } from '../../pricing/index.js';
import { closeDevChains } from '../helpers/harness.js';
import { probe } from '../helpers/media.js';
import { until } from '../helpers/wait.js';
import { videoHarness } from './helpers.js';

const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf('## Videos'));
const snippet = /node --input-type=module -e "\n([\s\S]*?)\n"\n```/.exec(section)?.[1];

t.test('the README example completes, downloads the MP4 and is charged the published price', async (t) => {
  t.ok(snippet, 'the Videos section has its example');
  const h = await videoHarness({ chains: true, renderMs: 500 });
  const dir = await mkdtemp(join(tmpdir(), 'farebox-readme-'));
  t.teardown(async () => {
    await h.close();
    await closeDevChains();
    await rm(dir, { recursive: true, force: true });
  });
  await h.fund('chain_a', 10_000_000n);
  // Only where it runs changes: this gateway's address, and the clip written to a temporary folder.
  const code = snippet!
    .replace('http://127.0.0.1:8080/v1', `${h.url}/v1`)
    .replace("'clip.mp4'", JSON.stringify(join(dir, 'clip.mp4')));
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', code], {
    env: { ...process.env, FAREBOX_KEY: h.key },
    timeout: 60_000,
  });
  t.match(stdout, /^video_[0-9a-f]{32} completed/);
  const clip = await probe(await readFile(join(dir, 'clip.mp4')));
  t.same([clip.codec, clip.width, clip.height, Math.round(clip.duration)], ['h264', 1280, 720, 8]);
  const [record] = await until('the clip charged', async () => {
    const r = await listUsage(h.redis, h.account);
    return r.length && r[0]!.status !== 'held' ? r : null;
  });
  t.equal(
    parseUsd(record!.price),
    parseUsd(publishPrices(h.config.prices).video['vidA-v6']!['8']!),
    'the published price of an 8 s vidA-v6 clip',
  );
  t.same([record!.model, record!.usage.video_seconds], ['vidA-v6', 8]);
});
