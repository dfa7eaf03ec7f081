/**
 * The soak's fuzz: the seeded malformed requests of fuzz-cases.ts against a running gateway, a few at a time.
 * Every answer must have an x-request-id, none may be a 500 or 503 of the gateway's own, every error must be in its
 * path's protocol shape (checkAnswer).
 */
import { checkAnswer, fuzzCases } from './fuzz-cases.js';

/** What a fuzz run saw. */
export interface FuzzReport {
  seed: number;
  cases: number;
  seconds: number;
  /** Answers by status. */
  statuses: Record<string, number>;
  /** Unexpected answers, one line each (path, what was done, what was wrong). */
  unexpected: string[];
}

/** Send `n` cases from `seed` to `url` with `key`, `concurrency` at a time. */
export async function runFuzz(
  url: string,
  key: string,
  seed: number,
  n: number,
  concurrency: number,
): Promise<FuzzReport> {
  const started = Date.now();
  const cases = fuzzCases(seed, n, key);
  const statuses: Record<string, number> = {};
  const unexpected: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      let res: Response;
      try {
        res = await fetch(`${url}${c.path}`, {
          method: 'POST',
          headers: c.headers,
          body: c.body,
          signal: AbortSignal.timeout(30_000),
        });
      } catch (err) {
        const cause = (err as { cause?: { code?: string } }).cause;
        unexpected.push(
          `${c.path} [${c.what}]: no answer (${(err as Error).message}${cause?.code ? `, ${cause.code}` : ''})`,
        );
        continue;
      }
      const text = await res.text().catch(() => '');
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      const wrong = checkAnswer(c, res.status, res.headers, text);
      if (wrong) unexpected.push(`${c.path} [${c.what}]: ${wrong}`);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { seed, cases: n, seconds: (Date.now() - started) / 1000, statuses, unexpected };
}
