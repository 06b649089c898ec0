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
import { decide } from '../../policy/index.js';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import { parseConnectTarget } from '../http/index.js';
import { destinationOf, F, ms, revokedWhileDeciding, type DecisionRecorder, type LineFields, type Refusal } from '../record/index.js';
import { dialPinned, isDialError } from '../upstream/index.js';
import { Splice } from './splice.js';

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
  // `head` keeps the read it came in (up to 64 KiB) held while the host is decided and dialled, a
  // connect timeout per address when the upstream is slow: charged from here, past the accept's
  // floor, and the tunnel takes the charge over. Uncharged, a client held that much per CONNECT.
  if (!connection.memory.grow(head.length)) return deny(record, connection, { reason: 'overloaded', detail: connection.memory.explain(head.length), retryAfter: 1 }, {});
  return openTunnel(ctx, connection, { host: target.host, port: target.port, started, headCharged: head.length }, head, record, CONNECT_ENTRY);
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
    /** Bytes of `head` the caller already charged to the connection's memory budget (a CONNECT's head, the hello a transparent listener read). */
    readonly headCharged?: number;
  },
  head: Buffer,
  record: DecisionRecorder,
  entry: TunnelEntry,
): Promise<void> {
  const { started } = target;
  const { socket: client, log, clientKey } = connection;
  const policy = connection.policy();
  const decision = await decide(policy, target.host, target.port, (name) => ctx.lookup(name, clientKey), ctx.ownListener);
  const decideMs = ms(started);
  if (!decision.allowed) {
    if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
    return deny(record, connection, decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs }, entry);
  }
  // The policy changed while the name resolved: a shared proxy's revocation did not see it yet.
  if (connection.policy() !== policy) return deny(record, connection, revokedWhileDeciding(decision), { [F.decideMs]: decideMs }, entry);
  const tls = entry.alwaysTls || decision.tunnel === 'tls';
  // An inspected tunnel's hello is checked too: the proxy's own TLS server reads it.
  connection.target = { kind: 'tunnel', host: decision.host, port: decision.port, mode: tls || decision.inspect === true ? 'tls' : 'opaque' };
  record.wouldDeny(decision.wouldDeny);
  if (decision.inspect === true) {
    const start = { decision, started, decideMs, headCharged: target.headCharged ?? 0 };
    return ctx.inspector.start(connection, ctx.inspection(), start, head, record, entry);
  }
  // A client gone while its request was decided still gets its one decision line.
  const clientGone = (): void =>
    record.allow(destinationOf(decision), { [F.tunnel]: tls ? 'tls' : 'opaque', [F.decideMs]: decideMs, [F.error]: 'client_closed' });
  if (client.destroyed) return clientGone();

  const dialStarted = performance.now();
  let upstream: Socket;
  let dialed: readonly string[];
  try {
    const result = await dialPinned(decision.addresses, decision.port, {
      connect: ctx.connect,
      purpose: 'tunnel',
      timeoutMs: ctx.limits.connectTimeoutMs,
      client,
    });
    upstream = result.socket;
    dialed = result.attempts;
  } catch (err) {
    // Given up with its client, which gets no refusal: its line says it left.
    if (client.destroyed) return clientGone();
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
  ctx.observer.tunnelOpened(connection.identity);
  // The client may go on at once; the decision line is written after the answer.
  if (entry.established !== undefined) client.write(entry.established);
  const allowLine: LineFields = { [F.tunnel]: tls ? 'tls' : 'opaque', [F.dialed]: dialed, [F.decideMs]: decideMs, [F.connectMs]: connectMs };
  const meta = { destination: destinationOf(decision), tls, started, record, allowLine, memory: connection.memory, headCharged: target.headCharged ?? 0 };
  new Splice(ctx, connection, upstream, meta).start(head);
}
