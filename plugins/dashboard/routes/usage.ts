/**
 * The Usage page and its CSV export, read with listUsage (the records `farebox usage` lists). listUsage reads the
 * newest N records, so page p reads p pages (and the chart every call of its days); pages, chart and export stop at
 * USAGE_MAX_RECORDS records.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { listKeys } from '../../accounts/accounts.js';
import { listUsage } from '../../billing/call-records.js';
import { keys } from '../../store/keys.js';
import type { Dashboard } from '../context.js';
import { requireSession, viewerOf } from '../guard.js';
import { usageBody } from '../pages/usage.js';
import { dailySpend, spendChart } from '../spend-chart.js';
import { usageCsv } from '../usage-csv.js';

/** Calls per page. */
export const USAGE_PAGE_SIZE = 25;
/** The most records the pages, the chart and the export read. */
export const USAGE_MAX_RECORDS = 10_000;
/** Days the chart covers. */
export const CHART_DAYS = 30;

async function keyNames(d: Dashboard, account: string): Promise<Map<string, string>> {
  return new Map((await listKeys(d.redis, account)).filter((k) => k.name).map((k) => [k.id, k.name]));
}

/** GET /usage?page=N */
export async function usagePage(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireSession(d, request);
  const raw = Number((request.query as { page?: string }).page ?? '1');
  const maxPage = USAGE_MAX_RECORDS / USAGE_PAGE_SIZE;
  const page = Number.isInteger(raw) && raw >= 1 ? Math.min(raw, maxPage) : 1;
  const now = Date.now();
  // The page needs its rows and one more (is there a next page?); the chart, every call of its days (the usage
  // index is scored by call time).
  const recent = await d.redis.zcount(keys.usageIndex(session.account), now - CHART_DAYS * 86_400_000, '+inf');
  const all = await listUsage(
    d.redis,
    session.account,
    Math.min(USAGE_MAX_RECORDS, Math.max(page * USAGE_PAGE_SIZE + 1, recent)),
  );
  const records = all.slice((page - 1) * USAGE_PAGE_SIZE, page * USAGE_PAGE_SIZE);
  return d.render(reply, {
    title: 'Usage',
    active: 'usage',
    viewer: await viewerOf(d, session),
    body: usageBody({
      base: d.base,
      records,
      page,
      hasNext: all.length > page * USAGE_PAGE_SIZE && page < maxPage,
      keyNames: await keyNames(d, session.account),
      explorers: d.settings.explorers,
      chart: spendChart(dailySpend(all, CHART_DAYS, now)),
    }),
  });
}

/** GET /usage.csv: every record the gateway keeps (up to USAGE_MAX_RECORDS), newest first. */
export async function usageCsvExport(d: Dashboard, request: FastifyRequest, reply: FastifyReply) {
  const session = await requireSession(d, request);
  const records = await listUsage(d.redis, session.account, USAGE_MAX_RECORDS);
  const day = new Date().toISOString().slice(0, 10);
  return reply
    .header('content-type', 'text/csv; charset=utf-8')
    .header('content-disposition', `attachment; filename="farebox-usage-${day}.csv"`)
    .header('cache-control', 'no-store')
    .send(usageCsv(records, await keyNames(d, session.account)));
}
