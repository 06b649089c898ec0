/**
 * What a connection's requests are handed to, each failing closed: an exception while deciding
 * becomes a refusal with its decision line (`internal_error`), never a crash and never an open
 * door. Plain HTTP goes to the forwarder, CONNECT to the tunnel, a transparent TLS connection to
 * its ClientHello's routing.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import { createForwarder } from '../http/index.js';
import { F, logLine, refuseResponse, type DecisionRecorder, type Decisions, type Logger, type Refusal } from '../record/index.js';
import { handleTransparentTls } from '../transparent/index.js';
import { handleConnect } from '../tunnel/index.js';

export const HEAD_TIMEOUT: Refusal = { reason: 'header_timeout', detail: 'the request head did not arrive in time' };
const INTERNAL_ERROR: Refusal = { reason: 'internal_error', detail: 'the proxy failed while deciding' };

export class Handlers {
  private readonly forward: ReturnType<typeof createForwarder>;

  constructor(
    private readonly ctx: ProxyContext,
    private readonly decisions: Decisions,
    private readonly log: Logger,
  ) {
    this.forward = createForwarder(ctx);
  }

  /** The one recorder of the decision line and metric of a request on `connection`. */
  recorder(connection: ClientConnection, method: string | undefined): DecisionRecorder {
    return this.decisions.recorder(connection.log, connection.clientKey, method, 'info', connection.identity);
  }

  /** The decision line and metric of a refusal the front makes itself (nothing was forwarded). */
  denyLine(connection: ClientConnection, refusal: Refusal, method?: string): void {
    this.recorder(connection, method).deny(refusal);
  }

  /** The line of `count` pipelined requests `connection` closed with, never started: within its refusal-line cap. */
  droppedLine(connection: ClientConnection, count: number): void {
    if (!this.decisions.admitsLine(connection.clientKey, 'requests_dropped')) return;
    logLine(connection.log, { [F.event]: 'requests_dropped', [F.requests]: count, [F.detail]: 'the connection closed before these pipelined requests were started' });
  }

  /** A parsed plain-HTTP request, in its turn. */
  request(connection: ClientConnection, req: IncomingMessage, res: ServerResponse): void {
    const record = this.recorder(connection, req.method);
    this.forward(connection, req, res, record).catch((err: unknown) =>
      this.failClosed('request', err, () => {
        // The request's line, unless it has one already; its response, unless one started.
        record.deny(INTERNAL_ERROR);
        refuseResponse(res, INTERNAL_ERROR);
      }),
    );
  }

  /** A CONNECT; `head` is what the client sent after its head. */
  connect(connection: ClientConnection, request: { target: string; bodyProblem: string | undefined }, head: Buffer): void {
    const record = this.recorder(connection, 'CONNECT');
    handleConnect(this.ctx, connection, request, head, record).catch((err: unknown) =>
      this.failClosed('connect', err, () => {
        record.deny(INTERNAL_ERROR);
        connection.refuse(INTERNAL_ERROR);
      }),
    );
  }

  /** A connection on the transparent TLS listener for dialled port `port`: routed by its ClientHello. */
  transparentTls(connection: ClientConnection, port: number): void {
    const record = this.recorder(connection, undefined);
    handleTransparentTls(this.ctx, connection, port, record).catch((err: unknown) =>
      this.failClosed('transparent_tls', err, () => {
        record.deny(INTERNAL_ERROR);
        connection.socket.destroy();
      }),
    );
  }

  private failClosed(what: string, err: unknown, fallback: () => void): void {
    this.log.error({ err, [F.event]: what }, 'handler failed; connection refused');
    fallback();
  }
}
