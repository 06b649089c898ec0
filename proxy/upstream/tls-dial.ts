/**
 * The upstream side of an inspected connection: TLS the proxy opens itself, over a connection the
 * pinned dialer made, verified against the proxy's trust store for the very name the client asked
 * for. ALPN offers http/1.1 alone: the proxy reads HTTP/1.1 and nothing else.
 *
 * A certificate that does not verify (an unknown issuer, another name, expired, self-signed) is an
 * UpstreamTlsError, refused `upstream_tls_invalid`; nothing of the request was sent.
 */
import type net from 'node:net';
import tls from 'node:tls';
import { CodedError } from '../../common/index.js';
import type { Unsent } from './dial.js';

export class UpstreamTlsError extends CodedError<'upstream_tls_invalid'> {}

/** What the upstream's certificate is verified against: the PEM certificates of the trusted CAs. */
export type UpstreamTrust = readonly string[];

/**
 * Opens TLS for `servername` over `socket` (connected); resolves once the certificate verified.
 * `cancel` gives the handshake up, and the connection, when what it was for has gone.
 */
export function secureUpstream(socket: net.Socket, servername: string, trust: UpstreamTrust, timeoutMs: number, cancel?: Unsent): Promise<tls.TLSSocket> {
  return new Promise((resolve, reject) => {
    const secure = tls.connect({
      socket,
      servername,
      ca: [...trust],
      ALPNProtocols: ['http/1.1'],
      minVersion: 'TLSv1.2',
      rejectUnauthorized: true,
    });
    const timer = setTimeout(() => fail(new UpstreamTlsError('upstream_tls_invalid', `the TLS handshake with ${servername} did not finish within ${timeoutMs} ms`)), timeoutMs);
    let unwatch: (() => void) | undefined;
    const fail = (err: Error): void => {
      clearTimeout(timer);
      unwatch?.();
      secure.destroy();
      socket.destroy();
      reject(err);
    };
    unwatch = cancel?.watch(() => fail(new Error('cancelled: what the connection was for is gone')));
    const handshakeFailed = (err: NodeJS.ErrnoException): void => fail(tlsFailure(servername, err));
    secure.once('error', handshakeFailed);
    secure.once('secureConnect', () => {
      clearTimeout(timer);
      unwatch?.();
      secure.off('error', handshakeFailed);
      // Errors after this are the exchange's (its pooled connection listens, h1-connection.ts). But
      // Node reports a TLS error after the handshake (a fatal alert, such as the
      // certificate_required a TLS 1.3 server that wants a client certificate sends after the
      // proxy's Finished; a record that does not decrypt) by an 'error' that leaves the connection
      // open, and a request in flight fails only when its socket closes: it waited for the head
      // deadline, and an idle connection stayed in its pool for the next request. So the error
      // closes the connection. Added first, this listener also leaves the socket never without one.
      secure.on('error', () => secure.destroy());
      resolve(secure);
    });
  });
}

/** Certificate failures are the upstream's fault by name; others (a reset mid-handshake) say what happened. */
function tlsFailure(servername: string, err: NodeJS.ErrnoException): Error {
  const code = err.code ?? 'TLS error';
  if (code.startsWith('ERR_SSL_') || code === 'ECONNRESET' || code === 'EPIPE') {
    return new UpstreamTlsError('upstream_tls_invalid', `the TLS handshake with ${servername} failed: ${err.message} (${code})`, { cause: err });
  }
  return new UpstreamTlsError('upstream_tls_invalid', `the certificate of ${servername} is not valid for it under the proxy's trust store: ${err.message} (${code})`, { cause: err });
}
