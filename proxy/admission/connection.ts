/**
 * One client connection, from its accept to its close: who it is, which listener it came in on,
 * what it holds (its slot in the connection limits, its charge to the memory budget, its request
 * pipeline) and how far it has got (the first head's deadline, the request under way, whether a
 * CONNECT took it over, whether it was refused). The server makes one per accepted socket, and
 * every handler (CONNECT, plain forwarding, the transparent listeners) takes it as an argument.
 * Node's HTTP server hands its events only the socket: `connectionOf` finds the connection there.
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { F, type Logger, refusalBytes, type Closer, type Refusal } from '../record/index.js';
import type { Charge } from '../budget/index.js';
import type { OpenTarget, Policy } from '../../policy/index.js';
import type { Pipeline } from './pipeline.js';
import type { ClientIdentity } from './identity.js';

/** The transparent listener a connection came in on; a connection without one came in on the proxy port. */
export interface TransparentEntry {
  readonly kind: 'tls' | 'http';
  /** The port the client dialled (the destination port the policy checks). */
  readonly port: number;
}

/**
 * The decrypted inside of an inspected connection (proxy/inspect/): TLS the proxy terminated for
 * `host` (the CONNECT host, or the transparent hello's server name) on `port`. Its requests must
 * name that host, and go to `addresses`, those its decision checked (checked again for each).
 */
export interface InspectedEntry {
  readonly kind: 'inspect';
  readonly host: string;
  readonly port: number;
  readonly addresses: readonly string[];
}

/** What a connection came in by: a transparent listener, or an inspected connection's inside. */
export type ConnectionEntry = TransparentEntry | InspectedEntry;

/** What the server gives a connection it accepts. */
export interface Accepted {
  readonly id: number;
  /** The client's address, in one spelling (own-address.ts's canonicalAddress). */
  readonly clientIp: string;
  /** Who it is: what its shares are kept by, its sandbox, its policy. */
  readonly identity: ClientIdentity;
  readonly entry: ConnectionEntry | undefined;
  /** Its charge to the memory budget; UNCHARGED when the budget had no room for it at the accept. */
  readonly memory: Charge;
  /** The budget had no room for it: it is only refused (or answered, if it is the health check). */
  readonly overloaded: boolean;
  /** The server's logger; the connection's own is a child of it, made on first use. */
  readonly root: Logger;
  /** Ends refused connections (refusal.ts). */
  readonly closer: Closer;
  /** Gives its slot in the connection limits back. */
  readonly uncount: () => void;
}

const CONNECTION = Symbol('capybara-egress.connection');
type Carrier = Socket & { [CONNECTION]?: ClientConnection };

export class ClientConnection {
  readonly id: number;
  readonly clientIp: string;
  /** What its shares of the limits, the memory budget, lookups and lines are kept by. */
  readonly clientKey: string;
  /** `ip:port` of the client. */
  readonly client: string;
  /**
   * What it was last allowed to (its tunnel, or its latest request's host and port): what a shared
   * proxy checks again when its sandbox's allowlist changes.
   */
  target: OpenTarget | undefined;
  readonly entry: ConnectionEntry | undefined;
  readonly memory: Charge;
  readonly overloaded: boolean;
  /** Client bytes already counted for earlier requests on this connection. */
  readonly counted = { read: 0 };
  /** Its requests, one at a time; made when Node's HTTP parser first hands one over. */
  pipeline: Pipeline | undefined;
  /** What Node's HTTP parser is charged for reading it (parserBytes), 0 once it no longer does. */
  parserCharge = 0;
  /** The first head's deadline, counted from the accept. */
  firstHeadTimer: NodeJS.Timeout | undefined;
  /** A CONNECT or an Upgrade took it out of Node's HTTP handling. */
  takenOver = false;
  /** Closed by its shared proxy because its sandbox's allowlist no longer allows it (tenants.ts). */
  revoked = false;
  /**
   * Node's HTTP parser failed on it. The parser stays failed: every later read of the connection
   * (more of the same bytes) is reported again, and is that one failure, refused once.
   */
  parserFailed = false;
  private refusedAlready = false;
  private counting = true;
  private child: Logger | undefined;
  /**
   * The request under way, as the way to refuse it: the HTTP parser can fail on a request's body
   * (or on the next request pipelined behind it) while the request is decided or forwarded, and
   * that request must end with its own one refusal or cut, never a second answer.
   */
  private underWay: ((refusal: Refusal) => void) | undefined;
  /** The response `underWay` belongs to. */
  private underWayOf: ServerResponse | undefined;

  constructor(
    readonly socket: Socket,
    private readonly accepted: Accepted,
  ) {
    this.id = accepted.id;
    this.clientIp = accepted.clientIp;
    this.clientKey = accepted.identity.key;
    this.client = `${accepted.clientIp}:${socket.remotePort ?? 0}`;
    this.entry = accepted.entry;
    this.memory = accepted.memory;
    this.overloaded = accepted.overloaded;
    (socket as Carrier)[CONNECTION] = this;
  }

  /** Its lines' logger (conn, client, and via for a transparent one); built on first use. */
  get log(): Logger {
    const via = this.entry === undefined ? undefined : this.entry.kind === 'inspect' ? 'inspect' : 'transparent';
    const sandbox = this.accepted.identity.sandbox;
    this.child ??= this.accepted.root.child({ [F.conn]: this.id, [F.client]: this.client, ...(sandbox !== undefined && { [F.sandbox]: sandbox }), ...(via && { [F.via]: via }) });
    return this.child;
  }

  /** Who it is (admission/identity.ts). */
  get identity(): ClientIdentity {
    return this.accepted.identity;
  }

  /** The policy its requests are decided by now (its sandbox's, on a shared proxy). */
  policy(): Policy {
    return this.accepted.identity.policy();
  }

  /**
   * The connection of the decrypted stream inside this one (an inspected connection): the same
   * client, id and memory charge; its slot in the limits is this one's, so it gives none back.
   */
  inner(socket: Socket, entry: InspectedEntry): ClientConnection {
    return new ClientConnection(socket, { ...this.accepted, entry, overloaded: false, uncount: () => undefined });
  }

  /** Whether it was refused already (a second refusal writes nothing). */
  get refused(): boolean {
    return this.refusedAlready;
  }

  /** Stops counting it against the connection limits (idempotent): at its close, or at once when it is refused. */
  release(): void {
    if (!this.counting) return;
    this.counting = false;
    this.accepted.uncount();
  }

  /** Ends it, refused: writes `last` (a response or a TLS alert), and gives its slot back at once. */
  close(last: string | Buffer | undefined): void {
    this.refusedAlready = true;
    this.release();
    this.accepted.closer.close(this.socket, last);
  }

  /** Writes a refusal on the raw socket (CONNECT, or before HTTP parsing) and ends it. */
  refuse(refusal: Refusal): void {
    this.close(refusalBytes(refusal));
  }

  /** Stops Node's HTTP parser's charge, once it no longer reads the connection. */
  leaveParser(): void {
    this.memory.shrink(this.parserCharge);
    this.parserCharge = 0;
  }

  /** Ends the first head's deadline: the head arrived, or the connection closed. */
  firstHeadDone(): void {
    clearTimeout(this.firstHeadTimer);
    this.firstHeadTimer = undefined;
  }

  /**
   * Makes `hook` the way to refuse the request under way, until its response closes. A request
   * hands its hook on as it goes (decided, then forwarded): one listener per response clears it.
   */
  holdInFlight(res: ServerResponse, hook: (refusal: Refusal) => void): void {
    this.underWay = hook;
    if (this.underWayOf === res) return;
    this.underWayOf = res;
    res.once('close', () => {
      if (this.underWayOf !== res) return;
      this.underWay = undefined;
      this.underWayOf = undefined;
    });
  }

  /** The way to refuse the request under way, if one is. */
  get inFlight(): ((refusal: Refusal) => void) | undefined {
    return this.underWay;
  }

  /** The request that starts now takes the place of one that ended without its response closing. */
  clearInFlight(): void {
    this.underWay = undefined;
    this.underWayOf = undefined;
  }
}

/** The connection the server accepted on `socket`; undefined for a socket it did not accept. */
export function connectionOf(socket: Socket): ClientConnection | undefined {
  return (socket as Carrier)[CONNECTION];
}
