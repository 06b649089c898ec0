/**
 * Responses the proxy writes itself. Every one carries the status of its reason, the
 * machine-readable `X-Egress-Reason` header and a one-line body naming the host, the reason and
 * what would allow the request, so an agent can tell a policy block from a network failure.
 */
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { REASONS, type Reason } from '../policy/index.js';
import { releaseConnection } from './connection.js';

const REASON_HEADER = 'X-Egress-Reason';

const LINGER_MS = 5_000;

export interface Refusal {
  readonly reason: Reason;
  readonly detail: string;
  readonly host?: string | undefined;
  readonly port?: number | undefined;
  /** Seconds, for limit refusals. */
  readonly retryAfter?: number | undefined;
}

/** Whether the reason is the network's fault rather than the policy's. */
function isFailure(reason: Reason): boolean {
  return REASONS[reason].status >= 500;
}

function refusalBody(refusal: Refusal): string {
  const target = refusal.host === undefined ? '' : ` ${refusal.host}${refusal.port === undefined ? '' : `:${refusal.port}`}`;
  const verb = isFailure(refusal.reason) ? 'egress failed' : 'egress denied';
  // Control characters never reach the body: details are built from validated names only, but
  // a stray CR or LF here would split the response.
  const detail = refusal.detail.replace(/[\x00-\x1f\x7f]/g, ' ');
  return `${verb}${target}: ${refusal.reason}: ${detail}; ${REASONS[refusal.reason].advice}\n`;
}

function headers(refusal: Refusal, body: string): Record<string, string> {
  const h: Record<string, string> = {
    [REASON_HEADER]: refusal.reason,
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': String(Buffer.byteLength(body)),
    Connection: 'close',
  };
  if (refusal.retryAfter !== undefined) h['Retry-After'] = String(refusal.retryAfter);
  return h;
}

const refused = new WeakSet<Socket>();

/** Whether the connection was already refused (a second refusal must write nothing). */
export function wasRefused(socket: Socket): boolean {
  return refused.has(socket);
}

/**
 * Ends a refused connection: writes `last` (a response or a TLS alert), closes the proxy's side,
 * and gives the client a short linger to read it. The connection stops counting against the
 * limits at once; a client that never reads or never closes cannot hold the socket open.
 */
export function closeRefused(socket: Socket, last: string | Buffer | undefined): void {
  refused.add(socket);
  releaseConnection(socket);
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  if (last === undefined) socket.end();
  else socket.end(last);
  // Reading on (and discarding) lets the client's own close end the socket promptly.
  if (socket.listenerCount('data') === 0) socket.resume();
  const linger = setTimeout(() => socket.destroy(), LINGER_MS);
  linger.unref();
  socket.once('close', () => clearTimeout(linger));
}

/** Writes a refusal on a raw socket (CONNECT, or before HTTP parsing) and closes it. */
export function refuseSocket(socket: Socket, refusal: Refusal): void {
  const status = REASONS[refusal.reason].status;
  const body = refusalBody(refusal);
  const lines = Object.entries(headers(refusal, body)).map(([k, v]) => `${k}: ${v}\r\n`);
  closeRefused(socket, `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n${lines.join('')}\r\n${body}`);
}

/** Writes a refusal as the response to a parsed plain-HTTP request. */
export function refuseResponse(res: ServerResponse, refusal: Refusal): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = refusalBody(refusal);
  res.shouldKeepAlive = false;
  res.writeHead(REASONS[refusal.reason].status, headers(refusal, body));
  res.end(body);
}
