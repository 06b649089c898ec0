/**
 * The first bytes of a connection on the proxy port or a transparent HTTP listener decide its
 * path: a complete, plain CONNECT head goes straight to the tunnel; anything else is handed to
 * Node's HTTP server (http-events.ts), with those bytes, as if it had read them itself. The
 * head's deadline runs from the accept on either path.
 */
import type http from 'node:http';
import { healthAnswer, healthCheckHead, type ClientConnection } from '../admission/index.js';
import { ACCEPT_BYTES, parserBytes, type MemoryBudget, type ProxyLimits } from '../budget/index.js';
import { readConnectHead } from '../http/index.js';
import type { Refusal } from '../record/index.js';
import { HEAD_TIMEOUT, type Handlers } from './handlers.js';

export interface FirstBytesDeps {
  readonly limits: ProxyLimits;
  readonly budget: MemoryBudget;
  /** Node's HTTP server of the proxy (http-events.ts). */
  readonly httpServer: http.Server;
  readonly handlers: Handlers;
}

export class FirstBytes {
  /** What Node's parser is charged for a connection it reads: its worst (parserBytes). */
  private readonly parserCharge: number;

  constructor(private readonly deps: FirstBytesDeps) {
    this.parserCharge = parserBytes(deps.limits.maxHeaderBytes);
  }

  /** Waits for `connection`'s first read, within the head's deadline, and sends it on its path. */
  readonly read = (connection: ClientConnection): void => {
    const { socket } = connection;
    const { limits } = this.deps;
    const accepted = Date.now();
    connection.firstHeadTimer = setTimeout(() => this.headTimedOut(connection), limits.headerTimeoutMs);
    socket.once('close', () => connection.firstHeadDone());
    // A client that closes before sending anything gets nothing and frees its slot at once.
    const onEnd = (): void => {
      connection.firstHeadDone();
      socket.destroy();
    };
    socket.once('end', onEnd);
    socket.once('data', (chunk: Buffer) => {
      socket.off('end', onEnd);
      if (connection.overloaded) {
        this.overloaded(connection, chunk, ACCEPT_BYTES);
        return;
      }
      // Only the proxy port takes CONNECT: a transparent HTTP listener's bytes all go to the parser.
      const fast = connection.entry === undefined ? readConnectHead(chunk, limits.maxHeaderBytes) : undefined;
      if (fast !== undefined) {
        connection.firstHeadDone();
        socket.pause();
        this.deps.handlers.connect(connection, { target: fast.target, bodyProblem: undefined }, chunk.subarray(fast.length));
        return;
      }
      // Node's parser holds what it reads in ways the proxy cannot see (a head still arriving is
      // kept as strings): the connection is charged its worst for as long as the parser has it.
      if (!connection.memory.grow(this.parserCharge)) {
        this.overloaded(connection, chunk, this.parserCharge);
        return;
      }
      connection.parserCharge = this.parserCharge;
      // Node's own header timer starts now; ours keeps the deadline counted from the accept.
      clearTimeout(connection.firstHeadTimer);
      connection.firstHeadTimer = setTimeout(() => this.headTimedOut(connection), Math.max(0, limits.headerTimeoutMs - (Date.now() - accepted)));
      // Paused across the hand-over, so that Node's parser meets a socket whose pause and resume
      // it controls: handed over flowing, its first pause for a request body it cannot take yet
      // was undone, and bodies were read into memory without limit.
      // A CONNECT or Upgrade in that chunk takes the socket over (Node leaves it unread for its
      // handler): resumed here, the bytes after its head would be emitted to no listener and lost.
      socket.pause();
      this.deps.httpServer.emit('connection', socket);
      socket.emit('data', chunk);
      if (!connection.takenOver) socket.resume();
    });
  };

  private headTimedOut(connection: ClientConnection): void {
    connection.firstHeadTimer = undefined;
    if (connection.refused) return;
    this.deps.handlers.denyLine(connection, HEAD_TIMEOUT);
    connection.refuse(HEAD_TIMEOUT);
  }

  /**
   * A connection the budget has no room for (`wanted` more bytes), at its first read: refused
   * `overloaded`, unless it is the health check, which is answered here and now. A container's
   * health check must not fail (and get the proxy restarted, with every tunnel) because clients
   * filled the budget.
   */
  private overloaded(connection: ClientConnection, chunk: Buffer, wanted: number): void {
    connection.firstHeadDone();
    // A transparent HTTP listener's requests are meant for the host they name, never the proxy.
    const health = connection.entry === undefined ? healthCheckHead(chunk) : undefined;
    if (health !== undefined) {
      connection.close(healthAnswer(health, connection.identity));
      return;
    }
    const refusal: Refusal = { reason: 'overloaded', detail: this.deps.budget.explain(connection.clientKey, wanted), retryAfter: 1 };
    this.deps.handlers.denyLine(connection, refusal);
    connection.refuse(refusal);
  }
}
