/**
 * An upstream's HTTP/1.1 responses, read strictly from the bytes of one connection (RFC 9112):
 * the status line and field lines of each head, then its body as the head frames it. Pure and
 * incremental: bytes go in by `feed`, events come out by `next`, one at a time, so that a reader
 * that cannot take more body stops asking and the rest waits here.
 *
 * What it refuses, rather than guess (each an `error` event; the connection is then not used
 * again): a line ended by a bare CR or LF, a folded field line, a field name that is not a token,
 * a status that is not three digits, 101 (nothing asked to switch protocols), a transfer coding
 * other than chunked alone, Transfer-Encoding beside Content-Length or in an HTTP/1.0 response, a
 * Content-Length that is not one run of digits (or two fields of it that differ), a chunk-size
 * line or chunk end that is not exact, and a head or trailer section past `maxHeadBytes` or
 * MAX_FIELD_LINES. Interim 1xx heads are read and skipped, MAX_INTERIM_HEADS of them at most. A
 * response with neither framing runs to the close of the connection. Bytes after a complete
 * response are never part of it: they end `keepAlive`, and the caller closes the connection.
 */
import { connectionCloses, fieldOf, framingOf } from './h1-fields.js';

/** What `next` found in what was fed. */
export type ResponseEvent =
  /** The final head: fields alternate names and values, as the bytes arrived (one byte a character). */
  | { readonly kind: 'head'; readonly status: number; readonly reason: string; readonly fields: readonly string[] }
  | { readonly kind: 'data'; readonly chunk: Buffer }
  /** The response is complete; `keepAlive`: the connection may carry another request. */
  | { readonly kind: 'end'; readonly keepAlive: boolean }
  | { readonly kind: 'error'; readonly detail: string };

type State =
  | { readonly at: 'idle' }
  | { readonly at: 'head' }
  | { readonly at: 'length'; left: number }
  | { readonly at: 'chunk-size' }
  | { readonly at: 'chunk-data'; left: number }
  | { readonly at: 'chunk-end' }
  | { readonly at: 'trailers'; used: number; lines: number }
  | { readonly at: 'to-close' }
  | { readonly at: 'failed' };

const STATUS_LINE = /^HTTP\/1\.([01]) ([0-9]{3})(?: (.*))?$/s;
/** A chunk-size (at most 13 hex digits: under 2^52, exact as a number) and any chunk extensions. */
const CHUNK_SIZE = /^([0-9A-Fa-f]{1,13})[\t ]*(?:;[\t\x20-\x7e\x80-\xff]*)?$/;
/** Longest chunk-size line read (with its extensions). */
const MAX_CHUNK_LINE = 4096;
/**
 * Most field lines of a head or a trailer section, and most interim (1xx) heads before a final
 * one. Each field costs the reader a split and a check (a 64 KiB head of 16,000 tiny fields took
 * 9 ms of the event loop every client shares), and interim heads had no end but the head
 * deadline: an upstream could go on sending them for that long. Servers send a few of each.
 */
export const MAX_FIELD_LINES = 1_000;
export const MAX_INTERIM_HEADS = 32;
/** A step of reading that found no event but can go on. */
const AGAIN = Symbol('again');
/** Nothing buffered (a Buffer of no bytes cannot be written into, so one serves every parser). */
const EMPTY = Buffer.alloc(0);
const HEAD_END = Buffer.from('\r\n\r\n', 'latin1');
/**
 * Whether a head's text holds a CR not followed by LF, or an LF not after a CR. A scan from one to
 * the next of each (a line apiece): a regular expression with a lookbehind tried both at every
 * byte, and took half again as long on a head of thirty fields.
 */
function bareCrOrLf(text: string): boolean {
  for (let lf = text.indexOf('\n'); lf !== -1; lf = text.indexOf('\n', lf + 1)) if (lf === 0 || text.charCodeAt(lf - 1) !== 0x0d) return true;
  for (let cr = text.indexOf('\r'); cr !== -1; cr = text.indexOf('\r', cr + 1)) if (text.charCodeAt(cr + 1) !== 0x0a) return true;
  return false;
}

export class ResponseParser {
  private buffered: Buffer = EMPTY;
  /** How many of `buffered`'s first bytes were searched already for what ends a head or a line. */
  private scanned = 0;
  /** What `buffered` grows in (its own memory, never the shared pool's), while a head or line arrives in pieces. */
  private room: Buffer | undefined;
  private state: State = { at: 'idle' };
  private head = false;
  private keepAlive = true;
  /** Interim heads read for the response under way. */
  private interim = 0;
  private closed = false;

  constructor(private readonly maxHeadBytes: number) {}

  /** A request was sent: its response comes next. `head`: the request's method is HEAD (no body). */
  expect(head: boolean): void {
    this.head = head;
    this.keepAlive = true;
    this.interim = 0;
    if (this.state.at === 'idle') this.state = { at: 'head' };
  }

  /** Whether a response is being read (its head, or its body). */
  get busy(): boolean {
    return this.state.at !== 'idle' && this.state.at !== 'failed';
  }

  /**
   * More bytes. A head trickling in a byte at a time is neither copied whole nor searched whole
   * again for each byte: `buffered` grows in room twice its size, and searches go on from `scanned`.
   */
  feed(bytes: Buffer): void {
    if (this.buffered.length === 0) {
      this.buffered = bytes;
      return;
    }
    const used = this.buffered.length + bytes.length;
    const { room } = this;
    const start = room !== undefined && this.buffered.buffer === room.buffer ? this.buffered.byteOffset - room.byteOffset : -1;
    if (room !== undefined && start >= 0 && start + used <= room.length) {
      bytes.copy(room, start + this.buffered.length);
      this.buffered = room.subarray(start, start + used);
      return;
    }
    const grown = Buffer.alloc(Math.max(used * 2, 4096));
    this.buffered.copy(grown, 0);
    bytes.copy(grown, this.buffered.length);
    this.room = grown;
    this.buffered = grown.subarray(0, used);
  }

  /** The connection ended (the upstream closed): a body that runs to the close is complete. */
  close(): void {
    this.closed = true;
  }

  /** The next event, or undefined until more bytes (or the close) come. */
  next(): ResponseEvent | undefined {
    // A loop, not a call per step: a buffer of a thousand trailer lines or interim heads is read
    // in one go, without a frame each on the stack.
    for (;;) {
      const event = this.step();
      if (event !== AGAIN) return event;
    }
  }

  /** What one step of reading found: an event, nothing yet, or AGAIN (a step was taken without an event). */
  private step(): ResponseEvent | undefined | typeof AGAIN {
    const { state } = this;
    switch (state.at) {
      case 'idle':
        return this.buffered.length > 0 ? this.fail('the upstream sent bytes no request asked for') : undefined;
      case 'failed':
        return undefined;
      case 'head':
        return this.readHead();
      case 'length': {
        if (state.left === 0) return this.end();
        const chunk = this.take(state.left);
        if (chunk === undefined) return this.closed ? this.fail('the upstream closed before the body was complete (Content-Length)') : undefined;
        state.left -= chunk.length;
        return { kind: 'data', chunk };
      }
      case 'chunk-size':
        return this.readChunkSize();
      case 'chunk-data': {
        const chunk = this.take(state.left);
        if (chunk === undefined) return this.closed ? this.fail('the upstream closed inside a chunk') : undefined;
        state.left -= chunk.length;
        if (state.left === 0) this.state = { at: 'chunk-end' };
        return { kind: 'data', chunk };
      }
      case 'chunk-end': {
        if (this.buffered.length < 2) return this.closed ? this.fail('the upstream closed inside a chunk') : undefined;
        if (this.buffered[0] !== 0x0d || this.buffered[1] !== 0x0a) return this.fail('a chunk is not followed by CRLF');
        this.consume(2);
        this.state = { at: 'chunk-size' };
        return AGAIN;
      }
      case 'trailers':
        return this.readTrailers(state);
      case 'to-close': {
        const chunk = this.take(Number.MAX_SAFE_INTEGER);
        if (chunk !== undefined) return { kind: 'data', chunk };
        return this.closed ? this.end() : undefined;
      }
    }
  }

  private take(most: number): Buffer | undefined {
    if (this.buffered.length === 0) return undefined;
    const chunk = this.buffered.length <= most ? this.buffered : this.buffered.subarray(0, most);
    this.consume(Math.min(most, this.buffered.length));
    return chunk;
  }

  /** One CRLF-ended line, or undefined while it is incomplete; a bare CR or LF fails. */
  private line(most: number, what: string): string | undefined | ResponseEvent {
    const lf = this.buffered.indexOf(0x0a, this.scanned);
    if (lf === -1) {
      if (this.buffered.length > most) return this.fail(`${what} is longer than ${most} bytes`);
      this.scanned = this.buffered.length;
      return this.closedEarly(what);
    }
    if (lf > most) return this.fail(`${what} is longer than ${most} bytes`);
    if (lf === 0 || this.buffered[lf - 1] !== 0x0d) return this.fail(`${what} ends in a bare LF`);
    const text = this.buffered.toString('latin1', 0, lf - 1);
    if (text.includes('\r')) return this.fail(`${what} holds a bare CR`);
    this.consume(lf + 1);
    return text;
  }

  private consume(bytes: number): void {
    this.buffered = bytes === this.buffered.length ? EMPTY : this.buffered.subarray(bytes);
    this.scanned = 0;
  }

  private closedEarly(what: string): ResponseEvent | undefined {
    return this.closed ? this.fail(`the upstream closed before ${what}`) : undefined;
  }

  private readHead(): ResponseEvent | undefined | typeof AGAIN {
    const end = this.buffered.indexOf(HEAD_END, Math.max(0, this.scanned - 3));
    if (end === -1) {
      if (this.buffered.length > this.maxHeadBytes) return this.fail(`the response head is larger than ${this.maxHeadBytes} bytes`);
      // Every LF that came so far ends a line with CR, or the head is refused now, not at its end.
      for (let lf = this.buffered.indexOf(0x0a, this.scanned); lf !== -1; lf = this.buffered.indexOf(0x0a, lf + 1)) {
        if (lf === 0 || this.buffered[lf - 1] !== 0x0d) return this.fail('the response head holds a bare LF');
      }
      this.scanned = this.buffered.length;
      return this.closedEarly('a complete response head');
    }
    if (end + 4 > this.maxHeadBytes) return this.fail(`the response head is larger than ${this.maxHeadBytes} bytes`);
    const text = this.buffered.toString('latin1', 0, end);
    this.consume(end + 4);
    if (bareCrOrLf(text)) return this.fail('the response head holds a bare CR or LF');
    const lines = text.split('\r\n');
    if (lines.length - 1 > MAX_FIELD_LINES) return this.fail(`the response head has more than ${MAX_FIELD_LINES} field lines`);
    const status = STATUS_LINE.exec(lines[0]!);
    if (status === null) return this.fail('the status line is not HTTP/1.x, a three-digit status and a reason');
    const code = Number(status[2]);
    const fields: string[] = [];
    for (let i = 1; i < lines.length; i++) {
      const field = fieldOf(lines[i]!);
      if (typeof field === 'string') return this.fail(field);
      fields.push(field[0], field[1]);
    }
    if (code < 100 || code > 599) return this.fail(`status ${code} is not an HTTP status`);
    if (code === 101) return this.fail('101 Switching Protocols, which no request asked for');
    // Interim: skipped; the final head follows.
    if (code < 200) return ++this.interim > MAX_INTERIM_HEADS ? this.fail(`more than ${MAX_INTERIM_HEADS} interim (1xx) responses before a final one`) : AGAIN;
    const framing = framingOf(fields);
    if (typeof framing === 'object') return this.fail(framing.bad);
    // RFC 9112 §6.1: an HTTP/1.0 message's Transfer-Encoding is faulty framing (1.0 has no chunks).
    if (framing === 'chunked' && status[1] === '0') return this.fail('an HTTP/1.0 response with Transfer-Encoding');
    if (status[1] === '0' || connectionCloses(fields)) this.keepAlive = false;
    if (this.head || code === 204 || code === 304) this.state = { at: 'length', left: 0 };
    else if (framing === 'chunked') this.state = { at: 'chunk-size' };
    else if (framing === 'close') {
      this.keepAlive = false;
      this.state = { at: 'to-close' };
    } else this.state = { at: 'length', left: framing };
    return { kind: 'head', status: code, reason: status[3] ?? '', fields };
  }

  private readChunkSize(): ResponseEvent | undefined | typeof AGAIN {
    const line = this.line(MAX_CHUNK_LINE, 'a chunk-size line');
    if (typeof line !== 'string') return line;
    const size = CHUNK_SIZE.exec(line);
    if (size === null) return this.fail('a chunk-size line is not hex digits and extensions');
    const left = parseInt(size[1]!, 16);
    this.state = left === 0 ? { at: 'trailers', used: 0, lines: 0 } : { at: 'chunk-data', left };
    return AGAIN;
  }

  private readTrailers(state: { used: number; lines: number }): ResponseEvent | undefined | typeof AGAIN {
    const line = this.line(this.maxHeadBytes - state.used, 'the trailer section');
    if (typeof line !== 'string') return line;
    state.used += line.length + 2;
    if (line === '') return this.end();
    if (++state.lines > MAX_FIELD_LINES) return this.fail(`the trailer section has more than ${MAX_FIELD_LINES} field lines`);
    const field = fieldOf(line);
    return typeof field === 'string' ? this.fail(`a trailer: ${field}`) : AGAIN;
  }

  private end(): ResponseEvent {
    const keepAlive = this.keepAlive && this.buffered.length === 0 && !this.closed;
    this.state = keepAlive ? { at: 'idle' } : { at: 'failed' };
    this.consume(this.buffered.length);
    return { kind: 'end', keepAlive };
  }

  private fail(detail: string): ResponseEvent {
    this.state = { at: 'failed' };
    this.consume(this.buffered.length);
    return { kind: 'error', detail };
  }
}
