/** What every request handler of the proxy shares: the current policy, lookup, limits, dialer. */
import type { Socket } from 'node:net';
import type { Lookup, Policy } from '../policy/index.js';
import type { Connect } from './dial.js';
import type { Logger } from './log.js';
import type { ProxyObserver } from './metrics.js';
import type { UpstreamAgents } from './upstream-agents.js';

export interface ProxyLimits {
  /** Largest request head, in bytes (431 beyond). */
  readonly maxHeaderBytes: number;
  /** Time allowed for a complete request head (408 beyond). */
  readonly headerTimeoutMs: number;
  /** A tunnel or connection with no traffic either way for this long is closed. */
  readonly idleTimeoutMs: number;
  /** Longest life of a tunnel; 0 for no limit. */
  readonly maxTunnelMs: number;
  readonly dnsTimeoutMs: number;
  readonly connectTimeoutMs: number;
  /**
   * Refuse tunnels whose first bytes are not a TLS ClientHello with a server name. A server name
   * that differs from the CONNECT host is always refused.
   */
  readonly requireSni: boolean;
  /** Open client connections in total (503 beyond). */
  readonly maxConnections: number;
  /** Open client connections from one client address (429 beyond). */
  readonly maxConnectionsPerClient: number;
}

export const DEFAULT_LIMITS: ProxyLimits = Object.freeze({
  maxHeaderBytes: 16 * 1024,
  headerTimeoutMs: 10_000,
  idleTimeoutMs: 300_000,
  maxTunnelMs: 0,
  dnsTimeoutMs: 5_000,
  connectTimeoutMs: 10_000,
  requireSni: false,
  maxConnections: 16_384,
  maxConnectionsPerClient: 4_096,
});

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
