/** Percentiles of per-response timings (ms, sub-ms precision), nearest-rank on the sorted sample. */

/** p50/p90/p99 of a sample (ms) and its size. */
export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  n: number;
}

/** A growable sample of float timings. */
export class Sample {
  private buf = new Float64Array(4096);
  private len = 0;

  push(v: number): void {
    if (this.len === this.buf.length) {
      const next = new Float64Array(this.buf.length * 2);
      next.set(this.buf);
      this.buf = next;
    }
    this.buf[this.len++] = v;
  }

  get size(): number {
    return this.len;
  }

  /** Nearest-rank percentiles; null when empty. */
  percentiles(): Percentiles | null {
    if (this.len === 0) return null;
    const sorted = this.buf.slice(0, this.len).sort();
    const at = (p: number) => sorted[Math.min(this.len - 1, Math.max(0, Math.ceil((p / 100) * this.len) - 1))];
    return { p50: round(at(50)), p90: round(at(90)), p99: round(at(99)), n: this.len };
  }
}

/** Rounded to 3 decimals (µs resolution in ms). */
export function round(v: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}
