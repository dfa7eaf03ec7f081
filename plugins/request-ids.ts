/**
 * The gateway's request ids and the escrow call id each stands for: the one rule both the gateway (which makes the
 * ids) and billing (which charges the call ids) follow. Imports nothing of the project, so any layer may use it.
 */
import { hash, randomBytes } from 'node:crypto';

const COUNTER_END = 2 ** 32;

/**
 * Request ids: `req_` and 32 hex digits, a 96-bit random prefix (drawn at the first id and again every 2^32 ids)
 * followed by a 32-bit counter. The call id billing charges is this 128-bit number (callIdOf), so an instance's
 * consecutive calls get consecutive call ids, whose statuses the escrow keeps 128 to a storage word.
 */
export class RequestIds {
  private prefix = randomBytes(12).toString('hex');

  /** `counter`: where the count starts (tests start near the end to see a new prefix drawn). */
  constructor(private counter = 0) {}

  next(): string {
    if (this.counter >= COUNTER_END) {
      this.prefix = randomBytes(12).toString('hex');
      this.counter = 0;
    }
    const n = (this.counter++).toString(16);
    return `req_${this.prefix}${'00000000'.slice(n.length)}${n}`;
  }
}

const processIds = new RequestIds();

/** A new request id of this process (RequestIds). */
export function newRequestId(): string {
  return processIds.next();
}

const GATEWAY_REQUEST_ID = /^req_[0-9a-f]{32}$/;
const CALL_ID = /^0x[0-9a-f]{64}$/;

/**
 * The escrow call id of a gateway call (x-request-id). A request id of the gateway's own (`req_` and 32 hex digits,
 * newRequestId) is a 128-bit number and that number is the call id: an instance's consecutive calls then share the
 * escrow's status words. A call id itself (0x and 64 hex digits) is its own: a record rebuilt from a charge of a call
 * id not of this form is listed under it (settlement/apply-events.ts). Any other string: its sha256, which falls below
 * 2^128 with odds of 2^-128, so the kinds never meet.
 */
export function callIdOf(requestId: string): `0x${string}` {
  if (GATEWAY_REQUEST_ID.test(requestId)) return `0x${'0'.repeat(32)}${requestId.slice(4)}`;
  if (CALL_ID.test(requestId)) return requestId as `0x${string}`;
  return `0x${hash('sha256', requestId, 'hex')}`; // one-shot hash: no Hash object
}
