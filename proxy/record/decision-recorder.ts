/**
 * The one decision line and decision metric of one proxied request. Every request the proxy takes
 * up gets a recorder, and every path that ends the request (allowed, refused before or after a
 * `200`, failed upstream, cut off by the client, a parse error behind it) goes through it: the
 * first `allow` or `deny` writes the line and counts the metric, and every later call does
 * nothing. "Exactly one line per request" is then this object's rule, not one each path keeps by
 * hand: an operator counting lines, or alerting on the deny metric, sees every request once.
 */
import type { Allowed, WouldDeny } from '../../policy/index.js';
import { F, logLine, type LineLevel, type LineValue, type Logger } from './log.js';
import type { ProxyObserver } from './metrics.js';
import type { SandboxOf } from './sandbox-metrics.js';
import { boundedDetail, type Refusal } from './refusal.js';

export type LineFields = Readonly<Record<string, LineValue>>;

/** The fields every allowed request's line carries, typed: where it went, by which rule, how pinned. */
export interface Destination {
  readonly [F.host]: string;
  readonly [F.port]: number;
  readonly [F.rule]: string | undefined;
  readonly [F.addresses]: readonly string[];
  readonly [F.pinnedBy]: Allowed['pinnedBy'];
}

/**
 * An allowed decision's destination fields, made here only: the CONNECT, transparent and
 * plain-HTTP lines all spell them alike. Fields listed one by one (a fixed shape, as decide's).
 */
export function destinationOf(decision: Allowed): Destination {
  return { [F.host]: decision.host, [F.port]: decision.port, [F.rule]: decision.rule, [F.addresses]: decision.addresses, [F.pinnedBy]: decision.pinnedBy };
}

export class DecisionRecorder {
  private written = false;
  private held = false;
  private noted: LineFields = {};
  private reportOnly: WouldDeny['reason'] | undefined;

  /**
   * `method` is the request's, when it was parsed; `level` is that of the line (a limit refusal,
   * made before the connection had a logger of its own, is a warning); `gate` says whether a
   * refusal gets its line (line-gate.ts: refusal lines are rate-capped per client, and only
   * counted past the cap); `allowGate`, on a shared proxy, says the same of an allowed line by
   * its host (decisions.ts).
   */
  constructor(
    private readonly observer: ProxyObserver,
    private readonly log: Logger,
    private readonly method: string | undefined,
    private readonly level: LineLevel = 'info',
    private readonly gate: (reason: string) => boolean = () => true,
    /** A shared proxy's connection: its decisions are counted by its registration too. */
    private readonly who: SandboxOf | undefined = undefined,
    private readonly allowGate: ((host: string) => boolean) | undefined = undefined,
  ) {}

  /** Whether the request's line is written (its outcome is known, and nothing may change it). */
  get recorded(): boolean {
    return this.written;
  }

  /**
   * Whether the request's line was held back (a refusal over the per-client line rate; on a
   * shared proxy, an allowed request over its sandbox's): the lines that would follow it (a
   * tunnel's close) are held back too.
   */
  get suppressed(): boolean {
    return this.held;
  }

  /** Fields the request's line carries whatever its outcome, known before it (a TLS server name read first). */
  note(fields: LineFields): void {
    this.noted = { ...this.noted, ...fields };
  }

  /**
   * The policy let the request through only because it is in report mode: its line, whatever its
   * outcome, carries `would_deny` with the refusal enforce mode would have given, and it is
   * counted in the would-deny metric too.
   */
  wouldDeny(wouldDeny: WouldDeny | undefined): void {
    if (wouldDeny === undefined || this.written) return;
    this.reportOnly = wouldDeny.reason;
    this.note({ [F.wouldDeny]: wouldDeny.reason });
  }

  /** The request was allowed to `destination`; `fields` say how it went. */
  allow(destination: Destination, fields: LineFields = {}): void {
    if (this.written) return;
    this.written = true;
    this.observer.decision('allow', 'allowed');
    if (this.who !== undefined) this.observer.sandboxDecision(this.who, 'allow', 'allowed');
    if (this.reportOnly !== undefined) this.observer.wouldDeny(this.reportOnly);
    // A line the level leaves out is not built either (its fields are a copy or two per request),
    // nor counted against the cap.
    if (!this.log.isLevelEnabled(this.level)) return;
    // A report-mode line is what the allowlist is learned from (proxy/report): never held back.
    if (this.allowGate !== undefined && this.reportOnly === undefined && !this.allowGate(destination[F.host])) {
      this.held = true;
      return;
    }
    logLine(this.log, { [F.event]: 'decision', [F.decision]: 'allow', [F.method]: this.method, ...this.noted, ...destination, ...fields }, this.level);
  }

  /** The request was refused for `refusal`'s reason; `fields` add what was known by then. */
  deny(refusal: Refusal, fields: LineFields = {}): void {
    if (this.written) return;
    this.written = true;
    this.observer.decision('deny', refusal.reason);
    if (this.who !== undefined) this.observer.sandboxDecision(this.who, 'deny', refusal.reason);
    if (this.reportOnly !== undefined) this.observer.wouldDeny(this.reportOnly);
    if (!this.gate(refusal.reason)) {
      this.held = true;
      return;
    }
    if (!this.log.isLevelEnabled(this.level)) return;
    logLine(
      this.log,
      { [F.event]: 'decision', [F.decision]: 'deny', [F.method]: this.method, [F.reason]: refusal.reason, [F.detail]: boundedDetail(refusal.detail), [F.host]: refusal.host, [F.port]: refusal.port, ...this.noted, ...fields },
      this.level,
    );
  }
}
