/**
 * The import graph's rules (npm run depcheck, part of npm test). Type-only imports count as imports: a type that
 * makes a low layer name a high one is an arrow up, as a value import would be.
 *
 * Layers, top down: gateway.ts and serve.ts wire everything; phases/ (identify to finish) and routes/ (the endpoint
 * modules) run a call, the dashboard beside them; call.ts declares the call and the endpoint contract; jobs/,
 * billing/, settlement/ and upstream/ do the work (upstream/protocols/: one folder per provider protocol, picked
 * through protocols/registry.ts); store/, chains/, metrics/ and accounts/ below them; policies/ and pricing/ are pure
 * and know no plugin.
 */
const PROJECT = '^(plugins|policies|pricing)/';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import circle (type-only imports included) means some layer names one above it.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'pricing-is-pure',
      severity: 'error',
      comment: 'pricing/ is bigint arithmetic over a price table: it imports nothing of the project outside itself.',
      from: { path: '^pricing/' },
      to: { path: PROJECT, pathNot: '^pricing/' },
    },
    {
      name: 'policies-know-no-plugin',
      severity: 'error',
      comment: 'policies/ says what a request may do; it imports pricing/ at most, nothing of plugins/.',
      from: { path: '^policies/' },
      to: { path: '^plugins/' },
    },
    {
      name: 'store-is-the-bottom',
      severity: 'error',
      comment: 'store/ (Redis, its keys and scripts) imports nothing of the project outside store/.',
      from: { path: '^plugins/store/' },
      to: { path: PROJECT, pathNot: '^plugins/store/' },
    },
    {
      name: 'upstream-knows-no-call',
      severity: 'error',
      comment: 'upstream/ is transport, metering and provider protocols: it names no call, phase, route, job or bill.',
      from: { path: '^plugins/upstream/' },
      to: { path: '^plugins/(call\\.ts|gateway\\.ts|serve\\.ts|phases/|routes/|jobs/|billing/|settlement/)' },
    },
    {
      name: 'protocols-through-the-registry',
      severity: 'error',
      comment:
        'A provider protocol (upstream/protocols/<name>/) is picked through protocols/registry.ts, never imported by name.',
      from: { path: '^(plugins|policies|pricing|bin)/', pathNot: '^plugins/upstream/protocols/' },
      to: { path: '^plugins/upstream/protocols/[^/]+/' },
    },
    {
      name: 'protocols-apart',
      severity: 'error',
      comment: 'One protocol folder imports nothing of another: what they share is at upstream/ or protocols/ root.',
      from: { path: '^plugins/upstream/protocols/([^/]+)/' },
      to: { path: '^plugins/upstream/protocols/[^/]+/', pathNot: '^plugins/upstream/protocols/$1/' },
    },
    {
      name: 'below-the-call-path',
      severity: 'error',
      comment:
        'What the call path uses (jobs, billing, settlement, chains, accounts, metrics, store) names none of it: no call.ts, phase, route, dashboard or wiring.',
      from: { path: '^plugins/(accounts|billing|chains|jobs|metrics|settlement|store)/' },
      to: { path: '^plugins/(call\\.ts|gateway\\.ts|serve\\.ts|embedded\\.ts|phases/|routes/|dashboard/)' },
    },
    {
      name: 'phases-know-no-endpoint-module',
      severity: 'error',
      comment: 'The phases reach an endpoint through the contract in call.ts, never a module of routes/.',
      from: { path: '^plugins/phases/' },
      to: { path: '^plugins/routes/' },
    },
    {
      name: 'money-knows-no-fastify',
      severity: 'error',
      comment: 'billing/, settlement/ and chains/ run without a web server: no fastify, no @fastify/ plugin.',
      from: { path: '^plugins/(billing|settlement|chains)/' },
      to: { path: 'node_modules/(fastify|@fastify)/' },
    },
    {
      name: 'money-knows-no-chain-library',
      severity: 'error',
      comment:
        'billing/ and settlement/ talk to chains through the port (chains/port.ts): only chains/ and the dashboard import viem.',
      from: { path: '^plugins/(billing|settlement)/' },
      to: { path: 'node_modules/viem/' },
    },
    {
      name: 'product-imports-no-test-or-bench',
      severity: 'error',
      comment: 'What ships (plugins/, policies/, pricing/, bin/) imports nothing of test/ or bench/.',
      from: { path: '^(plugins|policies|pricing|bin)/' },
      to: { path: '^(test|bench)/' },
    },
  ],
  options: {
    // Count `import type` edges too (the compiler's view before types are erased).
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^dist/' },
  },
};
