/**
 * Plain HTTP by absolute URL: decide on the URL's authority, judge the request head, then forward
 * with undici over a pooled connection to the pinned addresses.
 *
 * The proxy owns the framing on both sides. Upstream, it sends the checked authority as Host and
 * frames the body itself (Content-Length or chunked, for any method), so a body can never be read
 * as a second request. Downstream, the upstream's status line and fields are validated before
 * anything is written; once a response has started, a failure ends that client connection and
 * never writes a second response. Each request gets exactly one decision line and one decision
 * metric, whatever its outcome.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { Dispatcher } from 'undici';
import { CodedError, EGRESS_HEALTH_PATH, isCodedError } from '../../common/index.js';
import { checkTarget, resolveTarget, type Allowed, type Reason } from '../../policy/index.js';
import { HTTP_PORT, parseAbsoluteUrl } from './authority.js';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import { type DecisionRecorder, type LineFields, F, ms, refuseResponse, type Refusal } from '../record/index.js';
import { isDialError } from '../upstream/index.js';
import { READ_AHEAD_BYTES, type Held } from '../budget/index.js';
import { checkRequestHead, type BodyFraming } from './request-head.js';
import { checkResponseHead } from './response-head.js';
import { transparentTarget } from './transparent-http.js';

/** A failure of the exchange that the forwarder finds itself (undici reports the others). */
class ExchangeError extends CodedError<'upstream_timeout' | 'bad_upstream_response'> {}

/** An upstream failure, as the reason a refusal gives for it. */
function upstreamReason(err: Error): Reason {
  if (isDialError(err) || isCodedError(err, 'ExchangeError')) return err.code as Reason;
  // undici's own error codes, and the socket's.
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return 'upstream_timeout';
  if (code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_CLOSED') return 'upstream_failed';
  return 'bad_upstream_response';
}

function latin1(values: readonly Buffer[]): string[] {
  return values.map((v) => v.toString('latin1'));
}

/** Why a failure is refused, in the words of whoever found it. */
function failureDetail(err: Error): string {
  // The proxy's own errors say it all; undici's and the socket's are named by their code.
  if (isCodedError(err, 'CodedError')) return err.message;
  const code = (err as NodeJS.ErrnoException).code;
  return code ? `${err.message} (${code})` : err.message;
}

export function createForwarder(ctx: ProxyContext) {
  /** One plain-HTTP request on `connection`; its one decision line goes through `record`. */
  return async function handleRequest(connection: ClientConnection, req: IncomingMessage, res: ServerResponse, record: DecisionRecorder): Promise<void> {
    const started = performance.now();
    const { log, clientIp, entry } = connection;
    const deny = (refusal: Refusal, fields: LineFields = {}): void => {
      record.deny(refusal, fields);
      refuseResponse(res, refusal);
    };

    const url = req.url ?? '';
    // On a transparent listener every request is for the server named by its Host header, /healthz too.
    if (entry === undefined && url === EGRESS_HEALTH_PATH && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': '3' }).end(req.method === 'GET' ? 'ok\n' : undefined);
      return;
    }

    // Until forwarding starts, a parse error later on this connection refuses this request (the
    // failing bytes follow it), unless it was refused already: that refusal closes the
    // connection, and nothing answers it twice.
    let target: { host: string; port: number } | undefined;
    const early = (refusal: Refusal): void => {
      if (record.recorded) return;
      deny(refusal, target === undefined ? {} : { [F.host]: target.host, [F.port]: target.port });
    };
    connection.holdInFlight(res, early);

    if (entry === undefined && url.startsWith('/')) return deny({ reason: 'bad_request', detail: 'this is a proxy: send an absolute http:// URL or CONNECT host:port' });
    const parsed = entry === undefined ? parseAbsoluteUrl(url) : transparentTarget(req.rawHeaders, url, entry.port);
    if (!parsed.ok) return deny({ reason: parsed.reason, detail: parsed.detail });

    const policy = ctx.policy();
    const checked = checkTarget(policy, parsed.host, parsed.port);
    if (!checked.allowed) return deny(checked);
    target = checked;
    const head = checkRequestHead(req.rawHeaders, checked.host, checked.port, req.httpVersion !== '1.0');
    if (!head.ok) return deny({ reason: 'bad_request', detail: head.detail, host: checked.host, port: checked.port });

    const decision = await resolveTarget(policy, checked, (name) => ctx.lookup(name, clientIp), ctx.ownListener);
    // Refused meanwhile, by a parse error behind it.
    if (record.recorded) return;
    const decideMs = ms(started);
    if (!decision.allowed) {
      if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
      return deny(decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs });
    }
    if (req.socket.destroyed) {
      // Gone while its request was decided: still one decision line.
      record.allow({ [F.host]: decision.host, [F.port]: decision.port, [F.rule]: decision.rule, [F.addresses]: decision.addresses, [F.decideMs]: decideMs, [F.error]: 'client_closed' });
      return;
    }
    forward(ctx, connection, req, res, { decision, path: parsed.path, headers: head.headers, framing: head.framing, started, decideMs, record });
  };
}

interface Forwarding {
  readonly decision: Allowed;
  readonly path: string;
  readonly headers: readonly string[];
  readonly framing: BodyFraming;
  readonly started: number;
  readonly decideMs: number;
  readonly record: DecisionRecorder;
}

function forward(ctx: ProxyContext, connection: ClientConnection, req: IncomingMessage, res: ServerResponse, f: Forwarding): void {
  const { decision, record } = f;
  // The connection's memory charge: a response the client does not read is held on it.
  const { socket, counted, memory } = connection;
  const writtenAtStart = socket.bytesWritten;
  let abort: ((err?: Error) => void) | undefined;
  /** The response is complete upstream and ended, but not yet all written to the client. */
  let ending = false;
  /** Whether the exchange's outcome is known: its line is written, or it ends once flushed. */
  const over = (): boolean => record.recorded || ending;

  /** The decision line (and metrics) of a request that reached the upstream. */
  const allowLine = (error: string | undefined): void => {
    if (record.recorded) return;
    const bytesUp = socket.bytesRead - counted.read;
    counted.read = socket.bytesRead;
    const bytesDown = socket.bytesWritten - writtenAtStart;
    ctx.observer.httpBytes(bytesUp, bytesDown);
    record.allow({
      [F.host]: decision.host,
      [F.port]: decision.port,
      [F.rule]: decision.rule,
      [F.pinnedBy]: decision.pinnedBy,
      [F.addresses]: decision.addresses,
      [F.status]: res.headersSent ? res.statusCode : undefined,
      [F.completed]: error === undefined,
      [F.error]: error,
      [F.bytesUp]: bytesUp,
      [F.bytesDown]: bytesDown,
      [F.decideMs]: f.decideMs,
      [F.durationMs]: ms(f.started),
    });
  };
  /** Ends the request once: a refusal before the response started, else the client connection. */
  const fail = (err: Error): void => {
    if (over()) return;
    const reason = upstreamReason(err);
    if (!res.headersSent) {
      counted.read = socket.bytesRead;
      const refusal: Refusal = { reason, detail: failureDetail(err), host: decision.host, port: decision.port };
      record.deny(refusal, { [F.addresses]: decision.addresses, [F.dialed]: isDialError(err) ? err.attempts : undefined, [F.decideMs]: f.decideMs });
      refuseResponse(res, refusal);
    } else {
      allowLine(reason);
      res.destroy();
    }
  };

  // A parse error on this connection while the exchange runs: refused if nothing of the response
  // went out yet, otherwise the client connection is cut (never a second answer inside this one).
  const parseFailed = (refusal: Refusal): void => {
    if (over()) {
      socket.destroy();
      return;
    }
    // The line first: aborting the exchange reports an error of its own, which then finds the
    // request ended.
    if (!res.headersSent) {
      counted.read = socket.bytesRead;
      record.deny(refusal, { [F.host]: decision.host, [F.port]: decision.port, [F.addresses]: decision.addresses, [F.decideMs]: f.decideMs });
      abort?.();
      refuseResponse(res, refusal);
    } else {
      allowLine(refusal.reason);
      abort?.();
      res.destroy();
    }
  };
  // Requests on a connection run one at a time (pipeline.ts): the hook is this request's.
  connection.holdInFlight(res, parseFailed);

  // While the request waits on the upstream, the upstream's own deadlines apply (504 after the
  // idle timeout); the client connection's idle timer ends a client that stalls its upload, or
  // stops reading the response (the upstream is held back meanwhile, so no timer of its own runs).
  let awaitingClient = false;
  let idled = false;
  res.on('timeout', () => {
    if (req.complete && !awaitingClient && !ending) return;
    idled = true;
    socket.destroy();
  });
  /** The line of a response ended upstream: complete once the client has it all, else why not. */
  const ended = (): void => {
    if (!ending) return;
    ending = false;
    // A socket destroyed with bytes still queued calls back the last write too, so 'finish' alone
    // does not mean the client has the response.
    allowLine(socket.destroyed ? (idled ? 'idle_timeout' : 'client_closed') : undefined);
  };
  // The client went away before the response was complete: stop the upstream exchange too.
  res.once('close', () => {
    if (ending) {
      ended();
      return;
    }
    if (over()) return;
    allowLine(idled ? 'idle_timeout' : 'client_closed');
    abort?.();
  });

  // The validated head waits for the first body byte (or the end): an upstream that fails before
  // sending any of its body still gets the client a clean refusal instead of a cut connection.
  let head: { status: number; reason: string; fields: string[] } | undefined;
  let drain: () => void = () => undefined;
  const flushHead = (): boolean => {
    if (head === undefined) return true;
    const { status, reason, fields } = head;
    head = undefined;
    try {
      res.writeHead(status, reason, fields);
      return true;
    } catch (err) {
      abort?.(err as Error);
      fail(err as Error);
      return false;
    }
  };
  // Complete once the client has it all: a client that stops reading the last bytes is still cut
  // at the idle timeout, and its line says so.
  const complete = (): void => {
    if (over() || !flushHead()) return;
    ending = true;
    res.once('finish', ended);
    res.end();
  };

  // What a response the client does not read leaves held, charged until the client drains it; a
  // client past its share loses its oldest stalled responses and tunnels first.
  let held: Held | undefined;
  const evict = (): void => {
    allowLine('overloaded');
    abort?.();
    socket.destroy();
  };
  res.once('close', () => held?.release());

  const handler: Dispatcher.DispatchHandler = {
    onConnect(abortRequest) {
      abort = abortRequest;
      // Ended while the connection was being made (a timeout, a parse error): not sent at all.
      if (over()) abortRequest();
    },
    onHeaders(status, rawHeaders, resume, statusText) {
      // Interim 1xx responses are not passed on; the final one follows.
      if (status >= 100 && status < 200) return true;
      clearTimeout(headDeadline);
      const checked = checkResponseHead(status, statusText, latin1(rawHeaders));
      if (!checked.ok) {
        const err = new ExchangeError('bad_upstream_response', checked.detail);
        abort?.(err);
        fail(err);
        return false;
      }
      head = { status, reason: statusText, fields: checked.headers as string[] };
      // Answered before the request body has all arrived: nothing will read the rest of it, so no
      // next request on this connection can be parsed. The connection closes after this response.
      if (!req.complete) res.shouldKeepAlive = false;
      // These have no body whatever their fields say (RFC 9110 §6.4.1): the response is complete
      // here, and anything the upstream sends after the head is not passed on.
      if (status === 204 || status === 304 || req.method === 'HEAD') {
        complete();
        return true;
      }
      drain = resume;
      return true;
    },
    onData(chunk) {
      if (over() || res.destroyed || !flushHead()) return false;
      if (res.write(chunk)) return true;
      // The client reads slower than the upstream sends: undici pauses until the client drains,
      // and what the pause leaves held is charged to the client meanwhile (memory-budget.ts).
      awaitingClient = true;
      held = memory.hold(socket.writableLength + READ_AHEAD_BYTES, evict);
      res.once('drain', () => {
        held?.release();
        held = undefined;
        awaitingClient = false;
        drain();
      });
      return false;
    },
    onComplete() {
      complete();
    },
    onError(err) {
      fail(err);
    },
  };

  const headers = [...f.headers, 'host', decision.port === HTTP_PORT ? decision.host : `${decision.host}:${decision.port}`];
  if (f.framing.kind === 'length') headers.push('content-length', String(f.framing.length));
  // undici restarts its own head timer on every 1xx, so an upstream trickling 1xx could hold the
  // request forever: the final head has a deadline of its own, from the end of the request body.
  let headDeadline: NodeJS.Timeout | undefined;
  const startHeadDeadline = (): void => {
    if (over()) return;
    headDeadline = setTimeout(() => {
      const err = new ExchangeError('upstream_timeout', `no final response head within ${ctx.limits.idleTimeoutMs} ms`);
      abort?.(err);
      fail(err);
    }, ctx.limits.idleTimeoutMs);
  };
  if (f.framing.kind === 'none' || req.complete) startHeadDeadline();
  else req.once('end', startHeadDeadline);
  res.once('close', () => clearTimeout(headDeadline));
  const pool = ctx.pools.forTarget(decision.host, decision.port, decision.addresses);
  try {
    pool.dispatch(
      {
        method: req.method as Dispatcher.HttpMethod,
        path: f.path,
        headers,
        // No body: nothing after the head belongs to this request. Otherwise the client's body
        // stream, which undici frames with the Content-Length given or as chunked.
        body: f.framing.kind === 'none' ? null : req,
      },
      handler,
    );
  } catch (err) {
    fail(err as Error);
  }
}
