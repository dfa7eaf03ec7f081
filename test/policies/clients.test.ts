import t from 'tap';
import {
  buildSignatures,
  classifyClient,
  clientSignatureSchema,
  DEFAULT_SIGNATURES,
  type ClientClass,
  type RequestHeaders,
} from '../../policies/clients.js';

interface Row {
  readonly client: string;
  /** Where the sample (or the rule that builds it) was read. */
  readonly source: string;
  readonly headers: RequestHeaders;
  readonly class: ClientClass;
  readonly name: string;
}

const CC_BETA = 'claude-code-20250219,interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14';
const STAINLESS_JS = {
  'x-stainless-lang': 'js',
  'x-stainless-package-version': '0.68.0',
  'x-stainless-os': 'MacOS',
  'x-stainless-arch': 'arm64',
  'x-stainless-runtime': 'node',
  'x-stainless-runtime-version': 'v22.17.0',
  'x-stainless-retry-count': '0',
};
const STAINLESS_PY = {
  'x-stainless-lang': 'python',
  'x-stainless-package-version': '1.99.9',
  'x-stainless-os': 'Linux',
  'x-stainless-arch': 'x64',
  'x-stainless-runtime': 'CPython',
  'x-stainless-runtime-version': '3.12.3',
  'x-stainless-async': 'false',
};

// One row per client, each as the client sends it.
const ROWS: readonly Row[] = [
  // --- the recommended coding agent ---
  {
    client: 'Claude Code 2.0.36, interactive (no session id yet)',
    source: 'capture in claudish ai_docs/PROTOCOL_SPECIFICATION.md (headers of a real session)',
    headers: {
      accept: 'application/json',
      'anthropic-beta': CC_BETA,
      'anthropic-dangerous-direct-browser-access': 'true',
      'anthropic-version': '2023-06-01',
      'content-type': 'application/json',
      'user-agent': 'claude-cli/2.0.36 (external, cli)',
      'x-app': 'cli',
      'x-stainless-helper-method': 'stream',
      ...STAINLESS_JS,
    },
    class: 'coding_agent',
    name: 'claude-code',
  },
  {
    client: 'Claude Code 2.1.278, -p (sdk-cli)',
    source: 'louisphamdev/intact docs/class-a-claude.md capture + measured X-Claude-Code-Session-Id',
    headers: {
      'user-agent': 'claude-cli/2.1.278 (external, sdk-cli)',
      'x-app': 'cli',
      'anthropic-dangerous-direct-browser-access': 'true',
      'anthropic-version': '2023-06-01',
      'anthropic-beta': `${CC_BETA},context-management-2025-06-27`,
      'x-claude-code-session-id': '0197a1c2-7e4b-7d2a-9c1e-3f5b8a6d4e21',
      ...STAINLESS_JS,
    },
    class: 'coding_agent',
    name: 'claude-code',
  },
  {
    client: 'Claude Code internal call without the claude-code beta',
    source: 'measured: session id on every request since 2.1.86 (ranxianglei/billion-context PR #92)',
    headers: {
      'user-agent': 'claude-cli/2.1.211 (external, cli)',
      'x-app': 'cli',
      'anthropic-beta': 'token-counting-2024-11-01',
      'x-claude-code-session-id': '3c1f0e2a-55b1-4f0e-9d55-8d1c2b7a9e10',
      ...STAINLESS_JS,
    },
    class: 'coding_agent',
    name: 'claude-code',
  },
  // --- spoofed coding-agent claims ---
  {
    client: 'Python client copying the claude-cli UA (no x-app)',
    source: 'public Python proxy sending "claude-cli/2.1.220 (external, cli)" with its own beta list',
    headers: {
      'anthropic-version': '2023-06-01',
      'anthropic-beta': 'interleaved-thinking-2025-05-14,code-execution-2025-05-22,extended-cache-ttl-2025-04-11',
      'user-agent': 'claude-cli/2.1.220 (external, cli)',
    },
    class: 'third_party',
    name: 'claude-code (unverified)',
  },
  {
    client: 'Python SDK client copying UA, x-app and beta',
    source: 'public Python provider setting user-agent claude-cli/<v>, x-app: cli, claude-code beta over anthropic SDK',
    headers: {
      'user-agent': 'claude-cli/2.1.77',
      'x-app': 'cli',
      'anthropic-beta': 'claude-code-20250219,oauth-2025-04-20',
      ...STAINLESS_PY,
    },
    class: 'third_party',
    name: 'claude-code (unverified)',
  },
  {
    client: 'Full copy of Claude Code headers from a non-JS SDK',
    source: 'rule 3: X-Stainless-Lang python contradicts Claude Code (TypeScript SDK)',
    headers: {
      'user-agent': 'claude-cli/2.1.220 (external, cli)',
      'x-app': 'cli',
      'anthropic-beta': CC_BETA,
      'x-claude-code-session-id': 'a8f5f167-0e2d-4c8a-9b6e-1f2d3c4b5a69',
      ...STAINLESS_PY,
    },
    class: 'third_party',
    name: 'claude-code (unverified)',
  },
  {
    client: 'opencode on the Anthropic provider with the claude-code beta',
    source: 'sst/opencode session/llm.ts (UA) + vercel/ai with-user-agent-suffix.ts (ai-sdk suffix)',
    headers: {
      'user-agent': 'opencode/0.15.8 ai-sdk/anthropic/2.0.23 ai-sdk/provider-utils/3.0.10 runtime/bun/1.2.22',
      'anthropic-beta': CC_BETA,
      'anthropic-version': '2023-06-01',
      'x-session-affinity': 'ses_6a1f0c2e9ffe',
    },
    class: 'third_party',
    name: 'opencode',
  },
  // --- third-party coding clients and chat apps ---
  {
    client: 'opencode on its own providers',
    source: 'sst/opencode packages/opencode/src/session/llm.ts',
    headers: {
      'x-opencode-project': 'global',
      'x-opencode-session': 'ses_7c1a2b3d4e5f',
      'x-opencode-request': 'msg_0123456789abcdef0123456789',
      'x-opencode-client': 'cli',
      'user-agent': 'ai-sdk/openai-compatible/1.0.19 ai-sdk/provider-utils/3.0.10 runtime/bun/1.2.22',
    },
    class: 'third_party',
    name: 'opencode',
  },
  {
    client: 'Cline 4.1.16 (VS Code, AI SDK transport)',
    source: 'cline/cline src/services/EnvUtils.ts (UA, X-* host headers) + vercel/ai suffix',
    headers: {
      'user-agent':
        'Cline/4.1.16 ai-sdk/openai-compatible/3.0.30 ai-sdk/provider-utils/5.0.27 runtime/node.js/v24.18.1',
      'x-client-type': 'VSCode Extension',
      'x-client-version': '4.1.16',
      'x-core-version': '0.0.79',
      'x-platform': 'Visual Studio Code',
      'x-title': 'Cline',
      'http-referer': 'https://cline.bot',
    },
    class: 'third_party',
    name: 'cline',
  },
  {
    client: 'Cline (OpenAI SDK providers)',
    source: 'cline/cline src/core/api/providers/zai.ts defaultHeaders',
    headers: {
      'user-agent': 'OpenAI/JS 4.96.0',
      'http-referer': 'https://cline.bot',
      'x-title': 'Cline',
      'x-cline-version': '3.17.5',
      ...STAINLESS_JS,
    },
    class: 'third_party',
    name: 'cline',
  },
  {
    client: 'Roo Code (OpenAI-compatible provider)',
    source: 'RooCodeInc/Roo-Code src/api/providers/constants.ts DEFAULT_HEADERS',
    headers: {
      'http-referer': 'https://github.com/RooVetGit/Roo-Cline',
      'x-title': 'Roo Code',
      'user-agent': 'RooCode/3.25.11',
      ...STAINLESS_JS,
    },
    class: 'third_party',
    name: 'roo-code',
  },
  {
    client: 'Kilo Code',
    source: 'Kilo-Org/kilocode src/api/providers/constants.ts DEFAULT_HEADERS',
    headers: {
      'http-referer': 'https://kilocode.ai',
      'x-title': 'Kilo Code',
      'x-kilocode-version': '4.84.0',
      'user-agent': 'Kilo-Code/4.84.0',
      ...STAINLESS_JS,
    },
    class: 'third_party',
    name: 'kilo-code',
  },
  {
    client: 'Continue (OpenRouter route)',
    source: 'continuedev/continue packages/openai-adapters/src/apis/OpenRouter.ts',
    headers: { 'http-referer': 'https://www.continue.dev/', 'x-title': 'Continue', 'user-agent': 'node' },
    class: 'third_party',
    name: 'continue',
  },
  {
    client: 'aider (OpenRouter route through litellm)',
    source: 'Aider-AI/aider aider/llm.py OR_SITE_URL / OR_APP_NAME',
    headers: {
      'http-referer': 'https://aider.chat',
      'x-title': 'Aider',
      'user-agent': 'OpenAI/Python 1.99.9',
      ...STAINLESS_PY,
    },
    class: 'third_party',
    name: 'aider',
  },
  {
    client: 'Zed',
    source: 'zed-industries/zed crates/zed/src/main.rs',
    headers: { 'user-agent': 'Zed/0.201.4 (macos; aarch64)', 'content-type': 'application/json' },
    class: 'third_party',
    name: 'zed',
  },
  {
    client: 'Codex CLI',
    source: 'openai/codex codex-rs/core/src/default_client.rs',
    headers: { originator: 'codex_cli_rs', 'user-agent': 'codex_cli_rs/0.59.0 (Ubuntu 24.04; x86_64) tmux/3.4' },
    class: 'third_party',
    name: 'codex-cli',
  },
  {
    client: 'SWE-agent (litellm extra_headers)',
    source: 'SWE-agent/SWE-agent sweagent/agent/models.py (PR #1346)',
    headers: { 'user-agent': 'swe-agent/1.1.0', ...STAINLESS_PY },
    class: 'third_party',
    name: 'swe-agent',
  },
  {
    client: 'Open WebUI forwarding user info',
    source: 'open-webui/open-webui backend/open_webui/routers/openai.py (aiohttp backend)',
    headers: {
      'user-agent': 'Python/3.11 aiohttp/3.12.15',
      'x-openwebui-user-name': 'Ada',
      'x-openwebui-user-id': '5f0c7f8e-1b1a-4c1e-9a63-0c9f1a2b3c4d',
      'x-openwebui-user-email': 'ada@example.com',
      'x-openwebui-user-role': 'user',
    },
    class: 'third_party',
    name: 'open-webui',
  },
  {
    client: 'LibreChat (OpenRouter route over LangChain.js)',
    source: 'danny-avila/LibreChat packages/api/src/endpoints/openai/config.ts',
    headers: {
      'user-agent': 'langchainjs-openai/1.0.0 ((node/v20.19.4; linux; x64))',
      'http-referer': 'https://librechat.ai',
      'x-title': 'LibreChat',
      ...STAINLESS_JS,
    },
    class: 'third_party',
    name: 'librechat',
  },
  {
    client: 'AnythingLLM (Anthropic provider)',
    source: 'Mintplex-Labs/anything-llm PR #5174',
    headers: { 'user-agent': 'AnythingLLM/1.9.1', 'anthropic-version': '2023-06-01', ...STAINLESS_JS },
    class: 'third_party',
    name: 'anythingllm',
  },
  // --- agent frameworks ---
  {
    client: 'LangChain.js ChatOpenAI',
    source: 'langchain-ai/langchainjs libs/providers/langchain-openai/src/utils/azure.ts (seen in an OTel trace)',
    headers: { 'user-agent': 'langchainjs-openai/1.0.0 ((node/v20.18.0; win32; x64))', ...STAINLESS_JS },
    class: 'agent_framework',
    name: 'langchain',
  },
  {
    client: 'LangChain Python ChatAnthropic',
    source: 'langchain-ai/langchain libs/partners/anthropic/langchain_anthropic/chat_models.py (PR #35268)',
    headers: {
      'user-agent': 'langchain-anthropic/1.1.0',
      'anthropic-version': '2023-06-01',
      ...STAINLESS_PY,
      'x-stainless-async': 'async:asyncio',
    },
    class: 'agent_framework',
    name: 'langchain',
  },
  {
    client: 'LlamaIndex NVIDIA LLM',
    source: 'run-llama/llama_index llama-index-integrations/llms/llama-index-llms-nvidia',
    headers: { 'user-agent': 'llama-index-llms-nvidia', ...STAINLESS_PY },
    class: 'agent_framework',
    name: 'llamaindex',
  },
  {
    client: 'OpenAI Agents SDK (Python)',
    source: 'openai/openai-agents-python src/agents/models/openai_responses.py _USER_AGENT',
    headers: { 'user-agent': 'Agents/Python 0.3.2', ...STAINLESS_PY, 'x-stainless-async': 'async:asyncio' },
    class: 'agent_framework',
    name: 'openai-agents',
  },
  {
    client: 'OpenAI Agents SDK (JS)',
    source: 'openai/openai-agents-js packages/agents-openai/src/defaults.ts HEADERS',
    headers: { 'user-agent': 'Agents/JavaScript 0.9.1', ...STAINLESS_JS },
    class: 'agent_framework',
    name: 'openai-agents',
  },
  {
    client: 'Vercel AI SDK (@ai-sdk/anthropic)',
    source: 'vercel/ai packages/anthropic/src/anthropic-provider.ts + provider-utils with-user-agent-suffix.ts',
    headers: {
      'user-agent': 'ai-sdk/anthropic/3.0.103 ai-sdk/provider-utils/4.0.40 runtime/node.js/v24.4.1',
      'anthropic-version': '2023-06-01',
    },
    class: 'agent_framework',
    name: 'vercel-ai-sdk',
  },
  {
    client: 'Pydantic AI (OpenAI model)',
    source: 'pydantic/pydantic-ai pydantic_ai_slim/pydantic_ai/models/openai.py extra_headers',
    headers: { 'user-agent': 'pydantic-ai/1.0.10', ...STAINLESS_PY, 'x-stainless-async': 'async:asyncio' },
    class: 'agent_framework',
    name: 'pydantic-ai',
  },
  {
    client: 'Mastra (Anthropic)',
    source: 'mastra-ai/mastra PR #13087',
    headers: { 'user-agent': 'mastra/1.0.4', 'anthropic-version': '2023-06-01' },
    class: 'agent_framework',
    name: 'mastra',
  },
  // --- direct: official SDKs, curl, HTTP libraries ---
  {
    client: 'OpenAI Python SDK (sync)',
    source: 'openai/openai-python src/openai/_base_client.py user_agent + _client.py X-Stainless-Async',
    headers: { 'user-agent': 'OpenAI/Python 1.99.9', ...STAINLESS_PY },
    class: 'direct',
    name: 'openai-python',
  },
  {
    client: 'OpenAI Python SDK (async)',
    source: 'openai/openai-python src/openai/_client.py AsyncOpenAI default_headers',
    headers: { 'user-agent': 'AsyncOpenAI/Python 1.99.9', ...STAINLESS_PY, 'x-stainless-async': 'async:asyncio' },
    class: 'direct',
    name: 'openai-python',
  },
  {
    client: 'Anthropic Python SDK (sync)',
    source: 'anthropics/anthropic-sdk-python src/anthropic/_base_client.py user_agent',
    headers: { 'user-agent': 'Anthropic/Python 0.69.0', 'anthropic-version': '2023-06-01', ...STAINLESS_PY },
    class: 'direct',
    name: 'anthropic-python',
  },
  {
    client: 'Anthropic Python SDK (async)',
    source: 'anthropics/anthropic-sdk-python src/anthropic/_client.py AsyncAnthropic',
    headers: { 'user-agent': 'AsyncAnthropic/Python 0.69.0', ...STAINLESS_PY, 'x-stainless-async': 'async:asyncio' },
    class: 'direct',
    name: 'anthropic-python',
  },
  {
    client: 'Azure OpenAI JS client',
    source: 'openai/openai-node src/client.ts getUserAgent (constructor name)',
    headers: { 'user-agent': 'AzureOpenAI/JS 6.49.0', ...STAINLESS_JS },
    class: 'direct',
    name: 'openai-js',
  },
  {
    client: 'litellm (its own httpx handler)',
    source: 'BerriAI/litellm get_default_headers (issue #19017)',
    headers: { 'user-agent': 'litellm/1.77.3', 'anthropic-version': '2023-06-01' },
    class: 'direct',
    name: 'litellm',
  },
  {
    client: 'another Stainless SDK (OpenAI Go)',
    source: 'X-Stainless-* headers of Stainless-generated SDKs',
    headers: { 'user-agent': 'OpenAI/Go 1.12.0', 'x-stainless-lang': 'go', 'x-stainless-runtime': 'go' },
    class: 'direct',
    name: 'stainless-sdk',
  },
  {
    client: 'curl',
    source: 'curl/curl src/tool_version.h',
    headers: { 'user-agent': 'curl/8.5.0', accept: '*/*' },
    class: 'direct',
    name: 'curl',
  },
  {
    client: 'python-requests',
    source: 'psf/requests src/requests/utils.py',
    headers: { 'user-agent': 'python-requests/2.32.3' },
    class: 'direct',
    name: 'python-requests',
  },
  {
    client: 'httpx',
    source: 'encode/httpx httpx/_client.py',
    headers: { 'user-agent': 'python-httpx/0.28.1' },
    class: 'direct',
    name: 'httpx',
  },
  {
    client: 'aiohttp',
    source: 'aio-libs/aiohttp aiohttp/http.py',
    headers: { 'user-agent': 'Python/3.12 aiohttp/3.10.5' },
    class: 'direct',
    name: 'aiohttp',
  },
  {
    client: 'node-fetch v2',
    source: 'node-fetch/node-fetch src/index.js',
    headers: { 'user-agent': 'node-fetch/1.0 (+https://github.com/bitinn/node-fetch)' },
    class: 'direct',
    name: 'node-fetch',
  },
  {
    client: 'axios',
    source: 'axios/axios lib/adapters/http.js',
    headers: { 'user-agent': 'axios/1.7.9' },
    class: 'direct',
    name: 'axios',
  },
  {
    client: 'Go net/http',
    source: 'golang/go src/net/http/request.go',
    headers: { 'user-agent': 'Go-http-client/1.1' },
    class: 'direct',
    name: 'go-http-client',
  },
  {
    client: 'OkHttp',
    source: 'square/okhttp userAgent',
    headers: { 'user-agent': 'okhttp/4.12.0' },
    class: 'direct',
    name: 'okhttp',
  },
  {
    client: 'no user-agent',
    source: 'rule 4',
    headers: { 'content-type': 'application/json' },
    class: 'direct',
    name: 'unknown',
  },
  {
    client: 'unknown script',
    source: 'rule 4',
    headers: {
      'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0 Safari/537.36',
    },
    class: 'direct',
    name: 'unknown',
  },
];

for (const row of ROWS) {
  t.test(`${row.client} -> ${row.class} (${row.name})`, async (t) => {
    t.same(classifyClient(row.headers), { class: row.class, name: row.name }, row.source);
  });
}

t.test('framework marker wins over the official SDK it wraps', async (t) => {
  // LangChain.js sends through the openai SDK: X-Stainless-* headers stay, the UA is LangChain's.
  const sdk = { 'user-agent': 'OpenAI/JS 6.49.0', ...STAINLESS_JS };
  t.same(classifyClient(sdk), { class: 'direct', name: 'openai-js' });
  t.same(classifyClient({ ...sdk, 'user-agent': 'langchainjs-openai/1.0.0 ((node/v20.19.4; linux; x64))' }), {
    class: 'agent_framework',
    name: 'langchain',
  });
});

t.test('a third-party or framework marker beside a genuine-looking Claude Code claim wins', async (t) => {
  const cc = {
    'user-agent': 'claude-cli/2.1.278 (external, cli)',
    'x-app': 'cli',
    'anthropic-beta': CC_BETA,
    'x-claude-code-session-id': '0197a1c2-7e4b-7d2a-9c1e-3f5b8a6d4e21',
  };
  t.same(classifyClient(cc), { class: 'coding_agent', name: 'claude-code' });
  t.same(classifyClient({ ...cc, 'x-title': 'Roo Code' }), { class: 'third_party', name: 'roo-code' });
  t.same(classifyClient({ ...cc, 'x-opencode-session': 'ses_1' }), { class: 'third_party', name: 'opencode' });
});

t.test('coding-agent corroboration: each missing signal makes the claim unverified', async (t) => {
  const full = {
    'user-agent': 'claude-cli/2.1.278 (external, cli)',
    'x-app': 'cli',
    'anthropic-beta': CC_BETA,
    'x-claude-code-session-id': 'sid',
  };
  const unverified = { class: 'third_party', name: 'claude-code (unverified)' };
  t.same(classifyClient({ ...full, 'x-app': undefined }), unverified, 'no x-app');
  t.same(classifyClient({ ...full, 'x-app': 'desktop' }), unverified, 'other x-app');
  t.same(classifyClient({ ...full, 'user-agent': 'claude-cli/2.1.278' }), unverified, 'UA without (external, ...)');
  t.same(
    classifyClient({ ...full, 'user-agent': 'claude-cli/latest (external, cli)' }),
    unverified,
    'UA without semver',
  );
  t.same(
    classifyClient({ ...full, 'anthropic-beta': 'oauth-2025-04-20', 'x-claude-code-session-id': '' }),
    unverified,
    'neither beta nor session',
  );
  t.same(classifyClient({ ...full, 'x-stainless-lang': 'python' }), unverified, 'non-JS SDK');
  t.same(
    classifyClient({ ...full, 'anthropic-beta': undefined }),
    { class: 'coding_agent', name: 'claude-code' },
    'session id alone suffices',
  );
  t.same(
    classifyClient({ ...full, 'x-claude-code-session-id': undefined }),
    { class: 'coding_agent', name: 'claude-code' },
    'beta alone suffices',
  );
});

t.test('headers repeated as arrays are matched element by element', async (t) => {
  t.same(classifyClient({ 'user-agent': ['curl/8.5.0'] }), { class: 'direct', name: 'curl' });
  t.same(
    classifyClient({
      'user-agent': ['claude-cli/2.1.278 (external, cli)'],
      'x-app': ['cli'],
      'anthropic-beta': ['oauth-2025-04-20', 'claude-code-20250219'],
    }),
    { class: 'coding_agent', name: 'claude-code' },
  );
});

t.test('results are preallocated: the same object for the same signature', async (t) => {
  const a = classifyClient({ 'user-agent': 'curl/8.5.0' });
  const b = classifyClient({ 'user-agent': 'curl/7.88.1' });
  t.equal(a, b);
  t.ok(Object.isFrozen(a));
  t.equal(classifyClient({}), classifyClient({ 'user-agent': 'x' }));
});

t.test('operator entries from buildSignatures are checked first and win', async (t) => {
  const list = buildSignatures([
    { name: 'acme-bot', class: 'agent_framework', header: 'X-Acme-Agent', contains: 'v2' },
    { name: 'internal-langchain', class: 'direct', header: 'user-agent', regex: '^langchainjs-openai/.*acme' },
  ]);
  t.ok(Object.isFrozen(list));
  t.equal(list.length, DEFAULT_SIGNATURES.length + 2);
  t.same(
    classifyClient({ 'user-agent': 'curl/8.5.0', 'x-acme-agent': 'acme V2.1' }, list),
    {
      class: 'agent_framework',
      name: 'acme-bot',
    },
    'contains is case-insensitive; header name lower-cased',
  );
  t.same(classifyClient({ 'user-agent': 'langchainjs-openai/1.0.0 (acme)' }, list), {
    class: 'direct',
    name: 'internal-langchain',
  });
  t.same(classifyClient({ 'user-agent': 'langchainjs-openai/1.0.0 (other)' }, list), {
    class: 'agent_framework',
    name: 'langchain',
  });
  t.same(
    classifyClient({ 'user-agent': 'curl/8.5.0' }, list),
    { class: 'direct', name: 'curl' },
    'defaults still apply',
  );
});

t.test('operator regexes with alternation or an optional first char still match anywhere they should', async (t) => {
  const list = buildSignatures([
    { name: 'alt', class: 'third_party', header: 'user-agent', regex: '^zzz|acme-tool' },
    { name: 'opt', class: 'third_party', header: 'user-agent', regex: '^x?yoyo/' },
  ]);
  t.same(classifyClient({ 'user-agent': 'my acme-tool/1' }, list), { class: 'third_party', name: 'alt' });
  t.same(classifyClient({ 'user-agent': 'yoyo/2' }, list), { class: 'third_party', name: 'opt' });
  t.same(
    classifyClient({ 'user-agent': 'OPENAI/JS 6.0.0' }, list),
    { class: 'direct', name: 'openai-js' },
    'case-insensitive',
  );
});

t.test('an operator coding_agent entry is held to the same corroboration', async (t) => {
  const list = buildSignatures([
    { name: 'cc-wrapper', class: 'coding_agent', header: 'user-agent', regex: '^cc-wrapper/' },
  ]);
  t.same(classifyClient({ 'user-agent': 'cc-wrapper/1.0' }, list), {
    class: 'third_party',
    name: 'cc-wrapper (unverified)',
  });
});

t.test('clientSignatureSchema rejects malformed operator entries', async (t) => {
  const ok = { name: 'x', class: 'third_party', header: 'user-agent', contains: 'x/' };
  t.ok(clientSignatureSchema.safeParse(ok).success);
  t.equal(clientSignatureSchema.parse({ ...ok, header: 'X-Title' }).header, 'x-title');
  const bad: Array<[string, unknown]> = [
    ['both contains and regex', { ...ok, regex: '^x' }],
    ['neither contains nor regex', { name: 'x', class: 'direct', header: 'user-agent' }],
    ['invalid regex', { name: 'x', class: 'direct', header: 'user-agent', regex: '(' }],
    ['unknown class', { ...ok, class: 'browser' }],
    ['bad header name', { ...ok, header: 'user agent' }],
    ['unknown field', { ...ok, contain: 'typo' }],
    ['empty name', { ...ok, name: '' }],
  ];
  for (const [why, entry] of bad) t.notOk(clientSignatureSchema.safeParse(entry).success, why);
  t.throws(() => buildSignatures([{ name: 'x', class: 'direct', header: 'user-agent', regex: '(' }]));
});

t.test('every default signature is valid under the operator schema', async (t) => {
  for (const s of DEFAULT_SIGNATURES) {
    t.ok(clientSignatureSchema.safeParse(s).success, s.name);
    t.equal(s.header, s.header.toLowerCase(), `${s.name} header lower-case`);
  }
});

t.test('table order: products, then frameworks, then the coding agent, then direct', async (t) => {
  const rank = { third_party: 0, agent_framework: 1, coding_agent: 2, direct: 3 } as const;
  let last = 0;
  for (const s of DEFAULT_SIGNATURES) {
    t.ok(rank[s.class] >= last, `${s.name} (${s.class}) in order`);
    last = rank[s.class];
  }
});
