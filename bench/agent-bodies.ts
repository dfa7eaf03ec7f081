/**
 * The bodies of the bench's real-traffic scenarios (bench/scenarios.ts): a coding agent's turn as the Claude Code
 * CLI sends it on /v1/messages, and its equivalent on /v1/chat/completions, sized to a byte count. Built without
 * randomness, so every run (and every target of a run) sends the same bytes.
 */

/** A tool of the agent: its name, what it does, and the JSON schema of its input. */
interface Tool {
  name: string;
  description: string;
  schema: object;
}

const str = (description: string) => ({ type: 'string', description });
const int = (description: string) => ({ type: 'integer', description });
const bool = (description: string) => ({ type: 'boolean', description });

/** Tool definitions of the size and shape an agent sends: nested schemas, enums, long descriptions. */
const TOOLS: Tool[] = [
  {
    name: 'Read',
    description:
      'Reads a file of the workspace. The path must be absolute. By default the whole file is returned with line ' +
      'numbers; give offset and limit to read part of a long file. Reading a directory fails: list it instead.',
    schema: {
      type: 'object',
      properties: {
        file_path: str('Absolute path of the file to read.'),
        offset: int('First line to read, 1-based.'),
        limit: int('How many lines to read.'),
      },
      required: ['file_path'],
      additionalProperties: false,
    },
  },
  {
    name: 'Edit',
    description:
      'Replaces one exact occurrence of old_string with new_string in a file. The edit fails when old_string is ' +
      'absent or occurs more than once, unless replace_all is set. Read the file first: the match is exact, ' +
      'whitespace included.',
    schema: {
      type: 'object',
      properties: {
        file_path: str('Absolute path of the file to edit.'),
        old_string: str('The text to replace.'),
        new_string: str('The text to put in its place; must differ from old_string.'),
        replace_all: bool('Replace every occurrence (default false).'),
      },
      required: ['file_path', 'old_string', 'new_string'],
      additionalProperties: false,
    },
  },
  {
    name: 'Write',
    description: 'Writes a file, replacing it if it exists. Prefer Edit for changes to an existing file.',
    schema: {
      type: 'object',
      properties: { file_path: str('Absolute path of the file.'), content: str('The whole new content.') },
      required: ['file_path', 'content'],
      additionalProperties: false,
    },
  },
  {
    name: 'Bash',
    description:
      'Runs a shell command in a persistent session and returns its output (stdout and stderr, cut at 30,000 ' +
      'characters). Quote paths that hold spaces. Long-running commands may run in the background.',
    schema: {
      type: 'object',
      properties: {
        command: str('The command to run.'),
        timeout: int('Milliseconds before the command is stopped (at most 600000).'),
        description: str('What the command does, in five to ten words.'),
        run_in_background: bool('Start it and return at once.'),
      },
      required: ['command'],
      additionalProperties: false,
    },
  },
  {
    name: 'Grep',
    description:
      'Searches file contents with a regular expression. Returns matching files, matching lines or counts; ' +
      'filter files by glob or type.',
    schema: {
      type: 'object',
      properties: {
        pattern: str('The regular expression.'),
        path: str('File or directory to search (default: the workspace).'),
        glob: str('Only files whose name matches, e.g. "*.ts".'),
        output_mode: {
          type: 'string',
          enum: ['content', 'files_with_matches', 'count'],
          description: 'What to return.',
        },
        '-i': bool('Case-insensitive.'),
        '-n': bool('Line numbers (content mode).'),
        head_limit: int('Return at most this many results.'),
      },
      required: ['pattern'],
      additionalProperties: false,
    },
  },
  {
    name: 'Glob',
    description: 'Lists files whose path matches a glob pattern, newest first.',
    schema: {
      type: 'object',
      properties: { pattern: str('The glob, e.g. "src/**/*.ts".'), path: str('Directory to search in.') },
      required: ['pattern'],
      additionalProperties: false,
    },
  },
  {
    name: 'TodoWrite',
    description: 'Replaces the task list of the session: what is pending, in progress and done.',
    schema: {
      type: 'object',
      properties: {
        todos: {
          type: 'array',
          items: {
            type: 'object',
            properties: {
              content: { type: 'string', minLength: 1 },
              status: { type: 'string', enum: ['pending', 'in_progress', 'completed'] },
              activeForm: { type: 'string', minLength: 1 },
            },
            required: ['content', 'status', 'activeForm'],
            additionalProperties: false,
          },
          description: 'The whole list.',
        },
      },
      required: ['todos'],
      additionalProperties: false,
    },
  },
];

/** The long, stable part of the system prompt (the cached prefix of every turn). */
const SYSTEM = Array.from(
  { length: 40 },
  (_, i) =>
    `Rule ${i + 1}: work in small verified steps; read before editing; run the tests of what changed; say what ` +
    `you did and what is left, in plain words, without claiming what was not checked.`,
).join('\n');

/** Source-like text of `lines` lines for file `n` (what a Read or a Bash returns), deterministic. */
function fileText(n: number, lines: number): string {
  const out: string[] = [];
  for (let i = 1; i <= lines; i++) {
    const k = (n * 31 + i * 7) % 97;
    out.push(
      `${String(i).padStart(5)}\t  const value${k} = compute${n % 13}(input.items[${i % 17}], { limit: ${k * 3}, label: "step ${i}" });`,
    );
  }
  return out.join('\n');
}

/** One tool call of turn `n`: which tool, and its input. */
function toolCall(n: number): { name: string; input: Record<string, unknown> } {
  switch (n % 4) {
    case 0:
      return { name: 'Read', input: { file_path: `/workspace/src/module${n}.ts` } };
    case 1:
      return { name: 'Grep', input: { pattern: `compute${n % 13}\\(`, output_mode: 'content', '-n': true } };
    case 2:
      return { name: 'Bash', input: { command: `npx tap test/module${n}.test.ts`, description: 'Run its tests' } };
    default:
      return {
        name: 'Edit',
        input: { file_path: `/workspace/src/module${n}.ts`, old_string: `limit: ${n}`, new_string: `limit: ${n + 1}` },
      };
  }
}

/** Lines of the tool result of turn `n`: 40 to 120, so turns differ in size as real ones do. */
const resultLines = (n: number) => 40 + ((n * 37) % 81);

/** ASCII that JSON leaves unescaped, exactly `bytes` long: what tops a body up to its target size. */
function filler(bytes: number): string {
  const line = 'padding of the last tool result to the target size; ';
  return line.repeat(Math.ceil(bytes / line.length)).slice(0, bytes);
}

/** Top up the last tool result (`setPad`) so that the body's JSON is exactly `bytes` long (when it is below). */
function sized(body: object, bytes: number, setPad: (pad: string) => void): Buffer {
  const bare = Buffer.byteLength(JSON.stringify(body));
  if (bare < bytes) setPad(filler(bytes - bare));
  return Buffer.from(JSON.stringify(body));
}

/** The fixed part of an agent turn: everything but the history, whose bytes it also takes. */
const RESERVE = 16 * 1024;

/**
 * An agent's turn on /v1/messages as Claude Code sends it, `bytes` long: the system prompt as blocks (the long one
 * marked cache_control ephemeral), the tools, a history of tool_use and tool_result turns, and a last user turn of a
 * tool result and `lastText` with cache_control.
 */
export function messagesAgentBody(bytes: number, lastText: string, stream: boolean): Buffer {
  const messages: object[] = [
    { role: 'user', content: [{ type: 'text', text: 'Make the module tests pass, then tidy the helpers.' }] },
  ];
  let size = 0;
  let n = 0;
  for (;;) {
    const call = toolCall(n);
    const assistant = {
      role: 'assistant',
      content: [
        { type: 'text', text: `Next I check module ${n} with ${call.name}.` },
        { type: 'tool_use', id: `toolu_bench${String(n).padStart(6, '0')}`, name: call.name, input: call.input },
      ],
    };
    const result = {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: `toolu_bench${String(n).padStart(6, '0')}`,
          content: fileText(n, resultLines(n)),
        },
      ],
    };
    const turn = JSON.stringify(assistant).length + JSON.stringify(result).length + 2;
    if (size + turn + RESERVE > bytes && n > 0) break;
    size += turn;
    messages.push(assistant, result);
    n++;
  }
  // The last turn is the user's answer to the last tool call: its result and the text, the cache breakpoint on it.
  const lastResult = messages.pop() as { content: Array<{ content: string }> };
  const last = lastResult.content[0]!;
  const text = { type: 'text', text: lastText, cache_control: { type: 'ephemeral' } };
  messages.push({ role: 'user', content: [last, text] });
  const body = {
    model: 'alpha-sonnet-4-6',
    max_tokens: 32000,
    system: [
      { type: 'text', text: 'You are a coding agent working in a checked-out repository.' },
      { type: 'text', text: SYSTEM, cache_control: { type: 'ephemeral' } },
    ],
    tools: TOOLS.map((t) => ({ name: t.name, description: t.description, input_schema: t.schema })),
    messages,
    metadata: { user_id: 'bench-user-session-0001' },
    ...(stream ? { stream: true } : {}),
  };
  return sized(body, bytes, (pad) => {
    last.content += pad;
  });
}

/**
 * The same turn on /v1/chat/completions, `bytes` long: a system message, the tools as functions, assistant
 * messages with tool_calls answered by role "tool" messages, and a last user message of `lastText`.
 */
export function chatAgentBody(bytes: number, lastText: string, stream: boolean): Buffer {
  const messages: object[] = [
    { role: 'system', content: `You are a coding agent working in a checked-out repository.\n${SYSTEM}` },
    { role: 'user', content: 'Make the module tests pass, then tidy the helpers.' },
  ];
  let size = 0;
  let n = 0;
  let lastTool: { content: string } | undefined;
  for (;;) {
    const call = toolCall(n);
    const id = `call_bench${String(n).padStart(6, '0')}`;
    const assistant = {
      role: 'assistant',
      content: `Next I check module ${n} with ${call.name}.`,
      tool_calls: [{ id, type: 'function', function: { name: call.name, arguments: JSON.stringify(call.input) } }],
    };
    const tool = { role: 'tool', tool_call_id: id, content: fileText(n, resultLines(n)) };
    const turn = JSON.stringify(assistant).length + JSON.stringify(tool).length + 2;
    if (size + turn + RESERVE > bytes && n > 0) break;
    size += turn;
    messages.push(assistant, tool);
    lastTool = tool;
    n++;
  }
  messages.push({ role: 'user', content: lastText });
  const body = {
    model: 'gamma-k3',
    max_tokens: 32000,
    tools: TOOLS.map((t) => ({
      type: 'function',
      function: { name: t.name, description: t.description, parameters: t.schema },
    })),
    messages,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  };
  return sized(body, bytes, (pad) => {
    lastTool!.content += pad;
  });
}
