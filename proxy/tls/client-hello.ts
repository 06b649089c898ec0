/**
 * Reads the first TLS handshake message a client sends into a tunnel and returns its server name
 * (SNI, RFC 6066 §3), strictly: the ClientHello is reassembled across records (RFC 8446 §5.1) and
 * TCP segments, every length is checked against its container, and anything a real client does
 * not send before its ClientHello is refused instead of skipped. A reader that clipped a length,
 * skipped an odd record or guessed at a cut-off name could be shown one name while the server
 * behind it completes the handshake for another.
 *
 * Pure and incremental: the tunnel feeds it chunks as they arrive; each byte is examined once, so
 * a hello trickled a byte at a time costs no more than one sent whole. The reader is also where
 * the hello's bytes wait: it keeps them once, as received (records and all), and the tunnel
 * forwards exactly those bytes. Nothing is copied again until the hello is complete, and then only
 * a hello spread over several records is joined, for as long as it takes to parse it. (Holding
 * the raw bytes and a reassembled copy cost a tunnel twice its hello, which a flood of
 * half-sent 32 KiB hellos turned into ~100 KiB per tunnel.)
 */

import { GrowableBuffer } from './growable-buffer.js';

export type HelloResult =
  /** More bytes are needed. */
  | { readonly kind: 'incomplete' }
  /** A complete, well-formed ClientHello; `serverName` is the raw host_name bytes, if any. */
  | { readonly kind: 'hello'; readonly serverName: Buffer | undefined }
  | { readonly kind: 'refused'; readonly reason: 'sni_missing' | 'tls_hello_malformed'; readonly detail: string };

/** Largest ClientHello accepted, in bytes of the handshake message body (2^15: a hello with post-quantum key shares is under 2 KiB). */
export const MAX_HELLO_BYTES = 32 * 1024;

/** Most records a ClientHello may be spread over (real clients use one, or a few past 16 KiB). */
export const MAX_HELLO_RECORDS = 64;

/**
 * Most bytes the reader keeps: the largest hello in its records, and what may follow it in the
 * read that completed it (a client has little to send before the server answers).
 */
export const MAX_READER_BYTES = 2 * MAX_HELLO_BYTES + 16 * 1024;

const RECORD_HEADER = 5;
const HANDSHAKE_HEADER = 4;
const MAX_FRAGMENT = 16 * 1024; // RFC 8446 §5.1: a record's length MUST NOT exceed 2^14
const CONTENT_HANDSHAKE = 22;
const CLIENT_HELLO = 1;
const EXT_SERVER_NAME = 0;
const NAME_TYPE_HOST = 0;

const CONTENT_TYPES: Record<number, string> = { 20: 'change_cipher_spec', 21: 'alert', 23: 'application_data', 24: 'heartbeat' };

function refused(reason: 'sni_missing' | 'tls_hello_malformed', detail: string): HelloResult {
  return { kind: 'refused', reason, detail };
}

function malformed(detail: string): HelloResult {
  return refused('tls_hello_malformed', detail);
}

/**
 * TLS versions a client puts in a record header or in legacy_version: 1.0 (0x0301, the usual
 * record version of a first ClientHello) to 1.2 (0x0303, also what TLS 1.3 sends). SSL 3.0 and
 * anything newer-looking are refused: no client this proxy serves sends them.
 */
function isClientVersion(major: number, minor: number): boolean {
  return major === 3 && minor >= 1 && minor <= 3;
}

export class ClientHelloReader {
  /** Every byte pushed, in arrival order: the hello's records, then what followed them. */
  private readonly raw = new GrowableBuffer(MAX_READER_BYTES);
  /** Bytes of `raw` examined so far. */
  private scanned = 0;
  /** Where the handshake bytes lie in `raw`: one [start, end) range per record fragment. */
  private readonly fragments: [number, number][] = [];
  /** Handshake bytes gathered from record fragments so far. */
  private handshakeLength = 0;
  /** The handshake header (message type and length), once its four bytes have come. */
  private readonly handshakeHeader = Buffer.alloc(HANDSHAKE_HEADER);
  private records = 0;
  /** Body length from the handshake header, once known. */
  private helloLength = -1;
  /** Bytes still to come of the record being read, or -1 while between records. */
  private recordLeft = -1;
  private result: HelloResult = { kind: 'incomplete' };

  /** Feeds the next bytes; returns the outcome so far (final once not `incomplete`). */
  push(chunk: Buffer): HelloResult {
    if (this.result.kind !== 'incomplete' || chunk.length === 0) return this.result;
    const room = MAX_READER_BYTES - this.raw.length;
    this.raw.append(chunk.length <= room ? chunk : chunk.subarray(0, room));
    this.result = this.advance();
    // Bytes past the cap were not kept: whatever the kept ones say, the input cannot be forwarded
    // whole. A refusal the kept bytes already give is the more precise answer.
    if (chunk.length > room && this.result.kind !== 'refused') this.result = malformed('too many bytes before the ClientHello could be checked');
    return this.result;
  }

  /** Bytes of the input that belong to the ClientHello's records; what was pushed beyond them follows it. */
  get consumed(): number {
    return this.scanned;
  }

  /** Everything pushed so far, as received (a view that later pushes leave unchanged). */
  bytes(): Buffer {
    return this.raw.bytes();
  }

  /** Bytes this reader holds (allocated): what the memory budget charges for it. */
  get held(): number {
    return this.raw.capacity;
  }

  /** The client closed its side: whatever is incomplete now never will be. */
  end(): HelloResult {
    if (this.result.kind !== 'incomplete') return this.result;
    this.result = this.raw.length === 0 ? refused('sni_missing', 'the client sent nothing and closed') : malformed('the client closed before its ClientHello was complete');
    return this.result;
  }

  private advance(): HelloResult {
    const raw = this.raw.bytes();
    for (;;) {
      if (this.recordLeft === -1) {
        // The first byte alone decides "not TLS at all", so a plain-text protocol is named at once.
        if (this.scanned === raw.length) return { kind: 'incomplete' };
        const first = raw[this.scanned]!;
        if (first !== CONTENT_HANDSHAKE) {
          const type = CONTENT_TYPES[first];
          if (type !== undefined) return malformed(`a TLS ${type} record came before the ClientHello was complete`);
          return this.handshakeLength === 0
            ? refused('sni_missing', 'the tunnel does not start with TLS')
            : malformed(`a record of unknown type ${first} came before the ClientHello was complete`);
        }
        if (raw.length - this.scanned < RECORD_HEADER) return { kind: 'incomplete' };
        const header = raw.subarray(this.scanned, this.scanned + RECORD_HEADER);
        this.scanned += RECORD_HEADER;
        if (!isClientVersion(header[1]!, header[2]!)) {
          return malformed(`record version 0x${header.readUInt16BE(1).toString(16).padStart(4, '0')} is not one a TLS client sends`);
        }
        const length = header.readUInt16BE(3);
        // Empty handshake records are forbidden (RFC 8446 §5.1) and a favourite way to make two
        // parsers disagree about where a message starts.
        if (length === 0) return malformed('an empty handshake record');
        if (length > MAX_FRAGMENT) return malformed(`a record of ${length} bytes is over the 16384-byte limit`);
        this.records += 1;
        if (this.records > MAX_HELLO_RECORDS) return malformed(`a ClientHello spread over more than ${MAX_HELLO_RECORDS} records`);
        this.recordLeft = length;
      }
      if (this.scanned === raw.length) return { kind: 'incomplete' };
      const start = this.scanned;
      const take = Math.min(this.recordLeft, raw.length - start);
      this.scanned += take;
      this.recordLeft -= take;
      // One range per record: a fragment that arrives in pieces extends the range it began.
      const last = this.fragments[this.fragments.length - 1];
      if (last !== undefined && last[1] === start) last[1] += take;
      else this.fragments.push([start, start + take]);
      for (let i = 0; this.handshakeLength + i < HANDSHAKE_HEADER && i < take; i++) this.handshakeHeader[this.handshakeLength + i] = raw[start + i]!;
      this.handshakeLength += take;

      if (this.helloLength === -1 && this.handshakeLength >= HANDSHAKE_HEADER) {
        if (this.handshakeHeader[0] !== CLIENT_HELLO) return malformed(`the first handshake message is type ${this.handshakeHeader[0]}, not a ClientHello`);
        this.helloLength = this.handshakeHeader.readUIntBE(1, 3);
        if (this.helloLength > MAX_HELLO_BYTES) return malformed(`a ClientHello of ${this.helloLength} bytes is over the ${MAX_HELLO_BYTES}-byte limit`);
      }
      if (this.helloLength !== -1 && this.handshakeLength >= HANDSHAKE_HEADER + this.helloLength) {
        // The record that completes the ClientHello must end with it: a client sends nothing else
        // in its first flight of handshake records.
        if (this.handshakeLength !== HANDSHAKE_HEADER + this.helloLength || this.recordLeft > 0) {
          return malformed('more handshake data follows the ClientHello in its record');
        }
        return this.parse(raw);
      }
      if (this.recordLeft === 0) this.recordLeft = -1;
    }
  }

  /** Parses the complete hello where it lies, or joined once when it spans records. */
  private parse(raw: Buffer): HelloResult {
    let message: Buffer;
    if (this.fragments.length === 1) {
      const [start, end] = this.fragments[0]!;
      message = raw.subarray(start, end);
    } else {
      message = Buffer.allocUnsafeSlow(this.handshakeLength);
      let at = 0;
      for (const [start, end] of this.fragments) at += raw.copy(message, at, start, end);
    }
    const result = parseClientHello(message.subarray(HANDSHAKE_HEADER));
    if (result.kind !== 'hello' || result.serverName === undefined) return result;
    // The name outlives the held bytes (it is logged when the tunnel closes): a copy of its own,
    // so that it keeps nothing else alive.
    const name = Buffer.allocUnsafeSlow(result.serverName.length);
    result.serverName.copy(name);
    return { kind: 'hello', serverName: name };
  }
}

/** A cursor over one length-delimited structure; every read is checked against its end. */
class Cursor {
  constructor(
    private readonly buf: Buffer,
    public at: number,
    readonly end: number,
  ) {}

  get left(): number {
    return this.end - this.at;
  }

  u8(): number | undefined {
    if (this.left < 1) return undefined;
    return this.buf[this.at++];
  }

  u16(): number | undefined {
    if (this.left < 2) return undefined;
    const v = this.buf.readUInt16BE(this.at);
    this.at += 2;
    return v;
  }

  /** A sub-cursor over the next `length` bytes, or undefined when they are not all there. */
  sub(length: number | undefined): Cursor | undefined {
    if (length === undefined || length > this.left) return undefined;
    const inner = new Cursor(this.buf, this.at, this.at + length);
    this.at += length;
    return inner;
  }

  bytes(length: number): Buffer | undefined {
    if (length > this.left) return undefined;
    const out = this.buf.subarray(this.at, this.at + length);
    this.at += length;
    return out;
  }
}

/** Parses a ClientHello body (RFC 8446 §4.1.2, RFC 5246 §7.4.1.2); the whole body must be used. */
export function parseClientHello(body: Buffer): HelloResult {
  const c = new Cursor(body, 0, body.length);
  const major = c.u8();
  const minor = c.u8();
  if (major === undefined || minor === undefined || !isClientVersion(major, minor)) return malformed('the ClientHello version is not one a TLS client sends');
  if (c.bytes(32) === undefined) return malformed('the ClientHello is too short for its random');
  const sessionIdLength = c.u8();
  if (sessionIdLength === undefined || sessionIdLength > 32 || c.sub(sessionIdLength) === undefined) return malformed('bad legacy_session_id length');
  const suitesLength = c.u16();
  if (suitesLength === undefined || suitesLength < 2 || suitesLength % 2 !== 0 || c.sub(suitesLength) === undefined) return malformed('bad cipher_suites length');
  const compressionLength = c.u8();
  if (compressionLength === undefined || compressionLength < 1 || c.sub(compressionLength) === undefined) return malformed('bad legacy_compression_methods length');
  // Extensions may be absent altogether before TLS 1.3 (RFC 5246 §7.4.1.2); then there is no name.
  if (c.left === 0) return { kind: 'hello', serverName: undefined };
  const extensionsLength = c.u16();
  if (extensionsLength === undefined || extensionsLength !== c.left) return malformed('the extensions length does not match the rest of the ClientHello');
  const seen = new Set<number>();
  let serverName: Buffer | undefined;
  while (c.left > 0) {
    const type = c.u16();
    const data = c.sub(c.u16());
    if (type === undefined || data === undefined) return malformed('an extension runs past the end of the ClientHello');
    // RFC 8446 §4.2: at most one extension of each type. Two server_name extensions are two
    // answers to "which name", and parsers disagree about which one counts.
    if (seen.has(type)) return malformed(`extension ${type} appears twice`);
    seen.add(type);
    if (type === EXT_SERVER_NAME) {
      const name = readServerName(data);
      if (typeof name === 'string') return malformed(name);
      serverName = name;
    }
  }
  return { kind: 'hello', serverName };
}

/** The host_name of a server_name extension (RFC 6066 §3), or a string saying what is wrong. */
function readServerName(ext: Cursor): Buffer | string {
  const list = ext.sub(ext.u16());
  if (list === undefined || ext.left !== 0) return 'the server_name list length does not match its extension';
  if (list.left === 0) return 'an empty server_name list';
  const type = list.u8();
  const length = list.u16();
  // Only host_name is defined, and a list MUST NOT hold two names of one type: exactly one entry.
  if (type !== NAME_TYPE_HOST) return `server name type ${type ?? '(missing)'} is not host_name`;
  if (length === undefined || length === 0) return 'an empty host_name';
  const name = list.bytes(length);
  if (name === undefined) return 'the host_name runs past the end of its list';
  if (list.left !== 0) return 'more than one entry in the server_name list';
  return name;
}
