/**
 * How the benchmark runs farebox: the plugin in a Fastify app set up as `farebox serve` sets it up
 * (plugins/serve.ts), on the embedded default's config routed to an out-of-process simulator, with billing on:
 * real holds and the debit queue here, the settler and the watcher in a `farebox settle` process beside it (the
 * bench's `settle` server), against the four dev chains of another process (the bench's `chains` server,
 * published in Redis as serve publishes them): a production gateway's chains are elsewhere too, and EVM execution
 * on the gateway's core would measure the dev chain, not the gateway.
 * serve() itself cannot be used: without FAREBOX_CONFIG it starts the simulator and the chains in its own
 * process. The bench account (FAREBOX_BENCH_ACCOUNT) is funded on chain_a before the load starts.
 */
import Fastify from 'fastify';
import type { ChainsConfig } from '../plugins/chains/config.js';
import { DEV_KEYS, DEV_SETTLER_KEY_ENV } from '../plugins/chains/dev-chains.js';
import { buildConfig, embeddedDefault } from '../plugins/config.js';
import farebox from '../plugins/gateway.js';
import { closeRedis, connectRedis } from '../plugins/store/redis.js';
import { DEV_CHAINS_KEY, fundOnDevChain, tuneHeap } from '../plugins/serve.js';

/** Start farebox on 127.0.0.1 (ephemeral port), upstreams at `simUrl`, Redis keys under `redisPrefix`. */
export async function startFarebox(
  simUrl: string,
  redisUrl: string,
  redisPrefix: string,
): Promise<{ url: string; close(): Promise<void> }> {
  // The process runs as `farebox serve` runs it.
  tuneHeap();
  const input = embeddedDefault(simUrl);
  input.redis = { url: redisUrl, prefix: redisPrefix };
  input.server = { host: '127.0.0.1', port: 0 };
  // Rate limits still count every call (their Redis round trip is part of the hot path) but never refuse one:
  // the defaults (3,000 requests/min per key, 6,000 video polls) would answer most of the load with 429.
  input.limits = {
    default: { key: { rpm: 1e12 }, account: { rpm: 1e12 } },
    video_polls: { key: { rpm: 1e12 }, account: { rpm: 1e12 } },
  };
  // Settlement runs in a `farebox settle` process beside it (bench/server.ts settle), as a production deployment
  // runs it: its CPU and garbage stay off the gateway's event loop. The bench counts its CPU with the gateway's.
  input.billing = { settler: false, watcher: false };
  // img-2 on gpt-image-2, whose 4K is a 4K-class image (2880x2880), so the image scenarios move 4K-sized answers.
  for (const m of input.models as { id: string; upstream_model?: string }[])
    if (m.id === 'img-2') m.upstream_model = 'gpt-image-2';
  const published = connectRedis({ url: redisUrl, prefix: redisPrefix });
  const chains = await published.get(DEV_CHAINS_KEY);
  await closeRedis(published);
  if (!chains) throw new Error('no dev chains published under this prefix: start the chains server first');
  input.chains = JSON.parse(chains) as ChainsConfig;
  // As serve() builds the embedded default: the simulator's key, the dev settler key, embedded = true.
  const env = { FAREBOX_SIM_KEY: 'sim-key', [DEV_SETTLER_KEY_ENV]: DEV_KEYS.settler.privateKey };
  const config = buildConfig(input, env, true);
  // The options serve() gives its app, without a logger (a benchmark measures the gateway, not its logs).
  const app = Fastify({ logger: false, routerOptions: { ignoreTrailingSlash: true } });
  try {
    await app.register(farebox, { config, env });
    await app.listen({ host: config.server.host, port: config.server.port });
    const account = process.env.FAREBOX_BENCH_ACCOUNT;
    if (account) {
      const redis = connectRedis(config.redis);
      try {
        await fundOnDevChain(redis, config.chains!, 'chain_a', account, 1_000_000_000_000n);
      } finally {
        await closeRedis(redis);
      }
    }
  } catch (err) {
    await app.close().catch(() => {});
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => app.close(),
  };
}
