/**
 * A fast reading of the commonest first bytes a proxy receives: one complete, plain CONNECT
 * request head in the first chunk. Handing every connection to Node's HTTP server (a parser, its
 * state and listeners per connection) costs more than the rest of a CONNECT; this skips it for
 * heads made only of the plainest bytes. Pure.
 *
 * It accepts a strict subset of what Node's parser accepts and reads it the same way: a request
 * line `CONNECT <target> HTTP/1.x` with a target of name, bracket and colon characters only, then
 * header lines `name: value` with token names and printable ASCII values, CRLF everywhere. Anything
 * else (another method, a head split over chunks or over the size limit, odd bytes, a
 * Content-Length or Transfer-Encoding to refuse) returns undefined, and the full parser decides as
 * it always did.
 */

export interface ConnectHead {
  /** The request-target, as Node's parser would give it in `req.url`. */
  readonly target: string;
  /** Bytes of the head, CRLF CRLF included; what follows belongs to the tunnel. */
  readonly length: number;
}

const PREFIX = 'CONNECT ';
const REQUEST_LINE = /^CONNECT ([A-Za-z0-9._\-:[\]]{1,1024}) HTTP\/1\.[01]$/;
// Linear by construction: the blanks after the colon can only be matched one way (the value
// starts with a visible character), so no input makes the match backtrack.
const HEADER_LINE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[ \t]*(?:[\x21-\x7e][\x20-\x7e]*)?$/;
const MAX_HEADERS = 100;

export function readConnectHead(chunk: Buffer, maxHeaderBytes: number): ConnectHead | undefined {
  if (chunk.length < PREFIX.length || chunk.toString('latin1', 0, PREFIX.length) !== PREFIX) return undefined;
  const end = chunk.indexOf('\r\n\r\n', 0, 'latin1');
  if (end === -1 || end + 4 > maxHeaderBytes) return undefined;
  const lines = chunk.toString('latin1', 0, end).split('\r\n');
  if (lines.length > MAX_HEADERS + 1) return undefined;
  const request = REQUEST_LINE.exec(lines[0]!);
  if (request === null) return undefined;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    if (!HEADER_LINE.test(line)) return undefined;
    // A CONNECT with framing fields is refused; the full path does that, with its reason.
    const name = line.slice(0, line.indexOf(':')).toLowerCase();
    if (name === 'content-length' || name === 'transfer-encoding') return undefined;
  }
  return { target: request[1]!, length: end + 4 };
}
