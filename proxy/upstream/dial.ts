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

/** A tunnel's upstream reads into a buffer of its own (own-buffer.ts); a pooled HTTP connection reads its own way. */
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
 * A pooled request's hold on the dial made for it (upstream-pools.ts), given up when the request is
 * (its client went, its deadline passed) before it has a connection. One watcher at a time: the
 * dial's attempt, then its TLS handshake. Not an AbortController: its signal, an EventTarget made
 * for every keep-alive request, cost the inspected path a tenth of its throughput (bench:inspect).
 */
export class Unsent {
  private given = false;
  private watcher: (() => void) | undefined;

  get gone(): boolean {
    return this.given;
  }

  giveUp(): void {
    if (this.given) return;
    this.given = true;
    const watcher = this.watcher;
    this.watcher = undefined;
    watcher?.();
  }

  /** Calls `watcher` once given up (at once if it is already); what it returns stops the watch. */
  watch(watcher: () => void): () => void {
    if (this.given) {
      watcher();
      return () => undefined;
    }
    this.watcher = watcher;
    return () => {
      if (this.watcher === watcher) this.watcher = undefined;
    };
  }
}

/**
 * What a dial is for, whose end gives it up at once, mid-attempt too: a tunnel's client that
 * closes, or the request a pooled connection is opened for, given up before it had a connection.
 */
interface DialFor {
  readonly client?: net.Socket | undefined;
  readonly cancel?: Unsent | undefined;
}

const gone = ({ client, cancel }: DialFor): boolean => client?.destroyed === true || cancel?.gone === true;

function attempt(connect: Connect, address: string, port: number, timeoutMs: number, purpose: DialPurpose, dialFor: DialFor): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(address, port, purpose);
    const { client, cancel } = dialFor;
    let unwatchCancel: (() => void) | undefined;
    const unwatch = (): void => {
      client?.off('close', onGone);
      unwatchCancel?.();
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
    if (client?.destroyed === true) onGone();
    unwatchCancel = cancel?.watch(onGone);
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
