/**
 * CONNECT: decide on the authority, dial the pinned addresses, check the TLS server name of the
 * client's first record against the CONNECT host, then splice raw bytes both ways.
 * The Host header of a CONNECT request is ignored: only the request-target is decided on and
 * dialed. Half-closes are passed on (each direction ends on its own); an error on either side
 * tears down both.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { decide, type TunnelMode } from '../policy/index.js';
import { connectionOf, type ProxyContext } from './context.js';
import { dialPinned, DialError } from './dial.js';
import { F, ms, type Logger } from './log.js';
import { refuseSocket, type Refusal } from './refusal.js';
import { parseConnectTarget } from './authority.js';
import { scanClientHello, type HelloScan } from './client-hello.js';

const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n';


function deny(ctx: ProxyContext, log: Logger, socket: Socket, refusal: Refusal, fields: Record<string, unknown>): void {
  ctx.observer.decision('deny', refusal.reason);
  log.info({ [F.event]: 'decision', [F.decision]: 'deny', [F.method]: 'CONNECT', [F.reason]: refusal.reason, [F.detail]: refusal.detail, [F.host]: refusal.host, [F.port]: refusal.port, ...fields });
  refuseSocket(socket, refusal);
}

export async function handleConnect(ctx: ProxyContext, root: Logger, req: IncomingMessage, client: Socket, head: Buffer): Promise<void> {
  const started = performance.now();
  const { log } = connectionOf(client, root);
  client.on('error', () => client.destroy()); // reported by the close line; never crashes the process

  const target = parseConnectTarget(req.url ?? '');
  if (!target.ok) return deny(ctx, log, client, { reason: target.reason, detail: target.detail }, {});

  const decision = await decide(ctx.policy(), target.host, target.port, ctx.lookup);
  const decideMs = ms(started);
  if (!decision.allowed) {
    if (decision.reason === 'internal_error') log.error({ [F.reason]: decision.reason, [F.detail]: decision.detail }, 'decision failed');
    return deny(ctx, log, client, decision, { [F.addresses]: decision.addresses, [F.decideMs]: decideMs });
  }
  if (client.destroyed) return;

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
    return;
  }

  const connectMs = ms(dialStarted);
  ctx.observer.connect(connectMs / 1000, true);
  ctx.observer.decision('allow', 'allowed');
  ctx.observer.tunnelOpened();
  log.info({
    [F.event]: 'decision',
    [F.decision]: 'allow',
    [F.method]: 'CONNECT',
    [F.host]: decision.host,
    [F.port]: decision.port,
    [F.rule]: decision.rule,
    [F.pinnedBy]: decision.pinnedBy,
    [F.addresses]: decision.addresses,
    [F.dialed]: dialed,
    [F.decideMs]: decideMs,
    [F.connectMs]: connectMs,
  });
  client.write(ESTABLISHED);
  splice(ctx, log, client, upstream, { host: decision.host, port: decision.port, tunnel: decision.tunnel, started, head });
}

function splice(ctx: ProxyContext, log: Logger, client: Socket, upstream: Socket, meta: { host: string; port: number; tunnel: TunnelMode; started: number; head: Buffer }): void {
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
    log.info({
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

  upstream.pipe(client);
  // Client bytes wait until the first record shows what they are (a server that speaks first is
  // not held up: only this direction waits).
  holdFirstRecord(client, meta.head, (bytes, scan) => {
    if (scan.kind === 'tls') sni = scan.sni;
    const refusal = checkServerName(scan, meta.host, meta.tunnel === 'tls');
    if (refusal) {
      ctx.observer.decision('deny', refusal.reason);
      log.info({ [F.event]: 'decision', [F.decision]: 'deny', [F.method]: 'CONNECT', [F.reason]: refusal.reason, [F.detail]: refusal.detail, [F.host]: meta.host, [F.port]: meta.port, [F.sni]: sni });
      closedBy = refusal.reason;
      // A TLS alert (access_denied, RFC 8446 §6.2) tells a TLS client why the handshake ended.
      if (scan.kind === 'tls') client.end(ACCESS_DENIED_ALERT);
      else client.end();
      upstream.destroy();
      return;
    }
    if (bytes.length > 0) upstream.write(bytes);
    if (client.readableEnded) upstream.end();
    else client.pipe(upstream);
  });
}

const ACCESS_DENIED_ALERT = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);
// A ClientHello fits one record (at most 16 KiB plus its header); beyond that, stop looking.
const MAX_HELLO_BYTES = 16 * 1024 + 5;

function checkServerName(scan: HelloScan, host: string, requireSni: boolean): Refusal | undefined {
  if (scan.kind === 'tls' && scan.sni !== undefined) {
    const sni = scan.sni.toLowerCase().replace(/\.$/, '');
    // Without this, one allowed name on a shared (CDN) address would reach every site behind it.
    return sni === host ? undefined : { reason: 'sni_mismatch', detail: `TLS server name ${JSON.stringify(sni.slice(0, 255))} is not the CONNECT host ${host}`, host };
  }
  if (!requireSni) return undefined;
  return { reason: 'sni_missing', detail: scan.kind === 'tls' ? 'TLS without a server name' : 'the tunnel does not start with TLS', host };
}

/** Buffers client bytes until the first TLS record is complete (or is not TLS), then hands them on. */
function holdFirstRecord(client: Socket, head: Buffer, done: (bytes: Buffer, scan: HelloScan) => void): void {
  let bytes = head;
  const finish = (scan: HelloScan): void => {
    client.off('data', onData);
    client.off('end', onEnd);
    client.pause();
    done(bytes, scan);
  };
  const check = (): boolean => {
    const scan = scanClientHello(bytes);
    if (scan.kind !== 'incomplete') finish(scan);
    else if (bytes.length >= MAX_HELLO_BYTES) finish({ kind: 'tls', sni: undefined });
    else return false;
    return true;
  };
  const onData = (chunk: Buffer): void => {
    bytes = bytes.length === 0 ? chunk : Buffer.concat([bytes, chunk]);
    check();
  };
  const onEnd = (): void => {
    const scan = scanClientHello(bytes);
    finish(scan.kind === 'incomplete' ? { kind: 'not_tls' } : scan);
  };
  if (bytes.length > 0 && check()) return;
  client.on('data', onData);
  client.once('end', onEnd);
}
