/**
 * Which transparent listener a client connection came in on, attached to its socket by the
 * listener: the server then routes it (TLS by its ClientHello, HTTP by its Host header) and marks
 * its lines `via: "transparent"`. A connection without an entry came in on the explicit proxy.
 */
import type { Socket } from 'node:net';

export interface TransparentEntry {
  readonly kind: 'tls' | 'http';
  /** The port the client dialled (the destination port the policy checks). */
  readonly port: number;
}

const entries = new WeakMap<Socket, TransparentEntry>();

export function markTransparent(socket: Socket, entry: TransparentEntry): void {
  entries.set(socket, entry);
}

export function transparentEntryOf(socket: Socket): TransparentEntry | undefined {
  return entries.get(socket);
}
