/**
 * One upstream HTTP/1.1 connection of an inspected host's pool (h1-pool.ts): it writes a request,
 * frames its body (by the Content-Length given, else chunked), and reads its response strictly
 * (h1-response.ts), one request at a time. The handler is the exchange's (http/exchange.ts), called
 * as undici calls it: onConnect with the request's abort, onHeaders for the final head (with a
 * resume for a paused body), onData for each piece of body until it returns false, then
 * onComplete, or onError instead, exactly once.
 *
 * A connection is handed back for another request only when its response was complete and framed,
 * nothing followed it, its request was sent whole, and neither side asked to close. Anything else
 * (a malformed response, bytes no request asked for, a timeout, an abort) closes it.
 */
import type net from 'node:net';
import { declaredLength, requestHead, UpstreamHttpError, type PooledRequest, type UpstreamHandler } from './h1-request.js';
import { keepAliveHint } from './h1-fields.js';
import { ResponseParser } from './h1-response.js';

export interface ConnectionOptions {
  /** Longest silence of the upstream while a response is awaited or read. */
  readonly idleTimeoutMs: number;
  readonly maxHeaderBytes: number;
  /** Longest an idle connection is kept for another request; 0: one request per connection. */
  readonly keepAliveMs: number;
}

interface InFlight {
  readonly handler: UpstreamHandler;
  /** Set once onComplete or onError was called, or the request was given up. */
  done: boolean;
  paused: boolean;
  sent: boolean;
  /** The body waits for the upstream to read what was written of it (a drain). */
  blocked: boolean;
  headSeen: boolean;
  /** What the upstream's Keep-Alive field allows an idle connection, if it says. */
  keepAliveMs?: number;
  unbody?: () => void;
}

export class H1Connection {
  private readonly parser: ResponseParser;
  private active: InFlight | undefined;
  private error: Error | undefined;
  /** The upstream ended the connection (or it closed). */
  private peerEnded = false;

  constructor(
    private readonly socket: net.Socket,
    private readonly options: ConnectionOptions,
    /** Called once a request is over: with true when the connection can take another. */
    private readonly released: (connection: H1Connection, reusable: boolean) => void,
  ) {
    this.parser = new ResponseParser(options.maxHeaderBytes);
    socket.on('data', this.read);
    socket.on('end', this.ended);
    socket.on('error', (err: Error) => {
      this.error ??= err;
      socket.destroy();
    });
    socket.on('close', this.closed);
    socket.on('timeout', this.timedOut);
  }

  /** Whether the connection can still carry a request. */
  get usable(): boolean {
    return this.active === undefined && !this.peerEnded && !this.socket.destroyed && this.socket.writable;
  }

  destroy(): void {
    this.socket.destroy();
  }

  send(request: PooledRequest, handler: UpstreamHandler): void {
    const flight: InFlight = { handler, done: false, paused: false, sent: false, blocked: false, headSeen: false };
    this.active = flight;
    try {
      handler.onConnect((err) => {
        if (this.active === flight) this.fail(err ?? new UpstreamHttpError('upstream_failed', 'the request was given up'));
      });
    } catch (err) {
      return this.fail(err as Error);
    }
    if (flight.done) return;
    const head = requestHead(request, this.options.keepAliveMs === 0);
    if (head instanceof Error) return this.fail(head);
    this.parser.expect(request.method === 'HEAD');
    const { body } = request;
    if (body === null) {
      this.socket.write(`${head}\r\n`, 'latin1');
      return this.bodySent(flight);
    }
    // No idle timer while the body is read from the client (bodySent, or a blocked write, starts it).
    this.socket.setTimeout(0);
    const declared = declaredLength(request.headers);
    // Latin-1: a field's bytes go out as they came in (Node's parser read them a byte a character).
    this.socket.write(declared === undefined ? `${head}transfer-encoding: chunked\r\n\r\n` : `${head}\r\n`, 'latin1');
    this.sendBody(flight, body, declared);
  }

  private sendBody(flight: InFlight, body: NodeJS.ReadableStream, declared: number | undefined): void {
    const { socket } = this;
    let written = 0;
    const drained = (): void => {
      flight.blocked = false;
      this.time(flight);
      body.resume();
    };
    const data = (chunk: Buffer | string): void => {
      if (flight.done) return;
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      written += bytes.length;
      if (declared !== undefined && written > declared) return this.fail(new UpstreamHttpError('upstream_failed', 'the request body is longer than its Content-Length'));
      if (bytes.length === 0) return;
      let more: boolean;
      if (declared !== undefined) more = socket.write(bytes);
      else {
        // All three, whatever the first returns (each is queued), as one write.
        socket.cork();
        socket.write(`${bytes.length.toString(16)}\r\n`, 'latin1');
        socket.write(bytes);
        more = socket.write('\r\n', 'latin1');
        socket.uncork();
      }
      // One drain awaited at a time: a body that emits again before its pause takes hold adds none.
      if (!more && !flight.blocked) {
        body.pause();
        socket.once('drain', drained);
        // An upstream that reads none of the body (and answers nothing) is timed as a silent one.
        flight.blocked = true;
        this.time(flight);
      }
    };
    const end = (): void => {
      unbody();
      if (flight.done) return;
      if (declared !== undefined && written !== declared) return this.fail(new UpstreamHttpError('upstream_failed', 'the request body is shorter than its Content-Length'));
      if (declared === undefined) socket.write('0\r\n\r\n', 'latin1');
      this.bodySent(flight);
    };
    const failed = (err: Error): void => {
      unbody();
      if (this.active === flight) this.fail(err);
    };
    let unbodied = false;
    const unbody = (): void => {
      if (unbodied) return;
      unbodied = true;
      body.removeListener('data', data);
      body.removeListener('end', end);
      body.removeListener('error', failed);
      socket.removeListener('drain', drained);
      // The request is over (answered before its body was all sent, or failed): the body's later
      // failure (its client going) is nobody's, and must not end the process as an unheard error.
      body.on('error', ignore);
    };
    flight.unbody = unbody;
    body.on('data', data);
    body.once('end', end);
    body.once('error', failed);
  }

  /** The request is all written: the upstream's silence is timed from here. */
  private bodySent(flight: InFlight): void {
    flight.sent = true;
    this.time(flight);
  }

  /**
   * The upstream's silence is timed while its response is awaited or read (the request all sent),
   * or while the body waits for it to read more: never while the reader is paused, nor while the
   * body waits for the client.
   */
  private time(flight: InFlight): void {
    this.socket.setTimeout(!flight.paused && (flight.sent || flight.blocked) ? this.options.idleTimeoutMs : 0);
  }

  private readonly read = (chunk: Buffer): void => {
    // Bytes while no request is in flight answer nothing asked: the connection is not used again.
    if (this.active === undefined) return void this.socket.destroy();
    this.parser.feed(chunk);
    this.pump();
  };

  private readonly ended = (): void => {
    this.peerEnded = true;
    this.parser.close();
    if (this.active === undefined) return void this.socket.destroy();
    this.pump();
  };

  private readonly closed = (): void => {
    this.peerEnded = true;
    // Closed by an error (a reset, a TLS record that did not decrypt): a body that runs to the
    // close is cut, not complete.
    if (this.active !== undefined && this.error === undefined) {
      this.parser.close();
      this.pump();
    }
    this.fail(this.error ?? new UpstreamHttpError('upstream_failed', 'the upstream closed the connection before its response was complete'));
    this.released(this, false);
  };

  private readonly timedOut = (): void => {
    const flight = this.active;
    if (flight === undefined) return void this.socket.destroy();
    this.fail(new UpstreamHttpError('upstream_timeout', `the upstream sent nothing for ${this.options.idleTimeoutMs} ms`));
  };

  private readonly resume = (): void => {
    const flight = this.active;
    if (flight === undefined || !flight.paused) return;
    flight.paused = false;
    this.socket.resume();
    this.time(flight);
    this.pump();
  };

  /**
   * Hands the handler what the parser has, until it pauses, the response ends, or it fails. The
   * handler runs inside a socket's event: what it throws fails the request, never the process.
   */
  private pump(): void {
    try {
      this.deliver();
    } catch (err) {
      this.fail(err as Error);
    }
  }

  private deliver(): void {
    for (let flight = this.active; flight !== undefined && flight === this.active && !flight.paused; ) {
      const event = this.parser.next();
      if (event === undefined) return;
      switch (event.kind) {
        case 'head': {
          flight.headSeen = true;
          flight.keepAliveMs = keepAliveHint(event.fields);
          if (!flight.handler.onHeaders(event.status, event.fields, this.resume, event.reason)) this.pause(flight);
          break;
        }
        case 'data':
          if (!flight.handler.onData(event.chunk)) this.pause(flight);
          break;
        case 'end':
          return this.complete(flight, event.keepAlive);
        case 'error':
          // Closed before a head began: the connection failed, not the upstream's HTTP.
          if (this.peerEnded && !flight.headSeen && event.detail.startsWith('the upstream closed before')) {
            return this.fail(this.error ?? new UpstreamHttpError('upstream_failed', 'the upstream closed the connection before its response'));
          }
          return this.fail(new UpstreamHttpError('bad_upstream_response', `the upstream's response is malformed: ${event.detail}`));
      }
    }
  }

  private pause(flight: InFlight): void {
    if (flight.done || flight.paused) return;
    flight.paused = true;
    this.socket.pause();
    this.socket.setTimeout(0);
  }

  private complete(flight: InFlight, keepAlive: boolean): void {
    this.active = undefined;
    flight.done = true;
    flight.unbody?.();
    const keepMs = Math.min(this.options.keepAliveMs, flight.keepAliveMs ?? Infinity);
    const reusable = keepAlive && flight.sent && keepMs >= 1000 && !this.socket.destroyed;
    if (reusable) this.socket.setTimeout(keepMs);
    else this.socket.destroy();
    this.released(this, reusable);
    try {
      flight.handler.onComplete();
    } catch {
      // The exchange's own failure; the request is over for the connection.
    }
  }

  private fail(err: Error): void {
    const flight = this.active;
    this.active = undefined;
    this.socket.destroy();
    if (flight === undefined || flight.done) return;
    flight.done = true;
    flight.unbody?.();
    // Heard once what the handler wrote before it has gone out: Node's HTTP server sends a
    // response's head and first bytes together, a tick later, and a client connection cut now
    // (a body that turned out malformed in the same read) would have had none of them.
    setImmediate(() => {
      try {
        flight.handler.onError(err);
      } catch {
        // As in complete: nothing of the exchange's may end the process.
      }
    });
  }
}

function ignore(): void {}
