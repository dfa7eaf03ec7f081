/**
 * What the benchmark sends, and to whom. Every target gets the same body; only the path prefix and the
 * routing/auth headers differ (farebox: its own key; the peer: Portkey's `x-portkey-provider` and
 * `x-portkey-custom-host` headers, read from the request by @portkey-ai/gateway 1.15.2; direct: the provider's auth).
 */
import { chatAgentBody, messagesAgentBody } from './agent-bodies.js';

/**
 * The kinds of call measured. `video-poll`: GET /v1/videos/{id} of a submitted job (a caller's poll). The rest of
 * the list is real traffic (REAL_TRAFFIC): agent turns of 200 KB and 1 MB, and streams of 4,000 output tokens.
 */
export const SCENARIOS = [
  'chat-json',
  'chat-stream',
  'messages-stream',
  'video-poll',
  'messages-200k-json',
  'messages-200k-stream',
  'chat-200k-json',
  'chat-200k-stream',
  'messages-1m-json',
  'messages-1m-stream',
  'chat-1m-json',
  'chat-1m-stream',
  'chat-stream-4k',
  'messages-stream-4k',
] as const;
/** One kind of call. */
export type Scenario = (typeof SCENARIOS)[number];

/** A real-traffic scenario: its protocol, size and answer. */
export interface RealTraffic {
  protocol: 'messages' | 'chat';
  stream: boolean;
  /** Bytes of the request body (agent turns: exactly; the 4,000-token streams: a small request, null). */
  requestBytes: number | null;
  /** Output tokens asked for (#sim:tokens), which the answer must hold. */
  outputTokens: number;
  /**
   * Connections under load. The simulator (parsing the body) and the load generator share one core and farebox has
   * the other: 16 agent turns of 200 KB in flight keep the gateway's core busy; at 1 MB each call costs each core
   * tens of ms, and 4 in flight load it without queueing seconds of latency (autocannon's timeout is 10 s). A
   * 4,000-token stream costs the load generator about 10 ms (autocannon parses each event): 8 in flight.
   */
  connections: number;
}

const KB = 1024;
/** The agent turns' last user text: a short answer, so that the request is what is measured. */
const AGENT_ASK = 'Go on with the next step. #sim:tokens=20';

/** The real-traffic scenarios (issue 34): agent turns with big contexts, and long streams. */
export const REAL_TRAFFIC: Readonly<Partial<Record<Scenario, RealTraffic>>> = {
  'messages-200k-json': {
    protocol: 'messages',
    stream: false,
    requestBytes: 200 * KB,
    outputTokens: 20,
    connections: 16,
  },
  'messages-200k-stream': {
    protocol: 'messages',
    stream: true,
    requestBytes: 200 * KB,
    outputTokens: 20,
    connections: 16,
  },
  'chat-200k-json': { protocol: 'chat', stream: false, requestBytes: 200 * KB, outputTokens: 20, connections: 16 },
  'chat-200k-stream': { protocol: 'chat', stream: true, requestBytes: 200 * KB, outputTokens: 20, connections: 16 },
  'messages-1m-json': {
    protocol: 'messages',
    stream: false,
    requestBytes: 1024 * KB,
    outputTokens: 20,
    connections: 4,
  },
  'messages-1m-stream': {
    protocol: 'messages',
    stream: true,
    requestBytes: 1024 * KB,
    outputTokens: 20,
    connections: 4,
  },
  'chat-1m-json': { protocol: 'chat', stream: false, requestBytes: 1024 * KB, outputTokens: 20, connections: 4 },
  'chat-1m-stream': { protocol: 'chat', stream: true, requestBytes: 1024 * KB, outputTokens: 20, connections: 4 },
  'chat-stream-4k': { protocol: 'chat', stream: true, requestBytes: null, outputTokens: 4000, connections: 8 },
  'messages-stream-4k': { protocol: 'messages', stream: true, requestBytes: null, outputTokens: 4000, connections: 8 },
};

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
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  /** Built once per scenario (a megabyte body is not serialized again per request or per target). */
  body: string | Buffer;
  stream: boolean;
}

/** The simulator's directive for 20 output chunks (DESIGN.md "The simulated upstreams"). */
const TWENTY = 'Count to twenty. #sim:tokens=20';

const BODIES: Record<'chat-json' | 'chat-stream' | 'messages-stream', object> = {
  'chat-json': { model: 'gamma-k3', messages: [{ role: 'user', content: 'Say hello' }] },
  'chat-stream': {
    model: 'gamma-k3',
    stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: TWENTY }],
  },
  'messages-stream': {
    model: 'alpha-sonnet-4-6',
    max_tokens: 1024,
    stream: true,
    messages: [{ role: 'user', content: TWENTY }],
  },
};

/**
 * Targets each scenario runs on. The peer has no video jobs of its own to poll: `video-poll` compares farebox's
 * poll (a Redis read) with the provider's own answer to it.
 */
export const TARGETS_OF: Readonly<Record<Scenario, readonly TargetName[]>> = {
  'chat-json': TARGETS,
  'chat-stream': TARGETS,
  'messages-stream': TARGETS,
  'video-poll': ['direct', 'farebox'],
  'messages-200k-json': TARGETS,
  'messages-200k-stream': TARGETS,
  'chat-200k-json': TARGETS,
  'chat-200k-stream': TARGETS,
  'messages-1m-json': TARGETS,
  'messages-1m-stream': TARGETS,
  'chat-1m-json': TARGETS,
  'chat-1m-stream': TARGETS,
  'chat-stream-4k': TARGETS,
  'messages-stream-4k': TARGETS,
};

/** Each scenario's body, built on first use and sent as is to every target. */
const built = new Map<Scenario, Buffer>();

/** The body of a POST scenario. */
function bodyOf(scenario: Exclude<Scenario, 'video-poll'>): Buffer {
  let b = built.get(scenario);
  if (b) return b;
  const real = REAL_TRAFFIC[scenario];
  if (!real) b = Buffer.from(JSON.stringify(BODIES[scenario as keyof typeof BODIES]));
  else if (real.requestBytes !== null)
    b = (real.protocol === 'messages' ? messagesAgentBody : chatAgentBody)(real.requestBytes, AGENT_ASK, real.stream);
  else {
    const content = `Write a long story. #sim:tokens=${real.outputTokens}`;
    b = Buffer.from(
      JSON.stringify(
        real.protocol === 'messages'
          ? { model: 'alpha-sonnet-4-6', max_tokens: 8192, stream: true, messages: [{ role: 'user', content }] }
          : {
              model: 'gamma-k3',
              stream: true,
              stream_options: { include_usage: true },
              messages: [{ role: 'user', content }],
            },
      ),
    );
  }
  built.set(scenario, b);
  return b;
}

/** Whether `scenario` runs on `target`. */
export function runsOn(scenario: Scenario, target: TargetName): boolean {
  return TARGETS_OF[scenario].includes(target);
}

/** The video job each target's `video-poll` polls (submitted before the load: setVideoJob). */
const videoJobs: Partial<Record<TargetName, string>> = {};

/** The job `target`'s `video-poll` polls. */
export function setVideoJob(target: TargetName, id: string): void {
  videoJobs[target] = id;
}

/** The submit of the job `video-poll` polls, as sent to `target` (farebox: its key; direct: the provider's). */
export function videoSubmitFor(target: Target, key: string): RequestSpec {
  return {
    method: 'POST',
    url: `${target.url}/v1/videos`,
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${target.name === 'farebox' ? key : 'sim-key'}`,
    },
    body: JSON.stringify({
      model: 'vidA-v6',
      prompt: 'A benchmark of polls',
      seconds: target.name === 'farebox' ? 4 : '4',
      size: '1280x720',
    }),
    stream: false,
  };
}

/** The request of `scenario` for `target`; `simUrl` is where the peer must route, `key` farebox's API key. */
export function requestFor(scenario: Scenario, target: Target, simUrl: string, key: string): RequestSpec {
  if (scenario === 'video-poll') {
    const id = videoJobs[target.name];
    if (id === undefined) throw new Error(`no video job submitted to ${target.name}`);
    const auth = `Bearer ${target.name === 'farebox' ? key : 'sim-key'}`;
    return {
      method: 'GET',
      url: `${target.url}/v1/videos/${id}`,
      headers: { authorization: auth },
      body: '',
      stream: false,
    };
  }
  const anthropic = scenario === 'messages-stream' || REAL_TRAFFIC[scenario]?.protocol === 'messages';
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
  return {
    method: 'POST',
    url: target.url + path,
    headers,
    body: bodyOf(scenario),
    stream: REAL_TRAFFIC[scenario]?.stream ?? scenario !== 'chat-json',
  };
}

/** Whether a response body is a complete answer of its scenario (checked before each target is loaded). */
export function completeAnswer(scenario: Scenario, body: string): boolean {
  if (scenario === 'video-poll') {
    try {
      const v = JSON.parse(body) as { id?: unknown; object?: unknown; status?: unknown };
      return (
        typeof v.id === 'string' &&
        v.object === 'video' &&
        ['queued', 'in_progress', 'completed'].includes(String(v.status))
      );
    } catch {
      return false;
    }
  }
  const real = REAL_TRAFFIC[scenario];
  // The original cells ask for 20 tokens, but chat-json for none (the simulator's few words).
  const tokens = real?.outputTokens ?? 20;
  if (scenario === 'chat-json' || (real?.protocol === 'chat' && !real.stream)) {
    try {
      const j = JSON.parse(body) as {
        choices?: Array<{ message?: { content?: unknown } }>;
        usage?: { completion_tokens?: unknown };
      };
      return (
        typeof j.choices?.[0]?.message?.content === 'string' &&
        j.usage !== undefined &&
        (real === undefined || j.usage.completion_tokens === tokens)
      );
    } catch {
      return false;
    }
  }
  if (real?.protocol === 'messages' && !real.stream) {
    try {
      const j = JSON.parse(body) as {
        content?: Array<{ type?: unknown; text?: unknown }>;
        stop_reason?: unknown;
        usage?: { output_tokens?: unknown };
      };
      return (
        j.content?.[0]?.type === 'text' &&
        typeof j.content[0].text === 'string' &&
        j.stop_reason === 'end_turn' &&
        j.usage?.output_tokens === tokens
      );
    } catch {
      return false;
    }
  }
  if (scenario === 'chat-stream' || real?.protocol === 'chat') {
    const content = body
      .split('\n')
      .filter((l) => l.startsWith('data: {') && l.includes('"content":"') && !l.includes('"content":""'));
    return (
      content.length === tokens && /"usage":\{"prompt_tokens"/.test(body) && body.trimEnd().endsWith('data: [DONE]')
    );
  }
  const deltas = body.split('\n').filter((l) => l.startsWith('event: content_block_delta'));
  return deltas.length === tokens && body.includes('event: message_stop');
}
