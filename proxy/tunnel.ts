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
import type { IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { decide, parseHostName } from '../policy/index.js';
import { ClientHelloReader, type HelloResult } from './client-hello.js';
import { connectionOf, type ProxyContext } from './context.js';
import { dialPinned, DialError } from './dial.js';
import { F, logLine, ms, printable, type LineValue, type Logger } from './log.js';
import { closeRefused, refuseSocket, type Refusal } from './refusal.js';
import { parseConnectTarget } from './authority.js';

const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n';

// A TLS alert, fatal access_denied (RFC 8446 §6.2): tells a TLS client why the handshake ended.
const ACCESS_DENIED_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);

function deny(ctx: ProxyContext, log: Logger, socket: Socket, refusal: Refusal, fields: Record<string, LineValue>): void {
  ctx.observer.decision('deny', refusal.reason);
  logLine(log, { [F.event]: 'decision', [F.decision]: 'deny', [F.method]: 'CONNECT', [F.reason]: refusal.reason, [F.detail]: refusal.detail, [F.host]: refusal.host, [F.port]: refusal.port, ...fields });
  refuseSocket(socket, refusal);
}

/** CONNECT has no content (RFC 9110 §9.3.6): framing headers would smuggle bytes past the hello check. */
export function connectBodyProblem(headers: IncomingHttpHeaders): string | undefined {
  if (headers['transfer-encoding'] !== undefined) return 'a CONNECT request must not carry Transfer-Encoding';
  const length = headers['content-length'];
  if (length !== undefined && length !== '0') return 'a CONNECT request must not carry a body (Content-Length)';
  return undefined;
}

/**
 * One CONNECT request: its request-target, and why its head cannot be accepted (framing fields)
 * if that is so; `head` is what the client sent after the head.
 */
export async function handleConnect(ctx: ProxyContext, root: Logger, request: { target: string; bodyProblem: string | undefined }, client: Socket, head: Buffer): Promise<void> {
  const started = performance.now();
  const { log } = connectionOf(client, root);
  client.on('error', () => client.destroy()); // reported by the close line; never crashes the process

  const target = parseConnectTarget(request.target);
  if (!target.ok) return deny(ctx, log, client, { reason: target.reason, detail: target.detail }, {});
  if (request.bodyProblem !== undefined) return deny(ctx, log, client, { reason: 'bad_request', detail: request.bodyProblem }, {});

  const decision = await decide(ctx.policy(), target.host, target.port, ctx.lookup);
  const decideMs = ms(started);
  if (!decision.allowed) {
    if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
    return deny(ctx, log, client, decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs });
  }
  // A client gone while its request was decided still gets its one decision line.
  const clientGone = (): void => {
    ctx.observer.decision('allow', 'allowed');
    logLine(log, { [F.event]: 'decision', [F.decision]: 'allow', [F.method]: 'CONNECT', [F.host]: decision.host, [F.port]: decision.port, [F.rule]: decision.rule, [F.tunnel]: decision.tunnel, [F.addresses]: decision.addresses, [F.decideMs]: decideMs, [F.error]: 'client_closed' });
  };
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
    const attempts = err instanceof DialError ? err.attempts : [];
    ctx.observer.connect(ms(dialStarted) / 1000, false);
    return deny(
      ctx,
      log,
      client,
      { reason: 'connect_failed', detail: (err as Error).message, host: decision.host, port: decision.port },
      { [F.addresses]: decision.addresses, [F.dialed]: attempts, [F.decideMs]: decideMs, [F.connectMs]: ms(dialStarted) },
    );
  }
  if (client.destroyed) {
    upstream.destroy();
    return clientGone();
  }

  const connectMs = ms(dialStarted);
  ctx.observer.connect(connectMs / 1000, true);
  ctx.observer.decision('allow', 'allowed');
  ctx.observer.tunnelOpened();
  // The client may go on at once; the decision line is written after the answer.
  client.write(ESTABLISHED);
  logLine(log, {
    [F.event]: 'decision',
    [F.decision]: 'allow',
    [F.method]: 'CONNECT',
    [F.host]: decision.host,
    [F.port]: decision.port,
    [F.rule]: decision.rule,
    [F.tunnel]: decision.tunnel,
    [F.pinnedBy]: decision.pinnedBy,
    [F.addresses]: decision.addresses,
    [F.dialed]: dialed,
    [F.decideMs]: decideMs,
    [F.connectMs]: connectMs,
  });
  splice(ctx, log, client, upstream, { host: decision.host, port: decision.port, tls: decision.tunnel === 'tls', started, head });
}

/** What holding the client's first bytes ended with. */
type HoldOutcome = HelloResult | { readonly kind: 'timeout' };

interface TunnelMeta {
  readonly host: string;
  readonly port: number;
  /** Hold client bytes until a ClientHello naming `host` has arrived. */
  readonly tls: boolean;
  readonly started: number;
  readonly head: Buffer;
}

function splice(ctx: ProxyContext, log: Logger, client: Socket, upstream: Socket, meta: TunnelMeta): void {
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
    logLine(log, {
      [F.event]: 'tunnel_closed',
      [F.host]: meta.host,
      [F.port]: meta.port,
      [F.bytesUp]: upstream.bytesWritten,
      [F.bytesDown]: upstream.bytesRead,
      [F.durationMs]: ms(meta.started),
      [F.closedBy]: closedBy ?? 'both',
      [F.sni]: sni,
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

  // A server that speaks first is not held up: only the client's direction waits.
  upstream.pipe(client);
  const forward = (held: readonly Buffer[]): void => {
    for (const chunk of held) upstream.write(chunk);
    if (client.readableEnded) upstream.end();
    else client.pipe(upstream);
  };
  if (!meta.tls) {
    forward(meta.head.length > 0 ? [meta.head] : []);
    return;
  }
  holdClientHello(client, meta.head, ctx.limits.helloTimeoutMs, (held, result) => {
    const refusal = checkHello(result, meta.host);
    if (result.kind === 'hello' && result.serverName !== undefined) sni = printable(result.serverName);
    if (refusal === undefined) {
      forward(held);
      return;
    }
    ctx.observer.decision('deny', refusal.reason);
    logLine(log, { [F.event]: 'decision', [F.decision]: 'deny', [F.method]: 'CONNECT', [F.reason]: refusal.reason, [F.detail]: refusal.detail, [F.host]: meta.host, [F.port]: meta.port, [F.sni]: sni });
    closedBy = refusal.reason;
    upstream.destroy();
    // Only a client that spoke TLS understands an alert.
    closeRefused(client, result.kind === 'hello' || refusal.reason === 'tls_hello_malformed' ? ACCESS_DENIED_ALERT : undefined);
  });
}

/** Whether the hello lets the tunnel through to `host`; the refusal otherwise. */
function checkHello(result: HoldOutcome, host: string): Refusal | undefined {
  if (result.kind === 'timeout') return { reason: 'tls_hello_timeout', detail: 'no complete TLS ClientHello arrived in time', host };
  if (result.kind === 'refused') return { reason: result.reason, detail: result.detail, host };
  if (result.kind === 'incomplete') return { reason: 'tls_hello_malformed', detail: 'incomplete ClientHello', host };
  if (result.serverName === undefined) return { reason: 'sni_missing', detail: 'the TLS ClientHello carries no server name', host };
  // The name is normalised exactly as the CONNECT host was, so case and one trailing dot agree
  // and nothing else can.
  const parsed = parseHostName(result.serverName.toString('latin1'));
  if (parsed.ok && parsed.name === host) return undefined;
  return { reason: 'sni_mismatch', detail: `TLS server name "${printable(result.serverName)}" is not the CONNECT host ${host}`, host };
}

/**
 * Reads client bytes into a ClientHelloReader until it decides, the client closes, or the
 * deadline passes; then hands over every byte received so far, unmodified, with the outcome.
 */
function holdClientHello(client: Socket, head: Buffer, timeoutMs: number, done: (held: readonly Buffer[], result: HoldOutcome) => void): void {
  const reader = new ClientHelloReader();
  const held: Buffer[] = [];
  let finished = false;
  const finish = (result: HoldOutcome): void => {
    if (finished) return;
    finished = true;
    clearTimeout(deadline);
    client.off('data', onData);
    client.off('end', onEnd);
    client.pause();
    done(held, result);
  };
  const take = (chunk: Buffer): void => {
    held.push(chunk);
    const result = reader.push(chunk);
    if (result.kind !== 'incomplete') finish(result);
  };
  const onData = (chunk: Buffer): void => take(chunk);
  const onEnd = (): void => finish(reader.end());
  const deadline = setTimeout(() => finish({ kind: 'timeout' }), timeoutMs);
  client.on('data', onData);
  client.once('end', onEnd);
  client.once('close', () => clearTimeout(deadline));
  if (head.length > 0) take(head);
  // A socket handed over paused (the fast CONNECT path) flows from here.
  if (!finished) client.resume();
}
