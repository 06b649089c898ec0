/**
 * Token buckets by key, for what one peer may make the proxy do per second when nothing else
 * bounds it: DNS queries, which cost no connection, and the log lines refusals cause.
 *
 * The table of keys is capped, and it cannot be rotated around: a full table forgets nothing to
 * make room (forgetting would hand every new source address a full bucket). Buckets that are full
 * again (idle long enough) are swept out, at most once a second; past the cap a client address is
 * counted under its network (IPv4 /24, IPv6 /64), and past that under one key shared by every
 * address the table has no room for.
 */
import { performance } from 'node:perf_hooks';
import ipaddr from 'ipaddr.js';

interface Bucket {
  tokens: number;
  at: number;
}

/** The key every address shares once the table holds no more networks. */
export const OVERFLOW_KEY = '*';

const SWEEP_MS = 1_000;

/** An address's network for the rate tables: its /24 (IPv4) or /64 (IPv6), or undefined when it is no address. */
export function networkOf(address: string): string | undefined {
  if (!ipaddr.isValid(address)) return undefined;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') {
    const [a, b, c] = (parsed as ipaddr.IPv4).octets;
    return `${a}.${b}.${c}.0/24`;
  }
  const parts = (parsed as ipaddr.IPv6).parts.slice(0, 4).map((p) => p.toString(16));
  return `${parts.join(':')}::/64`;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private sweptAt = -Infinity;

  constructor(
    private readonly perSecond: number,
    private readonly burst: number,
    private readonly maxKeys: number,
    /** Milliseconds, increasing; injectable for tests. */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Takes one token of `key`'s bucket (made when the table has room): false when it is empty. */
  take(key: string): boolean {
    return this.takeFrom(this.bucket(key, this.maxKeys) ?? this.overflow());
  }

  /**
   * Takes one token for a client address: its own bucket while the table has room for it (three
   * quarters of it), else its network's, else the shared overflow bucket.
   */
  takeFor(address: string): boolean {
    const own = this.bucket(address, Math.floor((this.maxKeys * 3) / 4));
    if (own !== undefined) return this.takeFrom(own);
    const network = networkOf(address);
    const shared = network === undefined ? undefined : this.bucket(network, this.maxKeys - 1);
    return this.takeFrom(shared ?? this.overflow());
  }

  /** Keys held now (for tests of the cap). */
  get size(): number {
    return this.buckets.size;
  }

  /** The key under which `address` is counted now (for tests). */
  keyOf(address: string): string {
    if (this.buckets.has(address)) return address;
    const network = networkOf(address);
    return network !== undefined && this.buckets.has(network) ? network : OVERFLOW_KEY;
  }

  /** `key`'s bucket, made if the table holds fewer than `room` keys; undefined when it has no room. */
  private bucket(key: string, room: number): Bucket | undefined {
    const found = this.buckets.get(key);
    if (found !== undefined) return found;
    if (this.buckets.size >= room) this.sweep();
    if (this.buckets.size >= room) return undefined;
    const made = { tokens: this.burst, at: this.now() };
    this.buckets.set(key, made);
    return made;
  }

  private overflow(): Bucket {
    let shared = this.buckets.get(OVERFLOW_KEY);
    if (shared === undefined) {
      shared = { tokens: this.burst, at: this.now() };
      this.buckets.set(OVERFLOW_KEY, shared);
    }
    return shared;
  }

  private takeFrom(bucket: Bucket): boolean {
    const now = this.now();
    bucket.tokens = Math.min(this.burst, bucket.tokens + ((now - bucket.at) * this.perSecond) / 1000);
    bucket.at = now;
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }

  /** Forgets buckets that are full again: a key seen next gets the same full bucket it would have had. */
  private sweep(): void {
    const now = this.now();
    if (now - this.sweptAt < SWEEP_MS) return;
    this.sweptAt = now;
    for (const [key, bucket] of this.buckets) {
      if (bucket.tokens + ((now - bucket.at) * this.perSecond) / 1000 >= this.burst) this.buckets.delete(key);
    }
  }
}
