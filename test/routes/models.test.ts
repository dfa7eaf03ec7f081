// GET /v1/models and GET /v1/models/{id} through the official SDKs: every served model in the config's order, in
// OpenAI's shape or, with anthropic-version, Anthropic's paged one; each with its endpoints, limits and the prices
// `farebox prices --json` prints; a key required; an unknown id a 404 in the caller's shape.
import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { ConfigInput } from '../../plugins/config.js';
import { parseUsd } from '../../pricing/index.js';
import { startHarness } from '../helpers/harness.js';
import { cliHere, rejection } from '../helpers/wait.js';

// Two prices of the operator's own: a 5-minute cache write of an input of 0.000001 is 0.00000125, which 6 decimals
// cannot hold. alpha-haiku-4-5 without a chat provider: the Anthropic protocol serves it on the messages endpoints only.
let input: ConfigInput | undefined;
const h = await startHarness({
  edit: (cfg) => {
    cfg.prices = {
      text: { 'gamma-q3': { input: '0.000001', cache_read: '0.000001' } },
      image: { 'img-2': { '4K': '0.1234' } },
    };
    for (const m of cfg.models as { id: string; chat_provider?: string }[])
      if (m.id === 'alpha-haiku-4-5') delete m.chat_provider;
    input = cfg;
  },
});
const dir = mkdtempSync(join(tmpdir(), 'farebox-models-'));
t.teardown(async () => {
  await h.close();
  rmSync(dir, { recursive: true, force: true });
});

const ids = h.config.models.map((m) => m.id);
const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });

interface Farebox {
  kind: string;
  endpoints: string[];
  context_window?: number;
  max_output_tokens?: number;
  pricing: Record<string, string>;
}
const fareboxOf = (m: object) => (m as { farebox: Farebox }).farebox;

/** A USD decimal as 1e-8 USD units: enough for any published rate (a 5-minute write of 6 decimals needs 8). */
function units(s: string): bigint {
  const m = /^(\d+)\.(\d{6,8})$/.exec(s);
  if (m === null) throw new Error(`not a USD rate of 6 to 8 decimals: ${s}`);
  // More than 6 decimals only where the exact value needs them: never a trailing zero past the sixth.
  if (m[2]!.length > 6 && m[2]!.endsWith('0')) throw new Error(`needless decimals: ${s}`);
  return BigInt(m[1]!) * 100_000_000n + BigInt(m[2]!.padEnd(8, '0'));
}

t.test('openai models.list(): every served model in the config order, OpenAI fields, a request id', async (t) => {
  const { data: page, response } = await openai.models.list().withResponse();
  t.match(response.headers.get('x-request-id'), /^req_[0-9a-f]{32}$/);
  t.same(
    page.data.map((m) => m.id),
    ids,
  );
  for (const m of page.data) {
    t.equal(m.object, 'model');
    t.equal(m.created, 0, 'the epoch: no release date is known');
    t.equal(m.owned_by, 'farebox');
  }
  const all: string[] = [];
  for await (const m of openai.models.list()) all.push(m.id);
  t.same(all, ids, 'the SDK iterates the same list, one page');
});

t.test('entries: kind, the endpoints the catalogue routes the model on, a text model its limits', async (t) => {
  const page = await openai.models.list();
  const TEXT = ['/v1/messages', '/v1/messages/count_tokens', '/v1/chat/completions'];
  for (const m of page.data) {
    const config = h.config.models.find((c) => c.id === m.id)!;
    const f = fareboxOf(m);
    t.equal(f.kind, config.kind, m.id);
    if (config.kind === 'text') {
      const endpoints =
        m.id === 'alpha-haiku-4-5' ? TEXT.slice(0, 2) : config.family === 'alpha' ? TEXT : ['/v1/chat/completions'];
      t.same(f.endpoints, endpoints, `${m.id} endpoints`);
      t.equal(f.context_window, config.context_window, `${m.id} context window`);
      t.equal(f.max_output_tokens, config.max_tokens, `${m.id} most output`);
    } else {
      t.same(
        f.endpoints,
        config.kind === 'image' ? ['/v1/images/generations', '/v1/images/edits'] : ['/v1/videos'],
        `${m.id} endpoints`,
      );
      t.notOk('context_window' in f || 'max_output_tokens' in f, `${m.id}: no text limits`);
    }
  }
});

t.test('pricing of every model: the numbers `farebox prices --json` prints, at least 6 decimals, exact', async (t) => {
  // The CLI on a config file holding the gateway's config.
  const file = join(dir, 'farebox.json');
  writeFileSync(file, JSON.stringify(input));
  const cli = await cliHere(['prices', '--json'], { FAREBOX_CONFIG: file });
  t.equal(cli.code, 0, cli.stderr);
  const doc = JSON.parse(cli.stdout) as Record<'text' | 'image' | 'video', Record<string, Record<string, string>>>;
  const page = await openai.models.list();
  let n = 0;
  for (const m of page.data) {
    const { kind, pricing } = fareboxOf(m);
    const listed = doc[kind as 'text' | 'image' | 'video'][m.id]!;
    t.ok(listed, `${m.id} is in farebox prices`);
    if (kind === 'text') {
      t.same(Object.keys(pricing), ['input', 'output', 'cache_read', 'cache_write_5m', 'cache_write_1h'], m.id);
      for (const f of ['input', 'output', 'cache_read']) {
        t.equal(units(pricing[f]!), parseUsd(listed[f]!) * 100n, `${m.id} ${f}`);
        n++;
      }
      const inputUnits = parseUsd(listed.input!) * 100n;
      t.equal(units(pricing.cache_write_5m!), (inputUnits * 5n) / 4n, `${m.id} 5-minute write: 1.25x input`);
      t.equal(units(pricing.cache_write_1h!), inputUnits * 2n, `${m.id} 1-hour write: 2x input`);
    } else {
      t.same(Object.keys(pricing), Object.keys(listed), `${m.id}: the same sizes or durations`);
      for (const [k, v] of Object.entries(listed)) {
        t.equal(units(pricing[k]!), parseUsd(v) * 100n, `${m.id} ${k}`);
        n++;
      }
    }
  }
  t.ok(n > 60);
  const priced = (id: string) => fareboxOf(page.data.find((m) => m.id === id)!).pricing;
  t.same(priced('alpha-sonnet-4-6'), {
    input: '3.000000',
    output: '15.000000',
    cache_read: '0.300000',
    cache_write_5m: '3.750000',
    cache_write_1h: '6.000000',
  });
  t.equal(priced('gamma-q3').cache_write_5m, '0.00000125', 'more decimals only where the exact value needs them');
  t.equal(priced('gamma-q3').input, '0.000001');
  t.same(priced('img-2'), { '1K': '0.039000', '2K': '0.067000', '4K': '0.123400' });
  t.same(priced('vidC-3'), { '5': '0.600000', '8': '0.960000' });
});

t.test('openai models.retrieve(): the listed entry; an unknown id is a 404 model_not_found', async (t) => {
  const page = await openai.models.list();
  for (const id of ['alpha-opus-5', 'beta-5.6-mini', 'img-pro', 'vidB-2.5']) {
    const { data, response } = await openai.models.retrieve(id).withResponse();
    t.same(
      data,
      page.data.find((m) => m.id === id),
      id,
    );
    t.match(response.headers.get('x-request-id'), /^req_/);
  }
  const err = await rejection(openai.models.retrieve('alpha-nope'));
  t.ok(err instanceof OpenAI.NotFoundError, 'the SDK NotFoundError');
  t.equal(err.status, 404);
  t.equal(err.code, 'model_not_found');
  t.equal(err.type, 'invalid_request_error');
  t.equal(err.param, 'model');
  t.match(err.requestID, /^req_[0-9a-f]{32}$/);
  t.match(err.message, /No model with id "alpha-nope"/);
});

t.test('anthropic models.list() with limit 3 pages through every model; before_id pages back', async (t) => {
  const first = await anthropic.models.list({ limit: 3 });
  const pages: string[][] = [];
  for await (const page of first.iterPages()) {
    pages.push(page.data.map((m) => m.id));
    t.equal(page.first_id, page.data[0]?.id ?? null);
    t.equal(page.last_id, page.data.at(-1)?.id ?? null);
  }
  t.equal(pages.length, Math.ceil(ids.length / 3), 'one request a page of 3');
  t.ok(pages.slice(0, -1).every((p) => p.length === 3));
  t.same(pages.flat(), ids);
  const all: Anthropic.ModelInfo[] = [];
  for await (const m of anthropic.models.list({ limit: 5 })) all.push(m);
  t.same(
    all.map((m) => m.id),
    ids,
    'auto-pagination',
  );
  for (const m of all) {
    t.equal(m.type, 'model');
    t.equal(m.display_name, m.id);
    t.equal(m.created_at, '1970-01-01T00:00:00Z');
    t.ok(fareboxOf(m).pricing, `${m.id} carries its prices`);
  }
  const openaiEntries = (await openai.models.list()).data;
  t.same(all.map(fareboxOf), openaiEntries.map(fareboxOf), 'the same farebox fields in both shapes');
  // Backwards from the last: the SDK follows first_id with before_id.
  const back: string[] = [];
  for await (const m of anthropic.models.list({ before_id: ids.at(-1)!, limit: 4 })) back.push(m.id);
  const expected: string[] = [];
  for (let end = ids.length - 1; end > 0; end -= 4) expected.push(...ids.slice(Math.max(0, end - 4), end));
  t.same(back, expected);
  const page = await anthropic.models.list({ limit: 1000 });
  t.equal(page.has_more, false);
  t.equal(page.data.length, ids.length);
  const defaultPage = await anthropic.models.list();
  t.equal(defaultPage.data.length, Math.min(20, ids.length), 'limit 20 by default');
});

t.test('anthropic paging by hand: has_more and cursors; a bad limit or cursor is a 400 in its shape', async (t) => {
  const get = (query: string) =>
    fetch(`${h.url}/v1/models?${query}`, { headers: { 'x-api-key': h.key, 'anthropic-version': '2023-06-01' } });
  const after = (await (await get(`limit=2&after_id=${ids[1]}`)).json()) as { data: { id: string }[] };
  t.same(
    { ...after, data: after.data.map((m) => m.id) },
    { data: ids.slice(2, 4), has_more: true, first_id: ids[2], last_id: ids[3] },
  );
  const last = (await (await get(`limit=2&after_id=${ids.at(-2)}`)).json()) as Record<string, unknown>;
  t.same([last.has_more, last.first_id, last.last_id], [false, ids.at(-1), ids.at(-1)]);
  const end = (await (await get(`after_id=${ids.at(-1)}`)).json()) as Record<string, unknown>;
  t.same(end, { data: [], has_more: false, first_id: null, last_id: null }, 'after the last: an empty page');
  const before = (await (await get(`limit=2&before_id=${ids[2]}`)).json()) as Record<string, unknown>;
  t.same([before.has_more, before.first_id, before.last_id], [false, ids[0], ids[1]]);
  for (const [query, param] of [
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['limit=x', 'limit'],
    ['limit=2&limit=3', 'limit'],
    ['after_id=alpha-nope', 'after_id'],
    [`after_id=${ids[0]}&before_id=${ids[2]}`, 'before_id'],
  ] as const) {
    const res = await get(query);
    t.equal(res.status, 400, query);
    t.match(res.headers.get('request-id'), /^req_/, `${query}: Anthropic's request-id`);
    const body = (await res.json()) as { type: string; error: { type: string; code: string; message: string } };
    t.same([body.type, body.error.type, body.error.code], ['error', 'invalid_request_error', 'invalid_request'], query);
    t.match(body.error.message, param, query);
  }
});

t.test('anthropic models.retrieve(): one model; an unknown id is a 404 not_found_error', async (t) => {
  const m = await anthropic.models.retrieve('alpha-sonnet-5');
  t.same(
    { type: m.type, id: m.id, display_name: m.display_name, created_at: m.created_at },
    { type: 'model', id: 'alpha-sonnet-5', display_name: 'alpha-sonnet-5', created_at: '1970-01-01T00:00:00Z' },
  );
  t.equal(fareboxOf(m).kind, 'text');
  const err = await rejection(anthropic.models.retrieve('gamma-nope'));
  t.ok(err instanceof Anthropic.NotFoundError, 'the SDK NotFoundError');
  t.equal(err.status, 404);
  t.same(err.error, {
    type: 'error',
    error: { type: 'not_found_error', message: 'No model with id "gamma-nope".', code: 'model_not_found' },
  });
  t.match(err.requestID, /^req_[0-9a-f]{32}$/);
});

t.test('a key is required: 401 in the caller protocol shape, with a request id', async (t) => {
  for (const path of ['/v1/models', '/v1/models/alpha-opus-5']) {
    const bare = await fetch(`${h.url}${path}`);
    t.equal(bare.status, 401, path);
    t.match(bare.headers.get('x-request-id'), /^req_/);
    t.same(await bare.json(), {
      error: {
        message: 'An API key is required: send x-api-key or Authorization: Bearer.',
        type: 'authentication_error',
        param: null,
        code: 'missing_api_key',
      },
    });
    const anth = await fetch(`${h.url}${path}`, { headers: { 'anthropic-version': '2023-06-01' } });
    t.equal(anth.status, 401, path);
    t.equal(anth.headers.get('request-id'), anth.headers.get('x-request-id'));
    const body = (await anth.json()) as { type: string; error: { type: string; code: string } };
    t.same([body.type, body.error.type, body.error.code], ['error', 'authentication_error', 'missing_api_key']);
  }
  const wrongOpenai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'sk_nope', maxRetries: 0 });
  const e1 = await rejection(wrongOpenai.models.list());
  t.ok(e1 instanceof OpenAI.AuthenticationError);
  t.equal(e1.code, 'invalid_api_key');
  const wrongAnthropic = new Anthropic({ baseURL: h.url, apiKey: 'sk_nope', maxRetries: 0 });
  const e2 = await rejection(wrongAnthropic.models.retrieve('alpha-opus-5'));
  t.ok(e2 instanceof Anthropic.AuthenticationError);
  t.equal((e2.error as { error: { code: string } }).error.code, 'invalid_api_key');
});

t.test('the README example entry is what the gateway answers', async (t) => {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.slice(readme.indexOf('## Models and prices'));
  const example = /```json\n([\s\S]*?)\n```/.exec(section)?.[1];
  t.ok(example, 'the README has its example');
  const entry = JSON.parse(example!) as { id: string };
  t.same(await openai.models.retrieve(entry.id), entry);
});
