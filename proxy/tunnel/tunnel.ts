/**
 * CONNECT: decide on the authority, dial the pinned addresses, then splice raw bytes both ways.
 *
 * A `tls` tunnel (every allowlist entry unless the policy marks it `opaque`) holds the client's
 * bytes until a complete, well-formed ClientHello has arrived and its server name equals the
 * CONNECT host; only then does any client byte reach the upstream. Without this, one allowed name
 * on a shared (CDN) address would reach every site behind it, and a tunnel to port 80 would carry
 * plain HTTP whose Host the proxy never saw.
 *
 * The Host header of a CONNECT request is ignored: only the request-target is decided on and
 * dialed. Half-closes are passed on (each direction ends on its own); an error on either side
 * tears down both.
 */
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { decide, type Reason } from '../../policy/index.js';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import { ACCESS_DENIED_ALERT, type DecisionRecorder, type LineFields, F, logLine, ms, printable, type Refusal } from '../record/index.js';
import { dialPinned, isDialError } from '../upstream/index.js';
import { parseConnectTarget } from '../http/index.js';
import { READ_AHEAD_BYTES, type Charge, type Held } from '../budget/index.js';
import { TlsGuard, type GuardStep } from '../tls/index.js';

const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n';


/**
 * How a tunnel meets its client: a CONNECT (refusals are HTTP responses, the tunnel opens with a
 * `200`, the entry's tunnel mode applies) or a transparent TLS connection (refusals are TLS
 * alerts, nothing is said when it opens, and the ClientHello is always checked).
 */
export interface TunnelEntry {
  /** Written to the client once the upstream is connected, if anything. */
  readonly established: string | undefined;
  /** Ends a connection refused before the tunnel opened. */
  refuse(connection: ClientConnection, refusal: Refusal): void;
  /** Hold client bytes until a ClientHello naming the host has arrived, whatever the entry's mode. */
  readonly alwaysTls: boolean;
}

const CONNECT_ENTRY: TunnelEntry = { established: ESTABLISHED, refuse: (connection, refusal) => connection.refuse(refusal), alwaysTls: false };

function deny(record: DecisionRecorder, connection: ClientConnection, refusal: Refusal, fields: LineFields, entry: TunnelEntry = CONNECT_ENTRY): void {
  record.deny(refusal, fields);
  entry.refuse(connection, refusal);
}

/**
 * CONNECT has no content (RFC 9110 §9.3.6): framing fields would smuggle bytes past the hello
 * check. Read from the raw list, every occurrence, so no count limit or merge can hide one.
 */
export function connectBodyProblem(rawHeaders: readonly string[]): string | undefined {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (name === 'transfer-encoding') return 'a CONNECT request must not carry Transfer-Encoding';
    if (name === 'content-length' && rawHeaders[i + 1]!.trim() !== '0') return 'a CONNECT request must not carry a body (Content-Length)';
  }
  return undefined;
}

/**
 * One CONNECT request: its request-target, and why its head cannot be accepted (framing fields)
 * if that is so; `head` is what the client sent after the head. Its one decision line goes
 * through `record`.
 */
export async function handleConnect(
  ctx: ProxyContext,
  connection: ClientConnection,
  request: { target: string; bodyProblem: string | undefined },
  head: Buffer,
  record: DecisionRecorder,
): Promise<void> {
  const started = performance.now();
  const client = connection.socket;
  client.on('error', () => client.destroy()); // reported by the close line; never crashes the process

  const target = parseConnectTarget(request.target);
  if (!target.ok) return deny(record, connection, { reason: target.reason, detail: target.detail }, {});
  if (request.bodyProblem !== undefined) return deny(record, connection, { reason: 'bad_request', detail: request.bodyProblem }, {});
  return openTunnel(ctx, connection, { host: target.host, port: target.port, started }, head, record, CONNECT_ENTRY);
}

/**
 * Decides on `host:port` (not yet normalised: the policy's host-name rules apply), dials the
 * pinned addresses and splices the client to the upstream; `head` is what the client sent first.
 * Every outcome goes through `record`, every refusal through the entry.
 */
export async function openTunnel(
  ctx: ProxyContext,
  connection: ClientConnection,
  target: {
    readonly host: string;
    readonly port: number;
    readonly started: number;
    /** Bytes of `head` the caller already charged to the connection's memory budget (the hello a transparent listener read). */
    readonly headCharged?: number;
  },
  head: Buffer,
  record: DecisionRecorder,
  entry: TunnelEntry,
): Promise<void> {
  const { started } = target;
  const { socket: client, log, clientIp } = connection;
  const decision = await decide(ctx.policy(), target.host, target.port, (name) => ctx.lookup(name, clientIp), ctx.ownListener);
  const decideMs = ms(started);
  if (!decision.allowed) {
    if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
    return deny(record, connection, decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs }, entry);
  }
  const tls = entry.alwaysTls || decision.tunnel === 'tls';
  // A client gone while its request was decided still gets its one decision line.
  const clientGone = (): void =>
    record.allow({ [F.host]: decision.host, [F.port]: decision.port, [F.rule]: decision.rule, [F.tunnel]: tls ? 'tls' : 'opaque', [F.addresses]: decision.addresses, [F.decideMs]: decideMs, [F.error]: 'client_closed' });
  if (client.destroyed) return clientGone();

  const dialStarted = performance.now();
  let upstream: Socket;
  let dialed: readonly string[];
  try {
    const result = await dialPinned(decision.addresses, decision.port, {
      connect: ctx.connect,
      timeoutMs: ctx.limits.connectTimeoutMs,
      isCancelled: () => client.destroyed,
    });
    upstream = result.socket;
    dialed = result.attempts;
  } catch (err) {
    const attempts = isDialError(err) ? err.attempts : [];
    ctx.observer.connect(ms(dialStarted) / 1000, false);
    return deny(
      record,
      connection,
      { reason: 'connect_failed', detail: (err as Error).message, host: decision.host, port: decision.port },
      { [F.addresses]: decision.addresses, [F.dialed]: attempts, [F.decideMs]: decideMs, [F.connectMs]: ms(dialStarted) },
      entry,
    );
  }
  if (client.destroyed) {
    upstream.destroy();
    return clientGone();
  }

  const connectMs = ms(dialStarted);
  ctx.observer.connect(connectMs / 1000, true);
  ctx.observer.tunnelOpened();
  // The client may go on at once; the decision line is written after the answer.
  if (entry.established !== undefined) client.write(entry.established);
  const allowLine: LineFields = {
    [F.host]: decision.host,
    [F.port]: decision.port,
    [F.rule]: decision.rule,
    [F.tunnel]: tls ? 'tls' : 'opaque',
    [F.pinnedBy]: decision.pinnedBy,
    [F.addresses]: decision.addresses,
    [F.dialed]: dialed,
    [F.decideMs]: decideMs,
    [F.connectMs]: connectMs,
  };
  splice(ctx, connection, upstream, { host: decision.host, port: decision.port, tls, started, record, allowLine, memory: connection.memory, headCharged: target.headCharged ?? 0 }, head);
}

interface TunnelMeta {
  readonly host: string;
  readonly port: number;
  /** Hold client bytes until a ClientHello naming `host` has arrived. */
  readonly tls: boolean;
  readonly started: number;
  readonly record: DecisionRecorder;
  /** The decision line of an allowed tunnel, written once its verdict is known. */
  readonly allowLine: LineFields;
  /** The connection's charge to the memory budget: what it holds until the tunnel's verdict. */
  readonly memory: Charge;
  /** What of the head is charged already: the guard's holding takes that charge over. */
  readonly headCharged: number;
}

/**
 * `head`, what the client sent after its CONNECT head, is a view of the read it came in: passed
 * on once and never kept, so that the whole read is not held for as long as the tunnel lasts.
 */
function splice(ctx: ProxyContext, connection: ClientConnection, upstream: Socket, meta: TunnelMeta, head: Buffer): void {
  const { socket: client, log } = connection;
  let closedBy: string | undefined;
  let sni: string | undefined;
  let open = 2;
  const teardown = (by: string) => (err?: Error) => {
    closedBy ??= err ? `${by}_error` : by;
    client.destroy();
    upstream.destroy();
  };
  const onClose = (): void => {
    open -= 1;
    if (open > 0) return;
    clearTimeout(lifetime);
    ctx.observer.tunnelClosed(upstream.bytesWritten, upstream.bytesRead);
    // A tunnel refused after its dial (its TLS judged) closes as its refusal's line says: no
    // line of its own when that line was held back, or one client's refusals would flood the log.
    if (meta.record.suppressed) return;
    logLine(log, {
      [F.event]: 'tunnel_closed',
      [F.host]: meta.host,
      [F.port]: meta.port,
      [F.bytesUp]: upstream.bytesWritten,
      [F.bytesDown]: upstream.bytesRead,
      [F.durationMs]: ms(meta.started),
      [F.closedBy]: closedBy ?? 'both',
      [F.sni]: sni,
      [F.detail]: evicted ? 'closed to free memory: its client held more than its share in tunnels and responses it does not read' : undefined,
    });
  };
  client.removeAllListeners('error');
  client.on('error', teardown('client'));
  upstream.on('error', teardown('upstream'));
  client.once('close', onClose);
  upstream.once('close', onClose);
  // A full close of one side (both directions done) ends the other once its writes are flushed.
  client.once('close', () => {
    if (!upstream.destroyed && !upstream.writableEnded) upstream.end();
  });
  upstream.once('close', () => {
    if (!client.destroyed && !client.writableEnded) client.end();
  });

  // Socket timeouts count traffic either way, so each side's timer sees the whole tunnel;
  // the upstream's also covers the flush after the client has gone.
  const idle = (): void => {
    closedBy ??= 'idle_timeout';
    teardown('idle')();
  };
  client.setTimeout(ctx.limits.idleTimeoutMs, idle);
  upstream.setTimeout(ctx.limits.idleTimeoutMs, idle);
  const lifetime =
    ctx.limits.maxTunnelMs > 0
      ? setTimeout(() => {
          closedBy ??= 'max_lifetime';
          teardown('lifetime')();
        }, ctx.limits.maxTunnelMs)
      : undefined;

  // A client past its share of memory in directions it does not read loses its oldest stalled
  // tunnels first (memory-budget.ts).
  let evicted = false;
  const evict = (): void => {
    evicted = true;
    closedBy ??= 'overloaded';
    teardown('overloaded')();
  };
  const relays: Relays = { down: () => relay(upstream, client, meta.memory, evict), up: () => relay(client, upstream, meta.memory, evict) };
  const allow = (fields: LineFields = {}): void => meta.record.allow({ ...meta.allowLine, [F.sni]: sni, ...fields });
  if (!meta.tls) {
    // Any bytes, either way, from the start: a server that speaks first (SSH) is not held up.
    relays.down();
    allow();
    meta.memory.shrink(meta.memory.bytes);
    if (head.length > 0) upstream.write(head);
    if (client.readableEnded) upstream.end();
    else relays.up();
    return;
  }
  guardTls(ctx, client, upstream, meta, head, relays, {
    allow: (serverName) => {
      if (serverName !== undefined) sni = printable(serverName);
      allow();
    },
    abandoned: (serverName) => {
      if (serverName !== undefined) sni = printable(serverName);
      allow({ [F.error]: 'client_closed' });
      teardown('client')();
    },
    deny: (verdict, serverName) => {
      if (serverName !== undefined) sni = printable(serverName);
      meta.record.deny(verdict, { [F.host]: meta.host, [F.port]: meta.port, [F.sni]: sni });
      closedBy = verdict.reason;
      upstream.destroy();
      // Only a client that spoke TLS understands an alert.
      connection.close(verdict.tls ? ACCESS_DENIED_ALERT : undefined);
    },
    // A tunnel that closed before any verdict had its first hello accepted: allowed.
    undecided: () => !meta.record.recorded,
  });
}

interface GuardOutcomes {
  allow(serverName: Buffer | undefined): void;
  /** The client left after its hello passed and before the server answered: the exchange is over. */
  abandoned(serverName: Buffer | undefined): void;
  /** `tls`: the client spoke TLS, so a TLS alert tells it why. */
  deny(refusal: { readonly reason: Reason; readonly detail: string; readonly tls: boolean }, serverName: Buffer | undefined): void;
  undecided(): boolean;
}

/**
 * Runs a `tls` tunnel through the TlsGuard: client bytes go upstream only as the guard releases
 * them, and the server's bytes reach the client only once the guard has judged its first record
 * TLS; the hello deadline runs while a ClientHello is due. Once the guard opens, both directions
 * are piped as usual.
 */
/** Starts passing the bytes of a direction on, server to client (`down`) or client to server (`up`). */
interface Relays {
  down(): void;
  up(): void;
}

/**
 * Passes `from`'s bytes to `to` with backpressure, as `pipe` would: when `to` has more queued than
 * it wants, `from` is paused until `to` drains. What the pause leaves held (`to`'s queue, and what
 * `from` reads before it stops) is charged to the connection's memory until the drain; `evict`
 * ends the tunnel when the client is past its share (memory-budget.ts).
 */
export function relay(from: Socket, to: Socket, memory: Charge, evict: () => void): void {
  let held: Held | undefined;
  const release = (): void => {
    held?.release();
    held = undefined;
  };
  const drained = (): void => {
    release();
    from.resume();
  };
  from.on('data', (chunk: Buffer) => {
    if (to.write(chunk) || held !== undefined) return;
    from.pause();
    // An ending or closed destination never drains: nothing is held for it (its queue is flushed
    // or dropped with it), and the source stays paused until the tunnel ends.
    if (to.destroyed || to.writableEnded) return;
    to.once('drain', drained);
    held = memory.hold(to.writableLength + READ_AHEAD_BYTES, evict);
  });
  from.once('end', () => to.end());
  // Ended with a write still queued: no drain comes, and the hold ends once the queue is flushed.
  to.once('finish', release);
  from.once('close', release);
  to.once('close', release);
  // Flowing from here, as `pipe` makes it, even if the socket was paused across its hand-over.
  from.resume();
}

function guardTls(ctx: ProxyContext, client: Socket, upstream: Socket, meta: TunnelMeta, head: Buffer, relays: Relays, outcomes: GuardOutcomes): void {
  const guard = new TlsGuard(meta.host);
  let deadline: NodeJS.Timeout | undefined;
  let clientEnded = false;
  let serverPiped = false;
  let awaitingDrain = false;
  /** What the guard's holding is charged now (on top of the connection's floor). */
  let charged = meta.headCharged;
  const charge = (): boolean => {
    const held = guard.held;
    if (held > charged && !meta.memory.grow(held - charged)) return false;
    if (held < charged) meta.memory.shrink(charged - held);
    charged = held;
    return true;
  };
  const stop = (): void => {
    clearTimeout(deadline);
    client.off('data', onClient);
    client.off('end', onEnd);
    if (!serverPiped) upstream.off('data', onServer);
    // Decided (or over): nothing more is held for this connection before a verdict.
    meta.memory.shrink(meta.memory.bytes);
  };
  const apply = (step: GuardStep): void => {
    for (const bytes of step.deliver ?? []) client.write(bytes);
    // One write however many records the step released (a run of tiny records is many pieces).
    const bytes = step.forward.length === 1 ? step.forward[0]! : Buffer.concat(step.forward);
    if (bytes.length > 0 && !upstream.write(bytes) && !awaitingDrain) {
      awaitingDrain = true;
      client.pause();
      upstream.once('drain', () => {
        awaitingDrain = false;
        if (!guard.full) client.resume();
      });
    }
    if (step.verdict?.kind === 'deny') {
      stop();
      outcomes.deny(step.verdict, guard.serverName);
      return;
    }
    // Holding more than the client's share (or the proxy's budget) allows: refused, and the bytes
    // it held are dropped with the guard.
    if (step.verdict === undefined && !charge()) {
      const wanted = guard.held - charged;
      stop();
      outcomes.deny({ reason: 'overloaded', detail: meta.memory.explain(wanted), tls: true }, guard.serverName);
      return;
    }
    // The server's first record was TLS: the rest of what it sends flows to the client unseen.
    if (guard.serverJudged && !serverPiped) {
      serverPiped = true;
      upstream.off('data', onServer);
      relays.down();
    }
    if (step.verdict?.kind === 'allow') {
      stop();
      outcomes.allow(guard.serverName);
      if (clientEnded) upstream.end();
      else {
        relays.up();
        client.resume();
      }
      return;
    }
    // Deadline while a hello is due (the first, or the second after a retry request).
    if (guard.awaitingHello && deadline === undefined) deadline = setTimeout(() => apply(guard.timedOut()), ctx.limits.helloTimeoutMs);
    if (!guard.awaitingHello && deadline !== undefined) {
      clearTimeout(deadline);
      deadline = undefined;
    }
    if (guard.full) client.pause();
  };
  const onClient = (chunk: Buffer): void => apply(guard.fromClient(chunk));
  const onServer = (chunk: Buffer): void => {
    const step = guard.fromServer(chunk);
    if (step.verdict !== undefined || step.forward.length > 0) client.resume();
    apply(step);
  };
  const onEnd = (): void => {
    clientEnded = true;
    const step = guard.clientEnded();
    // Ended after its hello passed, before the server answered: a client that can send no more
    // can never finish the handshake, so the exchange ends here, and with it the wait for a
    // server that may never speak (its line would otherwise wait for the upstream or the idle
    // timeout, and the connection go on counting against the client's limit).
    if (step.verdict === undefined && guard.inspecting && !guard.awaitingHello) {
      stop();
      outcomes.abandoned(guard.serverName);
      return;
    }
    apply(step);
  };
  client.on('data', onClient);
  client.once('end', onEnd);
  upstream.on('data', onServer);
  client.once('close', () => {
    if (!outcomes.undecided()) return;
    stop();
    // Closed while a hello was due: refused as the guard sees it; otherwise the hello had passed.
    const step = guard.clientEnded();
    if (step.verdict?.kind === 'deny') outcomes.deny(step.verdict, guard.serverName);
    else outcomes.allow(guard.serverName);
  });
  apply(head.length > 0 ? guard.fromClient(head) : { forward: [] });
  // A socket handed over paused (the fast CONNECT path) flows from here, unless the head alone
  // filled what may wait for the server.
  if (guard.inspecting && !guard.full) client.resume();
}
