/** How an exchange's upstream failures are named: the reason a refusal gives, and its detail. */
import { CodedError, isCodedError } from '../../common/index.js';
import type { Reason } from '../../policy/index.js';
import { F, type LineFields } from '../record/index.js';
import { isDialError } from '../upstream/index.js';

/** A failure of the exchange that the forwarder finds itself (the pool's client reports the others). */
export class ExchangeError extends CodedError<'upstream_timeout' | 'bad_upstream_response'> {}

/** An upstream failure, as the reason a refusal gives for it. */
export function upstreamReason(err: Error): Reason {
  if (isDialError(err) || isCodedError(err, 'ExchangeError') || isCodedError(err, 'UpstreamHttpError') || isCodedError(err, 'UpstreamTlsError') || isCodedError(err, 'PlaceholderInBody') || isCodedError(err, 'SecretReflected')) {
    return err.code as Reason;
  }
  // undici's own error codes (plain HTTP), and the socket's.
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return 'upstream_timeout';
  if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_CLOSED') return 'upstream_failed';
  // An inspected upstream's TLS error after the handshake (a fatal alert, a record that does not
  // decrypt) ends the connection (tls-dial.ts) as a reset would: nothing of HTTP was judged bad.
  if (code?.startsWith('ERR_SSL_') === true) return 'upstream_failed';
  return 'bad_upstream_response';
}

/** Fields as undici gives them (bytes) or the proxy's own client (strings, a byte a character). */
export function latin1(values: readonly (Buffer | string)[]): string[] {
  return values.map((v) => (typeof v === 'string' ? v : v.toString('latin1')));
}

/** Why a failure is refused, in the words of whoever found it. */
export function failureDetail(err: Error): string {
  // The proxy's own errors say it all; undici's and the socket's are named by their code.
  if (isCodedError(err, 'CodedError')) return err.message;
  const code = (err as NodeJS.ErrnoException).code;
  return code ? `${err.message} (${code})` : err.message;
}

/** The secrets whose placeholder was found in a body, or whose value in a response (`NAME sha256:...`), for the line. */
export function secretsOf(err: Error): readonly string[] | undefined {
  return isCodedError(err, 'PlaceholderInBody') || isCodedError(err, 'SecretReflected') ? (err as unknown as { secrets: readonly string[] }).secrets : undefined;
}

/**
 * The line's field of the secrets a failure names (secretsOf), or nothing: a line whose failure
 * names none keeps the secrets noted when they went into the request.
 */
export function secretsField(err: Error): LineFields {
  const secrets = secretsOf(err);
  return secrets === undefined ? {} : { [F.secrets]: secrets };
}

/** The addresses a failed dial tried, for the line. */
export function dialAttempts(err: Error): readonly string[] | undefined {
  return isDialError(err) ? err.attempts : undefined;
}
