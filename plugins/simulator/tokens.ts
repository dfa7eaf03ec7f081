/**
 * Deterministic token arithmetic of the simulated upstreams.
 *
 * Invariant billing relies on: the input tokens counted for a request never exceed the UTF-8
 * byte length of its JSON body. Each count here is a quarter (rounded up) of the bytes of a
 * disjoint piece of that body, plus a per-message overhead smaller than the JSON that frames a
 * message, so the sum stays below the body length (checked in test/simulator/tokens.test.ts).
 */
import { createHash } from 'node:crypto';

/** Tokens added per message for its role and framing (a message's JSON frame is >= 24 bytes). */
export const MESSAGE_OVERHEAD = 3;

/** Tokens of a text: ceil(UTF-8 bytes / 4), the usual rule of thumb for English. */
export function textTokens(text: string): number {
  return text.length === 0 ? 0 : Math.ceil(Buffer.byteLength(text, 'utf8') / 4);
}

/** Tokens of a non-text value (image, tool definition, tool result...): those of its compact JSON. */
export function jsonTokens(value: unknown): number {
  return textTokens(JSON.stringify(value) ?? '');
}

/** A 32-bit seed from a string: FNV-1a for short strings, SHA-1 (native) for long ones. */
export function hashSeed(text: string): number {
  if (text.length > 512) return createHash('sha1').update(text).digest().readUInt32LE(0);
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

const WORDS = (
  'the a of and to in is it that on for with as at by from this be are was not but or an ' +
  'river stone light field quiet morning signal bridge window harbor paper garden winter ' +
  'copper orbit lantern meadow thread canyon ember willow pocket marble island forest ' +
  'ledger compass violet thunder ribbon falcon cedar'
).split(' ');

/** Length of the answer when no `#sim:tokens` is given: a handful of words (4 to 8). */
export function defaultAnswerLength(seed: number): number {
  return 4 + (seed % 5);
}

/**
 * `count` output pieces, one token each: the first word capitalised, the others led by a space;
 * `final` ends the last word with a period (a natural end, not a cut).
 */
export function outputPieces(seed: number, count: number, final: boolean): string[] {
  const pieces = new Array<string>(count);
  let s = seed >>> 0;
  for (let i = 0; i < count; i++) {
    // mulberry32: tiny, fast, and deterministic across platforms.
    s = (s + 0x6d2b79f5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), s | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    const word = WORDS[((t ^ (t >>> 14)) >>> 0) % WORDS.length]!;
    pieces[i] = i === 0 ? word[0]!.toUpperCase() + word.slice(1) : ' ' + word;
  }
  if (final && count > 0) pieces[count - 1] += '.';
  return pieces;
}
