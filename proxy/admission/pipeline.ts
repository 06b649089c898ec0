/**
 * HTTP/1.1 pipelining on one client connection, one request at a time.
 *
 * Node's HTTP server hands over every request it parses at once, even while earlier responses on
 * the connection are still owed, and only the response that currently owns the socket learns that
 * the client went away. Started all at once, a burst of pipelined requests would each open an
 * upstream connection (one client connection could hold thousands), and the ones still queued when
 * the client left would never end. So a connection's requests start in order, each once the
 * response before it is done, and at most MAX_WAITING may wait: one more cuts the connection.
 * (Pausing the socket cannot hold the parser back: Node's parser reads a server socket natively.)
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Refusal } from '../record/index.js';

/** Parsed requests that may wait for their turn; one more cuts the connection. */
export const MAX_WAITING = 32;

interface Waiting {
  readonly start: () => void;
  /** A parse error that came right behind this request: it meets the request once it starts. */
  parseError?: Refusal;
}

export interface PipelineEvents {
  /** A request's parse error, delivered when the request it follows has started. */
  parseError(refusal: Refusal): void;
  /** The connection closed with requests never started (or decided): the waiting and the cut-off. */
  dropped(count: number): void;
  /** One request more than may wait: the connection is cut after this. */
  overflow(): void;
}

export class Pipeline {
  /** Responses owed: the one under way and those waiting. */
  private owed = 0;
  private readonly waiting: Waiting[] = [];
  /** Requests parsed after the connection was cut (the rest of the read that overflowed it). */
  private lost = 0;
  private settled: (() => void) | undefined;

  constructor(
    private readonly socket: Socket,
    private readonly events: PipelineEvents,
  ) {
    socket.once('close', () => {
      const count = this.waiting.length + this.lost;
      this.waiting.length = 0;
      if (count > 0) events.dropped(count);
    });
  }

  /** Whether a response is still owed (the connection is not between requests). */
  get busy(): boolean {
    return this.owed > 0;
  }

  /** Adds a parsed request: started now if nothing is owed before it, else when its turn comes. */
  add(res: ServerResponse, start: () => void): void {
    if (this.socket.destroyed) {
      this.lost += 1;
      return;
    }
    if (this.waiting.length >= MAX_WAITING) {
      this.events.overflow();
      this.socket.destroy();
      return;
    }
    this.owed += 1;
    res.once('close', () => this.done());
    if (this.owed === 1) start();
    else this.waiting.push({ start });
  }

  /**
   * A parse error after the last request parsed: held for that request if it is still waiting
   * (true), or left to the caller to deliver now (false).
   */
  holdParseError(refusal: Refusal): boolean {
    const last = this.waiting[this.waiting.length - 1];
    if (last === undefined) return false;
    last.parseError = refusal;
    return true;
  }

  /** Runs `then` once nothing is owed (at once if nothing is). */
  whenSettled(then: () => void): void {
    if (this.owed === 0) then();
    else this.settled = then;
  }

  private done(): void {
    this.owed -= 1;
    // A response that closed the connection (a refusal, a cut) leaves the rest unanswered: they are
    // counted as dropped when the socket closes, never started.
    if (!this.socket.writable) return;
    const next = this.waiting.shift();
    if (next !== undefined) {
      next.start();
      if (next.parseError !== undefined) this.events.parseError(next.parseError);
      return;
    }
    if (this.owed === 0) {
      const then = this.settled;
      this.settled = undefined;
      then?.();
    }
  }
}
