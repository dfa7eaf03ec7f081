/**
 * What the benchmark sends, and to whom. Every target gets the same body; only the path prefix and the
 * routing/auth headers differ (farebox: its own key; the peer: Portkey's `x-portkey-provider` and
 * `x-portkey-custom-host` headers, read from the request by @portkey-ai/gateway 1.15.2; direct: the provider's auth).
 */

/** The kinds of call measured. `video-poll`: GET /v1/videos/{id} of a submitted job (a caller's poll). */
export const SCENARIOS = ['chat-json', 'chat-stream', 'messages-stream', 'video-poll'] as const;
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
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  body: string;
  stream: boolean;
}

/** The simulator's directive for 20 output chunks (DESIGN.md "The simulated upstreams"). */
const TWENTY = 'Count to twenty. #sim:tokens=20';

const BODIES: Record<Exclude<Scenario, 'video-poll'>, object> = {
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
};

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
  return {
    method: 'POST',
    url: target.url + path,
    headers,
    body: JSON.stringify(BODIES[scenario as Exclude<Scenario, 'video-poll'>]),
    stream: scenario !== 'chat-json',
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
  if (scenario === 'chat-json') {
    try {
      const j = JSON.parse(body) as { choices?: Array<{ message?: { content?: unknown } }>; usage?: unknown };
      return typeof j.choices?.[0]?.message?.content === 'string' && j.usage !== undefined;
    } catch {
      return false;
    }
  }
  if (scenario === 'chat-stream') {
    const content = body
      .split('\n')
      .filter((l) => l.startsWith('data: {') && l.includes('"content":"') && !l.includes('"content":""'));
    return content.length === 20 && /"usage":\{"prompt_tokens"/.test(body) && body.trimEnd().endsWith('data: [DONE]');
  }
  const deltas = body.split('\n').filter((l) => l.startsWith('event: content_block_delta'));
  return deltas.length === 20 && body.includes('event: message_stop');
}
