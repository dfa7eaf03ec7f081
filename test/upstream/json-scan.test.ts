import t from 'tap';
import { JsonScanner, type JsonPath, type Take, type ValueKind } from '../../plugins/upstream/json-scan.js';

/** Scan `text` cut into pieces of `step` bytes, streaming the strings `stream` picks and capturing those `capture` picks. */
function scan(text: string, step: number, pick: (path: string, kind: ValueKind) => Take, maxCapture?: number) {
  const streamed: string[] = [];
  let current: Buffer[] | null = null;
  const captured: Record<string, [string, boolean]> = {};
  const s = new JsonScanner(
    {
      take: (path: JsonPath, kind) => {
        const take = pick(path.join('.'), kind);
        if (take === 'stream') current = [];
        return take;
      },
      piece: (p) => current!.push(Buffer.from(p)),
      stringEnd: () => {
        streamed.push(Buffer.concat(current!).toString('utf8'));
        current = null;
      },
      captured: (path, value, whole) => {
        captured[path.join('.')] = [value, whole];
      },
    },
    maxCapture,
  );
  const bytes = Buffer.from(text, 'utf8');
  for (let i = 0; i < bytes.length; i += step) s.write(bytes.subarray(i, i + step));
  return { complete: s.end(), error: s.error, streamed, captured };
}

const doc = JSON.stringify({
  created: 1713833628,
  data: [{ b64_json: 'iVBORw0KGgo/AAAA+/==', revised: 'x' }],
  usage: { input_tokens: 5, details: { a: [1, 2, { b: 'c}]"' }] } },
  text: 'caf\u00e9 \u2603 "quoted" \\ back\nline \ud83d\ude00',
  flag: true,
  nothing: null,
  empty: {},
  list: [],
});

t.test('streams, captures and skips at any chunking, escapes resolved', async (t) => {
  for (const step of [1, 2, 3, 7, 64, 4096]) {
    const r = scan(doc, step, (p, kind) => {
      if (p === 'data.0.b64_json') return 'stream';
      if (
        p === 'usage' ||
        p === 'created' ||
        p === 'text' ||
        p === 'flag' ||
        p === 'nothing' ||
        p === 'empty' ||
        p === 'list'
      )
        return 'capture';
      t.not(p.startsWith('usage.'), true, 'nothing inside a captured value is asked about');
      void kind;
      return 'skip';
    });
    t.ok(r.complete, `complete at step ${step}`);
    t.same(r.streamed, ['iVBORw0KGgo/AAAA+/=='], `step ${step}`);
    t.same(JSON.parse(r.captured.usage![0]), { input_tokens: 5, details: { a: [1, 2, { b: 'c}]"' }] } });
    t.same(r.captured.created, ['1713833628', true]);
    t.same(r.captured.text, ['caf\u00e9 \u2603 "quoted" \\ back\nline \ud83d\ude00', true]);
    t.same(r.captured.flag, ['true', true]);
    t.same(r.captured.nothing, ['null', true]);
    t.same(r.captured.empty, ['{}', true]);
    t.same(r.captured.list, ['[]', true]);
  }
});

t.test('escaped slashes in a streamed string come out as slashes, pieces are slices elsewhere', async (t) => {
  const text = '{"data":"ab\\/cd\\/\\/ef\\u002Fgh"}';
  for (const step of [1, 2, 5, 100]) {
    const r = scan(text, step, (p) => (p === 'data' ? 'stream' : 'skip'));
    t.same(r.streamed, ['ab/cd//ef/gh'], `step ${step}`);
    t.ok(r.complete);
  }
});

t.test('captures are cut at the bound and say so', async (t) => {
  const r = scan(
    JSON.stringify({ text: 'x'.repeat(100), obj: { long: 'y'.repeat(100) } }),
    7,
    (p) => (p === 'text' || p === 'obj' ? 'capture' : 'skip'),
    10,
  );
  t.same(r.captured.text, ['x'.repeat(10), false]);
  t.equal(r.captured.obj![1], false);
  t.equal(r.captured.obj![0].length, 10);
});

t.test('incomplete or broken documents are not complete', async (t) => {
  t.notOk(scan('{"a":[1,2', 3, () => 'skip').complete);
  t.notOk(scan('{"a":"unterminated', 3, () => 'skip').complete);
  const bad = scan('{"a":1]', 2, () => 'skip');
  t.notOk(bad.complete);
  t.ok(bad.error);
  t.notOk(scan('{"a":1} {"b":2}', 4, () => 'skip').complete, 'one value only');
  t.ok(scan(' 12 ', 1, (_p, k) => (k === 'primitive' ? 'capture' : 'skip')).complete, 'a bare primitive');
});

t.test('array indices and keys make the path', async (t) => {
  const seen: string[] = [];
  scan(
    '{"candidates":[{"content":{"parts":[{"text":"a"},{"inlineData":{"mimeType":"image/png","data":"QQ=="}}]}}]}',
    5,
    (p) => {
      seen.push(p);
      return 'skip';
    },
  );
  t.same(seen, [
    '',
    'candidates',
    'candidates.0',
    'candidates.0.content',
    'candidates.0.content.parts',
    'candidates.0.content.parts.0',
    'candidates.0.content.parts.0.text',
    'candidates.0.content.parts.1',
    'candidates.0.content.parts.1.inlineData',
    'candidates.0.content.parts.1.inlineData.mimeType',
    'candidates.0.content.parts.1.inlineData.data',
  ]);
});
