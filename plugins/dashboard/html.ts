/**
 * HTML escaped by construction: the `html` tag escapes every interpolated value unless it is SafeHtml, which only
 * the tag itself (or `raw`, for constants) makes. Attribute values are always written in double quotes, where the
 * escaped text cannot end the attribute.
 */

/** A fragment of HTML that is safe to write as is. */
export class SafeHtml {
  constructor(readonly value: string) {}
  /** The HTML text. */
  toString(): string {
    return this.value;
  }
}

/** What an `html` template may interpolate: text is escaped, fragments are kept, empty values vanish. */
export type HtmlValue = SafeHtml | string | number | bigint | boolean | null | undefined | readonly HtmlValue[];

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text as HTML: the five characters that could open markup or end an attribute are escaped. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

function write(v: HtmlValue): string {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof SafeHtml) return v.value;
  if (Array.isArray(v)) return (v as readonly HtmlValue[]).map(write).join('');
  return escapeHtml(String(v));
}

/** Tagged template: the literal parts are trusted markup, every value is escaped (or kept, when SafeHtml). */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += write(values[i]!) + strings[i + 1]!;
  return new SafeHtml(out);
}

/** A constant of the code as HTML, unescaped: never pass it data. */
export function raw(markup: string): SafeHtml {
  return new SafeHtml(markup);
}

/**
 * JSON for a `<script type="application/json">` data block: `<` is escaped so no value can close the element, and
 * the two line separators JavaScript once refused are escaped too.
 */
export function jsonBlock(value: unknown): SafeHtml {
  return new SafeHtml(
    JSON.stringify(value)
      .replace(/</g, '\\u003c')
      .replace(/\u2028/g, '\\u2028')
      .replace(/\u2029/g, '\\u2029'),
  );
}
