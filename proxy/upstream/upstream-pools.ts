/**
 * Keep-alive connection pools for plain-HTTP forwarding (undici), and for the requests of inspected
 * connections over TLS the proxy opens (tls-dial.ts; h1-pool.ts), one per pinned destination. The
 * pool key includes the checked addresses and every connection is opened by the pinned dialer, so
 * a pooled connection is always to an address that was checked for the request that reuses it; a
 * new DNS answer means a new pool.
 *
 * undici is loaded on the first plain-HTTP request: it is a fifth of the proxy's resident memory,
 * and a proxy that only ever tunnels (HTTPS) never needs it.
 */
import type { Client, Dispatcher, Pool } from 'undici';
import type * as Undici from 'undici';
import { requireCjs } from '../../common/index.js';
import { dialPinned, type Connect, type Unsent } from './dial.js';
import { H1Pool, type UpstreamPool } from './h1-pool.js';
import type { PooledRequest } from './h1-request.js';
import { secureUpstream, type UpstreamTrust } from './tls-dial.js';

/**
 * An undici Pool as an UpstreamPool. A request's `unsent` reaches the connection it is handed
 * (create): undici cannot take a request back before it has a connection (it calls `onConnect`,
 * with its abort, only then), so the dial opened for it is given up instead, which fails the
 * request in undici, and frees the descriptor the dial held.
 */
function undiciPool(pool: Pool): UpstreamPool {
  return {
    dispatch: (request, handler) => void pool.dispatch(request as Dispatcher.DispatchOptions, handler as Dispatcher.DispatchHandler),
    get stats() {
      return pool.stats;
    },
    close: () => pool.close(),
    destroy: () => pool.destroy(),
  };
}

/**
 * Longest an idle upstream connection is kept, whatever the upstream's Keep-Alive hint says: it
 * holds a descriptor the open-file budget does not count (fd-budget.ts). undici's default.
 */
const KEEP_ALIVE_MAX_MS = 4_000;

export interface PoolOptions {
  readonly connect: Connect;
  readonly connectTimeoutMs: number;
  /** Longest wait for a response head, and longest pause inside a response body. */
  readonly idleTimeoutMs: number;
  /** Largest response head accepted from an upstream, in bytes. */
  readonly maxHeaderBytes: number;
  /** Most destinations kept; the least recently used pool is closed beyond it. */
  readonly maxPools: number;
  /**
   * Most of them one owner (a shared proxy's sandbox registration; every request of a proxy of one
   * tenant is one owner) keeps: past it, the owner's own least recently used pool is closed.
   */
  readonly maxPoolsPerOwner: number;
}

/** An owner's pools with idle connections, least recently used first, and how many they hold. */
interface IdleOf {
  total: number;
  readonly pools: Array<{ readonly key: string; readonly free: number }>;
}

/** A pool and whose it is ('' the one owner of a proxy of one tenant). */
interface Held {
  readonly pool: UpstreamPool;
  readonly owner: string;
}

export class UpstreamPools {
  /** Every pool, least recently used first. */
  private readonly pools = new Map<string, Held>();
  /** Each owner's pool keys, least recently used first. */
  private readonly byOwner = new Map<string, Set<string>>();
  private newest: string | undefined;
  private undici: typeof Undici | undefined;
  /** Each trust store a TLS pool was made with, numbered: a new store (a reload) means new pools. */
  private readonly trusts = new WeakMap<UpstreamTrust, number>();
  private nextTrust = 1;

  constructor(private readonly options: PoolOptions) {}

  /**
   * The pool for one pinned destination, created on first use: plain HTTP, or TLS verified for
   * `host` against `trust` when one is given. `owner` (a shared proxy's sandbox registration)
   * gets pools of its own: an upstream connection carries only one owner's requests, so a server
   * that reads one request's body as a second request (a CL.0 desync) cannot answer another
   * sandbox's request with it, nor append that sandbox's request to one it was sent.
   *
   * `alone`: the pool of requests a secret went into, which keeps no connection alive, so that
   * each is opened for one request and closed after it. On a connection other requests used, a
   * request of the sandbox's own planted in a body the server did not read (CL.0) would swallow
   * the secret's request, and an echo of it would answer the request after, which the proxy
   * watches for no value.
   */
  forTarget(host: string, port: number, addresses: readonly string[], trust?: UpstreamTrust, owner?: string, alone = false): UpstreamPool {
    const key = `${trust === undefined ? 'http' : `https${this.trustId(trust)}`}|${host}|${port}|${addressSet(addresses)}${owner === undefined ? '' : `|${owner}`}${alone ? '|alone' : ''}`;
    let held = this.pools.get(key);
    if (held !== undefined) {
      // Moved to the end (most recently used) only when it is not there already.
      if (key === this.newest) return held.pool;
      this.forget(key, held.owner);
    } else {
      held = { pool: this.create(host, port, addresses, trust, alone), owner: owner ?? '' };
      this.makeRoom(held.owner);
    }
    this.pools.set(key, held);
    const own = this.byOwner.get(held.owner) ?? new Set<string>();
    this.byOwner.set(held.owner, own.add(key));
    this.newest = key;
    return held.pool;
  }

  /**
   * Closes pools that hold idle keep-alive connections until about `wanted` idle connections are
   * closing (or no pool has one): always of the owner holding the most idle connections then, its
   * least recently used pool first. Their requests in flight finish, their idle connections close
   * at once. Returns how many idle connections it closed. Least recently used of all, as it was,
   * took from whoever had not sent a request for a few seconds: a sandbox keeping thousands of idle
   * connections in pools it went on using had every other sandbox's closed instead of its own.
   */
  shedIdle(wanted: number): number {
    // Each pool's idle connections, read once (undici counts them over the pool's connections).
    const idle = new Map<string, IdleOf>();
    for (const [key, { pool, owner }] of this.pools) {
      const { free } = pool.stats;
      if (free === 0) continue;
      const own = idle.get(owner) ?? { total: 0, pools: [] };
      own.total += free;
      own.pools.push({ key, free });
      idle.set(owner, own);
    }
    let shed = 0;
    while (shed < wanted) {
      let heaviest: IdleOf | undefined;
      for (const own of idle.values()) if (own.pools.length > 0 && (heaviest === undefined || own.total > heaviest.total)) heaviest = own;
      const oldest = heaviest?.pools.shift();
      if (heaviest === undefined || oldest === undefined) break;
      this.close(oldest.key);
      heaviest.total -= oldest.free;
      shed += oldest.free;
    }
    return shed;
  }

  destroy(): void {
    for (const { pool } of this.pools.values()) pool.destroy().catch(() => undefined);
    this.pools.clear();
    this.byOwner.clear();
    this.newest = undefined;
  }

  /**
   * Room for one more pool of `owner`. An owner at its share closes its own least recently used
   * pool, never another's: a sandbox cycling through many hosts under a wildcard entry closed
   * every other sandbox's keep-alive pools, and each of their next requests paid for a new
   * connection (and handshake). Only an owner within its share, with the process at its cap,
   * closes the least recently used pool of all.
   */
  private makeRoom(owner: string): void {
    const own = this.byOwner.get(owner);
    if (own !== undefined && own.size >= this.options.maxPoolsPerOwner) this.close(own.values().next().value as string);
    else if (this.pools.size >= this.options.maxPools) this.close(this.pools.keys().next().value as string);
  }

  /** Forgets the pool of `key` and closes it: its requests in flight finish; it takes no new ones. */
  private close(key: string): void {
    const held = this.pools.get(key);
    if (held === undefined) return;
    this.forget(key, held.owner);
    held.pool.close().catch(() => undefined);
  }

  private forget(key: string, owner: string): void {
    this.pools.delete(key);
    const own = this.byOwner.get(owner);
    own?.delete(key);
    if (own?.size === 0) this.byOwner.delete(owner);
    if (this.newest === key) this.newest = undefined;
  }

  private trustId(trust: UpstreamTrust): number {
    let id = this.trusts.get(trust);
    if (id === undefined) {
      id = this.nextTrust++;
      this.trusts.set(trust, id);
    }
    return id;
  }

  private create(host: string, port: number, addresses: readonly string[], trust: UpstreamTrust | undefined, alone: boolean): UpstreamPool {
    const { connect, connectTimeoutMs, idleTimeoutMs, maxHeaderBytes } = this.options;
    const open = async (unsent: Unsent | undefined) => {
      const dialed = await dialPinned(addresses, port, { connect, purpose: 'http', timeoutMs: connectTimeoutMs, cancel: unsent });
      return trust === undefined ? dialed.socket : secureUpstream(dialed.socket, host, trust, connectTimeoutMs, unsent);
    };
    // Inspected: the proxy's own HTTP/1.1 client (h1-pool.ts), idle connections kept as undici's below.
    if (trust !== undefined) return new H1Pool(open, { idleTimeoutMs, maxHeaderBytes, keepAliveMs: alone ? 0 : KEEP_ALIVE_MAX_MS });
    const undici = (this.undici ??= requireCjs('undici') as typeof Undici);
    // A pool hands a request only to a connection (an undici Client) that holds none (pipelining
    // 1, or 0): a connection dials for the one request it was handed last.
    const connection = (origin: URL, options: object): Client => {
      let unsent: Unsent | undefined;
      const client = new undici.Client(origin, {
        ...(options as Client.Options),
        connect: (_options, callback) => {
          open(unsent).then(
            (socket) => callback(null, socket),
            (err: Error) => callback(err, null),
          );
        },
      });
      const dispatch = client.dispatch.bind(client);
      client.dispatch = (request, handler) => {
        unsent = (request as Partial<PooledRequest>).unsent;
        return dispatch(request, handler);
      };
      return client;
    };
    return undiciPool(new undici.Pool(`http://${host}:${port}`, {
      factory: connection,
      headersTimeout: idleTimeoutMs,
      bodyTimeout: idleTimeoutMs,
      maxHeaderSize: maxHeaderBytes,
      // A body shorter or longer than its Content-Length is an error, never a second message.
      strictContentLength: true,
      // 0: no keep-alive, one request per connection (`alone`).
      pipelining: alone ? 0 : 1,
      keepAliveMaxTimeout: KEEP_ALIVE_MAX_MS,
    }));
  }
}

/**
 * A pool's addresses as a set, in one order whatever order they were resolved in. Resolvers
 * rotate a name's records from one answer to the next (BIND's default order, most public
 * resolvers), and each request resolves again (policy/decision.ts): keyed by the answer's order,
 * most requests to a name with several addresses found a pool of their own, a new upstream
 * connection (a TLS handshake, inside an inspected connection) where one was idle. Any of the
 * pool's connections goes to an address this request's own answer holds, and was checked.
 */
function addressSet(addresses: readonly string[]): string {
  return addresses.length === 1 ? addresses[0]! : [...addresses].sort().join(',');
}
