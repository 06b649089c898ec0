/** What every request handler of the proxy shares: the current policy, lookup, limits, dialer. */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { OwnListener, Policy } from '../policy/index.js';
import type { ClientLookup } from './dns.js';
import type { Connect } from './dial.js';
import type { ProxyLimits } from './limits.js';
import type { Refusal } from './refusal.js';
import type { ProxyObserver } from './metrics.js';
import type { UpstreamPools } from './upstream-pools.js';

export interface ProxyContext {
  policy(): Policy;
  /** Lookups within the client's share of those in flight (dns.ts). */
  readonly lookup: ClientLookup;
  /** Whether a destination is one of the proxy's own listeners (refused: it would loop). */
  readonly ownListener: OwnListener;
  readonly limits: ProxyLimits;
  readonly connect: Connect;
  readonly pools: UpstreamPools;
  readonly observer: ProxyObserver;
  /**
   * The request a connection has under way, as the way to refuse it: the HTTP parser can fail on
   * a request's body (or on the next request pipelined behind it) while the request is decided or
   * forwarded, and that request must end with its own one refusal or cut, never a second answer.
   */
  readonly inFlight: WeakMap<Socket, (refusal: Refusal) => void>;
}

/** Makes `hook` the way to refuse the request under way on `socket`, until its response closes. */
export function holdInFlight(ctx: ProxyContext, socket: Socket, res: ServerResponse, hook: (refusal: Refusal) => void): void {
  ctx.inFlight.set(socket, hook);
  res.once('close', () => {
    if (ctx.inFlight.get(socket) === hook) ctx.inFlight.delete(socket);
  });
}
