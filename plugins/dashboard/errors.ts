/**
 * Every error the dashboard answers with: a code, its HTTP status and a message safe to show. Forms get it as a
 * page, the wallet calls of the browser script as `{"error":{"code","message"}}`.
 */

/** The dashboard's error codes. */
export const DASHBOARD_ERRORS = {
  invalid_input: { status: 400, message: 'The form has a field the dashboard cannot accept.' },
  wrong_chain: {
    status: 400,
    message: 'Your wallet is on a chain this gateway does not bill on: switch it to one of chain_a..chain_d.',
  },
  sign_in_unknown: {
    status: 400,
    message: 'This sign-in request is unknown, expired or already used. Start the sign-in again.',
  },
  sign_in_altered: {
    status: 400,
    message: 'The signed message is not the one the dashboard issued. Start the sign-in again.',
  },
  bad_signature: { status: 401, message: 'The signature is not from the wallet the message names.' },
  not_signed_in: { status: 401, message: 'Sign in first: your session ended or never began.' },
  csrf_failed: {
    status: 403,
    message:
      'This form did not come from a page of this dashboard, or the page is older than your session. Reload the page and try again.',
  },
  cross_site: {
    status: 403,
    message: 'This request came from another site; the dashboard takes requests from its own pages only.',
  },
  signup_closed: {
    status: 403,
    message: 'Sign-ups are closed: this wallet has no account here and the operator is not opening new ones.',
  },
  not_found: { status: 404, message: 'No such page.' },
  no_such_key: { status: 404, message: 'No such key on your account.' },
  dev_only: { status: 404, message: 'Test USD exists only on the dev chains of the embedded default.' },
  too_many_sign_ins: {
    status: 429,
    message: 'Too many sign-in attempts from your address; wait a minute and try again.',
  },
  internal_error: { status: 500, message: 'The dashboard failed; the error is logged.' },
  chain_unavailable: { status: 502, message: 'The chain did not answer; try again in a moment.' },
} as const satisfies Record<string, { status: number; message: string }>;

/** One of the dashboard's error codes. */
export type DashboardErrorCode = keyof typeof DASHBOARD_ERRORS;

/** An expected refusal: `message` is shown to the person; `cause` goes to the log only. */
export class DashboardError extends Error {
  override readonly name = 'DashboardError';
  readonly status: number;
  constructor(
    readonly code: DashboardErrorCode,
    opts: { message?: string; cause?: unknown } = {},
  ) {
    super(opts.message ?? DASHBOARD_ERRORS[code].message, { cause: opts.cause });
    this.status = DASHBOARD_ERRORS[code].status;
  }
}

/** Any error as the DashboardError the browser sees: unknown ones become internal_error, their text unshown. */
export function toDashboardError(err: unknown): DashboardError {
  if (err instanceof DashboardError) return err;
  const e = err as { code?: string; statusCode?: number };
  if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return new DashboardError('invalid_input', { message: 'The form is too large.', cause: err });
  if (e.statusCode === 400 || e.statusCode === 415) return new DashboardError('invalid_input', { cause: err });
  return new DashboardError('internal_error', { cause: err });
}
