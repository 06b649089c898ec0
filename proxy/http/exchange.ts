/**
 * One allowed request forwarded over a pooled connection to the pinned addresses (undici for plain
 * HTTP; the proxy's own HTTP/1.1 client, upstream/h1-pool.ts, inside an inspected connection), and
 * its response passed back. The proxy frames the request itself (the checked
 * authority as Host, the body by Content-Length or chunked), validates the response head before
 * anything is written, and once a response has started, a failure ends the client connection and
 * never writes a second response. The request's one decision line is written once its outcome is
 * known: refused, complete, or cut (and why).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Allowed, SecretSet } from '../../policy/index.js';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import { READ_AHEAD_BYTES, type Held } from '../budget/index.js';
import { destinationOf, F, ms, refuseResponse, type DecisionRecorder, type Refusal } from '../record/index.js';
import { scannedBody, type ValueWatch } from '../secrets/index.js';
import { Unsent, type PooledRequest, type UpstreamHandler, type UpstreamTrust } from '../upstream/index.js';
import { HTTP_PORT, HTTPS_PORT } from './authority.js';
import type { BodyFraming } from './request-head.js';
import { checkResponseHead } from './response-head.js';
import { dialAttempts, ExchangeError, failureDetail, latin1, secretsField, upstreamReason } from './upstream-failure.js';

export interface Forwarding {
  readonly decision: Allowed;
  readonly path: string;
  readonly headers: readonly string[];
  readonly framing: BodyFraming;
  readonly started: number;
  readonly decideMs: number;
  readonly record: DecisionRecorder;
  /** Inside an inspected connection: TLS to the upstream, verified against this trust store. */
  readonly trust?: UpstreamTrust | undefined;
  /** The policy's secrets: a body that carries one of their placeholders is cut and refused. */
  readonly secrets?: SecretSet | undefined;
  /** Watches the response for the values put into the request: one there is refused, or cut before it. */
  readonly watch?: ValueWatch | undefined;
}

export class Exchange {
  private readonly writtenAtStart: number;
  /** Stops the exchange upstream: the dial made for it (upstream-pools.ts), from onConnect on the request. */
  private stop: (err?: Error) => void = () => this.unsent.giveUp();
  private readonly unsent = new Unsent();
  /** The response is complete upstream and ended, but not yet all written to the client. */
  private ending = false;
  /** The client does not read what the upstream sends (the pool's client paused meanwhile). */
  private awaitingClient = false;
  private idled = false;
  /** The validated head, waiting for the first body byte (or the end). */
  private head: { status: number; reason: string; fields: string[] } | undefined;
  private drain: () => void = () => undefined;
  /** What a response the client does not read leaves held, charged until the client drains it. */
  private held: Held | undefined;
  private headDeadline: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: ProxyContext,
    private readonly connection: ClientConnection,
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    private readonly f: Forwarding,
  ) {
    this.writtenAtStart = connection.socket.bytesWritten;
  }

  start(): void {
    const { req, res, connection } = this;
    // Requests on a connection run one at a time (pipeline.ts): the hook is this request's.
    connection.holdInFlight(res, this.parseFailed);
    // While the request waits on the upstream, the upstream's own deadlines apply (504 after the
    // idle timeout); the client connection's idle timer ends a client that stalls its upload, or
    // stops reading the response (the upstream is held back meanwhile, so no timer of its own runs).
    res.on('timeout', () => {
      if (req.complete && !this.awaitingClient && !this.ending) return;
      this.idled = true;
      connection.socket.destroy();
    });
    // One listener for the end of the response, whatever ended it (a listener more per request
    // is an allocation more on every request).
    res.once('close', this.closed);
    // An upstream trickling 1xx could hold the request forever (undici restarts its head timer on
    // every one; the own client's idle timer hears each byte): the final head has a deadline of its
    // own, from the end of the request body.
    if (this.f.framing.kind === 'none' || req.complete) this.startHeadDeadline();
    else req.once('end', this.startHeadDeadline);
    this.dispatch();
  }

  private readonly closed = (): void => {
    this.clientGone();
    this.held?.release();
    clearTimeout(this.headDeadline);
  };

  // The response is done, or the client went away before it was complete: then the upstream
  // exchange is stopped too.
  private clientGone(): void {
    if (this.ending) return this.ended();
    if (this.over()) return;
    this.allowLine(this.idled ? 'idle_timeout' : 'client_closed');
    this.stop();
  }

  /** Whether the exchange's outcome is known: its line is written, or it ends once flushed. */
  private over(): boolean {
    return this.f.record.recorded || this.ending;
  }

  private dispatch(): void {
    const { decision, framing, trust } = this.f;
    const ownPort = trust === undefined ? HTTP_PORT : HTTPS_PORT;
    const headers = [...this.f.headers, 'host', decision.port === ownPort ? decision.host : `${decision.host}:${decision.port}`];
    if (framing.kind === 'length') headers.push('content-length', String(framing.length));
    // Pools of its own for each sandbox registration of a shared proxy, and for requests a secret went into (upstream-pools.ts).
    const { sandbox, lifecycle = '' } = this.connection.identity;
    const pool = this.ctx.pools.forTarget(decision.host, decision.port, decision.addresses, trust, sandbox && `${sandbox}/${lifecycle}`, this.f.watch !== undefined);
    try {
      const request: PooledRequest = {
        method: this.req.method ?? 'GET', path: this.f.path, headers,
        // No body: nothing after the head belongs to this request. Otherwise the client's body
        // stream, which the pool's client frames with the Content-Length given or as chunked,
        // watched for placeholders: one fails the stream, and the request is aborted mid-body.
        body: framing.kind === 'none' ? null : scannedBody(this.req, this.f.secrets),
        unsent: this.unsent,
      };
      pool.dispatch(request, this.handler());
    } catch (err) {
      this.fail(err as Error);
    }
  }

  /** The decision line (and metrics) of a request that reached the upstream. */
  private allowLine(error: string | undefined): void {
    const { record, decision } = this.f;
    if (record.recorded) return;
    const { socket, counted } = this.connection;
    const bytesUp = socket.bytesRead - counted.read;
    counted.read = socket.bytesRead;
    const bytesDown = socket.bytesWritten - this.writtenAtStart;
    this.ctx.observer.httpBytes(bytesUp, bytesDown, this.connection.identity);
    record.allow(destinationOf(decision), {
      [F.status]: this.res.headersSent ? this.res.statusCode : undefined,
      [F.completed]: error === undefined,
      [F.error]: error,
      [F.bytesUp]: bytesUp,
      [F.bytesDown]: bytesDown,
      [F.decideMs]: this.f.decideMs,
      [F.durationMs]: ms(this.f.started),
    });
  }

  /** Ends the request once: a refusal before the response started, else the client connection. */
  private fail(err: Error): void {
    if (this.over()) return;
    const reason = upstreamReason(err);
    const { decision, record } = this.f;
    if (!this.res.headersSent) {
      this.connection.counted.read = this.connection.socket.bytesRead;
      const refusal: Refusal = { reason, detail: failureDetail(err), host: decision.host, port: decision.port };
      record.deny(refusal, { [F.addresses]: decision.addresses, [F.dialed]: dialAttempts(err), [F.decideMs]: this.f.decideMs, ...secretsField(err) });
      refuseResponse(this.res, refusal);
    } else {
      this.f.record.note(secretsField(err));
      this.allowLine(reason);
      this.res.destroy();
    }
  }

  // A parse error on this connection while the exchange runs: refused if nothing of the response
  // went out yet, otherwise the client connection is cut (never a second answer inside this one).
  private readonly parseFailed = (refusal: Refusal): void => {
    const { socket } = this.connection;
    if (this.over()) {
      socket.destroy();
      return;
    }
    // The line first: aborting the exchange reports an error of its own, which then finds the
    // request ended.
    if (!this.res.headersSent) {
      const { decision } = this.f;
      this.connection.counted.read = socket.bytesRead;
      this.f.record.deny(refusal, { [F.host]: decision.host, [F.port]: decision.port, [F.addresses]: decision.addresses, [F.decideMs]: this.f.decideMs });
      this.stop();
      refuseResponse(this.res, refusal);
    } else {
      this.allowLine(refusal.reason);
      this.stop();
      this.res.destroy();
    }
  };

  /** The line of a response ended upstream: complete once the client has it all, else why not. */
  private readonly ended = (): void => {
    if (!this.ending) return;
    this.ending = false;
    // A socket destroyed with bytes still queued calls back the last write too, so 'finish' alone
    // does not mean the client has the response.
    this.allowLine(this.connection.socket.destroyed ? (this.idled ? 'idle_timeout' : 'client_closed') : undefined);
  };

  // The validated head waits for the first body byte (or the end): an upstream that fails before
  // sending any of its body still gets the client a clean refusal instead of a cut connection.
  private flushHead(): boolean {
    if (this.head === undefined) return true;
    const { status, reason, fields } = this.head;
    this.head = undefined;
    try {
      this.res.writeHead(status, reason, fields);
      return true;
    } catch (err) {
      return this.cut(err as Error);
    }
  }

  /** Stops the exchange upstream and ends it: refused if nothing went out yet, else cut here. */
  private cut(err: Error): false {
    this.stop(err);
    this.fail(err);
    return false;
  }

  // Complete once the client has it all: a client that stops reading the last bytes is still cut
  // at the idle timeout, and its line says so.
  private complete(): void {
    if (this.over() || !this.flushHead()) return;
    this.ending = true;
    this.res.once('finish', this.ended);
    // What the watch held back (no value whole): the body's last bytes.
    this.res.end(this.f.watch?.end());
  }

  // A client past its share loses its oldest stalled responses and tunnels first.
  private readonly evict = (): void => {
    this.allowLine('overloaded');
    this.stop();
    this.connection.socket.destroy();
  };

  private readonly startHeadDeadline = (): void => {
    if (this.over()) return;
    const { idleTimeoutMs } = this.ctx.limits;
    this.headDeadline = setTimeout(() => this.cut(new ExchangeError('upstream_timeout', `no final response head within ${idleTimeoutMs} ms`)), idleTimeoutMs);
  };

  /** The final head, checked; 1xx are not passed on. */
  private onHeaders(status: number, rawHeaders: readonly (Buffer | string)[], resume: () => void, statusText: string): boolean {
    // Interim 1xx responses are not passed on; the final one follows.
    if (status >= 100 && status < 200) return true;
    clearTimeout(this.headDeadline);
    const checked = checkResponseHead(status, statusText, latin1(rawHeaders));
    if (!checked.ok) return this.cut(new ExchangeError('bad_upstream_response', checked.detail));
    const reflected = this.f.watch?.head(statusText, checked.headers);
    if (reflected !== undefined) return this.cut(reflected);
    this.head = { status, reason: statusText, fields: this.f.watch?.passed(checked.headers) ?? (checked.headers as string[]) };
    // Answered before the request body has all arrived: nothing will read the rest of it, so no
    // next request on this connection can be parsed. The connection closes after this response.
    if (!this.req.complete) this.res.shouldKeepAlive = false;
    // These have no body whatever their fields say (RFC 9110 §6.4.1): the response is complete
    // here, and anything the upstream sends after the head is not passed on.
    if (status === 204 || status === 304 || this.req.method === 'HEAD') {
      this.complete();
      return true;
    }
    this.drain = resume;
    return true;
  }

  private onData(data: Buffer): boolean {
    const { res } = this;
    if (this.over() || res.destroyed) return false;
    const chunk = this.f.watch === undefined ? data : this.f.watch.body(data);
    if (chunk instanceof Error) return this.cut(chunk);
    if (!this.flushHead()) return false;
    if (chunk.length === 0 || res.write(chunk)) return true;
    // The client reads slower than the upstream sends: the pool's client pauses until it drains,
    // and what the pause leaves held is charged to the client meanwhile (memory-budget.ts).
    this.awaitingClient = true;
    this.held = this.connection.memory.hold(this.connection.socket.writableLength + READ_AHEAD_BYTES, this.evict);
    res.once('drain', () => {
      this.held?.release();
      this.held = undefined;
      this.awaitingClient = false;
      this.drain();
    });
    return false;
  }

  private handler(): UpstreamHandler {
    return {
      onConnect: (abortRequest) => {
        this.stop = abortRequest;
        // Ended while the connection was being made (a timeout, a parse error): not sent at all.
        if (this.over()) abortRequest();
      },
      onHeaders: (status, rawHeaders, resume, statusText) => this.onHeaders(status, rawHeaders, resume, statusText),
      onData: (chunk) => this.onData(chunk),
      onComplete: () => this.complete(),
      onError: (err) => this.fail(err),
    };
  }
}
