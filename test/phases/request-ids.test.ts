import t from 'tap';
import { createHash } from 'node:crypto';
import { callIdOf, newRequestId, RequestIds } from '../../plugins/request-ids.js';

const numberOf = (requestId: string) => BigInt(`0x${requestId.slice(4)}`);

t.test('request ids: req_ and 32 hex digits, one random prefix per source, then a counter', async (t) => {
  const source = new RequestIds();
  const ids = Array.from({ length: 10_000 }, () => source.next());
  t.ok(
    ids.every((id) => /^req_[0-9a-f]{32}$/.test(id)),
    'format',
  );
  t.equal(new Set(ids).size, ids.length, 'all distinct');
  t.equal(new Set(ids.map((id) => id.slice(4, 28))).size, 1, 'one 96-bit prefix');
  t.equal(ids[0]!.slice(28), '00000000', 'the counter starts at 0');
  t.ok(
    ids.every((id, i) => i === 0 || numberOf(id) === numberOf(ids[i - 1]!) + 1n),
    'each id is the one before plus 1',
  );
  t.not(new RequestIds().next().slice(4, 28), source.next().slice(4, 28), 'another source draws another prefix');
  t.match(newRequestId(), /^req_[0-9a-f]{32}$/, "the process's own source");
});

t.test('request ids: a new prefix when the 32-bit counter runs out', async (t) => {
  const source = new RequestIds(2 ** 32 - 2);
  const [a, b, c, d] = [source.next(), source.next(), source.next(), source.next()];
  t.equal(a!.slice(28), 'fffffffe');
  t.equal(b!.slice(28), 'ffffffff');
  t.equal(a!.slice(4, 28), b!.slice(4, 28));
  t.equal(c!.slice(28), '00000000', 'the count starts again');
  t.not(c!.slice(4, 28), b!.slice(4, 28), 'under a new prefix');
  t.equal(numberOf(d!), numberOf(c!) + 1n);
});

t.test("callIdOf: a gateway request id's number is its call id; consecutive calls share status words", async (t) => {
  const source = new RequestIds();
  const ids = Array.from({ length: 256 }, () => source.next());
  for (const id of ids) t.equal(callIdOf(id), `0x${'0'.repeat(32)}${id.slice(4)}`);
  const words = new Set(ids.map((id) => BigInt(callIdOf(id)) >> 7n));
  t.equal(words.size, 2, '256 consecutive calls from counter 0: two of the escrow status words (128 call ids each)');
  t.equal(callIdOf(ids[7]!), callIdOf(ids[7]!), 'deterministic');
});

t.test('callIdOf: any other request id is its sha256', async (t) => {
  for (const id of [
    'req-1',
    'escrow-test-0',
    `req_${'A'.repeat(32)}`,
    `req_${'0'.repeat(31)}`,
    `req_${'0'.repeat(33)}`,
    '',
  ]) {
    t.equal(callIdOf(id), `0x${createHash('sha256').update(id).digest('hex')}`, JSON.stringify(id));
  }
  t.not(callIdOf('req-1'), callIdOf('req-2'));
});
