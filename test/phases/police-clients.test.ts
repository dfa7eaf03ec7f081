// Issue 5 end to end: every client class x every client/family rule (SPEC "Client and model-family rules",
// Authentication 4, Errors 403), over real HTTP to a billed gateway, with the headers real clients send.
import t, { type Test } from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { FastifyRequest } from 'fastify';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { getCallRecord, listUsage } from '../../plugins/billing/call-records.js';
import { readWallet } from '../../plugins/billing/wallets.js';
import type { ClientClass } from '../../policies/clients.js';
import type { ClientRuleId } from '../../policies/client-rules.js';
import { closeDevChains, startHarness, type Harness } from '../helpers/harness.js';
import { validator } from '../helpers/conformance.js';

interface Sample {
  readonly client: string;
  /** Where the headers were read (the same sources as test/policies/clients.test.ts). */
  readonly source: string;
  readonly class: ClientClass;
  /** The signature name the gateway must recognise. */
  readonly name: string;
  readonly headers: Readonly<Record<string, string>>;
}

const CC_BETA = 'claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14';
const STAINLESS_JS = {
  'x-stainless-lang': 'js',
  'x-stainless-package-version': '0.68.0',
  'x-stainless-os': 'Linux',
  'x-stainless-arch': 'x64',
  'x-stainless-runtime': 'node',
  'x-stainless-runtime-version': 'v22.17.0',
};
const STAINLESS_PY = {
  'x-stainless-lang': 'python',
  'x-stainless-package-version': '1.99.9',
  'x-stainless-os': 'Linux',
  'x-stainless-arch': 'x64',
  'x-stainless-runtime': 'CPython',
  'x-stainless-runtime-version': '3.12.3',
};

// Clients sent by fetch with their own headers; the official JS SDKs run for real in their own tests below.
const SAMPLES: readonly Sample[] = [
  // --- direct ---
  {
    client: 'curl',
    source: 'curl/curl src/tool_version.h',
    class: 'direct',
    name: 'curl',
    headers: { 'user-agent': 'curl/8.5.0', accept: '*/*' },
  },
  {
    client: 'python-requests',
    source: 'psf/requests src/requests/utils.py',
    class: 'direct',
    name: 'python-requests',
    headers: { 'user-agent': 'python-requests/2.32.3' },
  },
  {
    client: 'OpenAI Python SDK',
    source: 'openai/openai-python src/openai/_base_client.py',
    class: 'direct',
    name: 'openai-python',
    headers: { 'user-agent': 'OpenAI/Python 1.99.9', ...STAINLESS_PY },
  },
  {
    client: 'Anthropic Python SDK (async)',
    source: 'anthropics/anthropic-sdk-python src/anthropic/_client.py',
    class: 'direct',
    name: 'anthropic-python',
    headers: { 'user-agent': 'AsyncAnthropic/Python 0.69.0', 'anthropic-version': '2023-06-01', ...STAINLESS_PY },
  },
  {
    client: 'Node fetch',
    source: 'nodejs/undici lib/web/fetch/index.js',
    class: 'direct',
    name: 'undici',
    headers: {},
  },
  // --- the recommended coding agent ---
  {
    client: 'Claude Code -p (sdk-cli)',
    source: 'measured: test/routes/claude-code.test.ts',
    class: 'coding_agent',
    name: 'claude-code',
    headers: {
      'user-agent': 'claude-cli/2.1.330 (external, sdk-cli)',
      'x-app': 'cli',
      'anthropic-version': '2023-06-01',
      'anthropic-beta': `${CC_BETA},context-management-2025-06-27`,
      'x-claude-code-session-id': '0197a1c2-7e4b-7d2a-9c1e-3f5b8a6d4e21',
      'anthropic-dangerous-direct-browser-access': 'true',
      ...STAINLESS_JS,
    },
  },
  {
    client: 'Claude Code 2.0.36 interactive (no session id)',
    source: 'claudish ai_docs/PROTOCOL_SPECIFICATION.md',
    class: 'coding_agent',
    name: 'claude-code',
    headers: {
      'user-agent': 'claude-cli/2.0.36 (external, cli)',
      'x-app': 'cli',
      'anthropic-version': '2023-06-01',
      'anthropic-beta': CC_BETA,
      ...STAINLESS_JS,
    },
  },
  // --- third-party clients ---
  {
    client: 'opencode (Anthropic provider)',
    source: 'sst/opencode session/llm.ts + vercel/ai with-user-agent-suffix.ts',
    class: 'third_party',
    name: 'opencode',
    headers: {
      'user-agent': 'opencode/0.15.8 ai-sdk/anthropic/2.0.23 ai-sdk/provider-utils/3.0.10 runtime/bun/1.2.22',
      'anthropic-version': '2023-06-01',
      'anthropic-beta': CC_BETA,
    },
  },
  {
    client: 'opencode (own providers)',
    source: 'sst/opencode session/llm.ts',
    class: 'third_party',
    name: 'opencode',
    headers: {
      'x-opencode-session': 'ses_7c1a2b3d4e5f',
      'x-opencode-client': 'cli',
      'user-agent': 'ai-sdk/openai-compatible/1.0.19 ai-sdk/provider-utils/3.0.10 runtime/bun/1.2.22',
    },
  },
  {
    client: 'Cline',
    source: 'cline/cline src/services/EnvUtils.ts',
    class: 'third_party',
    name: 'cline',
    headers: {
      'user-agent':
        'Cline/4.1.16 ai-sdk/openai-compatible/3.0.30 ai-sdk/provider-utils/5.0.27 runtime/node.js/v24.18.1',
      'x-title': 'Cline',
      'http-referer': 'https://cline.bot',
    },
  },
  {
    client: 'Roo Code',
    source: 'RooCodeInc/Roo-Code src/api/providers/constants.ts',
    class: 'third_party',
    name: 'roo-code',
    headers: {
      'http-referer': 'https://github.com/RooVetGit/Roo-Cline',
      'x-title': 'Roo Code',
      'user-agent': 'RooCode/3.25.11',
      ...STAINLESS_JS,
    },
  },
  {
    client: 'Kilo Code',
    source: 'Kilo-Org/kilocode src/api/providers/constants.ts',
    class: 'third_party',
    name: 'kilo-code',
    headers: {
      'http-referer': 'https://kilocode.ai',
      'x-title': 'Kilo Code',
      'x-kilocode-version': '4.84.0',
      'user-agent': 'Kilo-Code/4.84.0',
      ...STAINLESS_JS,
    },
  },
  {
    client: 'Continue',
    source: 'continuedev/continue packages/openai-adapters/src/apis/OpenRouter.ts',
    class: 'third_party',
    name: 'continue',
    headers: { 'http-referer': 'https://www.continue.dev/', 'x-title': 'Continue', 'user-agent': 'node' },
  },
  {
    client: 'aider',
    source: 'Aider-AI/aider aider/llm.py',
    class: 'third_party',
    name: 'aider',
    headers: {
      'http-referer': 'https://aider.chat',
      'x-title': 'Aider',
      'user-agent': 'OpenAI/Python 1.99.9',
      ...STAINLESS_PY,
    },
  },
  {
    client: 'Zed',
    source: 'zed-industries/zed crates/zed/src/main.rs',
    class: 'third_party',
    name: 'zed',
    headers: { 'user-agent': 'Zed/0.201.4 (macos; aarch64)' },
  },
  {
    client: 'Codex CLI',
    source: 'openai/codex codex-rs/core/src/default_client.rs',
    class: 'third_party',
    name: 'codex-cli',
    headers: { originator: 'codex_cli_rs', 'user-agent': 'codex_cli_rs/0.59.0 (Ubuntu 24.04; x86_64) tmux/3.4' },
  },
  {
    client: 'Claude Code UA copied by a Python client',
    source: 'policies/clients.ts rule 3',
    class: 'third_party',
    name: 'claude-code (unverified)',
    headers: {
      'user-agent': 'claude-cli/2.1.220 (external, cli)',
      'x-app': 'cli',
      'anthropic-beta': CC_BETA,
      ...STAINLESS_PY,
    },
  },
  // --- agent frameworks ---
  {
    client: 'LangChain.js ChatOpenAI',
    source: 'langchain-ai/langchainjs libs/providers/langchain-openai/src/utils/azure.ts',
    class: 'agent_framework',
    name: 'langchain',
    headers: { 'user-agent': 'langchainjs-openai/1.0.0 ((node/v20.18.0; linux; x64))', ...STAINLESS_JS },
  },
  {
    client: 'LangChain Python ChatAnthropic',
    source: 'langchain-ai/langchain libs/partners/anthropic/langchain_anthropic/chat_models.py',
    class: 'agent_framework',
    name: 'langchain',
    headers: { 'user-agent': 'langchain-anthropic/1.1.0', 'anthropic-version': '2023-06-01', ...STAINLESS_PY },
  },
  {
    client: 'LlamaIndex',
    source: 'run-llama/llama_index llama-index-llms-nvidia',
    class: 'agent_framework',
    name: 'llamaindex',
    headers: { 'user-agent': 'llama-index-llms-nvidia', ...STAINLESS_PY },
  },
  {
    client: 'OpenAI Agents SDK (Python)',
    source: 'openai/openai-agents-python src/agents/models/openai_responses.py',
    class: 'agent_framework',
    name: 'openai-agents',
    headers: { 'user-agent': 'Agents/Python 0.3.2', ...STAINLESS_PY },
  },
  {
    client: 'OpenAI Agents SDK (JS)',
    source: 'openai/openai-agents-js packages/agents-openai/src/defaults.ts',
    class: 'agent_framework',
    name: 'openai-agents',
    headers: { 'user-agent': 'Agents/JavaScript 0.9.1', ...STAINLESS_JS },
  },
  {
    client: 'Vercel AI SDK',
    source: 'vercel/ai packages/anthropic/src/anthropic-provider.ts',
    class: 'agent_framework',
    name: 'vercel-ai-sdk',
    headers: {
      'user-agent': 'ai-sdk/anthropic/3.0.103 ai-sdk/provider-utils/4.0.40 runtime/node.js/v24.4.1',
      'anthropic-version': '2023-06-01',
    },
  },
  {
    client: 'Pydantic AI',
    source: 'pydantic/pydantic-ai pydantic_ai_slim/pydantic_ai/models/__init__.py',
    class: 'agent_framework',
    name: 'pydantic-ai',
    headers: { 'user-agent': 'pydantic-ai/1.0.10', ...STAINLESS_PY },
  },
  {
    client: 'Mastra',
    source: 'mastra-ai/mastra PR #13087',
    class: 'agent_framework',
    name: 'mastra',
    headers: { 'user-agent': 'mastra/1.0.4', 'anthropic-version': '2023-06-01' },
  },
];

type Endpoint = 'messages' | 'count_tokens' | 'chat';

interface Rule {
  readonly what: string;
  readonly endpoint: Endpoint;
  readonly model: string;
  /** The rule that refuses each class; a class absent here passes. */
  readonly refuses: Partial<Record<ClientClass, ClientRuleId>>;
}

// SPEC rule 8 as policies/client-rules.ts decides it.
const RULES: readonly Rule[] = [
  {
    what: 'alpha on /v1/messages',
    endpoint: 'messages',
    model: 'alpha-sonnet-4-6',
    refuses: { third_party: 'alpha_messages_third_party', agent_framework: 'alpha_messages_agent_framework' },
  },
  {
    what: 'alpha on /v1/messages/count_tokens',
    endpoint: 'count_tokens',
    model: 'alpha-haiku-4-5',
    refuses: { third_party: 'alpha_messages_third_party', agent_framework: 'alpha_messages_agent_framework' },
  },
  {
    what: 'alpha on /v1/chat/completions',
    endpoint: 'chat',
    model: 'alpha-sonnet-4-6',
    refuses: { third_party: 'alpha_chat_third_party', agent_framework: 'alpha_chat_agent_framework' },
  },
  { what: 'beta on /v1/chat/completions', endpoint: 'chat', model: 'beta-5.6-sol', refuses: {} },
  { what: 'gamma on /v1/chat/completions', endpoint: 'chat', model: 'gamma-k3', refuses: {} },
];

const PATHS: Record<Endpoint, string> = {
  messages: '/v1/messages',
  count_tokens: '/v1/messages/count_tokens',
  chat: '/v1/chat/completions',
};

function bodyOf(endpoint: Endpoint, model: string): unknown {
  const messages = [{ role: 'user', content: 'hi #sim:tokens=3' }];
  return endpoint === 'count_tokens' ? { model, messages } : { model, max_tokens: 16, messages };
}

/**
 * The client name the gateway gave each call, by request id. The host app keeps every request it sees (its
 * onRequest hook runs before the gateway's); the gateway names the client before any byte of the answer is sent.
 */
const requests: FastifyRequest[] = [];
const clientOf = {
  get: (id: string) => requests.find((r) => r.farebox?.id === id)?.farebox?.client,
};
const h = await startHarness({
  chains: true,
  configure: (app) => {
    app.addHook('onRequest', async (request) => {
      requests.push(request);
    });
  },
});
t.teardown(async () => {
  await h.close();
  await closeDevChains();
});
await h.fund('chain_a', 50_000_000n);
const errorSchema = validator('ErrorResponse');

function call(
  g: Harness,
  endpoint: Endpoint,
  model: string,
  headers: Readonly<Record<string, string>>,
  key = g.key,
): Promise<Response> {
  return fetch(`${g.url}${PATHS[endpoint]}`, {
    method: 'POST',
    headers: { ...headers, authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(bodyOf(endpoint, model)),
  });
}

interface ErrorBody {
  type?: string;
  error: { type: string; code: string; message: string };
}

/** Every property of a refusal: status, shape per protocol, code, rule, headers, and nothing reached the upstream or billing. */
async function assertRefused(
  t: Test,
  g: Harness,
  res: Response,
  endpoint: Endpoint,
  rule: ClientRuleId,
  upstreamBefore: number,
) {
  t.equal(res.status, 403);
  const id = res.headers.get('x-request-id');
  t.match(id, /^req_[0-9a-f]{32}$/, 'x-request-id');
  t.equal(res.headers.get('x-should-retry'), 'false');
  const body = (await res.json()) as ErrorBody;
  if (endpoint === 'chat') {
    t.same(errorSchema(body), [], 'OpenAI error shape');
    t.notOk('type' in body);
  } else {
    t.equal(body.type, 'error', 'Anthropic error shape');
  }
  t.equal(body.error.type, 'permission_error');
  t.equal(body.error.code, 'unsupported_client');
  t.match(body.error.message, `(rule ${rule})`, 'the message names the rule');
  t.equal(g.sim.received.length, upstreamBefore, 'the upstream never saw it');
  t.equal(await getCallRecord(g.redis, id!), null, 'no call record');
  t.equal(res.headers.get('x-gw-billing-chain'), null, 'never reached the funds gate');
}

t.test('refusals hold and charge nothing: the wallet and the usage records are untouched', async (t) => {
  const before = await readWallet(h.redis, h.account, 'chain_a');
  t.ok(before.available > 0n, 'funded');
  const refused = SAMPLES.filter((s) => s.class === 'third_party' || s.class === 'agent_framework');
  for (const rule of RULES.filter((r) => Object.keys(r.refuses).length > 0)) {
    for (const s of refused) {
      const n = h.sim.received.length;
      const res = await call(h, rule.endpoint, rule.model, s.headers);
      await assertRefused(t, h, res, rule.endpoint, rule.refuses[s.class]!, n);
    }
  }
  t.same(await readWallet(h.redis, h.account, 'chain_a'), before, 'synced, held, pending, available unchanged');
  t.same(await listUsage(h.redis, h.account), [], 'no usage record');
});

t.test(
  'the client rule comes before the funds gate: an unfunded account gets 403 for a refused client, 402 otherwise',
  async (t) => {
    const poor = await createAccount(h.redis, {});
    const { key } = await createKey(h.redis, poor.address);
    const opencode = SAMPLES.find((s) => s.name === 'opencode')!;
    const n = h.sim.received.length;
    await assertRefused(
      t,
      h,
      await call(h, 'messages', 'alpha-sonnet-4-6', opencode.headers, key),
      'messages',
      'alpha_messages_third_party',
      n,
    );
    const direct = await call(h, 'messages', 'alpha-sonnet-4-6', { 'user-agent': 'curl/8.5.0' }, key);
    t.equal(direct.status, 402);
    t.equal(((await direct.json()) as ErrorBody).error.code, 'insufficient_funds');
  },
);

for (const rule of RULES) {
  t.test(
    `${rule.what}: ${['direct', 'coding_agent', 'third_party', 'agent_framework'].map((c) => `${c} ${rule.refuses[c as ClientClass] ? '403' : 'passes'}`).join(', ')}`,
    async (t) => {
      for (const s of SAMPLES) {
        const n = h.sim.received.length;
        const res = await call(h, rule.endpoint, rule.model, s.headers);
        const id = res.headers.get('x-request-id')!;
        const refusedBy = rule.refuses[s.class];
        if (refusedBy) {
          await assertRefused(t, h, res, rule.endpoint, refusedBy, n);
        } else {
          t.equal(res.status, 200, `${s.client} passes`);
          await res.arrayBuffer();
          t.equal(h.sim.received.length, n + 1, 'the upstream was called');
          if (rule.endpoint !== 'count_tokens') t.equal(res.headers.get('x-gw-billing-chain'), 'chain_a', 'billed');
        }
        t.equal(clientOf.get(id), s.name, `${s.client} recognised as ${s.name} (${s.source})`);
      }
    },
  );
}

t.test(
  'official JS SDKs are direct: the Anthropic SDK on messages and count_tokens, the OpenAI SDK on alpha, beta, gamma',
  async (t) => {
    const anthropic = new Anthropic({ baseURL: h.url, apiKey: h.key, maxRetries: 0 });
    const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 0 });
    const m = await anthropic.messages
      .create({ model: 'alpha-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user', content: 'hi #sim:tokens=4' }] })
      .withResponse();
    t.equal(m.data.usage.output_tokens, 4);
    t.equal(clientOf.get(m.response.headers.get('x-request-id')!), 'anthropic-js');
    const c = await anthropic.messages
      .countTokens({ model: 'alpha-opus-4-6', messages: [{ role: 'user', content: 'count me' }] })
      .withResponse();
    t.ok(c.data.input_tokens > 0);
    t.equal(clientOf.get(c.response.headers.get('x-request-id')!), 'anthropic-js');
    for (const model of ['alpha-sonnet-4-6', 'beta-5.6-sol', 'gamma-k3']) {
      const r = await openai.chat.completions
        .create({ model, max_tokens: 16, messages: [{ role: 'user', content: 'hi #sim:tokens=2' }] })
        .withResponse();
      t.equal(r.data.usage?.completion_tokens, 2, model);
      t.equal(clientOf.get(r.response.headers.get('x-request-id')!), 'openai-js');
    }
  },
);

t.test(
  'the SDKs as frameworks and third-party clients configure them: typed PermissionDeniedError on alpha, beta and gamma pass',
  async (t) => {
    // @langchain/openai and the OpenAI Agents SDK (JS) hand the openai SDK their own User-Agent; Cline its
    // HTTP-Referer and X-Title (sources in SAMPLES). AnythingLLM sets its UA on the Anthropic SDK (PR #5174).
    const cases = [
      {
        name: 'langchain',
        headers: { 'User-Agent': 'langchainjs-openai/1.0.0 ((node/v20.19.4; linux; x64))' },
        rule: 'alpha_chat_agent_framework',
        gamma: true,
      },
      {
        name: 'openai-agents',
        headers: { 'User-Agent': 'Agents/JavaScript 0.9.1' },
        rule: 'alpha_chat_agent_framework',
        gamma: true,
      },
      {
        name: 'cline',
        headers: { 'HTTP-Referer': 'https://cline.bot', 'X-Title': 'Cline' },
        rule: 'alpha_chat_third_party',
        gamma: true,
      },
    ];
    for (const c of cases) {
      const openai = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: h.key, maxRetries: 2, defaultHeaders: c.headers });
      const n = h.sim.received.length;
      const e = await openai.chat.completions
        .create({ model: 'alpha-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
        .catch((x: unknown) => x);
      t.ok(e instanceof OpenAI.PermissionDeniedError, `${c.name}: OpenAI.PermissionDeniedError`);
      const pe = e as InstanceType<typeof OpenAI.PermissionDeniedError>;
      t.equal(pe.status, 403);
      t.match(pe.error, { code: 'unsupported_client', type: 'permission_error', message: `(rule ${c.rule})` });
      t.equal(clientOf.get(pe.requestID ?? pe.headers?.get('x-request-id') ?? ''), c.name);
      t.equal(h.sim.received.length, n, 'not retried, never upstream');
      for (const model of ['beta-5.6-sol', 'gamma-k3']) {
        const ok = await openai.chat.completions.create({
          model,
          max_tokens: 16,
          messages: [{ role: 'user', content: 'hi' }],
        });
        t.equal(ok.object, 'chat.completion', `${c.name} on ${model} passes`);
      }
    }
    const anythingllm = new Anthropic({
      baseURL: h.url,
      apiKey: h.key,
      maxRetries: 2,
      defaultHeaders: { 'User-Agent': 'AnythingLLM/1.9.1' },
    });
    const n = h.sim.received.length;
    const ae = await anythingllm.messages
      .create({ model: 'alpha-haiku-4-5', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
      .catch((x: unknown) => x);
    t.ok(ae instanceof Anthropic.PermissionDeniedError, 'Anthropic.PermissionDeniedError');
    const pe = ae as InstanceType<typeof Anthropic.PermissionDeniedError>;
    t.match(pe.error, {
      type: 'error',
      error: { type: 'permission_error', code: 'unsupported_client', message: '(rule alpha_messages_third_party)' },
    });
    t.equal(h.sim.received.length, n);
    // Claude Code is built on this SDK: the same SDK with its headers is the coding agent and passes.
    const cc = SAMPLES.find((s) => s.class === 'coding_agent')!;
    const claude = new Anthropic({
      baseURL: h.url,
      authToken: h.key,
      apiKey: null,
      maxRetries: 0,
      defaultHeaders: { ...cc.headers },
    });
    const ok = await claude.messages
      .create({ model: 'alpha-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user', content: 'hi #sim:tokens=2' }] })
      .withResponse();
    t.equal(ok.data.usage.output_tokens, 2);
    t.equal(clientOf.get(ok.response.headers.get('x-request-id')!), 'claude-code');
  },
);

t.test('operator signatures from the config take effect, checked before the built-in ones', async (t) => {
  const g = await startHarness({
    edit: (cfg) => {
      cfg.clients = [
        { name: 'acme-agent', class: 'agent_framework', header: 'X-Acme-Agent', contains: 'bot' },
        { name: 'opencode-internal', class: 'direct', header: 'user-agent', regex: '^opencode/\\S+ internal' },
        // A coding_agent entry is held to Claude Code's corroboration (policies/clients.ts rule 3).
        { name: 'my-agent', class: 'coding_agent', header: 'user-agent', regex: '^my-agent/' },
      ];
    },
  });
  t.teardown(() => g.close());
  const acme = { 'user-agent': 'curl/8.5.0', 'x-acme-agent': 'Acme BOT 2.1' };
  let n = g.sim.received.length;
  await assertRefused(
    t,
    g,
    await call(g, 'messages', 'alpha-sonnet-4-6', acme),
    'messages',
    'alpha_messages_agent_framework',
    n,
  );
  n = g.sim.received.length;
  await assertRefused(t, g, await call(g, 'chat', 'alpha-sonnet-4-6', acme), 'chat', 'alpha_chat_agent_framework', n);
  t.equal((await call(g, 'chat', 'gamma-k3', acme)).status, 200, 'a framework passes on gamma');
  t.equal(
    (await call(h, 'messages', 'alpha-sonnet-4-6', acme)).status,
    200,
    'without the entry the same request is curl, direct',
  );

  t.equal(
    (await call(g, 'messages', 'alpha-sonnet-4-6', { 'user-agent': 'opencode/0.15.8 internal' })).status,
    200,
    'operator entry wins over opencode',
  );
  n = g.sim.received.length;
  await assertRefused(
    t,
    g,
    await call(g, 'messages', 'alpha-sonnet-4-6', { 'user-agent': 'opencode/0.15.8' }),
    'messages',
    'alpha_messages_third_party',
    n,
  );

  n = g.sim.received.length;
  await assertRefused(
    t,
    g,
    await call(g, 'messages', 'alpha-sonnet-4-6', { 'user-agent': 'my-agent/1.0' }),
    'messages',
    'alpha_messages_third_party',
    n,
  );
});
