/**
 * The model variables Claude Code needs to run on the gateway. Unset, the CLI asks for its own default model ids
 * (claude-opus-5-5 for the main turn, claude-haiku-* for titles and summaries), which the gateway does not serve, and
 * every session fails with 400 "Unknown model". Claude Code 2.x reads the main model from ANTHROPIC_MODEL, each
 * alias (fable, opus, sonnet, haiku: `/model`, subagents, fallbacks) from ANTHROPIC_DEFAULT_<ALIAS>_MODEL and its
 * small fast model from ANTHROPIC_SMALL_FAST_MODEL; subagents inherit the main model unless CLAUDE_CODE_SUBAGENT_MODEL
 * says otherwise. The dashboard's Keys page shows these; the README's Claude Code command must equal them for the
 * embedded default (test/routes/claude-code.test.ts).
 */

/** Each alias's model on the embedded default: the ones Claude Code is tested with (test/routes/claude-code.test.ts). */
const PREFERRED = {
  sonnet: 'alpha-sonnet-4-6',
  opus: 'alpha-opus-5',
  haiku: 'alpha-haiku-4-5',
  fable: 'alpha-fable-5',
} as const;

type Alias = keyof typeof PREFERRED;

/** The served alpha model an alias maps to: the preferred one if served, else that family's newest, else none. */
function pick(alias: Alias, served: ReadonlySet<string>): string | undefined {
  if (served.has(PREFERRED[alias])) return PREFERRED[alias];
  const family = [...served].filter((id) => id.startsWith(`alpha-${alias}-`));
  return family.sort((a, b) => a.localeCompare(b, 'en', { numeric: true })).at(-1);
}

/**
 * The variables, in the order they are shown, for a gateway serving the text models `served`. A variable whose alias
 * has no served model is left out (the CLI then keeps its own id, which the gateway refuses if it is ever asked for).
 */
export function claudeCodeModelEnv(served: Iterable<string>): [name: string, model: string][] {
  const set = new Set(served);
  const sonnet = pick('sonnet', set);
  const opus = pick('opus', set);
  const haiku = pick('haiku', set);
  const fable = pick('fable', set);
  const main = sonnet ?? opus ?? fable ?? haiku;
  const out: [string, string | undefined][] = [
    ['ANTHROPIC_MODEL', main],
    ['ANTHROPIC_DEFAULT_FABLE_MODEL', fable],
    ['ANTHROPIC_DEFAULT_OPUS_MODEL', opus],
    ['ANTHROPIC_DEFAULT_SONNET_MODEL', sonnet],
    ['ANTHROPIC_DEFAULT_HAIKU_MODEL', haiku],
    ['ANTHROPIC_SMALL_FAST_MODEL', haiku ?? main],
  ];
  return out.filter((e): e is [string, string] => e[1] !== undefined);
}
