/** Waits of the settlement loops that end early when asked: a stop wakes them all, a mined batch one chain's poll. */
export class Sleeps<K = string> {
  private readonly waiting = new Map<() => void, K | undefined>();

  /** Wait `ms`, or until `wake(key)` or `wakeAll()`. */
  sleep(ms: number, key?: K): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiting.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiting.set(done, key);
    });
  }

  /** End the waits under `key`; false when none was waiting. */
  wake(key: K): boolean {
    let woke = false;
    for (const [done, k] of [...this.waiting]) {
      if (k === key) {
        done();
        woke = true;
      }
    }
    return woke;
  }

  /** End every wait now. */
  wakeAll(): void {
    for (const done of [...this.waiting.keys()]) done();
  }
}
