/**
 * Finish, the last phase, once the response has closed (or the caller left during the gate): the endpoint bills what
 * the call delivered and admission debits its hold at that price (0 for a failed call), or a job keeps the hold.
 * A billed call whose caller left before anything billable reached it costs nothing, whatever the upstream did; it
 * is counted per account (farebox_abandoned_calls_total), so an operator sees who makes providers work for free.
 * A call whose answer showed its price (showBill) is debited the bill shown, not one computed again at the end. An
 * answer that never reached its connection (queued behind another on a pipelined connection that closed) is free.
 */
import type { Admission } from '../billing/admission.js';
import { debitedPrice, FREE, type Bill } from '../billing/billing.js';
import type { Call } from '../call.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Log } from '../log.js';
import { formatUsd, type PriceTable } from '../../pricing/index.js';

/** x-gw-price of an answer that costs nothing (an error). */
export const NO_PRICE = formatUsd(0n);

/**
 * Show `bill` to the caller of `call` (x-gw-price, usage.cost): finish debits it as it is. Answers its price as the
 * debit takes it (billing.ts debitedPrice: cut to the hold; 0 without one), in USD with 6 decimals.
 */
export function showBill(call: Call, bill: Bill): string {
  call.bill = bill;
  return priceOf(call, bill);
}

/** The price of `bill` as the debit of `call` takes it (cut to its hold; 0 without one), in USD with 6 decimals. */
export function priceOf(call: Call, bill: Bill): string {
  return formatUsd(debitedPrice(bill.price, call.admitted?.hold?.amount));
}

/** Finishes calls; `drained()` waits for the debits still running (at shutdown, before Redis closes). */
export class Finisher {
  private readonly running = new Set<Promise<void>>();

  constructor(
    private readonly admission: Admission,
    private readonly prices: PriceTable,
    private readonly log: Log,
    private readonly metrics: Pick<Metrics, 'abandonedCalls'>,
  ) {}

  /** Finish `call` once, if it was admitted. */
  readonly finish = (call: Call): void => {
    if (call.finished || !call.admitted) return;
    call.finished = true;
    let bill: Bill | null;
    try {
      bill = call.bill ?? call.endpoint!.bill(call, call.policed!, this.prices);
    } catch (err) {
      // A bill that cannot be computed is a bug: logged, and the call charged nothing rather than guessed at.
      this.log.error({ err, requestId: call.id }, 'usage not billable; call charged 0');
      bill = FREE;
    }
    if (bill === null) return;
    // Whatever was metered or shown as written, none of it left the process.
    if (call.unsent) bill = FREE;
    // Counted only where the provider was asked (an exchange began): a caller that left during the gate or prepare
    // made no one work.
    if (call.clientAborted && bill.price === 0n && call.admitted.hold && call.exchange !== undefined) {
      this.metrics.abandonedCalls.inc({ account: call.admitted.hold.account, endpoint: call.endpoint!.name });
    }
    const done: Promise<void> = this.admission.finish(call.admitted, bill).then(
      () => void this.running.delete(done),
      (err) => {
        this.running.delete(done);
        this.log.error({ err, requestId: call.id }, 'finishing the call failed');
      },
    );
    this.running.add(done);
  };

  /** Wait for the debits in flight. */
  async drained(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }
}
