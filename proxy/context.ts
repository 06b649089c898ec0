/** What every request handler of the proxy shares: the current policy, lookup, limits, dialer. */
import type { OwnListener, Policy } from '../policy/index.js';
import type { ClientLookup } from './dns.js';
import type { Connect } from './dial.js';
import type { ProxyLimits } from './limits.js';
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
}
