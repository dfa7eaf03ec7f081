/**
 * Usage records as CSV (RFC 4180): one row per call, the columns of `farebox usage --json` flattened, plus the key's
 * name. Text a spreadsheet would run as a formula (a key name such as `=HYPERLINK(...)`) is written with a leading
 * apostrophe.
 */
import type { UsageRecord } from '../billing/call-records.js';
import { USAGE_FIELDS } from '../../pricing/index.js';

/** The CSV's columns, in order. */
export const CSV_COLUMNS = [
  'time',
  'call_id',
  'key_id',
  'key_name',
  'model',
  'chain',
  ...USAGE_FIELDS,
  'price_usd',
  'status',
  'tx',
] as const;

function text(v: string): string {
  const safe = /^[=+\-@\t\r]/.test(v) ? `'${v}` : v;
  return /[",\r\n]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** The CSV document of `records`, header first, CRLF line ends. */
export function usageCsv(records: readonly UsageRecord[], keyNames: ReadonlyMap<string, string>): string {
  const lines = [CSV_COLUMNS.join(',')];
  for (const r of records) {
    const counts = USAGE_FIELDS.map((f) => String(r.usage[f] ?? 0));
    lines.push(
      [
        text(r.time),
        text(r.call_id),
        text(r.key_id),
        text(keyNames.get(r.key_id) ?? ''),
        text(r.model),
        text(r.chain),
        ...counts,
        r.price,
        r.status,
        r.tx ?? '',
      ].join(','),
    );
  }
  return `${lines.join('\r\n')}\r\n`;
}
