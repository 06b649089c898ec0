/**
 * Keep-alive connection pools for plain-HTTP forwarding, one per pinned destination. The pool key
 * includes the checked addresses, so a pooled connection is always to an address that was checked
 * for the request that reuses it; a new DNS answer means a new pool.
 */
import http from 'node:http';
import type { Duplex } from 'node:stream';
import { dialPinned, type Connect } from './dial.js';

interface PoolOptions {
  readonly connect: Connect;
  readonly connectTimeoutMs: number;
  readonly idleTimeoutMs: number;
  /** Most destinations kept; the least recently used pool is closed beyond it. */
  readonly maxPools: number;
}

class PinnedAgent extends http.Agent {
  constructor(
    private readonly addresses: readonly string[],
    private readonly pool: PoolOptions,
  ) {
    super({ keepAlive: true, maxFreeSockets: 16, timeout: pool.idleTimeoutMs, scheduling: 'lifo' });
  }

  // Node's Agent accepts an asynchronous createConnection that reports through the callback.
  override createConnection(options: http.ClientRequestArgs, callback?: (err: Error | null, socket: Duplex) => void): Duplex {
    dialPinned(this.addresses, Number(options.port), { connect: this.pool.connect, timeoutMs: this.pool.connectTimeoutMs }).then(
      (dialed) => callback?.(null, dialed.socket),
      (err: Error) => callback?.(err, undefined as unknown as Duplex),
    );
    return undefined as unknown as Duplex;
  }
}

export class UpstreamAgents {
  private readonly pools = new Map<string, PinnedAgent>();

  constructor(private readonly options: PoolOptions) {}

  /**
   * An agent for one request. http-proxy rewrites the request path (it collapses `//`), so the
   * returned view restores the exact origin-form path before the request head is written.
   */
  forRequest(host: string, port: number, addresses: readonly string[], exactPath: string): http.Agent {
    const key = `${host}|${port}|${addresses.join(',')}`;
    let agent = this.pools.get(key);
    if (agent === undefined) {
      agent = new PinnedAgent(addresses, this.options);
      if (this.pools.size >= this.options.maxPools) {
        const [oldestKey, oldest] = this.pools.entries().next().value as [string, PinnedAgent];
        this.pools.delete(oldestKey);
        oldest.destroy();
      }
    } else {
      this.pools.delete(key); // re-inserted below as the most recently used
    }
    this.pools.set(key, agent);
    const pooled = agent;
    const view = Object.create(pooled) as http.Agent & { addRequest(req: http.ClientRequest, options: unknown): void };
    view.addRequest = (req: http.ClientRequest, options: unknown): void => {
      req.path = exactPath;
      (pooled as unknown as { addRequest(r: http.ClientRequest, o: unknown): void }).addRequest(req, options);
    };
    return view;
  }

  destroy(): void {
    for (const agent of this.pools.values()) agent.destroy();
    this.pools.clear();
  }
}
