/** Provider-shaped ids: a random per-process stem plus a counter (unique, no per-call entropy). */
import { randomBytes } from 'node:crypto';

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function base62(bytes: Buffer): string {
  let s = '';
  for (const b of bytes) s += ALPHABET[b % 62];
  return s;
}

const stem = base62(randomBytes(12));
let counter = 0;

/** A new id like the providers': `msg_01...`, `toolu_01...`, `chatcmpl-...`, `call_...`, `req_...`. */
export function newId(prefix: string): string {
  counter = (counter + 1) % 0x7fffffff;
  return prefix + stem + counter.toString(36).padStart(10, '0');
}
