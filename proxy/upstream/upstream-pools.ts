/**
 * Keep-alive connection pools for plain-HTTP forwarding (undici), one per pinned destination. The
 * pool key includes the checked addresses and every connection is opened by the pinned dialer, so
 * a pooled connection is always to an address that was checked for the request that reuses it; a
 * new DNS answer means a new pool.
 *
 * undici is loaded on the first plain-HTTP request: it is a fifth of the proxy's resident memory,
 * and a proxy that only ever tunnels (HTTPS) never needs it.
 */
import type { Pool } from 'undici';
import type * as Undici from 'undici';
import { requireCjs } from '../../common/index.js';
import { dialPinned, type Connect } from './dial.js';

type PoolClass = typeof Pool;

export interface PoolOptions {
  readonly connect: Connect;
  readonly connectTimeoutMs: number;
  /** Longest wait for a response head, and longest pause inside a response body. */
  readonly idleTimeoutMs: number;
  /** Largest response head accepted from an upstream, in bytes. */
  readonly maxHeaderBytes: number;
  /** Most destinations kept; the least recently used pool is closed beyond it. */
  readonly maxPools: number;
}

export class UpstreamPools {
  private readonly pools = new Map<string, Pool>();
  private newest: string | undefined;
  private PoolClass: PoolClass | undefined;

  constructor(private readonly options: PoolOptions) {}

  /** The pool for one pinned destination, created on first use. */
  forTarget(host: string, port: number, addresses: readonly string[]): Pool {
    const key = `${host}|${port}|${addresses.join(',')}`;
    let pool = this.pools.get(key);
    if (pool !== undefined) {
      // Moved to the end (most recently used) only when it is not there already.
      if (key === this.newest) return pool;
      this.pools.delete(key);
    } else {
      pool = this.create(host, port, addresses);
      if (this.pools.size >= this.options.maxPools) {
        const [oldestKey, oldest] = this.pools.entries().next().value as [string, Pool];
        this.pools.delete(oldestKey);
        // Requests in flight on the evicted pool finish; it takes no new ones.
        oldest.close().catch(() => undefined);
      }
    }
    this.pools.set(key, pool);
    this.newest = key;
    return pool;
  }

  destroy(): void {
    for (const pool of this.pools.values()) pool.destroy().catch(() => undefined);
    this.pools.clear();
    this.newest = undefined;
  }

  private create(host: string, port: number, addresses: readonly string[]): Pool {
    const { connect, connectTimeoutMs, idleTimeoutMs, maxHeaderBytes } = this.options;
    this.PoolClass ??= (requireCjs('undici') as typeof Undici).Pool;
    return new this.PoolClass(`http://${host}:${port}`, {
      connect: (_options, callback) => {
        dialPinned(addresses, port, { connect, purpose: 'http', timeoutMs: connectTimeoutMs }).then(
          (dialed) => callback(null, dialed.socket),
          (err: Error) => callback(err, null),
        );
      },
      headersTimeout: idleTimeoutMs,
      bodyTimeout: idleTimeoutMs,
      maxHeaderSize: maxHeaderBytes,
      // A body shorter or longer than its Content-Length is an error, never a second message.
      strictContentLength: true,
      pipelining: 1,
      // An idle upstream connection holds a descriptor the open-file budget does not count
      // (fd-budget.ts): an upstream's Keep-Alive hint cannot stretch it past undici's 4 s default.
      keepAliveMaxTimeout: 4_000,
    });
  }
}
