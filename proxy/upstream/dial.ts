/**
 * Dials a pinned destination: the checked addresses, in order, each with a connect timeout,
 * moving to the next when one fails. Only the addresses handed in are ever dialed.
 */
import net from 'node:net';
import { CodedError, isCodedError } from '../../common/index.js';
import { connectWithOwnBuffer } from './own-buffer.js';

/** What a connection is for: a tunnel's upstream, or a pooled plain-HTTP connection. */
export type DialPurpose = 'tunnel' | 'http';

/** Opens a TCP connection; injectable so tests can observe or fake the network. */
export type Connect = (address: string, port: number, purpose: DialPurpose) => net.Socket;

/** A tunnel's upstream reads into a buffer of its own (own-buffer.ts); undici reads its own way. */
export const defaultConnect: Connect = (address, port, purpose) =>
  purpose === 'tunnel' ? connectWithOwnBuffer(address, port) : net.connect({ host: address, port, allowHalfOpen: true, noDelay: true });

export class DialError extends CodedError<'connect_failed'> {
  constructor(
    message: string,
    readonly attempts: readonly string[],
    options?: ErrorOptions,
  ) {
    super('connect_failed', message, options);
  }
}

/** True when `err` is a DialError (by brand: also one of another copy of this package). */
export function isDialError(err: unknown): err is DialError {
  return isCodedError(err, 'DialError');
}

export interface Dialed {
  readonly socket: net.Socket;
  readonly address: string;
  /** `address:port` of every attempt, in order, the successful one last. */
  readonly attempts: readonly string[];
}

function endpoint(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

/**
 * What a dial is for, whose end gives it up at once, mid-attempt too: a tunnel's client that
 * closes, or the request a pooled connection is opened for, given up before it had a connection.
 */
interface DialFor {
  readonly client?: net.Socket | undefined;
  readonly cancel?: AbortSignal | undefined;
}

const gone = ({ client, cancel }: DialFor): boolean => client?.destroyed === true || cancel?.aborted === true;

function attempt(connect: Connect, address: string, port: number, timeoutMs: number, purpose: DialPurpose, dialFor: DialFor): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(address, port, purpose);
    const { client, cancel } = dialFor;
    const unwatch = (): void => {
      client?.off('close', onGone);
      cancel?.removeEventListener('abort', onGone);
    };
    const fail = (err: Error): void => {
      clearTimeout(timer);
      unwatch();
      socket.destroy();
      reject(err);
    };
    const timer = setTimeout(() => fail(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
    // A dial left running after what it was for has gone holds a descriptor no connection slot counts.
    const onGone = (): void => fail(new Error('cancelled: what it was for has gone'));
    client?.once('close', onGone);
    cancel?.addEventListener('abort', onGone, { once: true });
    if (gone(dialFor)) onGone();
    socket.once('error', fail);
    socket.once('connect', () => {
      clearTimeout(timer);
      unwatch();
      socket.off('error', fail);
      resolve(socket);
    });
  });
}

export async function dialPinned(
  addresses: readonly string[],
  port: number,
  options: { connect: Connect; purpose: DialPurpose; timeoutMs: number } & DialFor,
): Promise<Dialed> {
  const attempts: string[] = [];
  const failures: string[] = [];
  for (const address of addresses) {
    if (gone(options)) break;
    attempts.push(endpoint(address, port));
    try {
      const socket = await attempt(options.connect, address, port, options.timeoutMs, options.purpose, options);
      return { socket, address, attempts };
    } catch (err) {
      failures.push(`${endpoint(address, port)}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  throw new DialError(`no checked address accepted a connection (${failures.join('; ') || 'cancelled'})`, attempts);
}
