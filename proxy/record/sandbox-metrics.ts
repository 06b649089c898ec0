/**
 * A shared proxy's metrics by sandbox (`egress_sandbox_*`): decisions, refusals by reason, bytes
 * and open tunnels, in plain numbers, kept only for the sandboxes registered now and handed to
 * prom-client at each read (as metrics.ts's Tally does). `egressUsage` of a sandbox on a shard
 * reads them. A sandbox whose registration ended takes its series with it, and a late count of
 * one (a request cut as its registration ended) is dropped, so they never pile up.
 */
import type * as PromClient from 'prom-client';
import type { Registry } from 'prom-client';
import { EGRESS_METRICS, requireCjs } from '../../common/index.js';

const { Counter, Gauge } = requireCjs('prom-client') as typeof PromClient;

/** What a shared proxy counts for one registered sandbox. */
interface SandboxCounts {
  allowed: number;
  denied: number;
  readonly deniedByReason: Map<string, number>;
  bytesUp: number;
  bytesDown: number;
  openTunnels: number;
}

export class SandboxSeries {
  private readonly live = new Map<string, SandboxCounts>();

  constructor(registry: Registry) {
    const each = (emit: (sandbox: string, c: SandboxCounts) => void): void => {
      for (const [sandbox, c] of this.live) emit(sandbox, c);
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

  /** The sandboxes registered now: counted from here on; the others' series go. */
  registered(names: ReadonlySet<string>): void {
    for (const sandbox of this.live.keys()) if (!names.has(sandbox)) this.live.delete(sandbox);
    for (const sandbox of names) {
      if (!this.live.has(sandbox)) this.live.set(sandbox, { allowed: 0, denied: 0, deniedByReason: new Map(), bytesUp: 0, bytesDown: 0, openTunnels: 0 });
    }
  }

  decision(sandbox: string, outcome: 'allow' | 'deny', reason: string): void {
    const c = this.live.get(sandbox);
    if (c === undefined) return;
    if (outcome === 'allow') c.allowed += 1;
    else {
      c.denied += 1;
      c.deniedByReason.set(reason, (c.deniedByReason.get(reason) ?? 0) + 1);
    }
  }

  tunnelOpened(sandbox: string | undefined): void {
    const c = sandbox === undefined ? undefined : this.live.get(sandbox);
    if (c !== undefined) c.openTunnels += 1;
  }

  /** Closed: its bytes counted. A tunnel opened before its sandbox was registered again under the same name never takes the count below 0. */
  tunnelClosed(sandbox: string | undefined, up: number, down: number): void {
    const c = sandbox === undefined ? undefined : this.live.get(sandbox);
    if (c === undefined) return;
    c.openTunnels = Math.max(0, c.openTunnels - 1);
    this.bytes(sandbox, up, down);
  }

  bytes(sandbox: string | undefined, up: number, down: number): void {
    const c = sandbox === undefined ? undefined : this.live.get(sandbox);
    if (c === undefined) return;
    c.bytesUp += up;
    c.bytesDown += down;
  }
}
