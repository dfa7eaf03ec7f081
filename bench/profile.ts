/**
 * Summary of a V8 CPU profile (`node --cpu-prof`, the .cpuprofile JSON of the Chrome DevTools protocol,
 * Profiler.Profile): self time per function and per package, from the samples and their time deltas.
 */
import { readFileSync } from 'node:fs';
import { round } from './stats.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** One line of the summary: self time in ms and as a share of all samples. */
export interface SelfTime {
  name: string;
  selfMs: number;
  percent: number;
}

/** Where a function lives: the npm package, node's internals, or the project file. */
function area(url: string, root: string, functionName: string): string {
  // V8's pseudo-frames: (idle), (program), (garbage collector); other frames without a URL are builtins.
  if (!url) return functionName.startsWith('(') ? functionName : '(V8 builtins)';
  if (url.startsWith('node:')) return url.split('/').slice(0, 2).join('/');
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 14).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  return url.replace(`file://${root}/`, '');
}

/** A frame's file, short: node's own module id, the path inside node_modules, or the project-relative path. */
function shortFile(url: string, root: string): string {
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) return url.slice(nm + 14);
  return url.replace(`file://${root}/`, '');
}

/** Top `limit` functions and areas by self time; percentages are of the busy (non-idle) time. */
export function summarizeProfile(
  file: string,
  root: string,
  limit = 25,
): { busyMs: number; idleMs: number; functions: SelfTime[]; areas: SelfTime[] } {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const fn = new Map<string, number>();
  const ar = new Map<string, number>();
  let total = 0;
  let idle = 0;
  // timeDeltas[i] is the time since the previous sample; it is charged to sample i (as DevTools does).
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]!);
    const us = profile.timeDeltas[i] ?? 0;
    if (!node || us <= 0) continue;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)') {
      idle += us;
      continue;
    }
    total += us;
    const where = area(url, root, functionName);
    const key = `${functionName || '(anonymous)'}  ${url ? `${shortFile(url, root)}:${lineNumber + 1}` : where}`;
    fn.set(key, (fn.get(key) ?? 0) + us);
    ar.set(where, (ar.get(where) ?? 0) + us);
  }
  const top = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([name, us]) => ({ name, selfMs: round(us / 1000, 1), percent: round((100 * us) / total, 1) }));
  return { busyMs: round(total / 1000, 1), idleMs: round(idle / 1000, 1), functions: top(fn), areas: top(ar) };
}
