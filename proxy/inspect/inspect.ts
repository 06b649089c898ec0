/**
 * An inspected connection: a CONNECT or transparent TLS connection whose allowlist entry says
 * `inspect: true`. Instead of a tunnel, the proxy terminates the client's TLS with a leaf for the
 * host, signed by the deployment CA (leaf-certificates.ts), and hands the decrypted stream to its
 * own HTTP front as a connection of its own (entry `inspect`): every request inside is read,
 * framed and decided like plain HTTP (its Host must be the connection's host), and forwarded over
 * TLS the proxy opens itself and verifies (upstream/tls-dial.ts).
 *
 * The client's hello must name the host (a CONNECT's host, or the transparent hello's name); ALPN
 * offers http/1.1 alone, so HTTP/2 and gRPC are not inspected (a client that insists on them
 * fails the handshake). The connection's decision line is written when its handshake ends: allowed
 * (`tunnel: inspect`), or refused, `client_rejected_ca` when the client's TLS stack refused the
 * leaf. Each request inside has its own line.
 */
import { constants } from 'node:crypto';
import type { Socket } from 'node:net';
import tls from 'node:tls';
import { parseHostName } from '../../policy/index.js';
import type { ClientConnection, InspectEntry, Inspection, InspectStart, InspectStarter } from '../admission/index.js';
import { destinationOf, F, ms, type DecisionRecorder, type Refusal } from '../record/index.js';

/**
 * What an inspected connection holds beyond a tunnel, charged to the memory budget for its life:
 * OpenSSL's state of the client's TLS and the inner connection's objects. `npm run bench`
 * (bench/inspect.ts, in a proxy of its own) measured 66-76 KiB resident per open, idle inspected
 * connection over 400 of them, against 2-9 KiB per tunnel. Held a hundred at a time, the first
 * hundred cost about 35 KiB each and most later ones 64-67 KiB: an earlier measurement of a
 * hundred alone had set this at 64 KiB. A busy one holds a TLS record's read and write buffers
 * (16 KiB each) more. The inner connection's parser and request bodies are charged on top, as
 * for any connection.
 */
export const INSPECT_CONNECTION_BYTES = 80 * 1024;

/** TLS alerts by which a client says it refused the certificate it was shown. */
const CERTIFICATE_ALERTS = /ALERT_(UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|CERTIFICATE_EXPIRED|CERTIFICATE_REVOKED|DECRYPT_ERROR)/;

/**
 * The context a handshake starts with: no certificate at all. The leaf comes only from the SNI
 * callback, which checks the name; a hello with no server name never reaches it, finds no
 * certificate to sign with, and fails with a handshake_failure alert.
 *
 * No session tickets: OpenSSL resumes a session without the certificate step, so without the SNI
 * callback, and this one context (shared by every inspected connection) holds the ticket keys.
 * A ticket from a connection for one host would resume on a connection for any other, naming
 * another host or none. SSL_OP_NO_TICKET turns off TLS 1.2 tickets and TLS 1.3 stateless PSK
 * tickets; the stateful ones OpenSSL issues instead, like TLS 1.2 session IDs, are looked up in a
 * session store the proxy never fills (Node.js keeps none without `resumeSession` listeners).
 */
let unnamed: tls.SecureContext | undefined;
function noCertificate(): tls.SecureContext {
  unnamed ??= tls.createSecureContext({ secureOptions: constants.SSL_OP_NO_TICKET });
  return unnamed;
}

/** How OpenSSL fails a hello it has no certificate for (TLS 1.3, TLS 1.2). */
const NO_CERTIFICATE = new Set(['ERR_SSL_NO_SUITABLE_SIGNATURE_ALGORITHM', 'ERR_SSL_NO_SHARED_CIPHER']);

/**
 * Why a client's handshake failed, as the refusal its line gives; `named` says whether its hello
 * carried a server name (the SNI callback ran).
 */
export function handshakeRefusal(host: string, err: NodeJS.ErrnoException, sniRefused: string | undefined, named = true): Refusal {
  if (sniRefused !== undefined) return { reason: 'sni_mismatch', detail: sniRefused, host };
  const code = err.code ?? '';
  if (!named && NO_CERTIFICATE.has(code)) {
    return { reason: 'sni_missing', detail: `the TLS ClientHello carries no server name: an inspected connection's hello must name ${host}`, host };
  }
  if (CERTIFICATE_ALERTS.test(code)) {
    return {
      reason: 'client_rejected_ca',
      detail: `the client refused the certificate the proxy showed for ${host} (${code}): it does not trust the deployment CA; give it the certificate "capybara-egress ca" prints (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO)`,
      host,
    };
  }
  if (code === 'ERR_SSL_NO_APPLICATION_PROTOCOL') {
    return { reason: 'tls_hello_malformed', detail: `the client offered no ALPN protocol the proxy reads inside ${host}: only http/1.1 is inspected (no HTTP/2 or gRPC)`, host };
  }
  return { reason: 'tls_hello_malformed', detail: `the TLS handshake with the client failed: ${err.message}${code ? ` (${code})` : ''}`, host };
}

/** Starts inspected connections; `serve` hands a decrypted connection to the HTTP front. */
export class Inspector implements InspectStarter {
  constructor(
    private readonly serve: (connection: ClientConnection) => void,
    private readonly handshakeTimeoutMs: number,
  ) {}

  /** Terminates `connection`'s TLS for an allowed, inspected decision; `head` is what the client sent first. */
  async start(connection: ClientConnection, inspection: Inspection | undefined, start: InspectStart, head: Buffer, record: DecisionRecorder, entry: InspectEntry): Promise<void> {
    const { decision } = start;
    const host = decision.host;
    const refuse = (refusal: Refusal): void => {
      record.deny(refusal, { [F.decideMs]: start.decideMs });
      entry.refuse(connection, refusal);
    };
    if (inspection === undefined) return refuse({ reason: 'internal_error', detail: `the entry ${decision.rule ?? host} is inspected, but the proxy has no deployment CA`, host, port: decision.port });
    const { memory } = connection;
    if (!memory.grow(INSPECT_CONNECTION_BYTES)) return refuse({ reason: 'overloaded', detail: memory.explain(INSPECT_CONNECTION_BYTES), retryAfter: 1 });
    connection.socket.once('close', () => memory.shrink(INSPECT_CONNECTION_BYTES));
    let context: tls.SecureContext;
    try {
      context = await inspection.leaves.contextFor(host);
    } catch (err) {
      return refuse({ reason: 'internal_error', detail: `no leaf certificate for ${host}: ${(err as Error).message}`, host, port: decision.port });
    }
    const client = connection.socket;
    if (client.destroyed) {
      record.allow(destinationOf(decision), { [F.tunnel]: 'inspect', [F.decideMs]: start.decideMs, [F.error]: 'client_closed' });
      return;
    }
    if (entry.established !== undefined) client.write(entry.established);
    this.handshake(connection, context, start, head, record);
  }

  private handshake(connection: ClientConnection, context: tls.SecureContext, start: InspectStart, head: Buffer, record: DecisionRecorder): void {
    const { decision } = start;
    const client: Socket = connection.socket;
    // What the client sent already is the start of its handshake: back into the socket, where
    // the TLS layer reads it first.
    if (head.length > 0) client.unshift(head);
    let sniRefused: string | undefined;
    let named = false;
    const secure = new tls.TLSSocket(client, {
      isServer: true,
      // The leaf only through the SNI callback, for the one name allowed: a hello without a
      // server name is refused in the handshake, never shown the leaf.
      secureContext: noCertificate(),
      ALPNProtocols: ['http/1.1'],
      SNICallback: (servername, callback) => {
        named = true;
        const name = parseHostName(servername);
        if (name.ok && name.name === decision.host) return callback(null, context);
        sniRefused = `the TLS server name is not ${decision.host}, the host this connection was allowed for`;
        callback(new Error(sniRefused), undefined);
      },
    });
    connection.memory.shrink(start.headCharged);
    const timer = setTimeout(() => {
      record.deny({ reason: 'tls_hello_timeout', detail: `the TLS handshake with the client did not finish within ${this.handshakeTimeoutMs} ms`, host: decision.host }, { [F.decideMs]: start.decideMs });
      secure.destroy();
    }, this.handshakeTimeoutMs);
    const failed = (err: NodeJS.ErrnoException): void => {
      clearTimeout(timer);
      record.deny(handshakeRefusal(decision.host, err, sniRefused, named), { [F.decideMs]: start.decideMs });
      secure.destroy();
    };
    secure.once('error', failed);
    // The accepted socket allows half-open connections, and so does the TLS socket over it: a
    // client gone mid-handshake must still end it.
    const gone = (): void => void secure.destroy();
    secure.once('end', gone);
    secure.once('close', () => {
      clearTimeout(timer);
      client.destroy();
      // Closed mid-handshake without an alert: what a client that refuses the leaf after seeing
      // it does when it checks certificates itself (Node.js), or one that just went away.
      const detail = `the client closed during the TLS handshake for ${decision.host}, without an alert: most likely it does not trust the deployment CA (Node.js closes so); give it the certificate "capybara-egress ca" prints`;
      if (!record.recorded) record.deny({ reason: 'client_rejected_ca', detail, host: decision.host }, { [F.decideMs]: start.decideMs });
    });
    secure.once('secure', () => {
      clearTimeout(timer);
      secure.off('error', failed);
      secure.off('end', gone);
      secure.on('error', () => secure.destroy()); // the inner connection's close says the rest
      record.allow(destinationOf(decision), { [F.tunnel]: 'inspect', [F.decideMs]: start.decideMs, [F.durationMs]: ms(start.started) });
      this.serve(connection.inner(secure, { kind: 'inspect', host: decision.host, port: decision.port, addresses: decision.addresses }));
    });
  }
}
