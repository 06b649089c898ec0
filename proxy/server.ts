/**
 * The egress proxy server: accepts client connections (within the connection limits), parses
 * HTTP with Node's strict parser, and hands CONNECT to the tunnel and absolute-form requests to
 * the forwarder. Malformed input of any kind is answered with a 4xx and the connection closed;
 * nothing a client sends can crash the process.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import type { Registry } from 'prom-client';
import type { Policy } from '../policy/index.js';
import type { ClientLookup } from './dns/index.js';
import { ClientConnection, connectionOf, type TransparentEntry, type ProxyContext, MAX_WAITING, Pipeline, healthCheckHead } from './admission/index.js';
import { DecisionRecorder, LineGate, logSuppressed, type LineGateLimits, F, logLine, type Logger, Closer, refusalBytes, refuseResponse, type Refusal, createProxyMetrics } from './record/index.js';
import { clientShare, DEFAULT_LIMITS, type ProxyLimits, ACCEPT_BYTES, BODY_WAIT_BYTES, MemoryBudget, parserBytes, requestBytes, UNCHARGED } from './budget/index.js';
import { defaultConnect, type Connect, UpstreamPools, canonicalAddress, isOwnListener, type Listener } from './upstream/index.js';
import { createForwarder, readConnectHead } from './http/index.js';
import { connectBodyProblem, handleConnect } from './tunnel/index.js';
import { startTransparent, type Transparent, type TransparentOptions, alertFor, handleTransparentTls, refuseTls } from './transparent/index.js';

export interface EgressProxyOptions {
  readonly policy: Policy;
  /** Lookups for the pinned resolution; a ClientLookup (createLookup's) holds each client to its share. */
  readonly lookup: ClientLookup;
  readonly logger: Logger;
  readonly limits?: Partial<ProxyLimits>;
  /** Opens upstream TCP connections; tests inject one to observe dials. */
  readonly connect?: Connect;
  /**
   * The process's budget of bytes held before a verdict (memory-plan.ts sizes it), shared by
   * every listener's connections; without one, nothing is refused for memory.
   */
  readonly memory?: MemoryBudget;
}

export interface EgressProxy {
  listen(host: string, port: number): Promise<AddressInfo>;
  /**
   * Starts transparent mode's DNS, TLS and HTTP listeners; resolves once they listen (after
   * waiting for their address to appear on an interface, if it has not yet).
   */
  listenTransparent(options: TransparentOptions): Promise<Transparent>;
  /** Stops accepting, then closes every open connection and tunnel. */
  close(): Promise<void>;
  /** Replaces the policy for new requests; open tunnels are left alone. */
  setPolicy(policy: Policy): void;
  readonly openConnections: number;
  /** Prometheus registry of this proxy's metrics. */
  readonly metrics: Registry;
}

const HEAD_TIMEOUT: Refusal = { reason: 'header_timeout', detail: 'the request head did not arrive in time' };

/** Consecutive accept failures are logged once a second at most (a descriptor shortage repeats on every accept). */
const ACCEPT_ERROR_LOG_MS = 1_000;
/** How long the machine's interface addresses are taken as read (the self-loop check). */
const INTERFACES_REFRESH_MS = 1_000;
const INTERNAL_ERROR: Refusal = { reason: 'internal_error', detail: 'the proxy failed while deciding' };
/**
 * Connections over the connection limits that are read at once to see whether they are the
 * health check, and for how long: a container's health check must not fail (and get the proxy
 * restarted, with every tunnel) because clients hold every slot.
 */
const PROBE_SLOTS = 8;
/** Refusal lines one client, and every client together, may cause (a line is ~300-500 bytes). */
export const REFUSAL_LINES: LineGateLimits = Object.freeze({ clientPerSecond: 20, clientBurst: 100, totalPerSecond: 100, totalBurst: 400, maxClients: 4_096 });
/** How often the count of refusals without a line is written. */
const SUPPRESSED_REPORT_MS = 10_000;
const PROBE_MS = 2_000;

/** The health check's answer, for a connection the proxy closes after it. */
function healthAnswer(method: 'GET' | 'HEAD'): string {
  return `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\n${method === 'GET' ? 'ok\n' : ''}`;
}

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

export function createEgressProxy(options: EgressProxyOptions): EgressProxy {
  const configured: ProxyLimits = { ...DEFAULT_LIMITS, ...options.limits };
  // One client's connections stay a share of the total, however the total was lowered.
  const limits: ProxyLimits = Object.freeze({ ...configured, maxConnectionsPerClient: clientShare(configured.maxConnections, configured.maxConnectionsPerClient) });
  const log = options.logger;
  let policy = options.policy;
  const connect = options.connect ?? defaultConnect;
  const budget = options.memory ?? new MemoryBudget({ totalBytes: Infinity, perClientBytes: Infinity });
  const metrics = createProxyMetrics(() => budget.used);
  const observer = metrics.observer;
  const pools = new UpstreamPools({ connect, connectTimeoutMs: limits.connectTimeoutMs, idleTimeoutMs: limits.idleTimeoutMs, maxHeaderBytes: 64 * 1024, maxPools: 1024 });
  const lookup: ClientLookup = async (name, client) => {
    const t = performance.now();
    const outcome = await options.lookup(name, client);
    observer.dnsLookup((performance.now() - t) / 1000, outcome.ok ? 'ok' : outcome.reason);
    return outcome;
  };
  // Refusal lines, capped per client and in all; what is over the caps is summed up every interval.
  const lines = new LineGate(REFUSAL_LINES);
  const gateFor =
    (clientIp: string) =>
    (reason: string): boolean =>
      lines.admit(clientIp, reason);
  const reportSuppressed = (): void =>
    logSuppressed(lines, log, 'decision_lines_suppressed', 'refusals counted without a line of their own (over the per-client line rate); the decision metric counts each');
  const reporter = setInterval(reportSuppressed, SUPPRESSED_REPORT_MS);
  reporter.unref();
  // Every address and port the proxy listens on, and the machine's interface addresses (read
  // again at most once a second: an address can appear after start).
  const listeners: Listener[] = [];
  const listening = (address: string, port: number): void => {
    listeners.push({ address: canonicalAddress(address) ?? address, port });
  };
  let interfaces = { at: -Infinity, addresses: new Set<string>() };
  const machineAddresses = (): ReadonlySet<string> => {
    const now = Date.now();
    if (now - interfaces.at > INTERFACES_REFRESH_MS) {
      const all = Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((i) => canonicalAddress(i.address)));
      interfaces = { at: now, addresses: new Set(all.filter((a) => a !== undefined)) };
    }
    return interfaces.addresses;
  };
  const ownListener = (address: string, port: number): boolean => isOwnListener(address, port, listeners, machineAddresses());
  const ctx: ProxyContext = { policy: () => policy, lookup, ownListener, limits, connect, pools, observer };
  const closer = new Closer();
  /** The one recorder of the decision line and metric of a request on `connection`. */
  const recorderFor = (connection: ClientConnection, method: string | undefined): DecisionRecorder =>
    new DecisionRecorder(observer, connection.log, method, 'info', gateFor(connection.clientIp));
  /** The decision line and metric of a refusal the server itself makes (no forwarding began). */
  const denyLine = (connection: ClientConnection, refusal: Refusal, method?: string): void => recorderFor(connection, method).deny(refusal);
  const pipelineOf = (connection: ClientConnection): Pipeline => {
    connection.pipeline ??= new Pipeline(connection.socket, {
      parseError: (refusal) => parseFailed(connection, refusal),
      dropped: (count) =>
        logLine(connection.log, { [F.event]: 'requests_dropped', [F.requests]: count, [F.detail]: 'the connection closed before these pipelined requests were started' }),
      overflow: () => denyLine(connection, { reason: 'bad_request', detail: `more than ${MAX_WAITING} pipelined requests waiting for their turn; the connection is cut` }),
    });
    return connection.pipeline;
  };
  /**
   * The connection Node's HTTP server hands an event for. Every socket it reads came from
   * `accept`; one that did not is closed, never served.
   */
  const connectionFor = (socket: net.Socket): ClientConnection | undefined => {
    const connection = connectionOf(socket);
    if (connection === undefined) socket.destroy();
    return connection;
  };

  const httpServer = http.createServer({
    maxHeaderSize: limits.maxHeaderBytes,
    headersTimeout: limits.headerTimeoutMs,
    requestTimeout: 0,
    connectionsCheckingInterval: Math.min(1_000, limits.headerTimeoutMs),
    keepAliveTimeout: 5_000,
    noDelay: true,
    // A missing Host is refused by the forwarder, with a reason the client can read.
    requireHostHeader: false,
  });
  httpServer.timeout = limits.idleTimeoutMs;
  // Every field reaches the checks (the head is already bounded by maxHeaderBytes): Node's
  // default of 2000 would let a framing field hide behind 2000 others.
  httpServer.maxHeadersCount = 0;
  const forward = createForwarder(ctx);

  const failClosed = (what: string, err: unknown, fallback: () => void): void => {
    log.error({ err, [F.event]: what }, 'handler failed; connection refused');
    fallback();
  };
  /**
   * Charges a parsed request to its connection until its response is done: its head's objects,
   * and a body it may already have been read into Node's parser while it waits its turn. When
   * that does not fit, a request that would start now is refused `overloaded` in its turn; one
   * that would wait cuts the connection (its refusal could only be written after the responses
   * before it, holding the bytes meanwhile), like one request too many in the pipeline.
   */
  const chargeRequest = (connection: ClientConnection, req: http.IncomingMessage, res: http.ServerResponse): boolean => {
    const waits = connection.pipeline?.busy ?? false;
    const length = req.headers['content-length'];
    const body = req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    const bytes = requestBytes(req.url ?? '', req.rawHeaders) + (waits && body ? BODY_WAIT_BYTES : 0);
    const { memory } = connection;
    if (memory.grow(bytes)) {
      res.once('close', () => memory.shrink(bytes));
      return true;
    }
    const refusal: Refusal = { reason: 'overloaded', detail: budget.explain(connection.clientIp, bytes), retryAfter: 1 };
    if (waits) {
      denyLine(connection, refusal, req.method);
      req.socket.destroy();
      return false;
    }
    pipelineOf(connection).add(res, () => {
      connection.holdInFlight(res, () => undefined);
      denyLine(connection, refusal, req.method);
      refuseResponse(res, refusal);
    });
    return false;
  };
  httpServer.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const connection = connectionFor(req.socket);
    if (connection === undefined) return;
    connection.firstHeadDone();
    if (!chargeRequest(connection, req, res)) return;
    pipelineOf(connection).add(res, () => {
      connection.clearInFlight();
      const record = recorderFor(connection, req.method);
      forward(connection, req, res, record).catch((err: unknown) =>
        failClosed('request', err, () => {
          // The request's line, unless it has one already; its response, unless one started.
          record.deny(INTERNAL_ERROR);
          refuseResponse(res, INTERNAL_ERROR);
        }),
      );
    });
  });
  // A connection on the transparent TLS listener: routed by its ClientHello (transparent-tls.ts).
  const onTransparentTls = (connection: ClientConnection, port: number): void => {
    const record = recorderFor(connection, undefined);
    handleTransparentTls(ctx, connection, port, record).catch((err: unknown) =>
      failClosed('transparent_tls', err, () => {
        record.deny(INTERNAL_ERROR);
        connection.socket.destroy();
      }),
    );
  };
  const onConnect = (connection: ClientConnection, request: { target: string; bodyProblem: string | undefined }, head: Buffer): void => {
    const record = recorderFor(connection, 'CONNECT');
    handleConnect(ctx, connection, request, head, record).catch((err: unknown) =>
      failClosed('connect', err, () => {
        record.deny(INTERNAL_ERROR);
        connection.refuse(INTERNAL_ERROR);
      }),
    );
  };
  // Node hands a CONNECT or an Upgrade over as the raw socket even while an earlier request's
  // response on that connection is still pending: anything written to the socket then would land
  // inside that response. Such a request gets its own deny line and the connection is cut (the
  // earlier request logs client_closed); a client sends these on a connection of their own.
  const behindPending = (req: http.IncomingMessage, connection: ClientConnection): boolean => {
    if (!connection.pipeline?.busy) return false;
    denyLine(connection, { reason: 'bad_request', detail: `${req.method === 'CONNECT' ? 'CONNECT' : 'an Upgrade request'} pipelined behind a request still being answered` }, req.method);
    connection.socket.destroy();
    return true;
  };
  /** A CONNECT or an Upgrade takes the connection out of Node's HTTP handling. */
  const takeOver = (socket: net.Socket): ClientConnection | undefined => {
    const connection = connectionFor(socket);
    if (connection === undefined) return undefined;
    connection.takenOver = true;
    connection.firstHeadDone();
    connection.leaveParser();
    return connection;
  };
  httpServer.on('connect', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    const connection = takeOver(socket);
    if (connection === undefined || behindPending(req, connection)) return;
    if (connection.entry !== undefined) {
      const refusal: Refusal = { reason: 'bad_request', detail: 'CONNECT to a transparent listener (use the proxy port)' };
      denyLine(connection, refusal, req.method);
      connection.refuse(refusal);
      return;
    }
    onConnect(connection, { target: req.url ?? '', bodyProblem: connectBodyProblem(req.rawHeaders) }, head);
  });
  // Without this listener Node answers an Expect other than 100-continue with its own 417, which
  // carries no X-Egress-Reason and keeps the connection alive.
  httpServer.on('checkExpectation', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const connection = connectionFor(req.socket);
    if (connection === undefined) return;
    pipelineOf(connection).add(res, () => {
      // Refused here and now: a parse error behind it is not answered or logged again (the
      // refusal closes the connection).
      connection.holdInFlight(res, () => undefined);
      const refusal: Refusal = { reason: 'bad_request', detail: 'unsupported Expect header (only 100-continue)' };
      denyLine(connection, refusal, req.method);
      refuseResponse(res, refusal);
    });
  });
  // Node keeps a socket that asked for an upgrade out of its request flow (and would drop any
  // request pipelined behind it): refused, with its reason, like every other request it cannot take.
  httpServer.on('upgrade', (req: http.IncomingMessage, socket: net.Socket) => {
    const connection = takeOver(socket);
    if (connection === undefined || behindPending(req, connection)) return;
    const refusal: Refusal = { reason: 'bad_request', detail: 'protocol upgrades are not forwarded (use CONNECT for WebSocket and other protocols)' };
    denyLine(connection, refusal, req.method);
    connection.refuse(refusal);
  });
  httpServer.on('clientError', (err: NodeJS.ErrnoException, socket: net.Socket) => {
    const connection = connectionFor(socket);
    if (connection === undefined) return;
    connection.firstHeadDone();
    // A client that reset or left is not a request to refuse, and a refused connection is only closed.
    if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || connection.refused) {
      socket.destroy();
      return;
    }
    const refusal = clientError(err);
    // The failing bytes follow the last request parsed: if it still waits for its turn, the
    // refusal meets it when it starts.
    if (connection.pipeline?.holdParseError(refusal)) return;
    parseFailed(connection, refusal);
  });
  /** A parse error after the request under way (if any), or on a connection between requests. */
  function parseFailed(connection: ClientConnection, refusal: Refusal): void {
    // The request under way ends with this refusal (or is cut if its response has started),
    // through its own decision line.
    const underWay = connection.inFlight;
    if (underWay !== undefined) {
      underWay(refusal);
      return;
    }
    denyLine(connection, refusal);
    // A response still owed (to a request the proxy answers itself, such as /healthz) goes
    // first; the refusal follows it.
    const { pipeline } = connection;
    if (pipeline === undefined) connection.refuse(refusal);
    else pipeline.whenSettled(() => connection.refuse(refusal));
  }

  // Connection limits are applied before HTTP parsing, so a flood of idle sockets costs no parser.
  const perClient = new Map<string, number>();
  let open = 0;
  let nextId = 1;
  const sockets = new Set<net.Socket>();
  const parserCharge = parserBytes(limits.maxHeaderBytes);
  /**
   * Admits a client connection within the limits, then reads it (every listener's connections;
   * `entry` is the transparent listener it came in on).
   */
  const accept = (socket: net.Socket, entry?: TransparentEntry): void => {
    // One spelling per client: on a listener bound to ::, an IPv4 client is ::ffff:a.b.c.d, and
    // would otherwise hold a second share beside its plain address on the transparent listeners.
    const remote = socket.remoteAddress ?? 'unknown';
    const clientIp = canonicalAddress(remote) ?? remote;
    socket.on('error', () => socket.destroy());
    const fromClient = perClient.get(clientIp) ?? 0;
    if (open >= limits.maxConnections || fromClient >= limits.maxConnectionsPerClient) {
      const refusal: Refusal =
        open >= limits.maxConnections
          ? { reason: 'too_many_connections', detail: `${open} connections are open`, retryAfter: 1 }
          : { reason: 'client_limit', detail: `${fromClient} connections are open from ${clientIp} (its share: ${limits.maxConnectionsPerClient})`, retryAfter: 1 };
      // Refused before the connection has a logger of its own: the line names the client.
      let refused = false;
      const refuse = (): void => {
        if (refused) return;
        refused = true;
        const via = entry === undefined ? {} : { [F.via]: 'transparent', [F.port]: entry.port };
        new DecisionRecorder(observer, log, undefined, 'warn', gateFor(clientIp)).deny(refusal, { [F.client]: `${clientIp}:${socket.remotePort ?? 0}`, ...via });
        // A TLS client reads no HTTP answer.
        closer.close(socket, entry?.kind === 'tls' ? alertFor(refusal) : refusalBytes(refusal));
      };
      // The health check has slots of its own: a connection over the limits is read (in one of
      // a few reserved slots, for a moment) to see whether it is one. Transparent listeners take
      // no health check.
      if (entry === undefined && probes.size < PROBE_SLOTS && !probing.has(clientIp)) probeHealth(socket, clientIp, refuse);
      else refuse();
      return;
    }
    // Served only with room for its first read: a client past its share of the memory budget (or
    // the proxy past all of it) gets nothing more until what it holds is decided. Its first read
    // is still looked at (and dropped), so that the health check is answered.
    const admitted = budget.admit(clientIp, ACCEPT_BYTES);
    const memory = admitted ?? UNCHARGED;
    open += 1;
    perClient.set(clientIp, fromClient + 1);
    sockets.add(socket);
    const uncount = (): void => {
      open -= 1;
      const left = (perClient.get(clientIp) ?? 1) - 1;
      if (left === 0) perClient.delete(clientIp);
      else perClient.set(clientIp, left);
    };
    const connection = new ClientConnection(socket, { id: nextId++, clientIp, entry, memory, overloaded: admitted === undefined, root: log, closer, uncount });
    socket.once('close', () => {
      sockets.delete(socket);
      connection.release();
      memory.release();
    });
    if (entry?.kind !== 'tls') readFirstChunk(connection);
    else if (admitted !== undefined) onTransparentTls(connection, entry.port);
    else {
      // A transparent TLS client reads no HTTP answer, and no health check comes this way.
      const refusal: Refusal = { reason: 'overloaded', detail: budget.explain(clientIp, ACCEPT_BYTES), retryAfter: 1 };
      recorderFor(connection, undefined).deny(refusal, { [F.port]: entry.port });
      refuseTls(connection, refusal);
    }
  };
  /**
   * Connections over the limits read to see whether they are the health check: PROBE_SLOTS at
   * most, one per client address, each freed as soon as it is answered or refused.
   */
  const probes = new Set<net.Socket>();
  const probing = new Set<string>();
  const probeHealth = (socket: net.Socket, clientIp: string, refuse: () => void): void => {
    probes.add(socket);
    probing.add(clientIp);
    sockets.add(socket);
    let held = true;
    const free = (): void => {
      if (!held) return;
      held = false;
      probes.delete(socket);
      probing.delete(clientIp);
    };
    const refuseNow = (): void => {
      free();
      refuse();
    };
    socket.once('close', () => {
      free();
      sockets.delete(socket);
    });
    socket.setTimeout(PROBE_MS, refuseNow);
    socket.once('end', refuseNow);
    socket.once('data', (chunk: Buffer) => {
      socket.setTimeout(0);
      socket.off('end', refuseNow);
      free();
      const health = healthCheckHead(chunk);
      if (health === undefined) refuse();
      else closer.close(socket, healthAnswer(health));
    });
  };
  const netServer = net.createServer({ allowHalfOpen: true, noDelay: true }, accept);
  let transparent: Transparent | undefined;
  let closed = false;

  /**
   * The first bytes decide the path: a complete, plain CONNECT head goes straight to the tunnel;
   * anything else is handed to Node's HTTP server, with those bytes, as if it had read them
   * itself. The head's deadline runs from the accept on either path.
   */
  const headTimedOut = (connection: ClientConnection): void => {
    connection.firstHeadTimer = undefined;
    if (connection.refused) return;
    denyLine(connection, HEAD_TIMEOUT);
    connection.refuse(HEAD_TIMEOUT);
  };
  function readFirstChunk(connection: ClientConnection): void {
    const { socket } = connection;
    const accepted = Date.now();
    connection.firstHeadTimer = setTimeout(() => headTimedOut(connection), limits.headerTimeoutMs);
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
        overloadedAtHandOver(connection, chunk, ACCEPT_BYTES);
        return;
      }
      // Only the proxy port takes CONNECT: a transparent HTTP listener's bytes all go to the parser.
      const fast = connection.entry === undefined ? readConnectHead(chunk, limits.maxHeaderBytes) : undefined;
      if (fast !== undefined) {
        connection.firstHeadDone();
        socket.pause();
        onConnect(connection, { target: fast.target, bodyProblem: undefined }, chunk.subarray(fast.length));
        return;
      }
      // Node's parser holds what it reads in ways the proxy cannot see (a head still arriving is
      // kept as strings): the connection is charged its worst for as long as the parser has it.
      if (!connection.memory.grow(parserCharge)) {
        overloadedAtHandOver(connection, chunk, parserCharge);
        return;
      }
      connection.parserCharge = parserCharge;
      // Node's own header timer starts now; ours keeps the deadline counted from the accept.
      clearTimeout(connection.firstHeadTimer);
      connection.firstHeadTimer = setTimeout(() => headTimedOut(connection), Math.max(0, limits.headerTimeoutMs - (Date.now() - accepted)));
      // Paused across the hand-over, so that Node's parser meets a socket whose pause and resume
      // it controls: handed over flowing, its first pause for a request body it cannot take yet
      // was undone, and bodies were read into memory without limit.
      // A CONNECT or Upgrade in that chunk takes the socket over (Node leaves it unread for its
      // handler): resumed here, the bytes after its head would be emitted to no listener and lost.
      socket.pause();
      httpServer.emit('connection', socket);
      socket.emit('data', chunk);
      if (!connection.takenOver) socket.resume();
    });
  }

  /**
   * A connection the budget has no room for (`wanted` more bytes), at its first read: refused
   * `overloaded`, unless it is the health check, which is answered here and now. A container's
   * health check must not fail (and get the proxy restarted, with every tunnel) because clients
   * filled the budget.
   */
  function overloadedAtHandOver(connection: ClientConnection, chunk: Buffer, wanted: number): void {
    connection.firstHeadDone();
    // A transparent HTTP listener's requests are meant for the host they name, never the proxy.
    const health = connection.entry === undefined ? healthCheckHead(chunk) : undefined;
    if (health !== undefined) {
      connection.close(healthAnswer(health));
      return;
    }
    const refusal: Refusal = { reason: 'overloaded', detail: budget.explain(connection.clientIp, wanted), retryAfter: 1 };
    denyLine(connection, refusal);
    connection.refuse(refusal);
  }

  let acceptErrors = 0;
  let acceptErrorLogged = 0;
  /**
   * An accept that failed (no descriptor left: EMFILE, ENFILE) ends that one connection, never
   * the process: without a listener the server's 'error' event was an uncaught exception.
   */
  const acceptFailed = (err: NodeJS.ErrnoException): void => {
    acceptErrors += 1;
    const now = Date.now();
    if (now - acceptErrorLogged < ACCEPT_ERROR_LOG_MS) return;
    acceptErrorLogged = now;
    log.error({ [F.event]: 'accept_failed', [F.error]: err.code ?? err.message, count: acceptErrors }, 'a connection could not be accepted; the proxy goes on');
    acceptErrors = 0;
  };

  return {
    listen(host, port) {
      return new Promise((resolve, reject) => {
        netServer.once('error', reject);
        netServer.listen({ host, port }, () => {
          netServer.off('error', reject);
          netServer.on('error', acceptFailed);
          // The HTTP server never listens itself (connections are handed to it), but its
          // header-timeout sweep starts on 'listening'.
          httpServer.emit('listening');
          const bound = netServer.address() as AddressInfo;
          listening(bound.address, bound.port);
          resolve(bound);
        });
      });
    },
    async listenTransparent(options) {
      if (transparent !== undefined) throw new Error('transparent mode is already listening');
      const started = await startTransparent(options, { accept, policy: () => policy, observer, log, closed: () => closed });
      // Closed while it was binding: nothing may stay listening.
      if (closed) await started.close();
      else {
        transparent = started;
        for (const p of started.ports) listening(options.listen, p.listen);
      }
      return started;
    },
    close() {
      closed = true;
      clearInterval(reporter);
      reportSuppressed();
      void transparent?.close();
      return new Promise((resolve) => {
        netServer.close(() => resolve());
        httpServer.close(() => undefined); // stops the header-timeout sweep
        httpServer.closeAllConnections();
        for (const socket of sockets) socket.destroy();
        pools.destroy();
      });
    },
    setPolicy(next) {
      policy = next;
    },
    get openConnections() {
      return open;
    },
    metrics: metrics.registry,
  };
}
