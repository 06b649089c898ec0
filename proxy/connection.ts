/**
 * Per-client-connection facts (id, client address, child logger, limit slot), attached to the
 * socket when the server accepts it. A file of its own so that the refusal writer, which frees the
 * slot, and the request context, which names the refusal type, do not import each other.
 */
import type { Socket } from 'node:net';
import type { Logger } from './log.js';

export interface Connection {
  readonly id: number;
  /** `ip:port` of the client. */
  readonly client: string;
  readonly clientIp: string;
  readonly log: Logger;
  /** Client bytes already counted for earlier requests on this connection. */
  readonly counted: { read: number };
  /** Stops counting this connection against the limits (idempotent): on close, or at once when it is refused. */
  release(): void;
}

const connections = new WeakMap<Socket, Connection>();

export function attachConnection(socket: Socket, connection: Connection): void {
  connections.set(socket, connection);
}

/** The connection's facts; a socket not (or not yet) accepted gets an anonymous stand-in. */
export function connectionOf(socket: Socket, fallback: Logger): Connection {
  return connections.get(socket) ?? { id: 0, client: 'unknown', clientIp: 'unknown', log: fallback, counted: { read: 0 }, release: () => undefined };
}

/** Stops counting the socket's connection against the limits, if it was counted. */
export function releaseConnection(socket: Socket): void {
  connections.get(socket)?.release();
}
