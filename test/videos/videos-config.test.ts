// A video model's family comes from its config: an operator adds a model of a family under an id of its own, on a
// provider of its own, and it takes that family's sizes, durations, reference rules and prices.
import t from 'tap';
import OpenAI from 'openai';
import { ConfigError, buildConfig, embeddedDefault } from '../../plugins/config.js';
import { lookupRates } from '../../pricing/index.js';
import { startHarness } from '../helpers/harness.js';
import { referencePng } from '../helpers/media.js';
import { sdk } from './helpers.js';

const clips = { '5': '0.10', '8': '0.20' };
const h = await startHarness({
  videoRenderMs: 200,
  edit: (c) => {
    c.videos = { poll_initial_ms: 50, poll_max_ms: 100 };
    c.providers['studio'] = {
      protocol: 'gemini',
      base_url: `${(c.providers['sim-gemini'] as { base_url: string }).base_url}`,
      key_env: 'FAREBOX_SIM_KEY',
    };
    c.models.push({ id: 'studio-clip', family: 'vidC', provider: 'studio', upstream_model: 'veo-studio' });
    c.prices = { video: { 'studio-clip': clips } };
  },
});
t.teardown(() => h.close());

t.test('priced, routed and checked as its family', async (t) => {
  const rates = lookupRates(h.config.prices, 'studio-clip');
  t.equal(rates.kind === 'video' && rates.family, 'vidC');
  const openai = sdk(h);
  const frame = await OpenAI.toFile(await referencePng(64, 48), 'f.png', { type: 'image/png' });
  const e = await openai.videos
    .create({ model: 'studio-clip', prompt: 'p', seconds: '4', input_reference: frame })
    .catch((err: unknown) => err);
  t.equal((e as Error).message, '400 studio-clip (vidC) takes seconds 5 or 8; got "4".');
  const none = await openai.videos
    .create({ model: 'studio-clip', prompt: 'p', seconds: '8' as never })
    .catch((err: unknown) => err);
  t.equal((none as InstanceType<typeof OpenAI.APIError>).code, 'missing_input_reference');
  const v = await openai.videos.create({
    model: 'studio-clip',
    prompt: 'p',
    seconds: '8' as never,
    size: '1920x1080' as never,
    input_reference: frame,
  });
  t.equal(v.status, 'in_progress');
  t.ok(
    h.sim.received.some((r) => r.url === '/v1beta/models/veo-studio:predictLongRunning'),
    "its provider's model id, on its provider",
  );
});

t.test("a video model's config is checked when the gateway starts", async (t) => {
  const base = () => {
    const c = embeddedDefault('http://127.0.0.1:1');
    c.models.push({ id: 'clip-x', family: 'vidB', provider: 'sim-openai' });
    return c;
  };
  const env = { FAREBOX_SIM_KEY: 'k' };
  t.throws(
    () => buildConfig(base(), env),
    new ConfigError(
      `invalid config: models.${base().models.length - 1}.id: clip-x has no video price (add it under prices.video)`,
    ),
  );
  const wrong = base();
  wrong.prices = { video: { 'clip-x': { '4': '1' } } };
  t.throws(
    () => buildConfig(wrong, env),
    /prices\.video\.clip-x\.4: vidB clips last 5, 8, 12, 16, 20, 24, 30 seconds only/,
  );
  const text = base();
  (text.models.at(-1) as { provider: string }).provider = 'sim-anthropic';
  t.throws(() => buildConfig(text, env), /video models are not served through the anthropic protocol of sim-anthropic/);
  const refs = base();
  (refs.models.at(-1) as { max_references?: number }).max_references = 31;
  t.throws(() => buildConfig(refs, env), /max_references/);
  // Subject references and a last frame are vidB's alone.
  for (const family of ['vidA', 'vidC']) {
    const many = base();
    Object.assign(many.models.at(-1)!, { family, max_references: 5 });
    t.throws(() => buildConfig(many, env), new RegExp(`max_references: must be 0 for family ${family}`));
    const last = base();
    Object.assign(last.models.at(-1)!, { family, last_reference: true });
    t.throws(() => buildConfig(last, env), new RegExp(`last_reference: must be false for family ${family}`));
  }
});

t.test(
  'multipart is parsed on the endpoints that take it only: text endpoints keep their JSON-only context',
  async (t) => {
    const form = new FormData();
    form.append('model', 'gamma-k3');
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}` },
      body: form,
    });
    t.equal(res.status, 400);
    t.match(
      ((await res.json()) as { error: { message: string } }).error.message,
      /Content-Type must be application\/json/,
    );
  },
);
