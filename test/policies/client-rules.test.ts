import t from 'tap';
import { checkClientRule, type ClientRuleEndpoint, type ClientRuleId } from '../../policies/client-rules.js';
import { CLIENT_CLASSES, type ClientClass } from '../../policies/clients.js';

const ENDPOINTS: readonly ClientRuleEndpoint[] = ['messages', 'count_tokens', 'chat_completions', 'images', 'videos'];
const FAMILIES = ['alpha', 'beta', 'gamma', 'img', 'vidA', 'vidB', 'vidC'] as const;

// The expected refusals; every (endpoint, family, class) not listed passes.
// SPEC "Client and model-family rules" and Authentication 4; decisions in policies/client-rules.ts.
const REFUSED: Readonly<Record<string, ClientRuleId>> = {
  'messages/alpha/third_party': 'alpha_messages_third_party',
  'messages/alpha/agent_framework': 'alpha_messages_agent_framework',
  'count_tokens/alpha/third_party': 'alpha_messages_third_party',
  'count_tokens/alpha/agent_framework': 'alpha_messages_agent_framework',
  'chat_completions/alpha/third_party': 'alpha_chat_third_party',
  'chat_completions/alpha/agent_framework': 'alpha_chat_agent_framework',
};

for (const endpoint of ENDPOINTS) {
  for (const family of FAMILIES) {
    for (const client of CLIENT_CLASSES) {
      const key = `${endpoint}/${family}/${client}`;
      const rule = REFUSED[key];
      t.test(`${key} -> ${rule ? `403 ${rule}` : 'allowed'}`, async (t) => {
        const got = checkClientRule(endpoint, family, client);
        if (rule === undefined) {
          t.equal(got, null);
        } else {
          t.equal(got?.code, 'unsupported_client');
          t.equal(got?.rule, rule);
          t.match(got?.message, rule, 'the message names the rule');
        }
      });
    }
  }
}

t.test('the recommended coding agent and direct requests pass on every alpha endpoint', async (t) => {
  for (const client of ['direct', 'coding_agent'] as const satisfies readonly ClientClass[]) {
    for (const endpoint of ['messages', 'count_tokens', 'chat_completions'] as const) {
      t.equal(checkClientRule(endpoint, 'alpha', client), null, `${endpoint} ${client}`);
    }
  }
});

t.test('messages name the refused kind and leak nothing about the request', async (t) => {
  t.match(checkClientRule('messages', 'alpha', 'agent_framework')?.message, /agent framework is a third-party client/);
  t.match(
    checkClientRule('chat_completions', 'alpha', 'agent_framework')?.message,
    /agent frameworks are refused on alpha/,
  );
  t.match(checkClientRule('chat_completions', 'alpha', 'third_party')?.message, /third-party clients are refused/);
});

t.test('refusals are frozen and shared between calls', async (t) => {
  const a = checkClientRule('messages', 'alpha', 'third_party');
  t.equal(a, checkClientRule('messages', 'alpha', 'third_party'));
  t.ok(a && Object.isFrozen(a));
});
