/**
 * Tunnel upstreams that read into one buffer of their own, reused for every read. Node otherwise
 * allocates a fresh 64 KiB buffer for each read; a tunnel relaying a download makes thousands a
 * second, and V8 counts them as external memory, which sets off full collections of the whole
 * heap (measured: a fifth of the proxy's CPU while relaying, none with this).
 *
 * Until a relay takes a socket's reads over (`readInto`), each read is copied into a buffer of
 * its own and pushed as Node would push it, so 'data' and 'end' work as on any socket and
 * nothing is read before its reader is there. Once taken over, each read is a view of the
 * socket's buffer, valid only during the call: the reader passes it on or pauses the socket, and
 * the buffer is read into again only once the socket is resumed.
 */
import net from 'node:net';
import { TUNNEL_READ_BYTES } from '../budget/index.js';

/** Takes one read (a view, valid during the call); returns false to pause the socket. */
export type ReadTaker = (view: Buffer) => boolean;

const taker = Symbol('ownBufferTaker');

interface OwnBufferSocket extends net.Socket {
  [taker]?: ReadTaker;
}

/** Connects to `address:port`, its reads going into a buffer of its own. */
export function connectWithOwnBuffer(address: string, port: number): net.Socket {
  const buffer = Buffer.allocUnsafeSlow(TUNNEL_READ_BYTES);
  const socket: OwnBufferSocket = net.connect({
    host: address,
    port,
    allowHalfOpen: true,
    noDelay: true,
    onread: {
      buffer,
      callback: (n: number, buf: Uint8Array): boolean => {
        const view = Buffer.from(buf.buffer, buf.byteOffset, n);
        const take = socket[taker];
        return take === undefined ? socket.push(Buffer.from(view)) : take(view);
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
