/**
 * The dashboard's one stylesheet, served from the plugin (no external fonts or files): system fonts, readable at
 * phone width, a visible focus ring for keyboard use, colors that keep 4.5:1 contrast.
 */
export const STYLES = `
:root { color-scheme: light; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg: #ffffff; --panel: #f6f8fa;
  --accent: #0a58ca; --accent-fg: #ffffff; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --focus: #0a58ca; }
* { box-sizing: border-box; }
html { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: var(--bg); }
body { margin: 0; }
a { color: var(--accent); }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 0.875rem; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 0.75rem; overflow-x: auto; white-space: pre-wrap; word-break: break-all; margin: 0.25rem 0 0.75rem; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
.skip { position: absolute; left: -999px; top: 0; background: var(--bg); padding: 0.5rem; }
.skip:focus { left: 0.5rem; z-index: 1; }
header { border-bottom: 1px solid var(--line); background: var(--panel); }
header nav { max-width: 72rem; margin: 0 auto; padding: 0.5rem 1rem; display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem 1.25rem; }
.brand { font-weight: 700; color: var(--fg); text-decoration: none; }
header ul { list-style: none; display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; margin: 0; padding: 0; }
header ul a { text-decoration: none; padding: 0.25rem 0; }
header ul a[aria-current="page"] { font-weight: 700; border-bottom: 2px solid var(--accent); }
.who { margin-left: auto; display: flex; align-items: center; gap: 0.5rem; color: var(--muted); font-size: 0.875rem; }
.who form { margin: 0; }
main { max-width: 72rem; margin: 0 auto; padding: 1rem; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; }
h2 { font-size: 1.2rem; margin: 1.75rem 0 0.5rem; }
p { margin: 0.5rem 0; }
.muted { color: var(--muted); }
.notice { border: 1px solid var(--line); border-left: 4px solid var(--accent); background: var(--panel); padding: 0.75rem 1rem; border-radius: 6px; margin: 0.75rem 0; }
.notice.ok { border-left-color: var(--ok); }
.notice.warn { border-left-color: var(--warn); }
.notice.bad { border-left-color: var(--bad); }
.secret { border-left-color: var(--ok); }
.secret code { font-size: 1rem; word-break: break-all; }
/* Positioned: a visually-hidden header stays inside the scroll box instead of widening the page. */
.table-wrap { position: relative; overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; margin: 0.5rem 0 1rem; }
table { border-collapse: collapse; width: 100%; font-size: 0.9rem; }
th, td { text-align: left; padding: 0.45rem 0.6rem; border-bottom: 1px solid var(--line); vertical-align: top; white-space: nowrap; }
tr:last-child td { border-bottom: 0; }
th { background: var(--panel); font-weight: 600; }
tbody th { background: none; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.wrap { white-space: normal; word-break: break-all; }
form.inline { display: inline; margin: 0; }
/* A key's limits form: the row under the key's, folded. */
tr:has(+ tr.edit) td { border-bottom: 0; }
tr.edit td { white-space: normal; padding-top: 0; }
tr.edit summary { cursor: pointer; color: var(--accent); font-size: 0.875rem; }
/* The keys' table fits its page: amounts and times wrap at their spaces, a model id never inside. */
table.keys td { white-space: normal; }
table.keys td.list code, table.keys td.action { white-space: nowrap; }
.nowrap { white-space: nowrap; }
table.keys td.spent { min-width: 9rem; }
table.keys .tag { white-space: normal; border-radius: 6px; }
.row { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 0.75rem; margin: 0.5rem 0 1rem; }
.row > label { display: flex; flex-direction: column; gap: 0.25rem; font-weight: 600; font-size: 0.9rem; }
input, select { font: inherit; padding: 0.45rem 0.55rem; border: 1px solid var(--muted); border-radius: 6px; background: var(--bg); color: var(--fg); min-width: 10rem; }
button { font: inherit; padding: 0.45rem 0.9rem; border-radius: 6px; border: 1px solid var(--accent); background: var(--accent); color: var(--accent-fg); cursor: pointer; }
button.secondary { background: var(--bg); color: var(--accent); }
button.danger { background: var(--bg); color: var(--bad); border-color: var(--bad); }
button:disabled { opacity: 0.6; cursor: progress; }
.status { min-height: 1.5rem; margin: 0.5rem 0; }
/* Error text can hold a wallet's long hex: it wraps anywhere rather than widen the page. */
.status, .notice { overflow-wrap: anywhere; word-break: break-word; }
.status details { color: var(--fg); font-size: 0.875rem; margin-top: 0.25rem; }
.status summary { cursor: pointer; color: var(--muted); }
.status details pre { max-height: 12rem; overflow: auto; }
.status.bad { color: var(--bad); }
.status.ok { color: var(--ok); }
.tag { display: inline-block; white-space: nowrap; padding: 0 0.4rem; border-radius: 999px; font-size: 0.8rem; border: 1px solid var(--line); background: var(--panel); }
.tag.ok { color: var(--ok); border-color: var(--ok); }
.tag.bad { color: var(--bad); border-color: var(--bad); }
.tag.warn { color: var(--warn); border-color: var(--warn); }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(16rem, 1fr)); gap: 0.75rem 1.5rem; }
dl { margin: 0.25rem 0 1rem; display: grid; grid-template-columns: max-content 1fr; gap: 0.25rem 0.75rem; }
dt { color: var(--muted); }
dd { margin: 0; word-break: break-all; }
.chart { width: 100%; height: auto; max-height: 14rem; border: 1px solid var(--line); border-radius: 6px; background: var(--panel); }
.chart .bar { fill: var(--accent); }
.chart .axis { stroke: var(--line); }
.chart text { fill: var(--muted); font-size: 11px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 0 0.75rem; }
.card h3 { margin: 0.6rem 0 0.25rem; font-size: 1rem; }
.card dl { grid-template-columns: max-content minmax(0, 1fr); font-size: 0.875rem; }
.pager { display: flex; gap: 1rem; margin: 0.5rem 0 1.5rem; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
@media (max-width: 40rem) {
  main { padding: 0.75rem; }
  .who { margin-left: 0; width: 100%; justify-content: space-between; }
  input, select { min-width: 0; width: 100%; }
  .row > label { flex: 1 1 100%; }
  /* Wide tables become one card per row, each value under its column's name. */
  table.stack thead { display: none; }
  table.stack tr { display: block; border-bottom: 1px solid var(--line); padding: 0.35rem 0; }
  table.stack tr:last-child { border-bottom: 0; }
  table.stack th, table.stack td { display: flex; justify-content: space-between; gap: 1rem; border: 0; padding: 0.15rem 0.6rem; white-space: normal; text-align: right; }
  table.stack th[scope="row"] { background: none; text-align: left; }
  table.stack td::before { content: attr(data-label); color: var(--muted); text-align: left; }
  table.stack tr.edit td { display: block; text-align: left; }
}
`;
