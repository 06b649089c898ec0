/**
 * One real TLS handshake on loopback: a node:tls server with the given certificate (or secure
 * context) and a client that verifies it against `ca` for `servername`. Returns what the client
 * saw: the error code when verification failed, or the certificate the server presented.
 */
import tls from 'node:tls';
import { listen } from './loopback.js';

export interface HandshakeResult {
  /** The client's error code (e.g. UNABLE_TO_VERIFY_LEAF_SIGNATURE), or undefined when it trusted the server. */
  readonly error: string | undefined;
  /** The certificate the server presented, as the client parsed it (undefined when the handshake failed). */
  readonly peer: tls.PeerCertificate | undefined;
  /** The ALPN protocol agreed, or false. */
  readonly alpn: string | false | null | undefined;
}

export type ServerIdentity = { key: string; cert: string } | { secureContext: tls.SecureContext } | { SNICallback: tls.TlsOptions['SNICallback'] };

export async function handshake(identity: ServerIdentity, client: { ca: string | string[]; servername: string; ALPNProtocols?: string[] }): Promise<HandshakeResult> {
  // A server takes no ready context as an option: one is served by SNI instead.
  const options: tls.TlsOptions = 'secureContext' in identity ? { SNICallback: (_name, cb) => cb(null, identity.secureContext) } : identity;
  const server = tls.createServer({ ...options, ...(client.ALPNProtocols ? { ALPNProtocols: ['http/1.1'] } : {}) }, (s) => {
    s.on('error', () => s.destroy());
    s.end();
  });
  server.on('tlsClientError', () => undefined);
  const port = await listen(server);
  try {
    return await new Promise<HandshakeResult>((resolve) => {
      const socket = tls.connect({ host: '127.0.0.1', port, ca: client.ca, servername: client.servername, ALPNProtocols: client.ALPNProtocols });
      socket.once('secureConnect', () => {
        resolve({ error: undefined, peer: socket.getPeerCertificate(), alpn: socket.alpnProtocol });
        socket.destroy();
      });
      socket.once('error', (err: NodeJS.ErrnoException) => {
        resolve({ error: err.code ?? err.message, peer: undefined, alpn: undefined });
        socket.destroy();
      });
    });
  } finally {
    server.close();
  }
}
