/** undici keep-alive pools, one per upstream origin, shared by every call to it (DESIGN "Proxy"). */
import { Pool } from 'undici';

/** The pools of one gateway instance. */
export class Upstreams {
  private readonly pools = new Map<string, Pool>();
  private readonly targets = new Map<string, { pool: Pool; path: string }>();
  /** The server is closing: answers carry `connection: close`. */
  closing = false;

  constructor(private readonly options: Pool.Options = { connections: 256, pipelining: 1, keepAliveTimeout: 30_000 }) {}

  /** The pool and request path of an upstream URL (parsed once per URL). */
  target(url: string): { pool: Pool; path: string } {
    let t = this.targets.get(url);
    if (!t) {
      const u = new URL(url);
      let pool = this.pools.get(u.origin);
      if (!pool) {
        pool = new Pool(u.origin, this.options);
        this.pools.set(u.origin, pool);
      }
      t = { pool, path: u.pathname + u.search };
      // URLs of the catalogue are few; per-job URLs (video downloads) are not kept.
      if (this.targets.size < 10_000) this.targets.set(url, t);
    }
    return t;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.pools.values()].map((p) => p.close()));
    this.pools.clear();
    this.targets.clear();
  }
}
