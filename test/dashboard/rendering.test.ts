/**
 * The dashboard's pure parts: HTML escaped by construction, the JSON data block, exact rates, the CSV export and
 * spend per day.
 */
import t from 'tap';
import type { UsageRecord } from '../../plugins/billing/call-records.js';
import { formatDuration, shortHex } from '../../plugins/dashboard/format.js';
import { escapeHtml, html, jsonBlock, raw } from '../../plugins/dashboard/html.js';
import { dailySpend, spendChart } from '../../plugins/dashboard/spend-chart.js';
import { usageCsv } from '../../plugins/dashboard/usage-csv.js';

t.test('html: every interpolated value is escaped unless it is itself html', async (t) => {
  const name = `"><script>alert('x')</script>&`;
  t.equal(
    html`<td title="${name}">${name}</td>`.value,
    '<td title="&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;">&quot;&gt;&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;</td>',
  );
  t.equal(html`<ul>${['<a>', html`<li>${'<b>'}</li>`]}</ul>`.value, '<ul>&lt;a&gt;<li>&lt;b&gt;</li></ul>');
  t.equal(html`${null}${undefined}${false}${0}${12n}`.value, '012');
  t.equal(raw('<br>').value, '<br>');
  t.equal(escapeHtml(`&<>"'`), '&amp;&lt;&gt;&quot;&#39;');
});

t.test('jsonBlock: no value can close its script element', async (t) => {
  const out = jsonBlock({ name: '</script><script>alert(1)</script>', sep: '\u2028' }).value;
  t.notMatch(out, /<\/script/i);
  t.same(JSON.parse(out), { name: '</script><script>alert(1)</script>', sep: '\u2028' });
});

t.test('format: durations and short hex', async (t) => {
  t.equal(formatDuration(3600n), '1 hour');
  t.equal(formatDuration(86_400n * 2n), '2 days');
  t.equal(formatDuration(90n), '90 seconds');
  t.equal(formatDuration(60n), '1 minute');
  t.equal(shortHex('0x1234567890abcdef'), '0x1234…cdef');
});

const record = (over: Partial<UsageRecord>): UsageRecord => ({
  call_id: 'req_1',
  time: '2026-11-25T10:00:00.000Z',
  key_id: 'key_1',
  model: 'gamma-k3',
  chain: 'chain_a',
  usage: {
    input_tokens: 3,
    output_tokens: 4,
    cache_read_tokens: 0,
    cache_write_5m_tokens: 0,
    cache_write_1h_tokens: 0,
    images: 0,
    video_seconds: 0,
  },
  price: '0.000010',
  status: 'settled',
  tx: '0xabc',
  ...over,
});

t.test('usageCsv: RFC 4180 quoting, CRLF, and text a spreadsheet would run kept as text', async (t) => {
  const names = new Map([
    ['key_1', '=cmd|"/c calc"!A1'],
    ['key_2', 'plain, with comma'],
    ['key_3', '-2+3'],
    ['key_4', '@SUM(1)'],
  ]);
  const csv = usageCsv(
    [
      record({}),
      record({ key_id: 'key_2', tx: null, status: 'pending' }),
      record({ key_id: 'key_3' }),
      record({ key_id: 'key_4' }),
    ],
    names,
  );
  const lines = csv.split('\r\n');
  t.equal(lines.length, 6, 'header, 4 rows, and the final CRLF');
  t.equal(
    lines[1],
    `2026-11-25T10:00:00.000Z,req_1,key_1,"'=cmd|""/c calc""!A1",gamma-k3,chain_a,3,4,0,0,0,0,0,0.000010,settled,0xabc`,
  );
  t.match(lines[2], /,key_2,"plain, with comma",.*,0\.000010,pending,$/);
  t.match(lines[3], /,key_3,'-2\+3,/);
  t.match(lines[4], /,key_4,'@SUM\(1\),/);
});

t.test('dailySpend: charged calls (pending, settled) per UTC day, the window only', async (t) => {
  const now = Date.parse('2026-11-25T12:00:00Z');
  const series = dailySpend(
    [
      record({ time: '2026-11-25T00:00:01.000Z', price: '1.000000', status: 'settled' }),
      record({ time: '2026-11-25T11:00:00.000Z', price: '0.500000', status: 'pending' }),
      record({ time: '2026-11-24T23:59:59.000Z', price: '2.000000', status: 'settled' }),
      record({ time: '2026-11-25T01:00:00.000Z', price: '9.000000', status: 'failed' }),
      record({ time: '2026-11-25T01:00:00.000Z', price: '0.000000', status: 'free' }),
      record({ time: '2026-11-20T01:00:00.000Z', price: '5.000000', status: 'settled' }),
    ],
    3,
    now,
  );
  t.same(
    series.map((s) => [s.day, s.atomic]),
    [
      ['2026-11-23', 0n],
      ['2026-11-24', 2_000_000n],
      ['2026-11-25', 1_500_000n],
    ],
  );
  const svg = spendChart(series).value;
  t.match(
    svg,
    /aria-label="Spend per day over the last 3 days: 3\.500000 USD in all, most on 2026-11-24 \(2\.000000 USD\)\."/,
  );
  t.equal((svg.match(/<rect class="bar"/g) ?? []).length, 3);
  t.match(spendChart(dailySpend([], 2, now)).value, /0\.000000 USD in all\."/, 'no spend: no peak');
});
