/**
 * Reads the first TLS handshake message a client sends into a tunnel and returns its server name
 * (SNI, RFC 6066 §3), strictly: the ClientHello is reassembled across records (RFC 8446 §5.1) and
 * TCP segments, every length is checked against its container, and anything a real client does
 * not send before its ClientHello is refused instead of skipped. A reader that clipped a length,
 * skipped an odd record or guessed at a cut-off name could be shown one name while the server
 * behind it completes the handshake for another.
 *
 * Pure and incremental: the tunnel feeds it chunks as they arrive; each byte is examined once, so
 * a hello trickled a byte at a time costs no more than one sent whole.
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
  /** Received bytes not yet taken by a step, in arrival order. */
  private pending: Buffer[] = [];
  private pendingLength = 0;
  /** Handshake bytes gathered from record fragments so far (the message, and at most one record more). */
  private readonly handshake = new GrowableBuffer(HANDSHAKE_HEADER + MAX_HELLO_BYTES + MAX_FRAGMENT);
  private records = 0;
  /** Body length from the handshake header, once known. */
  private helloLength = -1;
  /** Bytes still to come of the record being read, or -1 while between records. */
  private recordLeft = -1;
  private result: HelloResult = { kind: 'incomplete' };

  private received = 0;

  /** Feeds the next bytes; returns the outcome so far (final once not `incomplete`). */
  push(chunk: Buffer): HelloResult {
    if (this.result.kind !== 'incomplete' || chunk.length === 0) return this.result;
    this.pending.push(chunk);
    this.pendingLength += chunk.length;
    this.received += chunk.length;
    this.result = this.advance();
    return this.result;
  }

  /** Bytes of the input that belong to the ClientHello's records; what was pushed beyond them follows it. */
  get consumed(): number {
    return this.received - this.pendingLength;
  }

  /** The client closed its side: whatever is incomplete now never will be. */
  end(): HelloResult {
    if (this.result.kind !== 'incomplete') return this.result;
    this.result =
      this.pendingLength === 0 && this.handshake.length === 0 && this.recordLeft === -1
        ? refused('sni_missing', 'the client sent nothing and closed')
        : malformed('the client closed before its ClientHello was complete');
    return this.result;
  }

  private advance(): HelloResult {
    for (;;) {
      if (this.recordLeft === -1) {
        // The first byte alone decides "not TLS at all", so a plain-text protocol is named at once.
        const first = this.peekFirst();
        if (first === undefined) return { kind: 'incomplete' };
        if (first !== CONTENT_HANDSHAKE) {
          const type = CONTENT_TYPES[first];
          if (type !== undefined) return malformed(`a TLS ${type} record came before the ClientHello was complete`);
          return this.handshake.length === 0
            ? refused('sni_missing', 'the tunnel does not start with TLS')
            : malformed(`a record of unknown type ${first} came before the ClientHello was complete`);
        }
        if (this.pendingLength < RECORD_HEADER) return { kind: 'incomplete' };
        const header = this.take(RECORD_HEADER);
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
      if (this.pendingLength === 0) return { kind: 'incomplete' };
      const fragment = this.take(Math.min(this.recordLeft, this.pendingLength));
      this.recordLeft -= fragment.length;
      // The cap holds the largest hello plus one record more, and the checks below refuse as
      // soon as the message is complete or announced too large; the test is a backstop.
      if (!this.handshake.append(fragment)) return malformed('the ClientHello is over its size limit');

      if (this.helloLength === -1 && this.handshake.length >= HANDSHAKE_HEADER) {
        const head = this.handshake.bytes();
        if (head[0] !== CLIENT_HELLO) return malformed(`the first handshake message is type ${head[0]}, not a ClientHello`);
        this.helloLength = head.readUIntBE(1, 3);
        if (this.helloLength > MAX_HELLO_BYTES) return malformed(`a ClientHello of ${this.helloLength} bytes is over the ${MAX_HELLO_BYTES}-byte limit`);
      }
      if (this.helloLength !== -1 && this.handshake.length >= HANDSHAKE_HEADER + this.helloLength) {
        // The record that completes the ClientHello must end with it: a client sends nothing else
        // in its first flight of handshake records.
        if (this.handshake.length !== HANDSHAKE_HEADER + this.helloLength || this.recordLeft > 0) {
          return malformed('more handshake data follows the ClientHello in its record');
        }
        return parseClientHello(this.handshake.bytes().subarray(HANDSHAKE_HEADER));
      }
      if (this.recordLeft === 0) this.recordLeft = -1;
    }
  }

  private peekFirst(): number | undefined {
    return this.pendingLength === 0 ? undefined : this.pending[0]![0];
  }

  /** Removes and returns the first `n` pending bytes (n ≤ pendingLength); copies only when they span chunks. */
  private take(n: number): Buffer {
    const first = this.pending[0]!;
    let out: Buffer;
    if (first.length > n) {
      out = first.subarray(0, n);
      this.pending[0] = first.subarray(n);
    } else if (first.length === n) {
      out = first;
      this.pending.shift();
    } else {
      out = Buffer.allocUnsafe(n);
      let at = 0;
      while (at < n) {
        const chunk = this.pending[0]!;
        const used = Math.min(chunk.length, n - at);
        chunk.copy(out, at, 0, used);
        at += used;
        if (used === chunk.length) this.pending.shift();
        else this.pending[0] = chunk.subarray(used);
      }
    }
    this.pendingLength -= n;
    return out;
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
