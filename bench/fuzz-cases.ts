/**
 * Malformed requests for the gateway, from a seed: valid bodies of each text endpoint with fields set to hostile
 * values, fields removed, bodies that are not objects or not JSON, hostile headers. `npm run soak` sends thousands;
 * test/phases/fuzz.test.ts a few hundred. What every answer must be: never a 500 or 503 of the gateway's own, always
 * an `x-request-id`, an error in the shape of the path's protocol.
 */

/** One request to send. */
export interface FuzzCase {
  readonly path: '/v1/chat/completions' | '/v1/messages' | '/v1/messages/count_tokens';
  readonly headers: Record<string, string>;
  /** The raw body. */
  readonly body: Buffer;
  /** What was done to it, for a failure message. */
  readonly what: string;
}

/** A seeded PRNG (mulberry32): the same seed, the same cases. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const nest = (depth: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = i % 2 ? { a: v } : [v];
  return v;
};

/** Values that have broken parsers, billing arithmetic and rewrites. */
const HOSTILE: readonly unknown[] = [
  null,
  true,
  false,
  0,
  -1,
  1.5,
  0.25,
  -0,
  1e308,
  -1e308,
  2 ** 53,
  2 ** 64,
  Number.MAX_SAFE_INTEGER,
  '',
  'x',
  '0',
  '1',
  '-1',
  'NaN',
  'Infinity',
  '1e309',
  '\ud800',
  'a\u0000b',
  'ü'.repeat(50),
  'x'.repeat(5_000),
  [],
  [[]],
  [1, 2, 3],
  ['a'],
  [null],
  {},
  { a: 1 },
  { type: 'text' },
  { type: 'text', text: 5 },
  { type: 'image_url', image_url: { url: 'data:image/png;base64,@@@' } },
  { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
  { type: 'ephemeral', ttl: '1h' },
  { type: 'ephemeral', ttl: 5 },
  { cache_control: 5 },
  nest(40),
  nest(300),
  Array.from({ length: 500 }, (_, i) => i),
];

const CHAT_FIELDS = [
  'model',
  'messages',
  'max_tokens',
  'max_completion_tokens',
  'n',
  'stream',
  'stream_options',
  'tools',
  'tool_choice',
  'reasoning_effort',
  'temperature',
  'top_p',
  'stop',
  'service_tier',
  'metadata',
  'user',
  'seed',
];
const MESSAGES_FIELDS = [
  'model',
  'messages',
  'max_tokens',
  'stream',
  'system',
  'temperature',
  'n',
  'tools',
  'tool_choice',
  'thinking',
  'metadata',
  'stop_sequences',
  'mcp_servers',
  'container',
];

const chatBase = () => ({
  model: 'gamma-k3',
  max_tokens: 20,
  messages: [{ role: 'user', content: 'hi #sim:tokens=3' }],
});
const messagesBase = () => ({
  model: 'alpha-haiku-4-5',
  max_tokens: 20,
  messages: [{ role: 'user', content: 'hi #sim:tokens=3' }],
});

/** `n` cases from `seed`, for the gateway at hand with a valid key. */
export function fuzzCases(seed: number, n: number, key: string): FuzzCase[] {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const cases: FuzzCase[] = [];
  for (let i = 0; i < n; i++) {
    const path = pick(['/v1/chat/completions', '/v1/messages', '/v1/messages/count_tokens'] as const);
    const chat = path === '/v1/chat/completions';
    const body: Record<string, unknown> = chat ? chatBase() : messagesBase();
    const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    if (!chat) headers['anthropic-version'] = '2023-06-01';
    const what: string[] = [];
    if (rnd() < 0.01) {
      // A well-formed prompt just over the model's context window (about 1 MB): it passes the gateway's size check and
      // the upstream refuses it, as every provider does. Served, it would bill more input than its hold covers.
      if (chat) body.model = 'gamma-q3';
      body.messages = [{ role: 'user', content: `${'word'.repeat(chat ? 262_145 : 200_001)} #sim:tokens=3` }];
      cases.push({ path, headers, body: Buffer.from(JSON.stringify(body)), what: 'a prompt over the window' });
      continue;
    }
    const steps = 1 + Math.floor(rnd() * 3);
    let raw: Buffer | undefined;
    for (let s = 0; s < steps; s++) {
      const r = rnd();
      if (r < 0.45) {
        const field = pick(chat ? CHAT_FIELDS : MESSAGES_FIELDS);
        const value = pick(HOSTILE);
        body[field] = value;
        what.push(`${field}=${JSON.stringify(value)?.slice(0, 40)}`);
      } else if (r < 0.6) {
        const field = pick(Object.keys(body));
        delete body[field];
        what.push(`-${field}`);
      } else if (r < 0.75) {
        // A hostile message part, or a hostile message.
        const part = pick(HOSTILE);
        const message =
          rnd() < 0.5 ? { role: pick(['user', 'assistant', 'system', 'tool', 'x', 5]), content: [part] } : part;
        body.messages = [message, ...(Array.isArray(body.messages) ? body.messages : [])];
        what.push(`message ${JSON.stringify(message)?.slice(0, 50)}`);
      } else if (r < 0.82) {
        const h = pick([
          [
            'content-type',
            pick([
              'text/plain',
              'application/json; charset=latin1',
              'multipart/form-data; boundary=x',
              'application/x-www-form-urlencoded',
              '',
            ]),
          ],
          ['x-gw-billing-chain', pick(['chain_e', 'auto', 'CHAIN_A', '', 'chain_a,chain_b', 'chain_b'])],
          ['anthropic-version', pick(['', 'yesterday', '2023-06-01\u00e9'.replace('\u00e9', 'x'), '9999-99-99'])],
          ['anthropic-beta', pick(['context-1m-2025-08-07', ',,,', 'x'.repeat(300)])],
          ['authorization', pick(['Bearer ', 'Bearer sk_', `Bearer ${key}x`, 'Basic abc', `bearer ${key}`])],
        ] as const);
        headers[h[0]] = h[1];
        what.push(`header ${h[0]}=${h[1].slice(0, 30)}`);
      } else if (r < 0.9) {
        raw = Buffer.from(
          pick([
            '',
            '{',
            'null',
            '1',
            '"x"',
            '[]',
            '[{}]',
            '{"model":',
            '\u0000',
            '{"a":1}{"b":2}',
            '{"model":"gamma-k3",}',
          ]),
        );
        what.push(`raw ${raw.toString().slice(0, 20)}`);
      } else {
        // Bytes that are not UTF-8 inside a string.
        const text = JSON.stringify(body);
        raw = Buffer.concat([
          Buffer.from(text.slice(0, text.length - 3)),
          Buffer.from([0xc3, 0x28, 0xff]),
          Buffer.from(text.slice(-3)),
        ]);
        what.push('invalid UTF-8');
      }
    }
    cases.push({ path, headers, body: raw ?? Buffer.from(JSON.stringify(body)), what: what.join('; ') });
  }
  return cases;
}

/** What is wrong with an answer to a fuzz case (null: nothing). */
export function checkAnswer(c: FuzzCase, status: number, headers: Headers, text: string): string | null {
  if (!headers.get('x-request-id')) return `${status} without x-request-id`;
  if (status >= 500) return `${status} from the gateway: ${text.slice(0, 200)}`;
  if (status < 400) return null;
  let body: { type?: unknown; error?: { type?: unknown; message?: unknown; code?: unknown } };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    return `${status} with a body that is not JSON: ${text.slice(0, 100)}`;
  }
  const anthropic = c.path.startsWith('/v1/messages');
  if (
    anthropic &&
    (body.type !== 'error' || typeof body.error?.type !== 'string' || typeof body.error?.message !== 'string')
  ) {
    return `${status} not in the Anthropic error shape: ${text.slice(0, 200)}`;
  }
  if (
    !anthropic &&
    (typeof body.error?.type !== 'string' || typeof body.error?.message !== 'string' || !('code' in (body.error ?? {})))
  ) {
    return `${status} not in the OpenAI error shape: ${text.slice(0, 200)}`;
  }
  return null;
}
