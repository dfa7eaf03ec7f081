// The real Claude Code CLI, headless, against a billed gateway (SPEC Authentication 5, Versioning 3: its base URL
// is the service origin without /v1). Run with exactly the README's variables and no --model flag, it must run, be
// recognised as the recommended coding agent, ask only for served models, and be billed.
import t from 'tap';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAccount, createKey } from '../../plugins/accounts/accounts.js';
import { listUsage } from '../../plugins/billing/call-records.js';
import { closeDevChains, startHarness } from '../helpers/harness.js';
import { getCallRecord, type CallRecord } from '../../plugins/billing/call-records.js';
import { claudeCodeModelEnv } from '../../policies/claude-code-models.js';
import { readmeClaudeVariables } from '../helpers/readme-claude.js';

const CLAUDE = new URL('../../node_modules/.bin/claude', import.meta.url).pathname;
const TIMEOUT_MS = 60_000;

/** What the gateway saw of one request, read when its answer has been sent (onResponse). */
interface Seen {
  method: string;
  url: string;
  status: number;
  client: string | undefined;
  headers: Record<string, string | string[] | undefined>;
  body: unknown;
  requestId: string | undefined;
  billingChain: string | undefined;
}

const seen: Seen[] = [];
const h = await startHarness({
  chains: true,
  configure: (app) => {
    app.addHook('onResponse', async (request, reply) => {
      const header = (name: string) => {
        const v = reply.getHeader(name);
        return typeof v === 'string' ? v : undefined;
      };
      seen.push({
        method: request.method,
        url: request.url,
        status: reply.statusCode,
        client: request.farebox?.client,
        headers: { ...request.headers },
        body: request.body,
        requestId: header('x-request-id'),
        billingChain: header('x-gw-billing-chain'),
      });
    });
  },
});
const home = mkdtempSync(join(tmpdir(), 'farebox-claude-home-'));
t.teardown(async () => {
  await h.close();
  await closeDevChains();
  rmSync(home, { recursive: true, force: true });
});
await h.fund('chain_a', 20_000_000n);

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
}

const readmeVars = readmeClaudeVariables();
const readmeModel = Object.fromEntries(readmeVars).ANTHROPIC_MODEL;

/** Run `claude` with only the README's variables (no inherited ANTHROPIC_* or CLAUDE* ones), on this gateway. */
function claude(args: string[], key = h.key): Promise<Run> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    // NODE_OPTIONS carries tap's loader, meant for node, not for the CLI.
    if (v !== undefined && !/^(ANTHROPIC_|CLAUDE|NODE_OPTIONS$)/i.test(k)) env[k] = v;
  }
  for (const [k, v] of readmeVars) env[k] = v.replace('http://127.0.0.1:8080', h.url).replace('$FAREBOX_KEY', key);
  Object.assign(env, {
    HOME: home,
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    // Also stops the preconnect HEAD /api/hello, error reporting and the update check.
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  });
  return new Promise((resolve) => {
    const child = spawn(CLAUDE, args, { env, cwd: home, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, timedOut, stdout, stderr });
    });
  });
}

/** The usage record of a call once settlement has moved it off `held`. */
async function settledRecord(requestId: string): Promise<CallRecord | null> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const rec = await getCallRecord(h.redis, requestId);
    if ((rec && rec.status !== 'held') || Date.now() > deadline) return rec;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const run = await claude(['-p', 'Say hello #sim:tokens=5', '--output-format', 'json']);
const calls = seen.filter((s) => s.url.startsWith('/v1/'));
const messages = calls.filter((s) => /^\/v1\/messages(\?|$)/.test(s.url));

t.test(
  "the README's Claude Code variables: base URL, key, and each model variable the served model policy gives",
  async (t) => {
    const names = readmeVars.map(([k]) => k);
    t.same(names.slice(0, 2), ['ANTHROPIC_BASE_URL', 'ANTHROPIC_AUTH_TOKEN']);
    t.same(readmeVars.slice(0, 2), [
      ['ANTHROPIC_BASE_URL', 'http://127.0.0.1:8080'],
      ['ANTHROPIC_AUTH_TOKEN', '$FAREBOX_KEY'],
    ]);
    const served = h.config.models.map((m) => m.id);
    t.same(readmeVars.slice(2), claudeCodeModelEnv(served), 'the models the dashboard shows too (Keys page)');
    for (const name of [
      'ANTHROPIC_MODEL',
      'ANTHROPIC_DEFAULT_FABLE_MODEL',
      'ANTHROPIC_DEFAULT_OPUS_MODEL',
      'ANTHROPIC_DEFAULT_SONNET_MODEL',
      'ANTHROPIC_DEFAULT_HAIKU_MODEL',
      'ANTHROPIC_SMALL_FAST_MODEL',
    ])
      t.ok(names.includes(name), `${name} set`);
    for (const [k, v] of readmeVars.slice(2)) t.ok(served.includes(v), `${k}=${v} is served`);
  },
);

t.test('claude -p runs headless against the gateway and prints the simulated answer', async (t) => {
  t.notOk(run.timedOut, `finished within ${TIMEOUT_MS / 1000} s`);
  t.equal(run.code, 0, `exit 0; stderr: ${run.stderr}`);
  const out = JSON.parse(run.stdout) as {
    type: string;
    subtype: string;
    is_error: boolean;
    result: string;
    usage: { output_tokens: number };
  };
  t.match(out, { type: 'result', subtype: 'success', is_error: false });
  t.equal(out.usage.output_tokens, 5, 'the five tokens #sim:tokens=5 asked for');
  t.equal(out.result.trim().split(/\s+/).length, 5, `five simulated words: ${JSON.stringify(out.result)}`);
});

t.test('every request it made was recognised as the coding agent and served', async (t) => {
  t.ok(messages.length >= 1, 'at least one /v1/messages call');
  for (const c of calls) {
    t.equal(c.client, 'claude-code', `${c.method} ${c.url} classified claude-code`);
    t.ok(c.status < 400, `${c.method} ${c.url} -> ${c.status}`);
  }
  const main = messages.find((m) => (m.body as { model?: string }).model === readmeModel);
  t.ok(main, `the main turn asked for ANTHROPIC_MODEL, ${readmeModel}`);
  const redacted = { ...main?.headers, authorization: 'Bearer <key>' };
  t.comment(`Claude Code request headers (${main?.method} ${main?.url}): ${JSON.stringify(redacted)}`);
  // What recognition rests on (policies/clients.ts rule 3), as the real CLI sends it.
  t.match(main?.headers['user-agent'], /^claude-cli\/\d+\.\d+\.\d+ \(external, [\w.-]+/);
  t.equal(main?.headers['x-app'], 'cli');
  t.equal(main?.headers.authorization, `Bearer ${h.key}`, 'ANTHROPIC_AUTH_TOKEN goes as a Bearer token');
  t.ok(
    String(main?.headers['anthropic-beta'] ?? '').includes('claude-code-20250219') ||
      Boolean(main?.headers['x-claude-code-session-id']),
    'the claude-code beta or a session id',
  );
  const upstream = h.sim.received.filter((r) => r.url.startsWith('/v1/messages'));
  t.equal(upstream.length, messages.length, 'each call reached the upstream once');
  t.match(upstream[0]?.headers['anthropic-beta'], /claude-code-20250219/, 'its betas are forwarded');
  t.equal(upstream[0]?.headers['x-api-key'], 'sim-key', "the operator's key goes upstream, not the caller's");
});

t.test('its calls are billed: x-gw-billing-chain, a usage record with a price > 0', async (t) => {
  const billed = messages.filter((m) => !m.url.includes('count_tokens'));
  t.ok(billed.length >= 1);
  const ids = new Set((await listUsage(h.redis, h.account)).map((r) => r.call_id));
  for (const m of billed) {
    t.equal(m.billingChain, 'chain_a');
    const rec = (await settledRecord(m.requestId!))!;
    t.not(rec.status, 'held', 'debited');
    t.ok(rec.priceAtomic > 0n, `charged ${rec.priceAtomic} atomic units`);
    t.equal(rec.key_id, h.keyId);
    t.equal(rec.model, (m.body as { model: string }).model);
    t.ok(ids.has(m.requestId!), 'listed in the account usage');
  }
});

t.test("the same request passes with Claude Code's headers and is refused with opencode's user-agent", async (t) => {
  const main = messages[0];
  t.ok(main);
  if (!main) return;
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(main.headers)) {
    if (typeof v === 'string' && !['host', 'content-length', 'connection', 'accept-encoding'].includes(k))
      headers[k] = v;
  }
  const replay = (extra: Record<string, string>) =>
    fetch(`${h.url}${main.url}`, {
      method: 'POST',
      headers: { ...headers, ...extra },
      body: JSON.stringify(main.body),
    });
  const same = await replay({});
  t.equal(same.status, 200, 'the replay passes');
  await same.arrayBuffer();
  const n = h.sim.received.length;
  // sst/opencode session/llm.ts: `opencode/<version>`, plus the AI SDK's suffix.
  const refused = await replay({
    'user-agent': 'opencode/0.15.8 ai-sdk/anthropic/2.0.23 ai-sdk/provider-utils/3.0.10 runtime/bun/1.2.22',
  });
  t.equal(refused.status, 403);
  t.equal(refused.headers.get('x-should-retry'), 'false');
  t.match(await refused.json(), {
    type: 'error',
    error: { type: 'permission_error', code: 'unsupported_client', message: /\(rule alpha_messages_third_party\)/ },
  });
  t.equal(h.sim.received.length, n, 'never upstream');
});

t.test("each model alias (/model, --model) runs on the model the README's variable gives it", async (t) => {
  const vars = Object.fromEntries(readmeVars);
  for (const alias of ['opus', 'haiku', 'fable']) {
    const name = `ANTHROPIC_DEFAULT_${alias.toUpperCase()}_MODEL`;
    const from = seen.length;
    const r = await claude(['-p', 'Say hello #sim:tokens=3', '--model', alias, '--output-format', 'json']);
    t.equal(r.code, 0, `--model ${alias}: exit 0; stderr: ${r.stderr}`);
    const asked = seen.slice(from).filter((s) => /^\/v1\/messages(\?|$)/.test(s.url));
    t.ok(asked.length >= 1);
    for (const c of asked) t.ok(c.status < 400, `${(c.body as { model: string }).model} -> ${c.status}`);
    t.ok(
      asked.some((c) => (c.body as { model: string }).model === vars[name]),
      `--model ${alias} asked for ${name}, ${vars[name]}`,
    );
  }
});

t.test('on a suspended account it shows the gateway 403 message, exits 1, and does not retry', async (t) => {
  const account = await createAccount(h.redis, { status: 'suspended' });
  const { key } = await createKey(h.redis, account.address);
  const from = seen.length;
  const r = await claude(['-p', 'Say hello', '--output-format', 'json'], key);
  t.notOk(r.timedOut);
  t.equal(r.code, 1);
  const out = JSON.parse(r.stdout) as { is_error: boolean; result: string; api_error_status: number | null };
  t.equal(out.is_error, true);
  t.equal(out.api_error_status, 403);
  t.match(out.result, 'Access is suspended for this account.', 'our message reaches the user');
  const tried = seen.slice(from).filter((s) => s.url.startsWith('/v1/'));
  t.equal(tried.length, 1, 'one request: the 403 is not retried');
  t.equal(tried[0]?.status, 403);
});
