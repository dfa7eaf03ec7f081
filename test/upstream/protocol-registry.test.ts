// The protocol registry is the one source of what a provider's `protocol` may name and what it serves: the config's
// checks and the catalogue's routes follow it.
import t from 'tap';
import { buildConfig, ConfigError, embeddedDefault } from '../../plugins/config.js';
import { catalogUpstream, PROTOCOL_NAMES } from '../../plugins/upstream/protocols/registry.js';
import {
  ENDPOINT_KIND,
  ModelCatalog,
  type CatalogEndpoint,
  type ModelConfig,
  type ProviderConfig,
} from '../../policies/catalog.js';

const env = { FAREBOX_SIM_KEY: 'k' };
const served = (protocol: string) => catalogUpstream.serves({ protocol } as ProviderConfig);

function configError(input: unknown): string | null {
  try {
    buildConfig(input, env);
    return null;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.message;
  }
}

t.test("an unknown protocol is refused with exactly the registry's names", async (t) => {
  const c = embeddedDefault('http://127.0.0.1:9');
  (c.providers['sim-gemini'] as { protocol: string }).protocol = 'responses';
  const message = configError(c);
  t.match(message, /providers\.sim-gemini\.protocol/);
  const listed = /expected one of (.+)$/
    .exec(message ?? '')?.[1]
    ?.split('|')
    .map((n) => JSON.parse(n));
  t.same(listed, PROTOCOL_NAMES);
});

t.test(
  "a model kind is served through a protocol exactly where the protocol serves one of its kind's endpoints",
  async (t) => {
    const modelOfKind: Record<ModelConfig['kind'], string> = { text: 'beta-5.6-sol', image: 'img-2', video: 'vidA-v6' };
    for (const name of PROTOCOL_NAMES) {
      for (const [kind, id] of Object.entries(modelOfKind)) {
        const c = embeddedDefault('http://127.0.0.1:9');
        c.providers.p = { protocol: name, base_url: 'http://127.0.0.1:9/v1', key_env: 'FAREBOX_SIM_KEY' };
        const i = c.models.findIndex((m) => (m as { id: string }).id === id);
        (c.models[i] as { provider: string }).provider = 'p';
        const serves = served(name).some((e) => ENDPOINT_KIND[e] === kind);
        const message = configError(c);
        if (serves) t.equal(message, null, `${kind} through ${name}: served`);
        else
          t.equal(
            message,
            `invalid config: models.${i}.provider: ${kind} models are not served through the ${name} protocol of p`,
            `${kind} through ${name}: refused`,
          );
      }
    }
  },
);

t.test('the catalogue routes a model on an endpoint only through a provider whose protocol serves it', async (t) => {
  const config = buildConfig(embeddedDefault('http://127.0.0.1:9'), env);
  const catalog = new ModelCatalog(config, catalogUpstream);
  let routes = 0;
  for (const endpoint of Object.keys(ENDPOINT_KIND) as CatalogEndpoint[]) {
    for (const model of config.models) {
      let route;
      try {
        route = catalog.route(endpoint, model.id);
      } catch {
        continue;
      }
      routes++;
      t.ok(served(route.provider.protocol).includes(endpoint), `${model.id} on ${endpoint}`);
      t.equal(ENDPOINT_KIND[endpoint], model.kind);
      t.not(route.url, '', 'a URL of its protocol');
    }
  }
  // alpha: messages, count_tokens and chat completions; beta and gamma: chat completions; images; videos.
  const count = (kind: string) => config.models.filter((m) => m.kind === kind).length;
  const alpha = config.models.filter((m) => m.kind === 'text' && m.family === 'alpha').length;
  t.equal(routes, alpha * 2 + count('text') + count('image') + count('video'));
});
