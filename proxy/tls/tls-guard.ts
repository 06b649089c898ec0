/**
 * What a `tls` tunnel lets through, as a state machine over the bytes of both directions. Pure:
 * the tunnel feeds it the client's chunks and the server's, forwards to the server exactly what it
 * returns as `forward` and to the client what it returns as `deliver`, until it decides.
 *
 * - `hello`: every client byte is held until the first ClientHello is complete and names the
 *   CONNECT host (client-hello.ts); only that hello's records are forwarded then. A server that
 *   speaks now is refused (`tls_upstream_not_tls`): a TLS server waits for the ClientHello, and
 *   one that speaks first (an SMTP banner) is another protocol, which would otherwise be taken for
 *   the answer to a hello it never got.
 * - `watch`: until the server's first handshake message shows whether it is a TLS 1.3
 *   HelloRetryRequest, the client's further bytes are held too. A client has nothing to say
 *   before the server answers, except TLS 1.3 early data, which only waits one round trip here;
 *   but a second ClientHello sent ahead for another name would otherwise reach a server that then
 *   asks for a retry, and be read as the retry. Nothing of the server reaches the client before
 *   its first record has been judged TLS (server-hello.ts); an answer in clear is refused, and
 *   the plain text a client pipelined behind its hello never reaches that server.
 * - `retry`: after a HelloRetryRequest the client's second ClientHello (sent in the clear, RFC 8446
 *   §4.1.2) must pass the same checks and name the same host; change_cipher_spec records, alerts
 *   and early data before it pass, and nothing may come between its records (RFC 8446 §5.1).
 * - `open`: the rest is encrypted (or the server asked for no retry): raw bytes from here on.
 *
 * What it holds meanwhile (`held`) is what the tunnel charges to the memory budget; each byte is
 * held once.
 *
 * Not covered: a TLS 1.2 renegotiation, whose ClientHello is encrypted (SECURITY.md).
 */
import { parseHostName } from '../../policy/index.js';
import { ClientHelloReader, MAX_HELLO_BYTES, type HelloResult } from './client-hello.js';
import { GrowableBuffer } from './growable-buffer.js';
import { printable } from '../record/index.js';
import { ServerHelloReader, type ServerHelloResult } from './server-hello.js';

export type HelloRefusalReason = 'sni_mismatch' | 'sni_missing' | 'tls_hello_malformed' | 'tls_hello_timeout' | 'tls_upstream_not_tls';

export type GuardVerdict =
  | { readonly kind: 'allow' }
  /** `tls`: the client spoke TLS, so a TLS alert tells it why. */
  | { readonly kind: 'deny'; readonly reason: HelloRefusalReason; readonly detail: string; readonly tls: boolean };

export interface GuardStep {
  /** Client bytes to send to the server now, in order. */
  readonly forward: readonly Buffer[];
  /** Server bytes to send to the client now, in order (held until the server's first record was judged). */
  readonly deliver?: readonly Buffer[];
  /** Present once, when the guard decides. */
  readonly verdict?: GuardVerdict;
}

type Phase = 'hello' | 'watch' | 'retry' | 'open' | 'refused';

const CONTENT_HANDSHAKE = 22;
const RECORD_HEADER = 5;
/** Client bytes held while waiting on the server's first answer; the tunnel stops reading beyond. */
export const MAX_WATCH_BYTES = 16 * 1024;
/** Client bytes held while waiting on the server, at most: reads already under way when the tunnel paused. */
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
}

export class TlsGuard {
  private phase: Phase = 'hello';
  /** The ClientHello being read, and its bytes (the first; in `retry`, the second once it began). */
  private reader: ClientHelloReader | undefined = new ClientHelloReader();
  /** In `watch`: the client's bytes after its hello. */
  private watch: GrowableBuffer | undefined;
  private readonly server = new ServerHelloReader();
  private serverAnswer: ServerHelloResult = 'incomplete';
  /** The server's bytes until its first record has been judged. */
  private serverHeld: Buffer[] = [];
  private serverHeldLength = 0;
  private readonly splitter = new RecordSplitter();
  /** In `retry`: the second ClientHello has begun; every byte from its first record on goes to the reader. */
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

  /** Whether the guard still needs to see the client's bytes (false once open or refused). */
  get inspecting(): boolean {
    return this.phase === 'hello' || this.phase === 'watch' || this.phase === 'retry';
  }

  /** Whether the server's first record has been judged TLS: its bytes may flow to the client unseen. */
  get serverJudged(): boolean {
    return this.serverAnswer === 'hello_retry' || this.serverAnswer === 'other';
  }

  /** Whether the tunnel should stop reading the client until the server has answered. */
  get full(): boolean {
    return this.phase === 'watch' && (this.watch?.length ?? 0) >= MAX_WATCH_BYTES;
  }

  /** Bytes the guard holds now (allocated), of both directions: what the memory budget charges. */
  get held(): number {
    return (this.reader?.held ?? 0) + (this.watch?.capacity ?? 0) + this.serverHeldLength;
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

  /** The server's bytes, until its first record has been judged (then they flow unseen). */
  fromServer(chunk: Buffer): GuardStep {
    if (!this.inspecting || this.serverAnswer !== 'incomplete') return NO_STEP;
    if (this.phase === 'hello') {
      return this.refuse({ kind: 'deny', reason: 'tls_upstream_not_tls', detail: 'the upstream spoke before the client\'s ClientHello had been checked and forwarded (a TLS server waits for it)', tls: true });
    }
    this.serverHeld.push(chunk);
    this.serverHeldLength += chunk.length;
    this.serverAnswer = this.server.push(chunk);
    if (this.serverAnswer === 'incomplete') return NO_STEP;
    if (this.serverAnswer === 'not_tls') return this.refuse({ kind: 'deny', reason: 'tls_upstream_not_tls', detail: this.server.problem ?? 'the upstream did not answer with TLS', tls: true });
    const deliver = this.serverHeld;
    this.serverHeld = [];
    this.serverHeldLength = 0;
    return { ...this.afterServerAnswer(), deliver };
  }

  /** The client closed its side. */
  clientEnded(): GuardStep {
    this.ended = true;
    if (this.phase === 'retry') {
      return this.refuse({ kind: 'deny', reason: 'tls_hello_malformed', detail: 'the client closed before its second ClientHello was complete', tls: true });
    }
    return this.phase === 'hello' ? this.refuse(this.verdictOf(this.reader!.end())) : NO_STEP;
  }

  /** The hello deadline passed. */
  timedOut(): GuardStep {
    if (!this.awaitingHello) return NO_STEP;
    return this.refuse({ kind: 'deny', reason: 'tls_hello_timeout', detail: 'no complete TLS ClientHello arrived in time', tls: this.phase === 'retry' });
  }

  private firstHello(chunk: Buffer): GuardStep {
    const reader = this.reader!;
    const result = reader.push(chunk);
    if (result.kind === 'incomplete') return NO_STEP;
    if (result.kind === 'hello') this.serverName = result.serverName;
    const verdict = this.verdictOf(result);
    if (verdict.kind === 'deny') return this.refuse(verdict);
    // Only the hello's own records go now; what followed it waits for the server's answer.
    const all = reader.bytes();
    this.reader = undefined;
    this.phase = 'watch';
    this.watch = new GrowableBuffer(MAX_HELD_BYTES);
    this.hold(all.subarray(reader.consumed));
    return { forward: [all.subarray(0, reader.consumed)] };
  }

  /** In `watch`: acts on the server's answer, now known. */
  private afterServerAnswer(): GuardStep {
    const held = this.watch?.bytes() ?? Buffer.alloc(0);
    this.watch = undefined;
    if (this.serverAnswer === 'other') return this.open(held.length > 0 ? [held] : []);
    this.phase = 'retry';
    this.reader = new ClientHelloReader();
    const step = held.length > 0 ? this.secondHello(held) : NO_STEP;
    // A client that already closed cannot send the rest of its second hello: refused now, not at
    // the hello deadline.
    return this.ended && this.phase === 'retry' ? this.clientEnded() : step;
  }

  private secondHello(chunk: Buffer): GuardStep {
    if (this.holding) return this.pushSecond(chunk);
    const forward: Buffer[] = [];
    const pieces = this.splitter.feed(chunk);
    for (let i = 0; i < pieces.length; i++) {
      if (pieces[i]!.type !== CONTENT_HANDSHAKE) {
        forward.push(pieces[i]!.bytes);
        continue;
      }
      // The header of the second hello's first record: from here on every byte is the reader's.
      this.holding = true;
      const step = this.pushSecond(Buffer.concat(pieces.slice(i).map((p) => p.bytes)));
      // A refusal drops the whole chunk, the records before the hello too.
      if (step.verdict?.kind === 'deny') return step;
      return { forward: [...forward, ...step.forward], ...(step.verdict ? { verdict: step.verdict } : {}) };
    }
    return { forward };
  }

  private pushSecond(bytes: Buffer): GuardStep {
    const result = this.reader!.push(bytes);
    if (result.kind === 'incomplete') return NO_STEP;
    const verdict = this.verdictOf(result);
    if (verdict.kind === 'deny') return this.refuse(verdict);
    // The second hello's records, and everything that followed them.
    return this.open([this.reader!.bytes()]);
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
    this.reader = undefined;
    return { forward, verdict: { kind: 'allow' } };
  }

  private refuse(verdict: GuardVerdict): GuardStep {
    this.phase = 'refused';
    this.reader = undefined;
    this.watch = undefined;
    this.serverHeld = [];
    this.serverHeldLength = 0;
    return { forward: [], verdict };
  }

  private hold(bytes: Buffer): boolean {
    return bytes.length === 0 || this.watch!.append(bytes);
  }
}

function tooMuch(): GuardVerdict {
  return { kind: 'deny', reason: 'tls_hello_malformed', detail: 'too many bytes before the TLS handshake could be checked', tls: true };
}
