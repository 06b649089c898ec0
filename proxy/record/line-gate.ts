/**
 * What keeps decision lines from filling the disk: a client's lines (its refusals; on a shared
 * proxy, its allowed requests too) get a line each up to a rate, and every client's together up to
 * a cap; past either, a line is only counted (the decision metrics still count each), and the
 * counts, by reason or by host, go out as one summary line per interval. The gate itself is pure:
 * the caller writes the summary (`logSuppressed`) on its own timer.
 */
import { F, type Logger } from './log.js';
import { RateLimiter } from '../budget/index.js';

export interface LineGateLimits {
  /** Lines per second for one client address, and its burst. */
  readonly clientPerSecond: number;
  readonly clientBurst: number;
  /** Lines per second for every client together, and the burst. */
  readonly totalPerSecond: number;
  readonly totalBurst: number;
  /** Client addresses the table remembers (past it, addresses are counted by network). */
  readonly maxClients: number;
}

/** One interval's refusals that had no line of their own. */
export interface Suppressed {
  readonly lines: number;
  /** Client addresses they came from (counted up to the table's cap). */
  readonly clients: number;
  /** By what each line would have said (its reason, or its host), at most MAX_KINDS of them; past it, under OTHER_KINDS. */
  readonly byReason: Readonly<Record<string, number>>;
  /** The clients with the most refusals without a line, most first (`address=count`, at most five): who it was, even when the lines were not written. */
  readonly topClients: readonly string[];
}

const TOP_CLIENTS = 5;
/**
 * Kinds a summary counts apart: reasons are a few dozen, but hosts are what a client chooses (any
 * name under a wildcard entry), and one summary must not grow with them.
 */
export const MAX_KINDS = 32;
export const OTHER_KINDS = '(others)';

export class LineGate {
  private readonly perClient: RateLimiter;
  private readonly total: RateLimiter;
  private suppressed = 0;
  private readonly from = new Map<string, number>();
  private byReason = new Map<string, number>();

  constructor(
    private readonly limits: LineGateLimits,
    now?: () => number,
  ) {
    this.perClient = new RateLimiter(limits.clientPerSecond, limits.clientBurst, limits.maxClients, now);
    this.total = new RateLimiter(limits.totalPerSecond, limits.totalBurst, 1, now);
  }

  /** Whether a line of `kind` (a reason, a host) for `client` gets written; false: it is counted for the summary. */
  admit(client: string, kind: string): boolean {
    // The client's share first: one client over its rate does not spend what the others have.
    if (this.perClient.takeFor(client) && this.total.take('')) return true;
    this.suppressed += 1;
    const seen = this.from.get(client);
    if (seen !== undefined || this.from.size < this.limits.maxClients) this.from.set(client, (seen ?? 0) + 1);
    const counted = this.byReason.has(kind) || this.byReason.size < MAX_KINDS ? kind : OTHER_KINDS;
    this.byReason.set(counted, (this.byReason.get(counted) ?? 0) + 1);
    return false;
  }

  /** The counts since the last call, and a fresh start; undefined when nothing was suppressed. */
  takeSummary(): Suppressed | undefined {
    if (this.suppressed === 0) return undefined;
    const top = [...this.from].sort((a, b) => b[1] - a[1]).slice(0, TOP_CLIENTS);
    const summary: Suppressed = { lines: this.suppressed, clients: this.from.size, byReason: Object.fromEntries(this.byReason), topClients: top.map(([c, n]) => `${c}=${n}`) };
    this.suppressed = 0;
    this.from.clear();
    this.byReason = new Map();
    return summary;
  }
}

/**
 * Writes what `gate` counted without a line since the last call, as one `event` line (none when
 * nothing was); the counts by kind are its `byKind` field (byReason, byHost).
 */
export function logSuppressed(gate: LineGate, log: Logger, event: string, message: string, byKind = 'byReason'): void {
  const summary = gate.takeSummary();
  if (summary === undefined) return;
  log.warn({ [F.event]: event, [F.lines]: summary.lines, clients: summary.clients, [byKind]: summary.byReason, topClients: summary.topClients }, message);
}
