/**
 * What keeps refusal lines from filling the disk: a client's refusals get a line each up to a few
 * a second, and every client's together up to a cap; past either, a refusal is only counted (the
 * decision metric still counts each), and the counts, by reason, go out as one summary line per
 * interval. The gate itself is pure: the caller writes the summary (`logSuppressed`) on its own
 * timer.
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
  readonly byReason: Readonly<Record<string, number>>;
  /** The clients with the most refusals without a line, most first (`address=count`, at most five): who it was, even when the lines were not written. */
  readonly topClients: readonly string[];
}

const TOP_CLIENTS = 5;

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

  /** Whether a refusal for `client` (an address) gets a line; false: it is counted for the summary. */
  admit(client: string, reason: string): boolean {
    // The client's share first: one client over its rate does not spend what the others have.
    if (this.perClient.takeFor(client) && this.total.take('')) return true;
    this.suppressed += 1;
    const seen = this.from.get(client);
    if (seen !== undefined || this.from.size < this.limits.maxClients) this.from.set(client, (seen ?? 0) + 1);
    this.byReason.set(reason, (this.byReason.get(reason) ?? 0) + 1);
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

/** Writes what `gate` counted without a line since the last call, as one `event` line (none when nothing was). */
export function logSuppressed(gate: LineGate, log: Logger, event: string, message: string): void {
  const summary = gate.takeSummary();
  if (summary === undefined) return;
  log.warn({ [F.event]: event, [F.lines]: summary.lines, clients: summary.clients, byReason: summary.byReason, topClients: summary.topClients }, message);
}
