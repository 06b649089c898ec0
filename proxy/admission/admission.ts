/**
 * Admission: every client connection, from every listener, is counted against the connection
 * limits (the total, and the client's share of it) and given room in the memory budget for its
 * first read before anything of it is read, so that a flood of idle sockets costs no parser. One
 * past the limits is refused with its reason (an HTTP answer, or a TLS alert on a transparent TLS
 * listener); one the budget has no room for is only refused once its first read shows it is not
 * the health check. An admitted connection becomes a ClientConnection and is served.
 */
import type { Socket } from 'node:net';
import type { Policy } from '../../policy/index.js';
import { ACCEPT_BYTES, RateLimiter, UNCHARGED, type MemoryBudget, type ProxyLimits } from '../budget/index.js';
import { F, refusalBytes, tlsAlertFor, type Closer, type Decisions, type Logger, type ProxyObserver, type Refusal } from '../record/index.js';
import { canonicalAddress } from '../upstream/index.js';
import { ClientConnection, type TransparentEntry } from './connection.js';
import { isRefusal, type ClientIdentity } from './identity.js';
import { healthAnswer, healthCheckHead } from './health-check.js';

/**
 * Connections over the connection limits that are read at once to see whether they are the
 * health check, one per client address, each for at most PROBE_MS: a container's health check
 * must not fail (and get the proxy restarted, with every tunnel) because clients hold every slot.
 */
const PROBE_SLOTS = 8;
/**
 * The addresses of the container's own health check (the image's HEALTHCHECK asks 127.0.0.1),
 * read past the limits even when every slot is taken: no packet from a network carries a
 * loopback source, so no other client can hold these. On a shared proxy such a check is a client
 * of no registered network, read only here, and eight addresses of no registered network (the
 * shared network's, the host's) that connected and sent nothing held every slot before. Still one
 * read at a time per address, so this adds at most two reads.
 */
const LOCAL_HEALTH = new Set(['127.0.0.1', '::1']);
/** Clients the new-connection rate table remembers (rate-limit.ts caps and shares it beyond). */
const RATE_KEYS = 4_096;
/** Connections over a client's rate answered 429 each second; the rest are closed unread. */
const RATE_ANSWERS_PER_SECOND = 10;
const PROBE_MS = 2_000;

/** How a proxy tells its clients apart. */
export interface Identities {
  /** Who the client of `socket` (at `clientIp`, canonical) is, or why it is not served. */
  identify(socket: Socket, clientIp: string): ClientIdentity | Refusal;
  /** An admitted connection, until it closes (a shared proxy closes it when its sandbox's policy no longer allows it). */
  admitted(connection: ClientConnection): void;
  /**
   * New connections one client may open a second (a shared proxy's sandbox: its churn spends the
   * process's one event loop, which the other sandboxes share); none: not limited.
   */
  readonly connectionRate?: { readonly perSecond: number; readonly burst: number } | undefined;
  /** Given the proxy's metrics once: a shared proxy drops a sandbox's series when its registration ends. */
  observe?(observer: ProxyObserver): void;
}

/** Every client by its address, under the one policy. */
export function byAddress(policy: () => Policy): Identities {
  return {
    identify: (_socket, clientIp) => ({ key: clientIp, policy }),
    admitted: () => undefined,
  };
}

export interface AdmissionDeps {
  readonly limits: ProxyLimits;
  readonly budget: MemoryBudget;
  readonly closer: Closer;
  readonly decisions: Decisions;
  /** The proxy's logger (the connections' own are children of it). */
  readonly log: Logger;
  /** Who each client is: by address, or by sandbox network on a shared proxy. */
  readonly identities: Identities;
  /** Serves an admitted connection: its first bytes (the proxy port, transparent HTTP), or its ClientHello. */
  serve(connection: ClientConnection): void;
}

export class Admission {
  private readonly perClient = new Map<string, number>();
  private open = 0;
  private nextId = 1;
  /** Every socket admitted or being probed, to be destroyed when the proxy closes. */
  private readonly sockets = new Set<Socket>();
  private readonly probes = new Set<Socket>();
  private readonly probing = new Set<string>();
  private readonly rates: RateLimiter | undefined;
  /** The same rate for clients no identity holds, by address (a table of its own: a sandbox may be named like an address). */
  private readonly strangerRates: RateLimiter | undefined;
  private readonly rateAnswers = new RateLimiter(RATE_ANSWERS_PER_SECOND, RATE_ANSWERS_PER_SECOND * 2, RATE_KEYS);

  constructor(private readonly deps: AdmissionDeps) {
    const rate = deps.identities.connectionRate;
    this.rates = rate === undefined ? undefined : new RateLimiter(rate.perSecond, rate.burst, RATE_KEYS);
    this.strangerRates = rate === undefined ? undefined : new RateLimiter(rate.perSecond, rate.burst, RATE_KEYS);
  }

  /** Connections counted against the limits now. */
  get openConnections(): number {
    return this.open;
  }

  /** Admits a client connection within the limits, then serves it; `entry` is the transparent listener it came in on. */
  readonly accept = (socket: Socket, entry?: TransparentEntry): void => {
    const { limits, budget } = this.deps;
    // One spelling per client: on a listener bound to ::, an IPv4 client is ::ffff:a.b.c.d, and
    // would otherwise hold a second share beside its plain address on the transparent listeners.
    const remote = socket.remoteAddress ?? 'unknown';
    const clientIp = canonicalAddress(remote) ?? remote;
    socket.on('error', () => socket.destroy());
    const identity = this.deps.identities.identify(socket, clientIp);
    if (isRefusal(identity)) {
      // A shared proxy's client of no registration (a sandbox whose slot is vacant or refused,
      // fail closed) is held to the connection rate too, by its address: each refusal is read
      // and answered, so its churn would otherwise spend the event loop every sandbox shares.
      // Past the rate it is closed unread; it would be refused anyway.
      if (this.strangerRates !== undefined && !this.strangerRates.takeFor(clientIp)) return void socket.destroy();
      // Its first read is still looked at: the container's health check comes from loopback.
      this.overLimits(socket, clientIp, entry, identity);
      return;
    }
    const key = identity.key;
    if (this.rates !== undefined && !this.rates.takeFor(key)) {
      // A few are told why; past that they are closed unread: answering a flood of them would
      // spend the event loop the other clients share.
      if (!this.rateAnswers.takeFor(key)) return void socket.destroy();
      const rate = this.deps.identities.connectionRate?.perSecond ?? 0;
      this.overLimits(socket, clientIp, entry, { reason: 'client_limit', detail: `more than ${rate} new connections a second from sandbox ${identity.sandbox ?? key}`, retryAfter: 1 }, identity);
      return;
    }
    const fromClient = this.perClient.get(key) ?? 0;
    if (this.open >= limits.maxConnections || fromClient >= limits.maxConnectionsPerClient) {
      const who = identity.sandbox === undefined ? clientIp : `sandbox ${identity.sandbox}`;
      const refusal: Refusal =
        this.open >= limits.maxConnections
          ? { reason: 'too_many_connections', detail: `${this.open} connections are open`, retryAfter: 1 }
          : { reason: 'client_limit', detail: `${fromClient} connections are open from ${who} (its share: ${limits.maxConnectionsPerClient})`, retryAfter: 1 };
      this.overLimits(socket, clientIp, entry, refusal, identity);
      return;
    }
    // Served only with room for its first read: a client past its share of the memory budget (or
    // the proxy past all of it) gets nothing more until what it holds is decided. Its first read
    // is still looked at (and dropped), so that the health check is answered.
    const admitted = budget.admit(key, ACCEPT_BYTES);
    const memory = admitted ?? UNCHARGED;
    this.open += 1;
    this.perClient.set(key, fromClient + 1);
    this.sockets.add(socket);
    const uncount = (): void => {
      this.open -= 1;
      const left = (this.perClient.get(key) ?? 1) - 1;
      if (left === 0) this.perClient.delete(key);
      else this.perClient.set(key, left);
    };
    const { closer, log } = this.deps;
    const connection = new ClientConnection(socket, { id: this.nextId++, clientIp, identity, entry, memory, overloaded: admitted === undefined, root: log, closer, uncount });
    this.deps.identities.admitted(connection);
    socket.once('close', () => {
      this.sockets.delete(socket);
      connection.release();
      memory.release();
    });
    if (entry?.kind === 'tls' && connection.overloaded) {
      // A transparent TLS client reads no HTTP answer, and no health check comes this way.
      const refusal: Refusal = { reason: 'overloaded', detail: budget.explain(key, ACCEPT_BYTES), retryAfter: 1 };
      this.deps.decisions.recorder(connection.log, key, undefined, 'info', identity).deny(refusal, { [F.port]: entry.port });
      connection.close(tlsAlertFor(refusal));
      return;
    }
    this.deps.serve(connection);
  };

  /** Destroys every socket admitted or being probed. */
  destroyAll(): void {
    for (const socket of this.sockets) socket.destroy();
  }

  /**
   * A connection past the limits: refused with `refusal`, after a look at its first read in one
   * of the health check's own slots when one is free, or always from a LOCAL_HEALTH address (the
   * proxy port only: transparent listeners take no health check).
   */
  private overLimits(socket: Socket, clientIp: string, entry: TransparentEntry | undefined, refusal: Refusal, who?: ClientIdentity): void {
    // The line cap and the one health-check read at a time are the sandbox's on a shared proxy,
    // whatever addresses it uses, as its other shares are.
    const key = who?.key ?? clientIp;
    // Refused before the connection has a logger of its own: the line names the client (and its sandbox).
    let refused = false;
    const refuse = (): void => {
      if (refused) return;
      refused = true;
      const via = entry === undefined ? {} : { [F.via]: 'transparent', [F.port]: entry.port };
      const sandbox = who?.sandbox === undefined ? {} : { [F.sandbox]: who.sandbox };
      this.deps.decisions.recorder(this.deps.log, key, undefined, 'warn', who).deny(refusal, { [F.client]: `${clientIp}:${socket.remotePort ?? 0}`, ...sandbox, ...via });
      // A TLS client reads no HTTP answer.
      this.deps.closer.close(socket, entry?.kind === 'tls' ? tlsAlertFor(refusal) : refusalBytes(refusal));
    };
    const slot = this.probes.size < PROBE_SLOTS || LOCAL_HEALTH.has(clientIp);
    if (entry === undefined && slot && !this.probing.has(key)) this.probeHealth(socket, key, refuse, who);
    else refuse();
  }

  /** Reads a connection past the limits once: the health check is answered (naming `who`'s sandbox), anything else refused. */
  private probeHealth(socket: Socket, key: string, refuse: () => void, who: ClientIdentity | undefined): void {
    this.probes.add(socket);
    this.probing.add(key);
    this.sockets.add(socket);
    let held = true;
    const free = (): void => {
      if (!held) return;
      held = false;
      this.probes.delete(socket);
      this.probing.delete(key);
    };
    const refuseNow = (): void => {
      free();
      refuse();
    };
    socket.once('close', () => {
      free();
      this.sockets.delete(socket);
    });
    socket.setTimeout(PROBE_MS, refuseNow);
    socket.once('end', refuseNow);
    socket.once('data', (chunk: Buffer) => {
      socket.setTimeout(0);
      socket.off('end', refuseNow);
      free();
      const health = healthCheckHead(chunk);
      if (health === undefined) refuse();
      else this.deps.closer.close(socket, healthAnswer(health, who));
    });
  }
}
