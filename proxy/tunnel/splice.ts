/**
 * An open tunnel: the client spliced to the upstream, both ways, until either side closes, the
 * tunnel idles out or reaches its lifetime, or its client is past its share of memory in stalled
 * directions. A `tls` tunnel is watched until its ClientHello is judged (tls-watch.ts); an
 * `opaque` one carries any bytes from the start. Its decision line is written once its verdict is
 * known, and a `tunnel_closed` line when it ends.
 */
import type { Socket } from 'node:net';
import type { ClientConnection, ProxyContext } from '../admission/index.js';
import type { Charge } from '../budget/index.js';
import { ACCESS_DENIED_ALERT, F, logLine, ms, printable, type DecisionRecorder, type Destination, type LineFields } from '../record/index.js';
import { relay, type Relays } from './relay.js';
import { TlsWatch, type WatchOutcomes } from './tls-watch.js';

export interface TunnelMeta {
  /** Where the tunnel goes, as its decision line says. */
  readonly destination: Destination;
  /** Hold client bytes until a ClientHello naming `host` has arrived. */
  readonly tls: boolean;
  readonly started: number;
  readonly record: DecisionRecorder;
  /** The rest of an allowed tunnel's decision line, written once its verdict is known. */
  readonly allowLine: LineFields;
  /** The connection's charge to the memory budget: what it holds until the tunnel's verdict. */
  readonly memory: Charge;
  /** What of the head is charged already: the watch's holding takes that charge over. */
  readonly headCharged: number;
}

const EVICTED = 'closed to free memory: its client held more than its share in tunnels and responses it does not read';

export class Splice {
  private closedBy: string | undefined;
  private sni: string | undefined;
  private open = 2;
  private evicted = false;
  private lifetime: NodeJS.Timeout | undefined;
  private readonly client: Socket;

  constructor(
    private readonly ctx: ProxyContext,
    private readonly connection: ClientConnection,
    private readonly upstream: Socket,
    private readonly meta: TunnelMeta,
  ) {
    this.client = connection.socket;
  }

  /**
   * Starts it. `head`, what the client sent after its CONNECT head, is a view of the read it came
   * in: passed on once and never kept, so that the whole read is not held for as long as the
   * tunnel lasts.
   */
  start(head: Buffer): void {
    const { client, upstream, meta } = this;
    this.watchCloses();
    this.startTimers();
    // A client past its share of memory in directions it does not read loses its oldest stalled
    // tunnels first (memory-budget.ts).
    const evict = (): void => {
      this.evicted = true;
      this.closedBy ??= 'overloaded';
      this.teardown('overloaded')();
    };
    const relays: Relays = { down: () => relay(upstream, client, meta.memory, evict), up: () => relay(client, upstream, meta.memory, evict) };
    if (!meta.tls) {
      // Any bytes, either way, from the start: a server that speaks first (SSH) is not held up.
      relays.down();
      this.allow();
      meta.memory.shrink(meta.memory.bytes);
      if (head.length > 0) upstream.write(head);
      if (client.readableEnded) upstream.end();
      else relays.up();
      return;
    }
    const watched = { client, upstream, host: meta.destination.host, memory: meta.memory, headCharged: meta.headCharged, helloTimeoutMs: this.ctx.limits.helloTimeoutMs, relays };
    new TlsWatch(watched, this.outcomes()).start(head);
  }

  private outcomes(): WatchOutcomes {
    const named = (serverName: Buffer | undefined): void => {
      if (serverName !== undefined) this.sni = printable(serverName);
    };
    return {
      allow: (serverName) => {
        named(serverName);
        this.allow();
      },
      abandoned: (serverName) => {
        named(serverName);
        this.allow({ [F.error]: 'client_closed' });
        this.teardown('client')();
      },
      deny: (verdict, serverName) => {
        named(serverName);
        this.meta.record.deny(verdict, { [F.host]: this.meta.destination.host, [F.port]: this.meta.destination.port, [F.sni]: this.sni });
        this.closedBy = verdict.reason;
        this.upstream.destroy();
        // Only a client that spoke TLS understands an alert.
        this.connection.close(verdict.tls ? ACCESS_DENIED_ALERT : undefined);
      },
      // A tunnel that closed before any verdict had its first hello accepted: allowed.
      undecided: () => !this.meta.record.recorded,
    };
  }

  private allow(fields: LineFields = {}): void {
    this.meta.record.allow(this.meta.destination, { ...this.meta.allowLine, [F.sni]: this.sni, ...fields });
  }

  private teardown(by: string): (err?: Error) => void {
    return (err) => {
      this.closedBy ??= err ? `${by}_error` : by;
      this.client.destroy();
      this.upstream.destroy();
    };
  }

  private watchCloses(): void {
    const { client, upstream } = this;
    client.removeAllListeners('error');
    client.on('error', this.teardown('client'));
    upstream.on('error', this.teardown('upstream'));
    client.once('close', this.onClose);
    upstream.once('close', this.onClose);
    // A full close of one side (both directions done) ends the other once its writes are flushed.
    client.once('close', () => {
      // Revoked (its sandbox's allowlist no longer allows it): no flush, and no wait for the
      // upstream's own end, which a server that ignores a half-close never sends.
      if (this.connection.revoked) {
        this.closedBy ??= 'policy_revoked';
        upstream.destroy();
        return;
      }
      if (!upstream.destroyed && !upstream.writableEnded) upstream.end();
    });
    upstream.once('close', () => {
      if (!client.destroyed && !client.writableEnded) client.end();
    });
  }

  private startTimers(): void {
    const { limits } = this.ctx;
    // Socket timeouts count traffic either way, so each side's timer sees the whole tunnel;
    // the upstream's also covers the flush after the client has gone.
    const idle = (): void => {
      this.closedBy ??= 'idle_timeout';
      this.teardown('idle')();
    };
    this.client.setTimeout(limits.idleTimeoutMs, idle);
    this.upstream.setTimeout(limits.idleTimeoutMs, idle);
    if (limits.maxTunnelMs > 0) {
      this.lifetime = setTimeout(() => {
        this.closedBy ??= 'max_lifetime';
        this.teardown('lifetime')();
      }, limits.maxTunnelMs);
    }
  }

  private readonly onClose = (): void => {
    this.open -= 1;
    if (this.open > 0) return;
    clearTimeout(this.lifetime);
    const { upstream, meta } = this;
    this.ctx.observer.tunnelClosed(upstream.bytesWritten, upstream.bytesRead, this.connection.identity);
    // A tunnel refused after its dial (its TLS judged) closes as its refusal's line says: no
    // line of its own when that line was held back, or one client's refusals would flood the log.
    if (meta.record.suppressed) return;
    logLine(this.connection.log, {
      [F.event]: 'tunnel_closed',
      [F.host]: meta.destination.host,
      [F.port]: meta.destination.port,
      [F.bytesUp]: upstream.bytesWritten,
      [F.bytesDown]: upstream.bytesRead,
      [F.durationMs]: ms(meta.started),
      [F.closedBy]: this.closedBy ?? 'both',
      [F.sni]: this.sni,
      [F.detail]: this.evicted ? EVICTED : undefined,
    });
  };
}
