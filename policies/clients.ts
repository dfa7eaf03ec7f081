/**
 * Client recognition: which kind of client sent a request, read from the headers it sends.
 *
 * SPEC "Client and model-family rules" names four kinds of caller (direct requests, the
 * recommended coding-agent client, other third-party clients, agent frameworks);
 * Authentication 6 leaves how a client is recognised to us. What this policy trusts, and why:
 *
 * 1. Headers are claims, not proof. Any client can send any header, and some third-party
 *    clients copy Claude Code's user-agent to pass as it. We sort, we do not authenticate.
 * 2. One ordered table, first match wins. Products (third-party coding clients, chat apps)
 *    come first, then agent frameworks, then the coding agent, then SDKs and HTTP libraries.
 *    A product names what the user runs even when it sits on a framework (opencode and Cline
 *    append the Vercel AI SDK's `ai-sdk/...` suffix to their own UA); a framework's marker
 *    wins over the official SDK it wraps (LangChain.js sends through the `openai` SDK, with
 *    its X-Stainless-* headers, but its own UA). Operator entries are checked before all.
 * 3. coding_agent needs corroboration. The `claude-cli/` UA is only a claim; it counts when
 *    the UA has the measured form `claude-cli/<semver> (external, <entrypoint>...)`, `x-app`
 *    is `cli`, and the request carries `X-Claude-Code-Session-Id` or the `claude-code-20250219`
 *    beta (older builds send no session id; some internal calls may lack the beta), and no
 *    X-Stainless-Lang other than `js` (Claude Code is built on the TypeScript SDK). A claim that
 *    fails is a third-party client named `claude-code (unverified)`: the spec refuses those on
 *    alpha, and every Claude Code request we have seen passes. Every coding_agent entry, operator ones
 *    included, is held to this: the spec recommends exactly one coding-agent client.
 * 4. Nothing matched: direct. The spec's direct requests are "chat, single calls, SDK use";
 *    scripts with any HTTP library are the common case, and refusing unknown clients would
 *    refuse curl. Only a positive third-party or framework marker moves a request out of direct.
 *
 * Known limits: a client that copies every Claude Code header is taken for Claude Code; a
 * framework that adds no marker (LangChain Python over OpenAI, CrewAI, AutoGen) is direct.
 *
 * Hot path: runs on every call. Regexes are compiled once per signature list (cached by
 * array identity), results are preallocated frozen objects, no JSON is parsed.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { z } from 'zod';

/** The client classes of the spec's client rules. */
export const CLIENT_CLASSES = ['direct', 'coding_agent', 'third_party', 'agent_framework'] as const;

/** One of the spec's four kinds of caller. */
export type ClientClass = (typeof CLIENT_CLASSES)[number];

/** Request headers as Node delivers them (names lower-case). */
export type RequestHeaders = IncomingHttpHeaders | Readonly<Record<string, string | string[] | undefined>>;

/** The result of classifying one request; `name` is stable and safe for logs and metric labels. */
export interface ClientMatch {
  readonly class: ClientClass;
  readonly name: string;
}

function compiles(source: string): boolean {
  try {
    new RegExp(source, 'i');
    return true;
  } catch {
    return false;
  }
}

/**
 * One known signature, as operators write it in config: the header to read and either a
 * case-insensitive substring (`contains`) or a case-insensitive regular expression (`regex`).
 */
export const clientSignatureSchema = z
  .strictObject({
    name: z.string().min(1).max(64),
    class: z.enum(CLIENT_CLASSES),
    header: z
      .string()
      .max(64)
      .regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'must be an HTTP header name')
      .transform((h) => h.toLowerCase()),
    contains: z.string().min(1).max(256).optional(),
    regex: z.string().min(1).max(256).refine(compiles, 'must be a valid regular expression').optional(),
  })
  .refine((s) => (s.contains === undefined) !== (s.regex === undefined), {
    message: 'give exactly one of contains or regex',
  });

/** A validated client signature (header name lower-case). */
export type ClientSignature = z.infer<typeof clientSignatureSchema>;

function freezeAll(list: ClientSignature[]): readonly ClientSignature[] {
  return Object.freeze(list.map((s) => Object.freeze(s)));
}

/**
 * Known signatures, in precedence order (first match wins). Each line cites the public source
 * the signature was read from (repository, file). All patterns are case-insensitive.
 */
export const DEFAULT_SIGNATURES: readonly ClientSignature[] = freezeAll([
  // --- third-party coding clients and chat apps ---
  // sst/opencode packages/opencode/src/session/llm.ts: `User-Agent: opencode/<version>` (non-opencode providers)
  { name: 'opencode', class: 'third_party', header: 'user-agent', regex: '^opencode/' },
  // sst/opencode packages/opencode/src/session/llm.ts: x-opencode-session on opencode's own providers
  { name: 'opencode', class: 'third_party', header: 'x-opencode-session', regex: '.' },
  // sst/opencode packages/opencode/src/provider/provider.ts: `X-Title: opencode` (OpenRouter-style gateways)
  { name: 'opencode', class: 'third_party', header: 'x-title', regex: '^opencode$' },
  // Kilo-Org/kilocode src/api/providers/constants.ts: `User-Agent: Kilo-Code/<version>`, X-KiloCode-Version, X-Title
  { name: 'kilo-code', class: 'third_party', header: 'user-agent', regex: '^kilo-?code/' },
  { name: 'kilo-code', class: 'third_party', header: 'x-kilocode-version', regex: '.' },
  { name: 'kilo-code', class: 'third_party', header: 'x-title', regex: '^kilo code$' },
  // RooCodeInc/Roo-Code src/api/providers/constants.ts: `User-Agent: RooCode/<version>`, X-Title, HTTP-Referer
  { name: 'roo-code', class: 'third_party', header: 'user-agent', regex: '^roocode/' },
  { name: 'roo-code', class: 'third_party', header: 'x-title', regex: '^roo code$' },
  { name: 'roo-code', class: 'third_party', header: 'http-referer', contains: 'github.com/RooVetGit/Roo-Cline' },
  // cline/cline src/services/EnvUtils.ts buildExternalBasicHeaders: `User-Agent: Cline/<version>`;
  // cline/cline src/core/api/providers/*.ts defaultHeaders: `HTTP-Referer: https://cline.bot`, `X-Title: Cline`
  { name: 'cline', class: 'third_party', header: 'user-agent', regex: '^cline/' },
  { name: 'cline', class: 'third_party', header: 'x-title', regex: '^cline$' },
  { name: 'cline', class: 'third_party', header: 'http-referer', contains: 'cline.bot' },
  // continuedev/continue packages/openai-adapters/src/apis/OpenRouter.ts: HTTP-Referer, X-Title (OpenRouter route only)
  { name: 'continue', class: 'third_party', header: 'http-referer', contains: 'continue.dev' },
  { name: 'continue', class: 'third_party', header: 'x-title', regex: '^continue$' },
  // Aider-AI/aider aider/llm.py: OR_SITE_URL/OR_APP_NAME, sent by litellm as HTTP-Referer/X-Title (OpenRouter route only)
  { name: 'aider', class: 'third_party', header: 'http-referer', contains: 'aider.chat' },
  { name: 'aider', class: 'third_party', header: 'x-title', regex: '^aider$' },
  // zed-industries/zed crates/zed/src/main.rs: global `User-Agent: Zed/<version> (<os>; <arch>)`
  { name: 'zed', class: 'third_party', header: 'user-agent', regex: '^zed/' },
  // openai/codex codex-rs/core/src/default_client.rs: `originator: codex_cli_rs`, `User-Agent: codex_cli_rs/<version> (...)`
  { name: 'codex-cli', class: 'third_party', header: 'originator', regex: '^(codex[_-]|codex )' },
  { name: 'codex-cli', class: 'third_party', header: 'user-agent', regex: '^codex_' },
  // SWE-agent/SWE-agent sweagent/agent/models.py (PR #1346): `User-Agent: swe-agent/<version>`
  { name: 'swe-agent', class: 'third_party', header: 'user-agent', regex: '^swe-agent/' },
  // open-webui/open-webui backend/open_webui/routers/openai.py: X-OpenWebUI-User-* (forwarded user info), X-Title
  { name: 'open-webui', class: 'third_party', header: 'x-openwebui-user-id', regex: '.' },
  { name: 'open-webui', class: 'third_party', header: 'x-openwebui-chat-id', regex: '.' },
  { name: 'open-webui', class: 'third_party', header: 'x-title', regex: '^open webui$' },
  // danny-avila/LibreChat packages/api/src/endpoints/openai/config.ts: X-Title, HTTP-Referer (OpenRouter/Vercel route)
  { name: 'librechat', class: 'third_party', header: 'x-title', regex: '^librechat$' },
  { name: 'librechat', class: 'third_party', header: 'http-referer', contains: 'librechat.ai' },
  // Mintplex-Labs/anything-llm (PR #5174): `User-Agent: AnythingLLM/<version>`
  { name: 'anythingllm', class: 'third_party', header: 'user-agent', regex: '^anythingllm/' },

  // --- agent frameworks ---
  // langchain-ai/langchainjs libs/providers/langchain-openai/src/utils/azure.ts getHeadersWithUserAgent:
  // `langchainjs-openai/<v> (<env>)`, `langchainjs-azure-openai/...`; libs/langchain-groq: `langchainjs`
  { name: 'langchain', class: 'agent_framework', header: 'user-agent', regex: '^langchainjs' },
  // langchain-ai/langchain libs/partners/anthropic/langchain_anthropic/chat_models.py (PR #35268): `langchain-anthropic/<v>`
  { name: 'langchain', class: 'agent_framework', header: 'user-agent', regex: '^langchain-' },
  // run-llama/llama_index llama-index-integrations/llms/llama-index-llms-nvidia: `User-Agent: llama-index-llms-nvidia`
  { name: 'llamaindex', class: 'agent_framework', header: 'user-agent', regex: '^llama-?index' },
  // openai/openai-agents-python src/agents/models/openai_responses.py: `_USER_AGENT = f"Agents/Python {__version__}"`
  { name: 'openai-agents', class: 'agent_framework', header: 'user-agent', regex: '^agents/python ' },
  // openai/openai-agents-js packages/agents-openai/src/defaults.ts: `User-Agent: Agents/JavaScript <version>`
  { name: 'openai-agents', class: 'agent_framework', header: 'user-agent', regex: '^agents/javascript ' },
  // pydantic/pydantic-ai pydantic_ai_slim/pydantic_ai/models/__init__.py get_user_agent: `pydantic-ai/<version>`
  { name: 'pydantic-ai', class: 'agent_framework', header: 'user-agent', regex: '^pydantic-ai/' },
  // mastra-ai/mastra (PR #13087): `User-Agent: mastra/<version>`
  { name: 'mastra', class: 'agent_framework', header: 'user-agent', regex: '^mastra/' },
  // vercel/ai packages/provider-utils/src/with-user-agent-suffix.ts + packages/anthropic/src/anthropic-provider.ts:
  // `ai-sdk/<provider>/<v> ai-sdk/provider-utils/<v> runtime/...` appended to any UA already set
  { name: 'vercel-ai-sdk', class: 'agent_framework', header: 'user-agent', regex: '(^|\\s)ai-sdk/' },

  // --- the recommended coding agent (a claim; see rule 3 above) ---
  // Measured with Claude Code: `claude-cli/<version> (external, cli|sdk-cli...)`, x-app: cli,
  // X-Claude-Code-Session-Id, anthropic-beta with claude-code-20250219
  { name: 'claude-code', class: 'coding_agent', header: 'user-agent', regex: '^claude-cli/' },

  // --- SDKs and HTTP libraries: direct ---
  // BerriAI/litellm get_default_headers (issue #19017): `User-Agent: litellm/<version>`
  { name: 'litellm', class: 'direct', header: 'user-agent', regex: '^litellm/' },
  // openai/openai-node src/client.ts getUserAgent: `${this.constructor.name}/JS ${VERSION}`
  { name: 'openai-js', class: 'direct', header: 'user-agent', regex: '^(azure)?openai/js ' },
  // openai/openai-python src/openai/_base_client.py user_agent: `{class}/Python {version}` (OpenAI, AsyncOpenAI, Azure*)
  { name: 'openai-python', class: 'direct', header: 'user-agent', regex: '^(async)?(azure)?openai/python ' },
  // anthropics/anthropic-sdk-typescript src/client.ts getUserAgent: `Anthropic/JS ${VERSION}`
  { name: 'anthropic-js', class: 'direct', header: 'user-agent', regex: '^anthropic/js ' },
  // anthropics/anthropic-sdk-python src/anthropic/_base_client.py user_agent: `{class}/Python {version}`
  {
    name: 'anthropic-python',
    class: 'direct',
    header: 'user-agent',
    regex: '^(async)?anthropic(bedrock|vertex|foundry)?/python ',
  },
  // Any other Stainless-generated SDK: X-Stainless-Lang (openai/openai-node src/internal/detect-platform.ts)
  { name: 'stainless-sdk', class: 'direct', header: 'x-stainless-lang', regex: '.' },
  // curl/curl src/tool_version.h: CURL_NAME "/" CURL_VERSION
  { name: 'curl', class: 'direct', header: 'user-agent', regex: '^curl/' },
  // psf/requests src/requests/utils.py default_user_agent: `python-requests/<version>`
  { name: 'python-requests', class: 'direct', header: 'user-agent', regex: '^python-requests/' },
  // encode/httpx httpx/_client.py: USER_AGENT = f"python-httpx/{__version__}"
  { name: 'httpx', class: 'direct', header: 'user-agent', regex: '^python-httpx/' },
  // aio-libs/aiohttp aiohttp/http.py: SERVER_SOFTWARE = "Python/{major}.{minor} aiohttp/{version}"
  { name: 'aiohttp', class: 'direct', header: 'user-agent', regex: '^python/\\S+ aiohttp/' },
  // node-fetch/node-fetch src/index.js: `node-fetch/1.0 (+https://github.com/bitinn/node-fetch)` (v2), `node-fetch` (v3)
  { name: 'node-fetch', class: 'direct', header: 'user-agent', regex: '^node-fetch' },
  // nodejs/undici lib/web/fetch/index.js defaultUserAgent: 'node' (Node's global fetch) or 'undici'
  { name: 'undici', class: 'direct', header: 'user-agent', regex: '^(node|undici)$' },
  // axios/axios lib/adapters/http.js: `User-Agent: axios/<version>`
  { name: 'axios', class: 'direct', header: 'user-agent', regex: '^axios/' },
  // golang/go src/net/http/request.go: defaultUserAgent = "Go-http-client/1.1"
  { name: 'go-http-client', class: 'direct', header: 'user-agent', regex: '^go-http-client/' },
  // square/okhttp okhttp3.internal userAgent: "okhttp/<version>"
  { name: 'okhttp', class: 'direct', header: 'user-agent', regex: '^okhttp/' },
] satisfies ClientSignature[]);

/** Matched nothing: a direct request (rule 4). */
const UNKNOWN: ClientMatch = Object.freeze({ class: 'direct', name: 'unknown' });

interface Compiled {
  readonly header: string;
  readonly re: RegExp;
  /** Lower-cased first char code a match must start with (anchored literal patterns), else -1. */
  readonly lead: number;
  readonly result: ClientMatch;
  /** Returned instead of `result` when a coding_agent claim is not corroborated. */
  readonly unverified: ClientMatch;
}

function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/** The char every match starts with, when the pattern is `^` + a required ASCII letter or digit. */
function leadOf(source: string): number {
  // Conservative: no alternation anywhere, and the lead char is not made optional by a quantifier.
  if (source.includes('|') || !/^\^[a-z0-9][^?*{]/i.test(source)) return -1;
  return source.charCodeAt(1) | 0x20;
}

function compile(signatures: readonly ClientSignature[]): readonly Compiled[] {
  return signatures.map((s) => {
    const source = s.regex ?? (s.contains !== undefined ? escapeRegex(s.contains) : undefined);
    if (source === undefined || (s.regex !== undefined && s.contains !== undefined)) {
      throw new Error(`client signature ${s.name}: give exactly one of contains or regex`);
    }
    return {
      header: s.header.toLowerCase(),
      re: new RegExp(source, 'i'),
      lead: leadOf(source),
      result: Object.freeze({ class: s.class, name: s.name }),
      unverified: Object.freeze({ class: 'third_party' as const, name: `${s.name} (unverified)` }),
    };
  });
}

// Compiled once per signature list; callers keep and pass the same array.
const compiledCache = new WeakMap<readonly ClientSignature[], readonly Compiled[]>();

function compiledFor(signatures: readonly ClientSignature[]): readonly Compiled[] {
  let c = compiledCache.get(signatures);
  if (c === undefined) {
    c = compile(signatures);
    compiledCache.set(signatures, c);
  }
  return c;
}

/**
 * The signature list with operator entries first (so they win), validated, frozen and
 * precompiled. Throws a ZodError on an invalid entry: call once, at config time.
 */
export function buildSignatures(extra: readonly ClientSignature[] = []): readonly ClientSignature[] {
  const parsed = extra.map((e) => clientSignatureSchema.parse(e));
  const list = freezeAll([...parsed, ...DEFAULT_SIGNATURES]);
  compiledFor(list);
  return list;
}

function first(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' ? v : v?.[0];
}

function matches(c: Compiled, v: string | string[]): boolean {
  if (typeof v === 'string') {
    // Cheap first-char check before the regex: most signatures are `^literal` on the UA.
    // `| 0x20` lower-cases ASCII letters and keeps digits; a false hit only costs the regex.
    if (c.lead !== -1 && (v.charCodeAt(0) | 0x20) !== c.lead) return false;
    return c.re.test(v);
  }
  for (const item of v) if (c.re.test(item)) return true;
  return false;
}

const CLAUDE_CODE_UA = /^claude-cli\/\d+\.\d+\.\d+\S* \(external, [\w.-]+/;
const CLAUDE_CODE_BETA = 'claude-code-20250219';

function hasBeta(v: string | string[] | undefined): boolean {
  if (v === undefined) return false;
  if (typeof v === 'string') return v.includes(CLAUDE_CODE_BETA);
  for (const item of v) if (item.includes(CLAUDE_CODE_BETA)) return true;
  return false;
}

/** Rule 3: the signals a genuine Claude Code sends beside its user-agent. */
function corroboratesCodingAgent(h: RequestHeaders): boolean {
  const ua = first(h['user-agent']);
  if (ua === undefined || !CLAUDE_CODE_UA.test(ua)) return false;
  if (first(h['x-app']) !== 'cli') return false;
  const lang = first(h['x-stainless-lang']);
  if (lang !== undefined && lang !== 'js') return false;
  const session = first(h['x-claude-code-session-id']);
  return (session !== undefined && session !== '') || hasBeta(h['anthropic-beta']);
}

/**
 * Classifies a request's client from its headers (names lower-case, as Node delivers them).
 * `signatures` should be `DEFAULT_SIGNATURES` or a list from `buildSignatures`, kept and reused.
 */
export function classifyClient(
  headers: RequestHeaders,
  signatures: readonly ClientSignature[] = DEFAULT_SIGNATURES,
): ClientMatch {
  for (const c of compiledFor(signatures)) {
    const v = headers[c.header];
    if (v === undefined || !matches(c, v)) continue;
    if (c.result.class === 'coding_agent' && !corroboratesCodingAgent(headers)) return c.unverified;
    return c.result;
  }
  return UNKNOWN;
}
