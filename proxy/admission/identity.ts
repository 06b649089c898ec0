/**
 * Who a connection is. A proxy serving one workload knows its clients by address, and decides
 * them all by its one policy. A shared proxy (proxy/tenants/) knows them by the sandbox network
 * their addresses are in, and decides each by its sandbox's policy; a connection no registered
 * network holds is refused `unknown_client`.
 */
import type { Policy } from '../../policy/index.js';
import type { Refusal } from '../record/index.js';

export interface ClientIdentity {
  /** What its shares (connections, memory, lookups, lines) are kept by: the address, or the sandbox. */
  readonly key: string;
  /** The sandbox it belongs to, on a shared proxy: every line of it names it. */
  readonly sandbox?: string | undefined;
  /** The registration it was accepted under (its lifecycle id), on a shared proxy. */
  readonly lifecycle?: string | undefined;
  /** The policy it is decided by now. */
  policy(): Policy;
}

export function isRefusal(value: ClientIdentity | Refusal): value is Refusal {
  return 'reason' in value;
}
