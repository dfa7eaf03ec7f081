/**
 * One serialized nonce sequence per (chain, sender): sends run one at a time in call order
 * with consecutive nonces, so concurrent batches never collide (automine and most mempools
 * reject a nonce gap or reuse). After a failed send, or a resync, the next job re-reads the nonce from the chain.
 */

/** A serialized sender of nonce-ordered transactions. */
export class NonceQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private next: number | undefined;

  constructor(private readonly fetchNonce: () => Promise<number>) {}

  /** Runs `send` with the next nonce once every earlier job is done; the nonce is used up if it resolves. */
  run<T>(send: (nonce: number) => Promise<T>): Promise<T> {
    const job = this.tail.then(async () => {
      this.next ??= await this.fetchNonce();
      const nonce = this.next;
      try {
        const result = await send(nonce);
        this.next = nonce + 1;
        return result;
      } catch (err) {
        this.next = undefined; // unknown whether the node took it: resync
        throw err;
      }
    });
    this.tail = job.catch(() => undefined);
    return job;
  }

  /**
   * The next job re-reads the nonce from the chain. For a transaction that will never be mined (given up after its
   * replacements, or dropped by the node): the chain's pending count then stops at its nonce, which the next send
   * takes, instead of leaving a gap that would hold every later transaction of the key.
   */
  resync(): void {
    this.tail = this.tail.then(() => {
      this.next = undefined;
    });
  }
}

const queues = new Map<string, NonceQueue>();

/** The process-wide queue of `sender` on the chain `chainId` reached at `rpcUrl`. */
export function nonceQueueFor(
  chainId: number,
  rpcUrl: string,
  sender: string,
  fetchNonce: () => Promise<number>,
): NonceQueue {
  // The URL is part of the key: two dev chain sets in one process share chain ids.
  const key = `${chainId}:${rpcUrl}:${sender.toLowerCase()}`;
  let q = queues.get(key);
  if (!q) {
    q = new NonceQueue(fetchNonce);
    queues.set(key, q);
  }
  return q;
}
