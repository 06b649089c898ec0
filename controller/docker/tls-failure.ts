/**
 * Explains a failed TLS connection to a remote engine. A server that refuses a client
 * certificate only sends a generic "bad certificate" alert, so the client cannot tell an
 * expired certificate from one of another CA by the alert alone; reading its own certificate
 * (only after a failure) names the likely cause. Nothing here logs or returns key material:
 * messages carry file names, subjects, issuers and dates only.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { SandboxError } from '../spec/index.js';
import { parseEndpoint } from './endpoint.js';

const TLS_PROBE_TIMEOUT_MS = 3_000;

export interface TlsContext {
  readonly endpoint: string;
  readonly tlsCertDir: string | undefined;
}

interface ConnectionError {
  readonly code?: string;
  readonly message: string;
  readonly statusCode?: number;
  readonly json?: unknown;
}

/** Certificate checks of the client side (Node/OpenSSL verify codes of the engine's certificate). */
const SERVER_CERT_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_SIGNATURE_FAILURE',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** A short diagnosis of cert.pem against ca.pem and key.pem, or '' when nothing looks wrong. */
export function diagnoseClientCertificate(tlsCertDir: string, now: Date = new Date()): string {
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(readFileSync(join(tlsCertDir, 'cert.pem')));
  } catch {
    return `${tlsCertDir}/cert.pem is not a readable PEM certificate.`;
  }
  if (new Date(cert.validTo).getTime() < now.getTime()) return `${tlsCertDir}/cert.pem expired on ${new Date(cert.validTo).toISOString()}.`;
  if (new Date(cert.validFrom).getTime() > now.getTime()) return `${tlsCertDir}/cert.pem is not valid before ${new Date(cert.validFrom).toISOString()}.`;
  try {
    const ca = new X509Certificate(readFileSync(join(tlsCertDir, 'ca.pem')));
    if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) {
      return `${tlsCertDir}/cert.pem is issued by "${cert.issuer.replace(/\n/g, ', ')}", not by the CA in ca.pem ("${ca.subject.replace(/\n/g, ', ')}").`;
    }
  } catch {
    return `${tlsCertDir}/ca.pem is not a readable PEM certificate.`;
  }
  try {
    if (!cert.checkPrivateKey(createPrivateKey(readFileSync(join(tlsCertDir, 'key.pem'))))) return `${tlsCertDir}/key.pem does not belong to cert.pem.`;
  } catch {
    return `${tlsCertDir}/key.pem is not a readable PEM private key.`;
  }
  return '';
}

/**
 * True when the endpoint completes a TLS handshake (no certificate is sent or checked: this
 * only asks whether the port speaks TLS at all).
 */
export function speaksTls(host: string, port: number, timeoutMs = TLS_PROBE_TIMEOUT_MS): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, rejectUnauthorized: false }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.setTimeout(timeoutMs, () => {
      socket.destroy();
      resolve(false);
    });
    socket.on('error', () => resolve(false));
  });
}

const PLAIN_TO_TLS = /HTTP request to an HTTPS server/i;

/**
 * A SandboxError with code `engine_tls` when `err` is a TLS failure, or plain HTTP sent to an
 * engine that requires TLS; undefined for any other failure, which the caller maps as usual.
 * A TLS engine answers plain HTTP with a 400 and closes at once, so the client often sees only
 * a reset: for a plain tcp:// endpoint a reset is followed by one TLS handshake probe.
 */
export async function tlsFailure(err: ConnectionError, what: string, context: TlsContext): Promise<SandboxError | undefined> {
  const { endpoint, tlsCertDir } = context;
  const code = err.code ?? '';
  const message = err.message;
  if (tlsCertDir === undefined) {
    const address = parseEndpoint(endpoint);
    if (address.kind !== 'tcp') return undefined;
    const detail = typeof err.json === 'object' && err.json !== null ? String((err.json as { message?: unknown }).message ?? '') : '';
    const plainRefused = err.statusCode === 400 && PLAIN_TO_TLS.test(`${detail} ${message}`);
    const reset = err.statusCode === undefined && (code === 'ECONNRESET' || code === 'EPIPE' || /socket hang up/i.test(message));
    if (plainRefused || (reset && (await speaksTls(address.host, address.port)))) {
      return new SandboxError(
        'engine_tls',
        `The engine at ${endpoint} requires TLS (${what} was refused): set tlsCertDir to the mounted directory holding ca.pem, cert.pem and key.pem.`,
        { cause: err },
      );
    }
    return undefined;
  }
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || /wrong version number/i.test(message)) {
    return new SandboxError(
      'engine_tls',
      `The endpoint ${endpoint} does not speak TLS (${what}): check the port, or remove tlsCertDir if this is the plain socket proxy on a private network.`,
      { cause: err },
    );
  }
  if (/^ERR_SSL_.*ALERT/.test(code) || /alert (bad certificate|certificate required|certificate expired|unknown ca|certificate unknown)/i.test(message)) {
    const diagnosis = diagnoseClientCertificate(tlsCertDir);
    return new SandboxError(
      'engine_tls',
      `The engine at ${endpoint} refused the client certificate in ${tlsCertDir} (${what}: ${code || 'TLS alert'}). ` +
        (diagnosis === '' ? 'Check that cert.pem is issued by the CA the engine trusts (dockerd --tlscacert) and is within its validity period.' : `${diagnosis} Issue a new client certificate from the CA the engine trusts (dockerd --tlscacert).`),
      { cause: err },
    );
  }
  if (SERVER_CERT_CODES.has(code)) {
    return new SandboxError(
      'engine_tls',
      `The engine's certificate at ${endpoint} is not trusted (${what}: ${code}): check that ${tlsCertDir}/ca.pem is the CA that signed the engine's server certificate, that it is valid, and that it names the endpoint host.`,
      { cause: err },
    );
  }
  return undefined;
}
