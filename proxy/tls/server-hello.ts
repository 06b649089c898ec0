/**
 * Judges the first bytes a server sends into a `tls` tunnel. They must be TLS: a handshake record
 * (the ServerHello) or an alert record (a refusal of the ClientHello). An SMTP banner, an HTTP
 * response or anything else in clear is not: without this check a `tls` tunnel to an allowed
 * host:port whose server is not TLS (a mail server, a plain web server that answers a hello with
 * a 400) carried plain text both ways once the client's hello had passed.
 *
 * It also reads just enough of the server's first handshake message to tell a TLS 1.3
 * HelloRetryRequest (RFC 8446 §4.1.3: a ServerHello whose random is a fixed value) from any other
 * answer. After a HelloRetryRequest the client sends a second ClientHello, in the clear, which
 * must name the same host as the first: the tunnel checks it only when this reader says one is
 * coming. Pure and incremental; it looks at the first 38 bytes of the first handshake message (and
 * the headers of the records they lie in) and no further.
 */

export type ServerHelloResult = 'incomplete' | 'hello_retry' | 'other' | 'not_tls';

/** SHA-256 of "HelloRetryRequest": the random of every HelloRetryRequest. */
const HELLO_RETRY_RANDOM = Buffer.from('cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c', 'hex');
const CONTENT_ALERT = 21;
const CONTENT_HANDSHAKE = 22;
const SERVER_HELLO = 2;
const RECORD_HEADER = 5;
/** RFC 8446 §5.1 (and RFC 5246 §6.2.1 for plaintext records): at most 2^14 bytes. */
const MAX_FRAGMENT = 16 * 1024;
/** Handshake header (4), legacy_version (2) and random (32). */
const NEEDED = 4 + 2 + 32;

/**
 * A record version a TLS server may send before encryption starts: SSL 3.0 (0x0300) to 1.2
 * (0x0303, which TLS 1.3 also writes: RFC 8446 §5.1).
 */
function isServerVersion(major: number, minor: number): boolean {
  return major === 3 && minor <= 3;
}

export class ServerHelloReader {
  private header = Buffer.alloc(0);
  private recordLeft = 0;
  private readonly message = Buffer.alloc(NEEDED);
  private have = 0;
  private result: ServerHelloResult = 'incomplete';
  /** Why the bytes are not TLS, once `not_tls`. */
  problem: string | undefined;

  push(chunk: Buffer): ServerHelloResult {
    let at = 0;
    while (this.result === 'incomplete' && at < chunk.length) {
      if (this.recordLeft === 0) {
        // The first byte of a record alone shows a protocol in clear (an SMTP or FTP banner
        // starts with a digit, an HTTP response with "H"): refused without waiting for more.
        if (this.header.length === 0 && chunk[at] !== CONTENT_HANDSHAKE && chunk[at] !== CONTENT_ALERT) {
          return this.notTls(`the upstream did not answer with a TLS handshake or alert record (a record it sent starts with 0x${chunk[at]!.toString(16).padStart(2, '0')})`);
        }
        const take = Math.min(RECORD_HEADER - this.header.length, chunk.length - at);
        this.header = Buffer.concat([this.header, chunk.subarray(at, at + take)]);
        at += take;
        if (this.header.length < RECORD_HEADER) break;
        const [type, major, minor] = [this.header[0]!, this.header[1]!, this.header[2]!];
        const length = this.header.readUInt16BE(3);
        this.header = Buffer.alloc(0);
        if (!isServerVersion(major, minor)) return this.notTls(`the upstream sent a record with version 0x${((major << 8) | minor).toString(16).padStart(4, '0')}, which no TLS server sends before encryption`);
        // Empty handshake and alert records are forbidden (RFC 8446 §5.1), and no record is longer.
        if (length === 0 || length > MAX_FRAGMENT) return this.notTls(`the upstream sent a record of ${length} bytes, which no handshake or alert record is`);
        // An alert (the server refused the hello) is TLS, and no HelloRetryRequest.
        if (type !== CONTENT_HANDSHAKE) this.result = 'other';
        this.recordLeft = length;
        continue;
      }
      const take = Math.min(this.recordLeft, NEEDED - this.have, chunk.length - at);
      chunk.copy(this.message, this.have, at, at + take);
      this.have += take;
      this.recordLeft -= take;
      at += take;
      if (this.have === NEEDED) {
        this.result = this.message[0] === SERVER_HELLO && this.message.subarray(6, NEEDED).equals(HELLO_RETRY_RANDOM) ? 'hello_retry' : 'other';
      }
    }
    return this.result;
  }

  private notTls(problem: string): ServerHelloResult {
    this.problem = problem;
    this.result = 'not_tls';
    return this.result;
  }
}
