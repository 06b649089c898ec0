/**
 * Where one proxy's decision lines come from: a recorder per request (decision-recorder.ts), its
 * refusal line capped per client and in all (line-gate.ts), and what is over the caps summed up
 * every interval on one `decision_lines_suppressed` line.
 *
 * On a shared proxy, allowed lines are capped per sandbox too (its tunnel's closing line goes with
 * its allowed line): one sandbox making allowed requests as fast as it can would otherwise fill
 * the shard's log alone, and its rotation would drop the other sandboxes' lines. Past the cap its
 * requests are counted by host on one `allowed_lines_suppressed` line per interval, so the log
 * still says where it went. A proxy serving one workload writes every allowed line: whatever it
 * floods is its own.
 */
import { DecisionRecorder } from './decision-recorder.js';
import { LineGate, logSuppressed, type LineGateLimits } from './line-gate.js';
import type { LineLevel, Logger } from './log.js';
import type { ProxyObserver } from './metrics.js';
import type { SandboxOf } from './sandbox-metrics.js';

/** Refusal lines one client, and every client together, may cause (a line is ~300-500 bytes). */
export const REFUSAL_LINES: LineGateLimits = Object.freeze({ clientPerSecond: 20, clientBurst: 100, totalPerSecond: 100, totalBurst: 400, maxClients: 4_096 });
/**
 * Allowed lines one sandbox of a shared proxy, and all its sandboxes together, may cause: enough
 * for a burst of hundreds of connections (a package install), not for a loop.
 */
export const ALLOWED_LINES: LineGateLimits = Object.freeze({ clientPerSecond: 50, clientBurst: 500, totalPerSecond: 500, totalBurst: 2_000, maxClients: 4_096 });
/** How often the count of lines not written is written. */
const SUPPRESSED_REPORT_MS = 10_000;

export class Decisions {
  private readonly lines = new LineGate(REFUSAL_LINES);
  private readonly allowedLines = new LineGate(ALLOWED_LINES);
  private readonly reporter: NodeJS.Timeout;

  constructor(
    private readonly observer: ProxyObserver,
    private readonly log: Logger,
  ) {
    this.reporter = setInterval(() => this.report(), SUPPRESSED_REPORT_MS);
    this.reporter.unref();
  }

  /**
   * The one recorder of a request's decision line and metric, written to `log` (the connection's
   * own, or the proxy's with a client field for a refusal at the limits, at `level`).
   */
  recorder(log: Logger, clientIp: string, method: string | undefined, level: LineLevel = 'info', who?: SandboxOf): DecisionRecorder {
    const allowGate = who?.sandbox === undefined ? undefined : (host: string): boolean => this.allowedLines.admit(clientIp, host);
    return new DecisionRecorder(this.observer, log, method, level, (reason) => this.lines.admit(clientIp, reason), who, allowGate);
  }

  /**
   * Whether a line about `client`'s requests that is no decision (`requests_dropped`) gets
   * written: within the client's refusal-line cap, as a refusal's, and counted under `kind` on the
   * summary past it. One such line per connection, uncapped, let a sandbox write one at its whole
   * connection rate.
   */
  admitsLine(client: string, kind: string): boolean {
    return this.lines.admit(client, kind);
  }

  /** Stops the interval, with a last summary. */
  close(): void {
    clearInterval(this.reporter);
    this.report();
  }

  private report(): void {
    logSuppressed(this.lines, this.log, 'decision_lines_suppressed', 'refusals counted without a line of their own (over the per-client line rate); the decision metric counts each');
    logSuppressed(this.allowedLines, this.log, 'allowed_lines_suppressed', 'allowed requests counted by host without a line of their own (over the per-sandbox line rate); the decision metrics count each', 'byHost');
  }
}
