/**
 * Tunnel upstreams that read into a buffer of their own once they carry bulk data, reused for
 * every read. Node otherwise allocates a fresh 64 KiB buffer for each read; a tunnel relaying a
 * download makes thousands a second, and V8 counts them as external memory, which sets off full
 * collections of the whole heap (measured: a fifth of the proxy's CPU while relaying, none with
 * this).
 *
 * Every socket starts reading into one buffer the process shares, and each read that lands there
 * is copied out before the next read anywhere: a copy of what was read, not of 64 KiB. Until a
 * relay takes a socket's reads over (`readInto`), the copies are pushed as Node pushes its reads,
 * so 'data' and 'end' work as on any socket and nothing is read before its reader is there. Once
 * taken over, a read that fills the shared buffer marks the socket as carrying bulk data: from
 * its next read on it reads into a buffer of its own, and each read is a view of it, valid only
 * during the call. The reader passes it on or pauses the socket, and the buffer is read into again
 * only once the socket is resumed. A tunnel that never carries bulk data never holds one.
 */
import net from 'node:net';
import { TUNNEL_READ_BYTES } from '../budget/index.js';

/** Takes one read (a view, valid during the call); returns false to pause the socket. */
export type ReadTaker = (view: Buffer) => boolean;

const taker = Symbol('ownBufferTaker');

interface OwnBufferSocket extends net.Socket {
  [taker]?: ReadTaker;
}

/** Where every socket of these reads until it carries bulk data: copied out at once, each time. */
let shared: Buffer | undefined;

/** Connects to `address:port`, its reads going into the shared buffer, then into one of its own. */
export function connectWithOwnBuffer(address: string, port: number): net.Socket {
  let own: Buffer | undefined;
  const socket: OwnBufferSocket = net.connect({
    host: address,
    port,
    allowHalfOpen: true,
    noDelay: true,
    onread: {
      // Asked for the buffer of each next read.
      buffer: (): Buffer => own ?? (shared ??= Buffer.allocUnsafeSlow(TUNNEL_READ_BYTES)),
      callback: (n: number, buf: Uint8Array): boolean => {
        const take = socket[taker];
        if (buf === own && take !== undefined) return take(own.subarray(0, n));
        const chunk = Buffer.from(buf.subarray(0, n));
        if (take === undefined) return socket.push(chunk);
        if (n === buf.length) own = Buffer.allocUnsafeSlow(TUNNEL_READ_BYTES);
        return take(chunk);
      },
    },
  });
  // Marked as one of these; no taker until a relay takes its reads over.
  socket[taker] = undefined;
  return socket;
}

/**
 * Hands `socket`'s reads to `take` from now on, first what was read and not yet consumed; false
 * for a socket without a buffer of its own (the caller relays its 'data' events instead).
 */
export function readInto(socket: net.Socket, take: ReadTaker): boolean {
  const own = socket as OwnBufferSocket;
  if (!(taker in own)) return false;
  for (let chunk = socket.read() as Buffer | null; chunk !== null; chunk = socket.read() as Buffer | null) take(chunk);
  own[taker] = take;
  return true;
}
