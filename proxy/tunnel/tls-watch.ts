/**
 * A `tls` tunnel under the TlsGuard: client bytes go upstream only as the guard releases them,
 * and the server's bytes reach the client only once the guard has judged its first record TLS;
 * the hello deadline runs while a ClientHello is due. Once the guard opens, both directions are
 * relayed as usual (relay.ts). What the guard holds before its verdict is charged to the
 * connection's memory.
 */
import type { Socket } from 'node:net';
import type { Reason } from '../../policy/index.js';
import type { Charge } from '../budget/index.js';
import { TlsGuard, type GuardStep } from '../tls/index.js';
import type { Relays } from './relay.js';

/** What the watch tells the tunnel. */
export interface WatchOutcomes {
  allow(serverName: Buffer | undefined): void;
  /** The client left after its hello passed and before the server answered: the exchange is over. */
  abandoned(serverName: Buffer | undefined): void;
  /** `tls`: the client spoke TLS, so a TLS alert tells it why. */
  deny(refusal: { readonly reason: Reason; readonly detail: string; readonly tls: boolean }, serverName: Buffer | undefined): void;
  /** Whether the tunnel's outcome is still open (its line not yet written). */
  undecided(): boolean;
}

export interface WatchedTunnel {
  readonly client: Socket;
  readonly upstream: Socket;
  /** The CONNECT host (or transparent server name) the ClientHello must name. */
  readonly host: string;
  /** The connection's charge to the memory budget, and what of the head it holds already. */
  readonly memory: Charge;
  readonly headCharged: number;
  readonly helloTimeoutMs: number;
  readonly relays: Relays;
}

export class TlsWatch {
  private readonly guard: TlsGuard;
  private deadline: NodeJS.Timeout | undefined;
  private clientEnded = false;
  private serverPiped = false;
  private awaitingDrain = false;
  /** What the guard's holding is charged now (on top of the connection's floor). */
  private charged: number;

  constructor(
    private readonly tunnel: WatchedTunnel,
    private readonly outcomes: WatchOutcomes,
  ) {
    this.guard = new TlsGuard(tunnel.host);
    this.charged = tunnel.headCharged;
  }

  /** Watches from `head`, what the client sent first. */
  start(head: Buffer): void {
    const { client, upstream } = this.tunnel;
    client.on('data', this.onClient);
    client.once('end', this.onEnd);
    upstream.on('data', this.onServer);
    client.once('close', () => {
      if (!this.outcomes.undecided()) return;
      this.stop();
      // Closed while a hello was due: refused as the guard sees it; otherwise the hello had passed.
      const step = this.guard.clientEnded();
      if (step.verdict?.kind === 'deny') this.outcomes.deny(step.verdict, this.guard.serverName);
      else this.outcomes.allow(this.guard.serverName);
    });
    this.apply(head.length > 0 ? this.guard.fromClient(head) : { forward: [] });
    // A socket handed over paused (the fast CONNECT path) flows from here, unless the head alone
    // filled what may wait for the server.
    if (this.guard.inspecting && !this.guard.full) client.resume();
  }

  private readonly onClient = (chunk: Buffer): void => this.apply(this.guard.fromClient(chunk));

  private readonly onServer = (chunk: Buffer): void => {
    const step = this.guard.fromServer(chunk);
    if (step.verdict !== undefined || step.forward.length > 0) this.tunnel.client.resume();
    this.apply(step);
  };

  private readonly onEnd = (): void => {
    this.clientEnded = true;
    const step = this.guard.clientEnded();
    // Ended after its hello passed, before the server answered: a client that can send no more
    // can never finish the handshake, so the exchange ends here, and with it the wait for a
    // server that may never speak (its line would otherwise wait for the upstream or the idle
    // timeout, and the connection go on counting against the client's limit).
    if (step.verdict === undefined && this.guard.inspecting && !this.guard.awaitingHello) {
      this.stop();
      this.outcomes.abandoned(this.guard.serverName);
      return;
    }
    this.apply(step);
  };

  private apply(step: GuardStep): void {
    this.pass(step);
    const { guard } = this;
    if (step.verdict?.kind === 'deny') {
      this.stop();
      this.outcomes.deny(step.verdict, guard.serverName);
      return;
    }
    // Holding more than the client's share (or the proxy's budget) allows: refused, and the bytes
    // it held are dropped with the guard.
    if (step.verdict === undefined && !this.charge()) {
      const wanted = guard.held - this.charged;
      this.stop();
      this.outcomes.deny({ reason: 'overloaded', detail: this.tunnel.memory.explain(wanted), tls: true }, guard.serverName);
      return;
    }
    // The server's first record was TLS: the rest of what it sends flows to the client unseen.
    if (guard.serverJudged && !this.serverPiped) {
      this.serverPiped = true;
      this.tunnel.upstream.off('data', this.onServer);
      this.tunnel.relays.down();
    }
    if (step.verdict?.kind === 'allow') {
      this.opened();
      return;
    }
    // Deadline while a hello is due (the first, or the second after a retry request).
    if (guard.awaitingHello && this.deadline === undefined) this.deadline = setTimeout(() => this.apply(guard.timedOut()), this.tunnel.helloTimeoutMs);
    if (!guard.awaitingHello && this.deadline !== undefined) {
      clearTimeout(this.deadline);
      this.deadline = undefined;
    }
    if (guard.full) this.tunnel.client.pause();
  }

  /** What a step releases: to the client (the server's first records), and upstream in one write. */
  private pass(step: GuardStep): void {
    const { client, upstream } = this.tunnel;
    for (const bytes of step.deliver ?? []) client.write(bytes);
    // One write however many records the step released (a run of tiny records is many pieces).
    const bytes = step.forward.length === 1 ? step.forward[0]! : Buffer.concat(step.forward);
    if (bytes.length > 0 && !upstream.write(bytes) && !this.awaitingDrain) {
      this.awaitingDrain = true;
      client.pause();
      upstream.once('drain', () => {
        this.awaitingDrain = false;
        if (!this.guard.full) client.resume();
      });
    }
  }

  /** Allowed: the watch ends, and the client's bytes are relayed from here. */
  private opened(): void {
    this.stop();
    this.outcomes.allow(this.guard.serverName);
    if (this.clientEnded) this.tunnel.upstream.end();
    else {
      this.tunnel.relays.up();
      this.tunnel.client.resume();
    }
  }

  /** Charges what the guard holds now; false when that does not fit. */
  private charge(): boolean {
    const { memory } = this.tunnel;
    const held = this.guard.held;
    if (held > this.charged && !memory.grow(held - this.charged)) return false;
    if (held < this.charged) memory.shrink(this.charged - held);
    this.charged = held;
    return true;
  }

  private stop(): void {
    clearTimeout(this.deadline);
    this.tunnel.client.off('data', this.onClient);
    this.tunnel.client.off('end', this.onEnd);
    if (!this.serverPiped) this.tunnel.upstream.off('data', this.onServer);
    // Decided (or over): nothing more is held for this connection before a verdict.
    this.tunnel.memory.shrink(this.tunnel.memory.bytes);
  }
}
