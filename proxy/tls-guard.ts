/**
 * What a `tls` tunnel lets through from the client, as a state machine over the bytes of both
 * directions. Pure: the tunnel feeds it the client's chunks and the server's, and forwards to the
 * server exactly what it returns.
 *
 * - `hello`: every client byte is held until the first ClientHello is complete and names the
 *   CONNECT host (client-hello.ts); only that hello's records are forwarded then.
 * - `watch`: until the server's first handshake message shows whether it is a TLS 1.3
 *   HelloRetryRequest, the client's further bytes are held too. A client has nothing to say
 *   before the server answers, except TLS 1.3 early data, which only waits one round trip here;
 *   but a second ClientHello sent ahead for another name would otherwise reach a server that then
 *   asks for a retry, and be read as the retry.
 * - `retry`: after a HelloRetryRequest the client's second ClientHello (sent in the clear, RFC 8446
 *   §4.1.2) must pass the same checks and name the same host; change_cipher_spec records, alerts
 *   and early data around it pass.
 * - `open`: the rest is encrypted (or the server asked for no retry): raw bytes from here on.
 *
 * Not covered: a TLS 1.2 renegotiation, whose ClientHello is encrypted (SECURITY.md).
 */
import { parseHostName } from '../policy/index.js';
import { ClientHelloReader, MAX_HELLO_BYTES, type HelloResult } from './client-hello.js';
import { GrowableBuffer } from './growable-buffer.js';
import { printable } from './log.js';
import { ServerHelloReader, type ServerHelloResult } from './server-hello.js';

export type HelloRefusalReason = 'sni_mismatch' | 'sni_missing' | 'tls_hello_malformed' | 'tls_hello_timeout';

export type GuardVerdict =
  | { readonly kind: 'allow' }
  /** `tls`: the client spoke TLS, so a TLS alert tells it why. */
  | { readonly kind: 'deny'; readonly reason: HelloRefusalReason; readonly detail: string; readonly tls: boolean };

export interface GuardStep {
  /** Client bytes to send to the server now, in order. */
  readonly forward: readonly Buffer[];
  /** Present once, when the guard decides. */
  readonly verdict?: GuardVerdict;
}

type Phase = 'hello' | 'watch' | 'retry' | 'open' | 'refused';

const RECORD_HEADER = 5;
const CONTENT_HANDSHAKE = 22;
/** Client bytes held while waiting on the server's first answer; the tunnel stops reading beyond. */
export const MAX_WATCH_BYTES = 16 * 1024;
/** Client bytes held while a ClientHello is incomplete: the largest hello and the records around it. */
const MAX_HELD_BYTES = 2 * MAX_HELLO_BYTES + MAX_WATCH_BYTES;

const NO_STEP: GuardStep = { forward: [] };

/** Splits bytes into pieces that each lie within one TLS record, tagged with its type. */
class RecordSplitter {
  private header = Buffer.alloc(0);
  private type = -1;
  private left = 0;

  feed(chunk: Buffer): { type: number; bytes: Buffer }[] {
    const out: { type: number; bytes: Buffer }[] = [];
    let at = 0;
    while (at < chunk.length) {
      if (this.left === 0) {
        const take = Math.min(RECORD_HEADER - this.header.length, chunk.length - at);
        this.header = Buffer.concat([this.header, chunk.subarray(at, at + take)]);
        at += take;
        if (this.header.length < RECORD_HEADER) break;
        this.type = this.header[0]!;
        this.left = this.header.readUInt16BE(3);
        out.push({ type: this.type, bytes: this.header });
        this.header = Buffer.alloc(0);
        continue;
      }
      const take = Math.min(this.left, chunk.length - at);
      out.push({ type: this.type, bytes: chunk.subarray(at, at + take) });
      this.left -= take;
      at += take;
    }
    return out;
  }

  /** A record header begun but not finished (bytes not yet handed out). */
  partial(): Buffer {
    return this.header;
  }
}

export class TlsGuard {
  private phase: Phase = 'hello';
  private reader = new ClientHelloReader();
  private held = new GrowableBuffer(MAX_HELD_BYTES);
  private readonly server = new ServerHelloReader();
  private serverAnswer: ServerHelloResult = 'incomplete';
  private readonly splitter = new RecordSplitter();
  /** In `retry`: everything from the first record of the second ClientHello on is held. */
  private holding = false;
  /** The client closed its side (while the server had not answered, that is no refusal yet). */
  private ended = false;
  /** The server name of the first ClientHello as sent, for the log. */
  serverName: Buffer | undefined;

  constructor(private readonly host: string) {}

  /** Whether a ClientHello is due now (the hello deadline runs). */
  get awaitingHello(): boolean {
    return this.phase === 'hello' || this.phase === 'retry';
  }

  /** Whether the guard still needs to see the bytes (false once open or refused). */
  get inspecting(): boolean {
    return this.phase === 'hello' || this.phase === 'watch' || this.phase === 'retry';
  }

  /** Whether the tunnel should stop reading the client until the server has answered. */
  get full(): boolean {
    return this.phase === 'watch' && this.held.length >= MAX_WATCH_BYTES;
  }

  fromClient(chunk: Buffer): GuardStep {
    switch (this.phase) {
      case 'hello':
        return this.firstHello(chunk);
      case 'watch':
        return this.hold(chunk) ? NO_STEP : this.refuse(tooMuch());
      case 'retry':
        return this.secondHello(chunk);
      case 'open':
        return { forward: [chunk] };
      default:
        return NO_STEP;
    }
  }

  /** The server's bytes, seen on their way to the client, from its first byte on. */
  fromServer(chunk: Buffer): GuardStep {
    if (this.serverAnswer !== 'incomplete' || !this.inspecting) return NO_STEP;
    this.serverAnswer = this.server.push(chunk);
    return this.phase === 'watch' ? this.afterServerAnswer() : NO_STEP;
  }

  /** The client closed its side. */
  clientEnded(): GuardStep {
    this.ended = true;
    if (this.phase === 'retry') {
      return this.refuse({ kind: 'deny', reason: 'tls_hello_malformed', detail: 'the client closed before its second ClientHello was complete', tls: true });
    }
    return this.awaitingHello ? this.refuse(this.verdictOf(this.reader.end())) : NO_STEP;
  }

  /** The hello deadline passed. */
  timedOut(): GuardStep {
    if (!this.awaitingHello) return NO_STEP;
    return this.refuse({ kind: 'deny', reason: 'tls_hello_timeout', detail: 'no complete TLS ClientHello arrived in time', tls: this.phase === 'retry' });
  }

  private firstHello(chunk: Buffer): GuardStep {
    if (!this.hold(chunk)) return this.refuse(tooMuch());
    const result = this.reader.push(chunk);
    if (result.kind === 'incomplete') return NO_STEP;
    if (result.kind === 'hello') this.serverName = result.serverName;
    const verdict = this.verdictOf(result);
    if (verdict.kind === 'deny') return this.refuse(verdict);
    // Only the hello's own records go now; what followed it waits for the server's answer.
    const all = this.take();
    this.phase = 'watch';
    this.hold(all.subarray(this.reader.consumed));
    const first = { forward: [all.subarray(0, this.reader.consumed)] };
    const next = this.afterServerAnswer();
    return { forward: [...first.forward, ...next.forward], ...(next.verdict ? { verdict: next.verdict } : {}) };
  }

  /** In `watch`: acts on the server's answer, once it is known. */
  private afterServerAnswer(): GuardStep {
    if (this.serverAnswer === 'incomplete') return NO_STEP;
    const held = this.take();
    if (this.serverAnswer === 'other') return this.open(held.length > 0 ? [held] : []);
    this.phase = 'retry';
    this.reader = new ClientHelloReader();
    const step = held.length > 0 ? this.secondHello(held) : NO_STEP;
    // A client that already closed cannot send the rest of its second hello: refused now, not at
    // the hello deadline.
    return this.ended && this.phase === 'retry' ? this.clientEnded() : step;
  }

  private secondHello(chunk: Buffer): GuardStep {
    const forward: Buffer[] = [];
    const pieces = this.splitter.feed(chunk);
    for (let i = 0; i < pieces.length; i++) {
      const piece = pieces[i]!;
      if (!this.holding && piece.type !== CONTENT_HANDSHAKE) {
        forward.push(piece.bytes);
        continue;
      }
      this.holding = true;
      if (!this.hold(piece.bytes)) return this.refuse(tooMuch());
      if (piece.type !== CONTENT_HANDSHAKE) continue;
      const result = this.reader.push(piece.bytes);
      if (result.kind === 'incomplete') continue;
      const verdict = this.verdictOf(result);
      if (verdict.kind === 'deny') return this.refuse(verdict);
      // Past the second hello: everything held, the rest of this chunk, and a record header begun.
      forward.push(this.take(), ...pieces.slice(i + 1).map((p) => p.bytes), this.splitter.partial());
      return this.open(forward.filter((b) => b.length > 0));
    }
    return { forward };
  }

  private verdictOf(result: HelloResult): GuardVerdict {
    if (result.kind === 'incomplete') return { kind: 'deny', reason: 'tls_hello_malformed', detail: 'incomplete ClientHello', tls: true };
    if (result.kind === 'refused') return { kind: 'deny', reason: result.reason, detail: result.detail, tls: result.reason === 'tls_hello_malformed' };
    if (result.serverName === undefined) return { kind: 'deny', reason: 'sni_missing', detail: 'the TLS ClientHello carries no server name', tls: true };
    // Normalised exactly as the CONNECT host was, so case and one trailing dot agree and nothing
    // else can.
    const parsed = parseHostName(result.serverName.toString('latin1'));
    if (parsed.ok && parsed.name === this.host) return { kind: 'allow' };
    const which = this.phase === 'retry' ? 'second ClientHello\'s ' : '';
    return { kind: 'deny', reason: 'sni_mismatch', detail: `the ${which}TLS server name "${printable(result.serverName)}" is not the CONNECT host ${this.host}`, tls: true };
  }

  private open(forward: Buffer[]): GuardStep {
    this.phase = 'open';
    return { forward, verdict: { kind: 'allow' } };
  }

  private refuse(verdict: GuardVerdict): GuardStep {
    this.phase = 'refused';
    this.held = new GrowableBuffer(0);
    return { forward: [], verdict };
  }

  private hold(bytes: Buffer): boolean {
    return bytes.length === 0 || this.held.append(bytes);
  }

  /** The held bytes (a view that stays valid: the hold starts again with a new buffer). */
  private take(): Buffer {
    const bytes = this.held.bytes();
    this.held = new GrowableBuffer(MAX_HELD_BYTES);
    return bytes;
  }
}

function tooMuch(): GuardVerdict {
  return { kind: 'deny', reason: 'tls_hello_malformed', detail: 'too many bytes before the TLS handshake could be checked', tls: true };
}
