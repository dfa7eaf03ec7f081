/** Prompts of a known size by the simulator's token count, and the refusal a call over a model's limits meets. */
import type { Test } from 'tap';

/** A text of exactly `tokens` tokens by the simulator's count. */
export const text = (tokens: number) => 'word'.repeat(tokens);
/** Tokens a Messages request with one user message adds to its text: the message's framing. */
export const MESSAGE = 3;
/** Tokens a Chat Completions request with one user message adds: the message's framing and the reply's priming. */
export const CHAT = 6;

/** The error a promise rejects with (failing the test if it resolves). */
export async function refusal<E>(t: Test, p: Promise<unknown>, cls: abstract new (...a: never[]) => E): Promise<E> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  t.type(err, cls, `refused with ${cls.name}`);
  return err as E;
}
