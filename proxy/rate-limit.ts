/**
 * Token buckets by key (a client address), for what one peer may make the proxy do per second
 * when nothing else bounds it: DNS queries, which cost no connection, and the log lines they
 * cause. The table of keys is capped, so spoofed source addresses cannot grow it: past the cap
 * the key seen first is forgotten (its bucket is most likely full again by then).
 */
import { performance } from 'node:perf_hooks';

interface Bucket {
  tokens: number;
  at: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly maxKeys: number,
    /** Milliseconds, increasing; injectable for tests. */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Takes one token of `key`'s bucket: false when it is empty (the event is over the rate). */
  take(key: string): boolean {
    const now = this.now();
    let bucket = this.buckets.get(key);
    if (bucket === undefined) {
      if (this.buckets.size >= this.maxKeys) this.buckets.delete(this.buckets.keys().next().value as string);
      bucket = { tokens: this.burst, at: now };
      this.buckets.set(key, bucket);
    } else {
      bucket.tokens = Math.min(this.burst, bucket.tokens + ((now - bucket.at) * this.perSecond) / 1000);
      bucket.at = now;
    }
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }

  /** Keys held now (for tests of the cap). */
  get size(): number {
    return this.buckets.size;
  }
}
