/**
 * A shared proxy's metrics by sandbox (`egress_sandbox_*`): decisions, refusals by reason, bytes
 * and open tunnels, in plain numbers, kept by registration (sandbox and lifecycle id) for the
 * registrations held now, and handed to prom-client at each read (as metrics.ts's Tally does).
 * `egressUsage` of a sandbox on a shard reads them. A registration that ended takes its counts
 * with it, and a late count of one (a request cut as it ended) is dropped: they never pile up,
 * and a later sandbox of the same name starts from nothing.
 */
import promClient, { type Registry } from 'prom-client';
import { EGRESS_METRICS } from '../../common/index.js';

const { Counter, Gauge } = promClient;

/** A shared proxy's client, as its counts are kept: its sandbox and the registration (lifecycle id) it came under. */
export interface SandboxOf {
  readonly sandbox?: string | undefined;
  readonly lifecycle?: string | undefined;
}

/** What a shared proxy counts for one registration. */
interface SandboxCounts {
  readonly sandbox: string;
  allowed: number;
  denied: number;
  readonly deniedByReason: Map<string, number>;
  bytesUp: number;
  bytesDown: number;
  openTunnels: number;
}

const keyOf = (sandbox: string, lifecycle: string): string => `${sandbox} ${lifecycle}`;

export class SandboxSeries {
  /** By keyOf: a sandbox of the same name registered again is another registration. */
  private readonly live = new Map<string, SandboxCounts>();

  constructor(registry: Registry) {
    const each = (emit: (sandbox: string, c: SandboxCounts) => void): void => {
      for (const c of this.live.values()) emit(c.sandbox, c);
    };
    new Counter({
      name: EGRESS_METRICS.sandboxDecisions,
      help: 'A shared proxy\'s decisions, by sandbox and outcome',
      labelNames: ['sandbox', 'outcome'] as const,
      registers: [registry],
      collect() {
        this.reset();
        each((sandbox, c) => {
          if (c.allowed > 0) this.inc({ sandbox, outcome: 'allow' }, c.allowed);
          if (c.denied > 0) this.inc({ sandbox, outcome: 'deny' }, c.denied);
        });
      },
    });
    new Counter({
      name: EGRESS_METRICS.sandboxDenials,
      help: 'A shared proxy\'s refusals, by sandbox and reason',
      labelNames: ['sandbox', 'reason'] as const,
      registers: [registry],
      collect() {
        this.reset();
        each((sandbox, c) => {
          for (const [reason, n] of c.deniedByReason) this.inc({ sandbox, reason }, n);
        });
      },
    });
    new Counter({
      name: EGRESS_METRICS.sandboxBytes,
      help: 'Bytes a shared proxy relayed, by sandbox and direction (up: client to upstream)',
      labelNames: ['sandbox', 'direction'] as const,
      registers: [registry],
      collect() {
        this.reset();
        each((sandbox, c) => {
          if (c.bytesUp + c.bytesDown === 0) return;
          this.inc({ sandbox, direction: 'up' }, c.bytesUp);
          this.inc({ sandbox, direction: 'down' }, c.bytesDown);
        });
      },
    });
    new Gauge({
      name: EGRESS_METRICS.sandboxOpenTunnels,
      help: 'Tunnels a shared proxy has open now, by sandbox',
      labelNames: ['sandbox'] as const,
      registers: [registry],
      collect() {
        this.reset();
        each((sandbox, c) => {
          if (c.openTunnels > 0) this.set({ sandbox }, c.openTunnels);
        });
      },
    });
  }

  /** The registrations held now: counted from here on; the others' counts go. */
  registered(registrations: ReadonlyArray<{ readonly sandbox: string; readonly lifecycle: string }>): void {
    const now = new Map(registrations.map((r) => [keyOf(r.sandbox, r.lifecycle), r.sandbox]));
    for (const key of this.live.keys()) if (!now.has(key)) this.live.delete(key);
    for (const [key, sandbox] of now) {
      if (!this.live.has(key)) this.live.set(key, { sandbox, allowed: 0, denied: 0, deniedByReason: new Map(), bytesUp: 0, bytesDown: 0, openTunnels: 0 });
    }
  }

  decision(who: SandboxOf, outcome: 'allow' | 'deny', reason: string): void {
    const c = this.of(who);
    if (c === undefined) return;
    if (outcome === 'allow') c.allowed += 1;
    else {
      c.denied += 1;
      c.deniedByReason.set(reason, (c.deniedByReason.get(reason) ?? 0) + 1);
    }
  }

  tunnelOpened(who: SandboxOf | undefined): void {
    const c = this.of(who);
    if (c !== undefined) c.openTunnels += 1;
  }

  /** Closed: its bytes counted, to the registration it was opened under. */
  tunnelClosed(who: SandboxOf | undefined, up: number, down: number): void {
    const c = this.of(who);
    if (c === undefined) return;
    c.openTunnels = Math.max(0, c.openTunnels - 1);
    this.bytes(who, up, down);
  }

  bytes(who: SandboxOf | undefined, up: number, down: number): void {
    const c = this.of(who);
    if (c === undefined) return;
    c.bytesUp += up;
    c.bytesDown += down;
  }

  private of(who: SandboxOf | undefined): SandboxCounts | undefined {
    return who?.sandbox === undefined || who.lifecycle === undefined ? undefined : this.live.get(keyOf(who.sandbox, who.lifecycle));
  }
}
