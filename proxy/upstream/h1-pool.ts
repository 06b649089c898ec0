/**
 * The keep-alive pool of one inspected destination (upstream-pools.ts keys it): connections the
 * proxy opened itself (the pinned dial, then TLS verified for the host), each carrying one request
 * at a time (h1-connection.ts). A request takes the idle connection used last, or a new one, dialled
 * for it. An idle connection is kept for the keep-alive time, or closed at once in a pool that
 * keeps none (`keepAliveMs` 0: one request a connection).
 *
 * It stands where an undici Pool stood for inspected hosts: undici cost an inspected request half
 * of the proxy's CPU (bench:inspect, the floors), and the inspected path needs its own strict
 * response reading only, which this is.
 */
import type net from 'node:net';
import type { Unsent } from './dial.js';
import { H1Connection, type ConnectionOptions } from './h1-connection.js';
import { UpstreamHttpError, type PooledRequest, type UpstreamHandler } from './h1-request.js';

/** What upstream-pools.ts asks of a pool, an undici Pool or this one. */
export interface UpstreamPool {
  dispatch(request: PooledRequest, handler: UpstreamHandler): void;
  /** `free`: idle connections held. */
  readonly stats: { readonly free: number };
  /** Takes no new request; closes idle connections now, busy ones once their response is over. */
  close(): Promise<void>;
  destroy(): Promise<void>;
}

export class H1Pool implements UpstreamPool {
  /** Idle connections, the one used last at the end. */
  private readonly idle: H1Connection[] = [];
  private readonly all = new Set<H1Connection>();
  private closing = false;
  private destroyed = false;

  constructor(
    private readonly open: (unsent: Unsent) => Promise<net.Socket>,
    private readonly options: ConnectionOptions,
  ) {}

  get stats(): { readonly free: number } {
    return { free: this.idle.length };
  }

  dispatch(request: PooledRequest, handler: UpstreamHandler): void {
    if (this.closing) return heard(handler, new UpstreamHttpError('upstream_failed', 'the pool of this destination was closed'));
    for (let connection = this.idle.pop(); connection !== undefined; connection = this.idle.pop()) {
      if (connection.usable) return connection.send(request, handler);
      connection.destroy();
    }
    this.open(request.unsent).then(
      (socket) => {
        // Closed meanwhile, the request is still sent (a request in flight finishes, as in an undici
        // Pool closed); its connection is not kept (released). Destroyed, it fails.
        if (this.destroyed) {
          socket.destroy();
          return heard(handler, new UpstreamHttpError('upstream_failed', 'the pool of this destination was closed'));
        }
        const connection = new H1Connection(socket, this.options, this.released);
        this.all.add(connection);
        connection.send(request, handler);
      },
      (err: Error) => heard(handler, err),
    );
  }

  close(): Promise<void> {
    this.closing = true;
    for (const connection of this.idle.splice(0)) connection.destroy();
    return Promise.resolve();
  }

  destroy(): Promise<void> {
    this.closing = true;
    this.destroyed = true;
    this.idle.length = 0;
    for (const connection of this.all) connection.destroy();
    return Promise.resolve();
  }

  private readonly released = (connection: H1Connection, reusable: boolean): void => {
    if (reusable && !this.closing && this.options.keepAliveMs > 0) {
      this.idle.push(connection);
      return;
    }
    const at = this.idle.indexOf(connection);
    if (at !== -1) this.idle.splice(at, 1);
    this.all.delete(connection);
    connection.destroy();
  };
}

/** Tells `handler` its request failed; what it throws is its own (a rejection here would end the process). */
function heard(handler: UpstreamHandler, err: Error): void {
  try {
    handler.onError(err);
  } catch {
    // The exchange's own failure; the request is over.
  }
}
