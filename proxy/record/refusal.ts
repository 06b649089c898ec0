/**
 * Responses the proxy writes itself. Every one carries the status of its reason, the
 * machine-readable `X-Egress-Reason` header and a one-line body naming the host, the reason and
 * what would allow the request, so an agent can tell a policy block from a network failure.
 */
import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { REASONS, type Reason } from '../../policy/index.js';

const REASON_HEADER = 'X-Egress-Reason';

const LINGER_MS = 5_000;

/**
 * Refused connections that may linger at once. Each keeps its descriptor for up to LINGER_MS and
 * no longer counts against the connection limits, so a flood of connections refused at the caps
 * ran the process out of descriptors (fd-budget.ts keeps room for this many). Beyond it, a refused
 * connection is closed as soon as its last bytes are written.
 */
const MAX_LINGERING = 64;

export interface Refusal {
  readonly reason: Reason;
  readonly detail: string;
  readonly host?: string | undefined;
  readonly port?: number | undefined;
  /** Seconds, for limit refusals. */
  readonly retryAfter?: number | undefined;
  /** What would allow it, instead of the catalog's advice (the policy's refusal hint). */
  readonly advice?: string | undefined;
}

/**
 * The refusal of a request allowed by a policy its sandbox's new one replaced while the name
 * resolved (a shared proxy's live change): decided again by the next request, never let through.
 */
export function revokedWhileDeciding(target: { readonly host: string; readonly port: number }): Refusal {
  return { reason: 'policy_revoked', detail: `the allowlist changed while ${target.host} was being resolved; send the request again`, host: target.host, port: target.port };
}

/** Whether the reason is the network's fault rather than the policy's. */
function isFailure(reason: Reason): boolean {
  return REASONS[reason].status >= 500;
}

/**
 * The longest detail a refusal's body and decision line carry. Details quote what a peer sent
 * (Node's words on an upstream certificate list every name it holds, which the upstream chooses),
 * and one refusal must not cost a line or a body of that peer's size.
 */
export const DETAIL_MAX = 1024;

/** `detail`, cut to DETAIL_MAX characters with `...`. */
export function boundedDetail(detail: string): string {
  return detail.length > DETAIL_MAX ? `${detail.slice(0, DETAIL_MAX - 3)}...` : detail;
}

function refusalBody(refusal: Refusal): string {
  const target = refusal.host === undefined ? '' : ` ${refusal.host}${refusal.port === undefined ? '' : `:${refusal.port}`}`;
  const verb = isFailure(refusal.reason) ? 'egress failed' : 'egress denied';
  // Control characters never reach the body: details are built from validated names only, but
  // a stray CR or LF here would split the response.
  const detail = boundedDetail(refusal.detail).replace(/[\x00-\x1f\x7f]/g, ' ');
  // The hint was checked as printable ASCII where it was configured (config-values.ts).
  return `${verb}${target}: ${refusal.reason}: ${detail}; ${refusal.advice ?? REASONS[refusal.reason].advice}\n`;
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

/**
 * Ends refused connections: writes the last bytes (a response or a TLS alert), closes the proxy's
 * side, and gives the client a short linger to read them, MAX_LINGERING at once (one server's).
 * A client that never reads or never closes cannot hold the socket open.
 */
export class Closer {
  private lingering = 0;

  close(socket: Socket, last: string | Buffer | undefined): void {
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    if (this.lingering >= MAX_LINGERING) {
      socket.end(last ?? '', () => socket.destroy());
      return;
    }
    if (last === undefined) socket.end();
    else socket.end(last);
    // Reading on (and discarding) lets the client's own close end the socket promptly.
    if (socket.listenerCount('data') === 0) socket.resume();
    this.lingering += 1;
    const linger = setTimeout(() => socket.destroy(), LINGER_MS);
    linger.unref();
    socket.once('close', () => {
      this.lingering -= 1;
      clearTimeout(linger);
    });
  }
}

/** A fatal TLS alert, access_denied (RFC 8446 §6.2): tells a TLS client the policy ended the handshake. */
export const ACCESS_DENIED_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);
/** A fatal TLS alert, internal_error: the proxy, not the policy, could not go on. */
const INTERNAL_ERROR_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50]);

/**
 * The alert that ends a TLS client refused before any tunnel (nothing else reaches it):
 * access_denied when the policy refused, internal_error when the network failed, so that the
 * client can still tell the two apart.
 */
export function tlsAlertFor(refusal: Refusal): Buffer {
  return isFailure(refusal.reason) ? INTERNAL_ERROR_ALERT : ACCESS_DENIED_ALERT;
}

/** The longest detail the status line carries; the body has it whole. */
const PHRASE_DETAIL_MAX = 160;

/**
 * The status line's reason phrase: the standard one, then the reason and its detail. A client
 * that shows only the status line (pip: "Tunnel connection failed: 403 ...", for a CONNECT that
 * was refused) still says why. Printable ASCII only, as the grammar of a reason phrase allows.
 */
export function refusalPhrase(refusal: Refusal): string {
  const status = REASONS[refusal.reason].status;
  const detail = refusal.detail.replace(/[^\x20-\x7e]/g, '?');
  const cut = detail.length > PHRASE_DETAIL_MAX ? `${detail.slice(0, PHRASE_DETAIL_MAX - 3)}...` : detail;
  return `${STATUS_CODES[status] ?? 'Refused'} (${refusal.reason}: ${cut})`;
}

/** A refusal as a whole HTTP response, for a raw socket (CONNECT, or before HTTP parsing). */
export function refusalBytes(refusal: Refusal): string {
  const status = REASONS[refusal.reason].status;
  const body = refusalBody(refusal);
  const lines = Object.entries(headers(refusal, body)).map(([k, v]) => `${k}: ${v}\r\n`);
  return `HTTP/1.1 ${status} ${refusalPhrase(refusal)}\r\n${lines.join('')}\r\n${body}`;
}

/** Writes a refusal as the response to a parsed plain-HTTP request. */
export function refuseResponse(res: ServerResponse, refusal: Refusal): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = refusalBody(refusal);
  res.shouldKeepAlive = false;
  res.writeHead(REASONS[refusal.reason].status, refusalPhrase(refusal), headers(refusal, body));
  res.end(body);
}
