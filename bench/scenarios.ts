/**
 * What the benchmark sends, and to whom. Every target gets the same body; only the path prefix and the
 * routing/auth headers differ (farebox: its own key; the peer: Portkey's `x-portkey-provider` and
 * `x-portkey-custom-host` headers, read from the request by @portkey-ai/gateway 1.15.2; direct: the provider's auth).
 */

/** The kinds of call measured. */
export const SCENARIOS = ['chat-json', 'chat-stream', 'messages-stream'] as const;
/** One kind of call. */
export type Scenario = (typeof SCENARIOS)[number];

/** The servers measured. */
export const TARGETS = ['direct', 'farebox', 'peer'] as const;
/** One server. */
export type TargetName = (typeof TARGETS)[number];

/** Where a target listens and what it needs to route a call. */
export interface Target {
  name: TargetName;
  /** Origin, http://127.0.0.1:PORT. */
  url: string;
  /** The process that serves it (the simulator for `direct`). */
  pid: number;
}

/** One request, ready to send. */
export interface RequestSpec {
  url: string;
  headers: Record<string, string>;
  body: string;
  stream: boolean;
}

/** The simulator's directive for 20 output chunks (DESIGN.md "The simulated upstreams"). */
const TWENTY = 'Count to twenty. #sim:tokens=20';

const BODIES: Record<Scenario, object> = {
  'chat-json': { model: 'gamma-k3', messages: [{ role: 'user', content: 'Say hello' }] },
  'chat-stream': {
    model: 'gamma-k3',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: TWENTY }],
  },
  'messages-stream': { model: 'alpha-sonnet-4-6', max_tokens: 1024, stream: true, messages: [{ role: 'user', content: TWENTY }] },
};

/** The request of `scenario` for `target`; `simUrl` is where the peer must route, `key` farebox's API key. */
export function requestFor(scenario: Scenario, target: Target, simUrl: string, key: string): RequestSpec {
  const anthropic = scenario === 'messages-stream';
  const path = anthropic ? '/v1/messages' : '/v1/chat/completions';
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (anthropic) headers['anthropic-version'] = '2023-06-01';
  if (target.name === 'farebox') {
    headers.authorization = `Bearer ${key}`;
  } else if (anthropic) {
    headers['x-api-key'] = 'sim-key';
  } else {
    headers.authorization = 'Bearer sim-key';
  }
  if (target.name === 'peer') {
    // Portkey's anthropic and openai providers both append their path to a base that ends in /v1.
    headers['x-portkey-provider'] = anthropic ? 'anthropic' : 'openai';
    headers['x-portkey-custom-host'] = `${simUrl}/v1`;
  }
  return { url: target.url + path, headers, body: JSON.stringify(BODIES[scenario]), stream: scenario !== 'chat-json' };
}

/** Whether a response body is a complete answer of its scenario (checked before each target is loaded). */
export function completeAnswer(scenario: Scenario, body: string): boolean {
  if (scenario === 'chat-json') {
    try {
      const j = JSON.parse(body) as { choices?: Array<{ message?: { content?: unknown } }>; usage?: unknown };
      return typeof j.choices?.[0]?.message?.content === 'string' && j.usage !== undefined;
    } catch {
      return false;
    }
  }
  if (scenario === 'chat-stream') {
    const content = body.split('\n').filter((l) => l.startsWith('data: {') && l.includes('"content":"') && !l.includes('"content":""'));
    return content.length === 20 && /"usage":\{"prompt_tokens"/.test(body) && body.trimEnd().endsWith('data: [DONE]');
  }
  const deltas = body.split('\n').filter((l) => l.startsWith('event: content_block_delta'));
  return deltas.length === 20 && body.includes('event: message_stop');
}
