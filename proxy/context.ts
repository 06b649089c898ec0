/** What every request handler of the proxy shares: the current policy, lookup, limits, dialer. */
import type { Socket } from 'node:net';
import type { Lookup, Policy } from '../policy/index.js';
import type { Connect } from './dial.js';
import type { ProxyLimits } from './limits.js';
import type { Logger } from './log.js';
import type { ProxyObserver } from './metrics.js';
import type { UpstreamAgents } from './upstream-agents.js';

export interface ProxyContext {
  policy(): Policy;
  readonly lookup: Lookup;
  readonly limits: ProxyLimits;
  readonly connect: Connect;
  readonly agents: UpstreamAgents;
  readonly observer: ProxyObserver;
}

/** Per-client-connection facts, attached when the connection is accepted. */
export interface Connection {
  readonly id: number;
  /** `ip:port` of the client. */
  readonly client: string;
  readonly clientIp: string;
  readonly log: Logger;
  /** Client bytes already counted for earlier requests on this connection. */
  readonly counted: { read: number };
}

const connections = new WeakMap<Socket, Connection>();

export function attachConnection(socket: Socket, connection: Connection): void {
  connections.set(socket, connection);
}

export function connectionOf(socket: Socket, fallback: Logger): Connection {
  return connections.get(socket) ?? { id: 0, client: 'unknown', clientIp: 'unknown', log: fallback, counted: { read: 0 } };
}
