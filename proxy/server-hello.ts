/**
 * Reads just enough of the server's first handshake message to tell a TLS 1.3 HelloRetryRequest
 * (RFC 8446 §4.1.3: a ServerHello whose random is a fixed value) from any other answer. After a
 * HelloRetryRequest the client sends a second ClientHello, in the clear, which must name the same
 * host as the first: the tunnel checks it only when this reader says one is coming. Pure and
 * incremental; it looks at the first 38 bytes of the first handshake message and no further.
 */

export type ServerHelloResult = 'incomplete' | 'hello_retry' | 'other';

/** SHA-256 of "HelloRetryRequest": the random of every HelloRetryRequest. */
const HELLO_RETRY_RANDOM = Buffer.from('cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c', 'hex');
const CONTENT_HANDSHAKE = 22;
const SERVER_HELLO = 2;
const RECORD_HEADER = 5;
/** Handshake header (4), legacy_version (2) and random (32). */
const NEEDED = 4 + 2 + 32;

export class ServerHelloReader {
  private header = Buffer.alloc(0);
  private recordLeft = 0;
  private readonly message = Buffer.alloc(NEEDED);
  private have = 0;
  private result: ServerHelloResult = 'incomplete';

  push(chunk: Buffer): ServerHelloResult {
    let at = 0;
    while (this.result === 'incomplete' && at < chunk.length) {
      if (this.recordLeft === 0) {
        const take = Math.min(RECORD_HEADER - this.header.length, chunk.length - at);
        this.header = Buffer.concat([this.header, chunk.subarray(at, at + take)]);
        at += take;
        if (this.header.length < RECORD_HEADER) break;
        // Anything but a handshake record (an alert, or not TLS at all) is no HelloRetryRequest.
        if (this.header[0] !== CONTENT_HANDSHAKE) this.result = 'other';
        this.recordLeft = this.header.readUInt16BE(3);
        this.header = Buffer.alloc(0);
        if (this.recordLeft === 0) this.result = 'other';
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
}
