import t, { type Test } from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildConfig, ConfigError, embeddedDefault, loadConfig } from '../plugins/config.js';

const env = { FAREBOX_SIM_KEY: 'k' };
const good = () => embeddedDefault('http://127.0.0.1:9');

const fails = (t: Test, input: unknown, field: RegExp, e: Record<string, string> = env) => {
  try {
    buildConfig(input, e);
    t.fail(`accepted; expected an error naming ${field}`);
  } catch (err) {
    t.ok(err instanceof ConfigError, 'a ConfigError');
    t.match((err as Error).message, field);
  }
};

t.test('the embedded default validates and covers every text model id of the spec', async (t) => {
  const c = buildConfig(good(), env, true);
  const ids = c.models.map((m) => m.id);
  for (const id of [
    'alpha-fable-5',
    'alpha-haiku-4-5',
    'alpha-opus-4-6',
    'alpha-opus-4-7',
    'alpha-opus-4-8',
    'alpha-opus-5',
    'alpha-sonnet-4-6',
    'alpha-sonnet-5',
    'beta-5.6-sol',
    'gamma-k3',
  ]) {
    t.ok(ids.includes(id), id);
  }
  t.equal(c.embedded, true);
});

t.test('config is frozen, deeply', async (t) => {
  const c = buildConfig(good(), env);
  t.ok(Object.isFrozen(c));
  t.ok(Object.isFrozen(c.models[0]));
  t.ok(Object.isFrozen(c.providers['sim-openai']));
  t.throws(() => {
    (c.models[0] as { max_tokens: number }).max_tokens = 1;
  });
});

t.test('a bad config fails with a message naming the field', async (t) => {
  const wrongFamily = good();
  (wrongFamily.models[0] as { family: string }).family = 'delta';
  fails(t, wrongFamily, /models\.0\.family/);

  const badUrl = good();
  (badUrl.providers['sim-openai'] as { base_url: string }).base_url = 'not a url';
  fails(t, badUrl, /providers\.sim-openai\.base_url/);

  const unknownProvider = good();
  (unknownProvider.models[2] as { provider: string }).provider = 'nope';
  fails(t, unknownProvider, /models\.2\.provider: unknown provider nope/);

  const dup = good();
  dup.models.push({ ...(dup.models[0] as object) });
  fails(t, dup, /duplicate model id alpha-fable-5/);

  const typo = { ...good(), modles: [] };
  fails(t, typo, /modles|Unrecognized/);

  const ceiling = good();
  (ceiling.models[1] as { max_tokens: number }).max_tokens = 0;
  fails(t, ceiling, /models\.1\.max_tokens/);

  const forever = { ...good(), billing: { retention_days: 36_501 } };
  fails(t, forever, /billing\.retention_days/);

  // A timeout near one heartbeat would take live instances for dead and release their calls' holds.
  fails(t, { ...good(), billing: { instance_timeout_ms: 999 } }, /billing\.instance_timeout_ms/);

  fails(t, good(), /providers\.sim-anthropic\.key_env: environment variable FAREBOX_SIM_KEY is not set/, {});

  // Image settings of one protocol on a model of the other, or a quality its upstream does not take.
  const image = (id: string, set: Record<string, unknown>) => {
    const c = good();
    const i = c.models.findIndex((m) => (m as { id: string }).id === id);
    Object.assign(c.models[i] as object, set);
    return { c, i };
  };
  for (const [id, set, field] of [
    ['img-pro', { quality: 'high' }, 'quality'],
    ['img-pro', { input_fidelity: 'high' }, 'input_fidelity'],
    ['img-2', { max_output_tokens: 4096 }, 'max_output_tokens'],
    ['img-2', { quality: 'hd' }, 'quality'],
    ['img-2', { sizes: ['8K'] }, 'sizes'],
    ['img-2', { aspect_ratios: [] }, 'aspect_ratios'],
  ] as const) {
    const { c, i } = image(id, set);
    fails(t, c, new RegExp(`models\\.${i}\\.${field}`));
  }
});

t.test(
  'the environment overrides server and redis settings of a config file; an explicit config keeps its own',
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'farebox-config-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'c.json');
    const chains = JSON.parse(readFileSync(new URL('../deploy/farebox.example.json', import.meta.url), 'utf8')).chains;
    writeFileSync(file, JSON.stringify({ ...good(), chains }));
    const over = {
      ...env,
      PORT: '9099',
      HOST: '0.0.0.0',
      REDIS_URL: 'redis://10.0.0.1:6380',
      FAREBOX_REDIS_PREFIX: 'x:',
    };
    const c = loadConfig({ ...over, FAREBOX_CONFIG: file });
    t.equal(c.server.port, 9099);
    t.equal(c.server.host, '0.0.0.0');
    t.equal(c.redis.url, 'redis://10.0.0.1:6380');
    t.equal(c.redis.prefix, 'x:');
    t.throws(() => loadConfig({ ...env, PORT: 'eighty', FAREBOX_CONFIG: file }), /server\.port/);
    const explicit = buildConfig({ ...good(), server: { port: 7070 }, redis: { url: 'redis://127.0.0.1:6390' } }, over);
    t.equal(explicit.server.port, 7070, 'an explicit config wins over PORT');
    t.equal(explicit.redis.url, 'redis://127.0.0.1:6390', 'and over REDIS_URL');
    t.equal(explicit.redis.prefix, 'farebox:', 'and over FAREBOX_REDIS_PREFIX');
  },
);

t.test('FAREBOX_CONFIG is read from its file; unreadable or invalid JSON fails clearly', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'farebox-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'c.json');
  const chains = JSON.parse(readFileSync(new URL('../deploy/farebox.example.json', import.meta.url), 'utf8')).chains;
  writeFileSync(file, JSON.stringify({ ...good(), chains }));
  const c = loadConfig({ ...env, FAREBOX_CONFIG: file });
  t.equal(c.embedded, false);
  t.equal(c.chains?.chain_b.chain_id, 8453);
  writeFileSync(file, JSON.stringify(good()));
  t.throws(() => loadConfig({ ...env, FAREBOX_CONFIG: file }), /chains: the four settlement chains are required/);
  writeFileSync(file, '{ nope');
  t.throws(() => loadConfig({ ...env, FAREBOX_CONFIG: file }), /is not valid JSON/);
  t.throws(() => loadConfig({ ...env, FAREBOX_CONFIG: join(dir, 'missing.json') }), /cannot read FAREBOX_CONFIG/);
});

t.test('deploy/ example config for real providers validates', async (t) => {
  const example = JSON.parse(readFileSync(new URL('../deploy/farebox.example.json', import.meta.url), 'utf8'));
  const keys = { ANTHROPIC_API_KEY: 'a', OPENAI_API_KEY: 'o', TOGETHER_API_KEY: 't', GEMINI_API_KEY: 'g' };
  const c = buildConfig(example, keys);
  t.equal(c.providers.anthropic.protocol, 'anthropic');
  t.ok(c.models.length >= 10);
  const image = (id: string) => c.models.find((m) => m.id === id)!;
  t.match(image('img-pro'), { kind: 'image', provider: 'gemini', upstream_model: 'gemini-3-pro-image-preview' });
  t.equal(c.providers[image('img-pro').provider]!.protocol, 'gemini');
  t.equal(c.providers[image('img-pro').provider]!.base_url, 'https://generativelanguage.googleapis.com/v1beta');
  t.match(image('img-2'), { kind: 'image', provider: 'openai', upstream_model: 'gpt-image-2' });
  t.same(c.images, { url_ttl_ms: 3_600_000, store_max_bytes: 268_435_456 });
});
