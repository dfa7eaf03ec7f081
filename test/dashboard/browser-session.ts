/**
 * A browser as the dashboard's HTTP tests see it: a cookie jar, an Origin, requests through Fastify's inject, and
 * the sign-in of a viem local account (the steps the page's script takes, without a page).
 */
import type { FastifyInstance } from 'fastify';
import type { LocalAccount } from 'viem';

/** One browser: its cookies, the origin its pages come from, the dashboard's prefix. */
export interface TestBrowser {
  app: FastifyInstance;
  base: string;
  origin: string;
  cookies: Map<string, string>;
}

/** An answer: status, headers, body text, and the body as JSON when it is JSON. */
export interface Answer {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  text: string;
  json: any;
}

/** A browser with an empty cookie jar. */
export function browser(app: FastifyInstance, base: string, origin: string): TestBrowser {
  return { app, base, origin, cookies: new Map() };
}

function setCookies(b: TestBrowser, header: string | string[] | number | undefined): void {
  for (const line of [header ?? []].flat()) {
    const [pair, ...attrs] = String(line).split(';');
    const eq = pair!.indexOf('=');
    const name = pair!.slice(0, eq).trim();
    const value = pair!.slice(eq + 1).trim();
    const expired = attrs.some(
      (a) => /^\s*max-age=0\s*$/i.test(a) || (/^\s*expires=/i.test(a) && Date.parse(a.split('=')[1]!) < Date.now()),
    );
    if (expired || value === '') b.cookies.delete(name);
    else b.cookies.set(name, value);
  }
}

/** A request from the browser: its cookies and Origin (unless `headers` says otherwise), JSON or a form. */
export async function send(
  b: TestBrowser,
  method: 'GET' | 'POST',
  path: string,
  opts: {
    json?: unknown;
    form?: Record<string, string>;
    headers?: Record<string, string | undefined>;
    origin?: boolean;
  } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (b.cookies.size) headers.cookie = [...b.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  if (method === 'POST' && opts.origin !== false) headers.origin = b.origin;
  let payload: string | undefined;
  if (opts.json !== undefined) {
    headers['content-type'] = 'application/json';
    headers.accept = 'application/json';
    payload = JSON.stringify(opts.json);
  } else if (opts.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded';
    payload = new URLSearchParams(opts.form).toString();
  }
  for (const [k, v] of Object.entries(opts.headers ?? {})) {
    if (v === undefined) delete headers[k];
    else headers[k] = v;
  }
  const res = await b.app.inject({ method, url: `${b.base}${path}`, headers, payload });
  setCookies(b, res.headers['set-cookie']);
  let json: unknown;
  try {
    json = JSON.parse(res.body);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, text: res.body, json };
}

/** Ask for a sign-in message for `address` on `chainId`. */
export async function nonce(b: TestBrowser, address: string, chainId: number): Promise<Answer> {
  return send(b, 'POST', '/auth/nonce', { json: { address, chainId } });
}

/** Sign in as the wallet would: the message, a personal_sign of it, the verification. */
export async function signIn(b: TestBrowser, account: LocalAccount, chainId: number): Promise<Answer> {
  const n = await nonce(b, account.address, chainId);
  if (n.status !== 200) return n;
  const signature = await account.signMessage({ message: n.json.message });
  return send(b, 'POST', '/auth/verify', { json: { message: n.json.message, signature } });
}

/** The session's CSRF token, as a page carries it. */
export async function csrfOf(b: TestBrowser): Promise<string> {
  const page = await send(b, 'GET', '/keys');
  const m = /name="_csrf" value="([^"]+)"/.exec(page.text);
  if (!m) throw new Error(`no CSRF token on the Keys page (status ${page.status})`);
  return m[1]!;
}
