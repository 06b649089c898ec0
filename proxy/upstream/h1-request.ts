/**
 * A request as the inspected path's own HTTP/1.1 client takes it (h1-pool.ts), the handler that
 * hears how it went, and the request head it writes: checked byte by byte once more, since a CR or
 * LF that reached it would start a second request on the upstream connection.
 */
import { CodedError } from '../../common/index.js';
import { HTTP_TOKEN } from '../../policy/index.js';
import type { Unsent } from './dial.js';

/** A failure the connection finds itself (the socket's own errors keep their codes). */
export class UpstreamHttpError extends CodedError<'bad_upstream_response' | 'upstream_failed' | 'upstream_timeout'> {}

/** A request sent through a pool. */
export interface PooledRequest {
  readonly method: string;
  readonly path: string;
  /** Names and values, alternating. */
  readonly headers: readonly string[];
  /** No body, or the stream of its bytes (framed here). */
  readonly body: NodeJS.ReadableStream | null;
  /**
   * Given up with the request, when that is before it has a connection (its client went, its
   * deadline passed): the dial opened for it is given up too, which fails the request, and frees
   * the descriptor the dial held.
   */
  readonly unsent: Unsent;
}

/** Who hears how a request went: the exchange, as undici's handler API names it. */
export interface UpstreamHandler {
  onConnect(abort: (err?: Error) => void): void;
  onHeaders(status: number, rawHeaders: readonly (Buffer | string)[], resume: () => void, statusText: string): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(): void;
  onError(err: Error): void;
}

const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const TARGET = /^[\x21-\xff]+$/;

/** The request head, or why it cannot be written (the proxy built it: this is a last check). */
export function requestHead(request: PooledRequest, close: boolean): string | Error {
  if (!HTTP_TOKEN.test(request.method) || !TARGET.test(request.path)) return new UpstreamHttpError('upstream_failed', 'the request line holds a byte it cannot carry');
  let head = `${request.method} ${request.path} HTTP/1.1\r\n`;
  const { headers } = request;
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i]!;
    const value = headers[i + 1] ?? '';
    if (!HTTP_TOKEN.test(name) || !FIELD_VALUE.test(value)) return new UpstreamHttpError('upstream_failed', `the request field ${JSON.stringify(name.slice(0, 40))} holds a byte it cannot carry`);
    head += `${name}: ${value}\r\n`;
  }
  return `${head}${close ? 'connection: close\r\n' : ''}`;
}

/** The Content-Length the request's fields give, if any. */
export function declaredLength(headers: readonly string[]): number | undefined {
  for (let i = 0; i < headers.length; i += 2) if (headers[i]!.toLowerCase() === 'content-length') return Number(headers[i + 1]);
  return undefined;
}
