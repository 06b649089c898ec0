/** What every request handler of the proxy shares: the current policy, lookup, limits, dialer. */
import type { OwnListener, Policy } from '../../policy/index.js';
import type { ClientLookup } from '../dns/index.js';
import type { Connect, UpstreamPools } from '../upstream/index.js';
import type { ProxyLimits } from '../budget/index.js';
import type { ProxyObserver } from '../record/index.js';

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
