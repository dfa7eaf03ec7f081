// The README's SDK example ("Two commands"), run as pasted against a gateway on the embedded default's models, billed
// on dev chains: chat, a streamed message, an image generated and then edited, each charged once.
import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import sharp from 'sharp';
import { listUsage } from '../plugins/billing/call-records.js';
import { parseUsd, publishPrices } from '../pricing/index.js';
import { closeDevChains, startHarness } from './helpers/harness.js';
import { until } from './helpers/wait.js';

const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8');
const section = readme.slice(readme.indexOf('With the official SDKs'));
const snippet = /node --input-type=module -e "\n([\s\S]*?)\n"\n```/.exec(section)?.[1];

t.test(
  'the README SDK example runs as pasted: text, a stream, an image and its edit, each charged its price',
  async (t) => {
    t.ok(snippet, 'the README has its SDK example');
    const h = await startHarness({ chains: true });
    const dir = await mkdtemp(join(tmpdir(), 'farebox-readme-'));
    t.teardown(async () => {
      await h.close();
      await closeDevChains();
      await rm(dir, { recursive: true, force: true });
    });
    await h.fund('chain_a', 10_000_000n);
    // Only where it runs changes: this gateway's address, and the images written to a temporary folder.
    const code = snippet!
      .replaceAll('http://127.0.0.1:8080', h.url)
      .replaceAll("'lighthouse.png'", JSON.stringify(join(dir, 'lighthouse.png')))
      .replaceAll("'night.png'", JSON.stringify(join(dir, 'night.png')));
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', code], {
      env: { ...process.env, FAREBOX_KEY: h.key },
      timeout: 60_000,
    });
    t.equal(stdout.trim().split('\n').length, 2, 'the chat answer and the streamed message, a line each');

    const lighthouse = await sharp(join(dir, 'lighthouse.png')).metadata();
    t.same([lighthouse.format, lighthouse.width, lighthouse.height], ['png', 2752, 1536], 'img-pro at 2K, 16:9');
    const night = await sharp(join(dir, 'night.png')).metadata();
    t.same([night.format, night.width, night.height], ['png', 1024, 1024], 'img-2 at its default 1K, 1:1');
    const edited = h.sim.images.received.at(-1)!.images;
    t.same(
      edited.map((i) => [i.format, i.width, i.height]),
      [['png', 2752, 1536]],
      'the edit sent the generated image',
    );

    const records = await until('all four calls debited', async () => {
      const r = await listUsage(h.redis, h.account);
      return r.length === 4 && r.every((x) => x.status !== 'held') ? r : null;
    });
    const published = publishPrices(h.config.prices).image;
    const byModel = new Map(records.map((r) => [r.model, r]));
    t.equal(
      parseUsd(byModel.get('img-pro')!.price),
      parseUsd(published['img-pro']!['2K']),
      'img-pro: the published 2K price',
    );
    t.equal(
      parseUsd(byModel.get('img-2')!.price),
      parseUsd(published['img-2']!['1K']),
      'img-2: the published 1K price',
    );
    for (const r of records) t.ok(parseUsd(r.price) > 0n, `${r.model} charged`);
    t.same(records.map((r) => r.model).sort(), ['alpha-sonnet-4-6', 'beta-5.6-sol', 'img-2', 'img-pro']);
  },
);

t.test(
  'the README price example runs as pasted: each price it prints is its debit, and the balance is after them',
  async (t) => {
    const part = readme.slice(readme.indexOf('A caller reads the price of each call, its receipt and its balance'));
    const code = /node --input-type=module -e "\n([\s\S]*?)\n"\n```/.exec(part)?.[1];
    t.ok(code, 'the README has its price example');
    const h = await startHarness({ chains: true });
    t.teardown(async () => {
      await h.close();
      await closeDevChains();
    });
    await h.fund('chain_a', 10_000_000n);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--input-type=module', '-e', code!.replaceAll('http://127.0.0.1:8080', h.url)],
      { env: { ...process.env, FAREBOX_KEY: h.key }, timeout: 60_000 },
    );
    const lines = stdout.trim().split('\n');
    t.equal(lines.length, 5, stdout);
    const [price, id] = /^price (\d+\.\d{6}) (req_[0-9a-f]{32})$/.exec(lines[0]!)!.slice(1);
    t.match(lines[1], new RegExp(`^receipt (held null|pending ${price}|settled ${price})$`), 'the receipt');
    const stream = /^stream (\d+\.\d{6})$/.exec(lines[2]!)![1]!;
    const message = /^message (\d+\.\d{6})$/.exec(lines[3]!)![1]!;
    const available = /^available (\d+\.\d{6})$/.exec(lines[4]!)![1]!;
    const records = await until('the three calls debited', async () => {
      const r = await listUsage(h.redis, h.account);
      return r.length === 3 && r.every((x) => x.status !== 'held') ? r : null;
    });
    // A record names its call by the request id its answer carried.
    t.equal(records.find((r) => r.call_id === id)?.price, price, 'the JSON answer: x-gw-price is its debit');
    const streamed = records.filter((r) => r.call_id !== id).map((r) => [r.model, r.price]);
    t.same(
      streamed.sort(),
      [
        ['alpha-haiku-4-5', message],
        ['gamma-k3', stream],
      ],
      'the streams: usage.cost is their debit',
    );
    const spent = [price!, stream, message].reduce((a, p) => a + parseUsd(p), 0n);
    t.equal(parseUsd(available), 10_000_000n - spent, 'the balance after the three');
  },
);
