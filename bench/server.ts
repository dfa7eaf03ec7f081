/**
 * A server process of the benchmark, run compiled (dist/bench/server.js): `server.js sim`, `server.js chains
 * <redisUrl> <redisPrefix> [<blockMs> <confirmations>]` (the four dev chains, published in Redis as `farebox serve`
 * publishes them; with a block time, mining on that interval and settled at that many confirmations), `server.js
 * settle <redisUrl> <redisPrefix>` (`farebox settle` on those chains; its url is its /metrics) or `server.js
 * farebox <simUrl> <redisUrl> <redisPrefix>`.
 * Prints one JSON line `{"url":"http://127.0.0.1:PORT"}` once listening; closes and exits 0 on SIGTERM.
 * Over IPC, {type:'profile-start'} and {type:'profile-stop', file} record a CPU profile of the main thread
 * (inspector Profiler domain) for just the span between them, start-up excluded.
 */
import { writeFileSync } from 'node:fs';
import { Session, type Profiler } from 'node:inspector/promises';
import { findSourceMap } from 'node:module';

const [kind, ...args] = process.argv.slice(2);
let running: { url: string; close(): Promise<void> };
if (kind === 'sim') {
  // Imported by kind: the simulator process loads none of the gateway.
  const { startSimulator } = await import('../plugins/simulator/index.js');
  running = await startSimulator({ host: '127.0.0.1', port: 0 });
} else if (kind === 'chains' && (args.length === 2 || args.length === 4)) {
  const { startDevChains } = await import('../plugins/chains/dev-chains.js');
  const { DEV_CHAINS_KEY, devChainsConfig } = await import('../plugins/serve.js');
  const { closeRedis, connectRedis } = await import('../plugins/store/redis.js');
  const [blockTimeMs, confirmations] = args.length === 4 ? [Number(args[2]), Number(args[3])] : [undefined, undefined];
  const dev = await startDevChains({ host: '127.0.0.1', basePort: 0, blockTimeMs, confirmations });
  const redis = connectRedis({ url: args[0]!, prefix: args[1]! });
  await redis.set(DEV_CHAINS_KEY, JSON.stringify(devChainsConfig(dev)));
  await closeRedis(redis);
  running = { url: dev.chains.chain_a.rpc_url, close: () => dev.close() };
} else if (kind === 'settle' && args.length === 2) {
  // `farebox settle` on the chains the `chains` server published: the settler and the watcher, no gateway.
  const { embeddedSettleConfig, DEV_CHAINS_KEY, tuneHeap } = await import('../plugins/serve.js');
  const { startSettleProcess } = await import('../plugins/settlement/settlement.js');
  const { closeRedis, connectRedis } = await import('../plugins/store/redis.js');
  tuneHeap();
  const redis = connectRedis({ url: args[0]!, prefix: args[1]! });
  const chains = await redis.get(DEV_CHAINS_KEY);
  await closeRedis(redis);
  if (!chains) throw new Error('no dev chains published under this prefix: start the chains server first');
  const { config, env } = embeddedSettleConfig(JSON.parse(chains), {
    ...process.env,
    REDIS_URL: args[0]!,
    FAREBOX_REDIS_PREFIX: args[1]!,
  });
  const settle = await startSettleProcess(config, env, { metricsPort: 0 });
  running = { url: settle.metricsUrl!, close: () => settle.close() };
} else if (kind === 'farebox' && args.length === 3) {
  const { startFarebox } = await import('./farebox-target.js');
  running = await startFarebox(args[0]!, args[1]!, args[2]!);
} else {
  process.stderr.write(
    'usage: server.js sim | chains <redisUrl> <redisPrefix> [<blockMs> <confirmations>] | settle <redisUrl> <redisPrefix> | farebox <simUrl> <redisUrl> <redisPrefix>\n',
  );
  process.exit(2);
}

/**
 * Frames of the compiled sources moved to their files and positions in the .ts sources (farebox runs from dist/
 * with --enable-source-maps when profiled, so node:module finds the maps).
 */
function toSourcePositions(profile: Profiler.Profile): Profiler.Profile {
  for (const node of profile.nodes) {
    const frame = node.callFrame;
    if (!frame.url.startsWith('file:') || frame.url.includes('/node_modules/')) continue;
    const entry = findSourceMap(frame.url)?.findEntry(frame.lineNumber, frame.columnNumber);
    if (!entry || !('originalLine' in entry)) continue;
    if (typeof entry.originalSource === 'string') frame.url = entry.originalSource;
    frame.lineNumber = entry.originalLine;
    frame.columnNumber = entry.originalColumn;
    delete node.positionTicks;
  }
  return profile;
}

let session: Session | undefined;
process.on('message', (m: { type?: string; file?: string }) => {
  if (m?.type === 'profile-start' && !session) {
    const s = new Session();
    session = s;
    s.connect();
    void s
      .post('Profiler.enable')
      .then(() => s.post('Profiler.start'))
      .then(() => process.send?.({ type: 'profile-started' }));
  } else if (m?.type === 'profile-stop' && session && m.file) {
    const s = session;
    const file = m.file;
    session = undefined;
    void s.post('Profiler.stop').then(({ profile }) => {
      writeFileSync(file, JSON.stringify(toSourcePositions(profile)));
      s.disconnect();
      process.send?.({ type: 'profile-stopped' });
    });
  }
});

process.stdout.write(JSON.stringify({ url: running.url }) + '\n');

let closing = false;
process.on('SIGTERM', () => {
  if (closing) return;
  closing = true;
  // Bounded: a stuck close must not keep the process (and the benchmark) alive.
  setTimeout(() => process.exit(0), 3000).unref();
  running.close().finally(() => process.exit(0));
});
