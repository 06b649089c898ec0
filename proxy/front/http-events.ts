/**
 * Node's HTTP server, fed the connections whose first bytes are not a plain CONNECT head
 * (first-bytes.ts), and what the proxy makes of each of its events: a request is charged to its
 * connection and started in its turn (pipeline.ts); a CONNECT or an Upgrade takes the connection
 * over; an unsupported Expect, an Upgrade and any parse error are refused with their reason.
 * Malformed input of any kind is answered with a 4xx and the connection closed; nothing a client
 * sends can crash the process.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import { connectionOf, MAX_WAITING, Pipeline, type ClientConnection } from '../admission/index.js';
import { BODY_WAIT_BYTES, requestBytes, type MemoryBudget, type ProxyLimits } from '../budget/index.js';
import { refuseResponse, type Refusal } from '../record/index.js';
import { connectBodyProblem } from '../tunnel/index.js';
import { HEAD_TIMEOUT, type Handlers } from './handlers.js';

function clientError(err: NodeJS.ErrnoException): Refusal {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return { reason: 'headers_too_large', detail: 'the request head is too large' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return HEAD_TIMEOUT;
    default:
      return { reason: 'bad_request', detail: `malformed request (${err.code ?? 'parse error'})` };
  }
}

/**
 * The connection Node's HTTP server hands an event for. Every socket it reads came from the
 * admission; one that did not is closed, never served.
 */
function connectionFor(socket: Socket): ClientConnection | undefined {
  const connection = connectionOf(socket);
  if (connection === undefined) socket.destroy();
  return connection;
}

/** A CONNECT or an Upgrade takes the connection out of Node's HTTP handling. */
function takeOver(socket: Socket): ClientConnection | undefined {
  const connection = connectionFor(socket);
  if (connection === undefined) return undefined;
  connection.takenOver = true;
  connection.firstHeadDone();
  connection.leaveParser();
  return connection;
}

/** The HTTP server of one proxy; it never listens itself (first-bytes.ts hands it connections). */
export function createHttpFront(limits: ProxyLimits, budget: MemoryBudget, handlers: Handlers): http.Server {
  const server = http.createServer({
    maxHeaderSize: limits.maxHeaderBytes,
    headersTimeout: limits.headerTimeoutMs,
    requestTimeout: 0,
    connectionsCheckingInterval: Math.min(1_000, limits.headerTimeoutMs),
    keepAliveTimeout: 5_000,
    noDelay: true,
    // A missing Host is refused by the forwarder, with a reason the client can read.
    requireHostHeader: false,
  });
  server.timeout = limits.idleTimeoutMs;
  // Every field reaches the checks (the head is already bounded by maxHeaderBytes): Node's
  // default of 2000 would let a framing field hide behind 2000 others.
  server.maxHeadersCount = 0;
  const events = new HttpEvents(budget, handlers);
  server.on('request', events.request);
  server.on('connect', events.connect);
  // Without this listener Node answers an Expect other than 100-continue with its own 417, which
  // carries no X-Egress-Reason and keeps the connection alive.
  server.on('checkExpectation', events.checkExpectation);
  server.on('upgrade', events.upgrade);
  server.on('clientError', events.clientError);
  return server;
}

class HttpEvents {
  constructor(
    private readonly budget: MemoryBudget,
    private readonly handlers: Handlers,
  ) {}

  readonly request = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const connection = connectionFor(req.socket);
    if (connection === undefined) return;
    connection.firstHeadDone();
    if (!this.chargeRequest(connection, req, res)) return;
    this.pipelineOf(connection).add(res, () => {
      connection.clearInFlight();
      this.handlers.request(connection, req, res);
    });
  };

  readonly connect = (req: http.IncomingMessage, socket: Socket, head: Buffer): void => {
    const connection = takeOver(socket);
    if (connection === undefined || this.behindPending(req, connection)) return;
    if (connection.entry !== undefined) {
      const refusal: Refusal = { reason: 'bad_request', detail: 'CONNECT to a transparent listener (use the proxy port)' };
      this.handlers.denyLine(connection, refusal, req.method);
      connection.refuse(refusal);
      return;
    }
    this.handlers.connect(connection, { target: req.url ?? '', bodyProblem: connectBodyProblem(req.rawHeaders) }, head);
  };

  readonly checkExpectation = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    const connection = connectionFor(req.socket);
    if (connection === undefined) return;
    this.pipelineOf(connection).add(res, () => {
      // Refused here and now: a parse error behind it is not answered or logged again (the
      // refusal closes the connection).
      connection.holdInFlight(res, () => undefined);
      const refusal: Refusal = { reason: 'bad_request', detail: 'unsupported Expect header (only 100-continue)' };
      this.handlers.denyLine(connection, refusal, req.method);
      refuseResponse(res, refusal);
    });
  };

  // Node keeps a socket that asked for an upgrade out of its request flow (and would drop any
  // request pipelined behind it): refused, with its reason, like every other request it cannot take.
  readonly upgrade = (req: http.IncomingMessage, socket: Socket): void => {
    const connection = takeOver(socket);
    if (connection === undefined || this.behindPending(req, connection)) return;
    const refusal: Refusal = { reason: 'bad_request', detail: 'protocol upgrades are not forwarded (use CONNECT for WebSocket and other protocols)' };
    this.handlers.denyLine(connection, refusal, req.method);
    connection.refuse(refusal);
  };

  readonly clientError = (err: NodeJS.ErrnoException, socket: Socket): void => {
    const connection = connectionFor(socket);
    if (connection === undefined) return;
    connection.firstHeadDone();
    // A client that reset or left is not a request to refuse, and a refused connection is only closed.
    if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || connection.refused) {
      socket.destroy();
      return;
    }
    // Refused (or held for its turn) already: the refusal's response closes the connection once
    // written, and cutting it now could reset it before the client has read that response.
    if (connection.parserFailed) return;
    connection.parserFailed = true;
    const refusal = clientError(err);
    // The failing bytes follow the last request parsed: if it still waits for its turn, the
    // refusal meets it when it starts.
    if (connection.pipeline?.holdParseError(refusal)) return;
    this.parseFailed(connection, refusal);
  };

  private pipelineOf(connection: ClientConnection): Pipeline {
    connection.pipeline ??= new Pipeline(connection.socket, {
      parseError: (refusal) => this.parseFailed(connection, refusal),
      dropped: (count) => this.handlers.droppedLine(connection, count),
      overflow: () => this.handlers.denyLine(connection, { reason: 'bad_request', detail: `more than ${MAX_WAITING} pipelined requests waiting for their turn; the connection is cut` }),
    });
    return connection.pipeline;
  }

  /**
   * Charges a parsed request to its connection until its response is done: its head's objects,
   * and a body it may already have been read into Node's parser while it waits its turn. When
   * that does not fit, a request that would start now is refused `overloaded` in its turn; one
   * that would wait cuts the connection (its refusal could only be written after the responses
   * before it, holding the bytes meanwhile), like one request too many in the pipeline.
   */
  private chargeRequest(connection: ClientConnection, req: http.IncomingMessage, res: http.ServerResponse): boolean {
    const waits = connection.pipeline?.busy ?? false;
    const length = req.headers['content-length'];
    const body = req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    const bytes = requestBytes(req.url ?? '', req.rawHeaders) + (waits && body ? BODY_WAIT_BYTES : 0);
    const { memory } = connection;
    if (memory.grow(bytes)) {
      res.once('close', () => memory.shrink(bytes));
      return true;
    }
    const refusal: Refusal = { reason: 'overloaded', detail: this.budget.explain(connection.clientKey, bytes), retryAfter: 1 };
    if (waits) {
      this.handlers.denyLine(connection, refusal, req.method);
      req.socket.destroy();
      return false;
    }
    this.pipelineOf(connection).add(res, () => {
      connection.holdInFlight(res, () => undefined);
      this.handlers.denyLine(connection, refusal, req.method);
      refuseResponse(res, refusal);
    });
    return false;
  }

  // Node hands a CONNECT or an Upgrade over as the raw socket even while an earlier request's
  // response on that connection is still pending: anything written to the socket then would land
  // inside that response. Such a request gets its own deny line and the connection is cut (the
  // earlier request logs client_closed); a client sends these on a connection of their own.
  private behindPending(req: http.IncomingMessage, connection: ClientConnection): boolean {
    if (!connection.pipeline?.busy) return false;
    this.handlers.denyLine(connection, { reason: 'bad_request', detail: `${req.method === 'CONNECT' ? 'CONNECT' : 'an Upgrade request'} pipelined behind a request still being answered` }, req.method);
    connection.socket.destroy();
    return true;
  }

  /** A parse error after the request under way (if any), or on a connection between requests. */
  private parseFailed(connection: ClientConnection, refusal: Refusal): void {
    // The request under way ends with this refusal (or is cut if its response has started),
    // through its own decision line.
    const underWay = connection.inFlight;
    if (underWay !== undefined) {
      underWay(refusal);
      return;
    }
    this.handlers.denyLine(connection, refusal);
    // A response still owed (to a request the proxy answers itself, such as /healthz) goes
    // first; the refusal follows it.
    const { pipeline } = connection;
    if (pipeline === undefined) connection.refuse(refusal);
    else pipeline.whenSettled(() => connection.refuse(refusal));
  }
}
