// The README's Claude Code command ("Two commands"), parsed as a shell would read its variables.
import { readFileSync } from 'node:fs';

/** The `NAME=value` pairs before `claude`, in order, as written (the base URL and `$FAREBOX_KEY` unexpanded). */
export function readmeClaudeVariables(): [string, string][] {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.slice(readme.indexOf('The Claude Code CLI takes the gateway without'));
  const block = /```sh\n([\s\S]*?)\n```/.exec(section)?.[1];
  if (!block) throw new Error('README: no Claude Code command block');
  const words = block.replace(/\\\n/g, ' ').trim().split(/\s+/);
  if (words.at(-1) !== 'claude') throw new Error(`README: the Claude Code command ends with ${words.at(-1)}`);
  return words.slice(0, -1).map((w) => {
    const m = /^([A-Z_]+)=(\S+)$/.exec(w);
    if (!m) throw new Error(`README: ${w} in the Claude Code command is not NAME=value`);
    return [m[1]!, m[2]!];
  });
}
