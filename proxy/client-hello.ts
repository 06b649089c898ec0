/**
 * Reads the server name (SNI, RFC 6066 §3) from the first bytes a client sends into a tunnel,
 * without consuming them. Pure: the tunnel feeds it what it has buffered and acts on the result.
 * Only the first TLS record is read (RFC 8446 §5.1): a ClientHello split over several records is
 * treated as having no SNI.
 */

export type HelloScan =
  /** More bytes are needed to decide. */
  | { readonly kind: 'incomplete' }
  /** The bytes are not a TLS handshake. */
  | { readonly kind: 'not_tls' }
  | { readonly kind: 'tls'; readonly sni: string | undefined };

const HANDSHAKE = 0x16;
const CLIENT_HELLO = 0x01;
const SERVER_NAME = 0x0000;
const HOST_NAME = 0x00;

export function scanClientHello(buf: Buffer): HelloScan {
  if (buf.length === 0) return { kind: 'incomplete' };
  if (buf[0] !== HANDSHAKE) return { kind: 'not_tls' };
  if (buf.length < 5) return { kind: 'incomplete' };
  if (buf[1] !== 0x03) return { kind: 'not_tls' };
  const recordLength = buf.readUInt16BE(3);
  if (buf.length < 5 + recordLength) return { kind: 'incomplete' };
  const record = buf.subarray(5, 5 + recordLength);
  // A record too short to hold the fields below is read as having no SNI, never as an error
  // that could let bytes through unseen: the caller decides what "no SNI" means.
  try {
    if (record[0] !== CLIENT_HELLO) return { kind: 'tls', sni: undefined };
    let at = 4 + 2 + 32; // handshake header, legacy_version, random
    at += 1 + read8(record, at); // session id
    at += 2 + read16(record, at); // cipher suites
    at += 1 + read8(record, at); // compression methods
    if (at >= record.length) return { kind: 'tls', sni: undefined };
    const end = Math.min(record.length, at + 2 + read16(record, at));
    at += 2;
    while (at + 4 <= end) {
      const type = read16(record, at);
      const length = read16(record, at + 2);
      at += 4;
      if (type === SERVER_NAME) return { kind: 'tls', sni: readServerName(record.subarray(at, at + length)) };
      at += length;
    }
    return { kind: 'tls', sni: undefined };
  } catch {
    return { kind: 'tls', sni: undefined };
  }
}

function read8(buf: Buffer, at: number): number {
  if (at >= buf.length) throw new RangeError('short');
  return buf[at] as number;
}

function read16(buf: Buffer, at: number): number {
  if (at + 2 > buf.length) throw new RangeError('short');
  return buf.readUInt16BE(at);
}

function readServerName(ext: Buffer): string | undefined {
  const listEnd = Math.min(ext.length, 2 + read16(ext, 0));
  let at = 2;
  while (at + 3 <= listEnd) {
    const type = ext[at];
    const length = read16(ext, at + 1);
    at += 3;
    if (type === HOST_NAME) return ext.subarray(at, at + length).toString('latin1');
    at += length;
  }
  return undefined;
}
