/**
 * `capybara-egress report`: the host names a run needed, learned from the proxy's own decision
 * lines, written as a policy file to enforce. A line counts for its host when the request was
 * allowed (by an entry, or by report mode: `would_deny`), or refused only for the allowlist or the
 * port (an enforce-mode log: what it would have needed). Refusals that no policy lifts (an IP
 * literal, a private address, a hello naming another host) are summed up in comments, never
 * listed. Everything read is hostile text: each host is checked as the proxy checks a request's,
 * and what is held is capped (hosts, refusals, line length, the ports a host's comment names).
 */
import { buildPolicy, DEFAULT_CONNECT_PORTS, isReason, parseHostName, parseHostPattern, parsePolicyText } from '../../policy/index.js';
import { F } from '../record/index.js';

export const REPORT_LIMITS = Object.freeze({
  /** Distinct hosts held; past it, lines for new hosts are counted and dropped (the note says how many). */
  maxHosts: 10_000,
  /** Distinct refused hosts held for the comments. */
  maxRefused: 200,
  /** Longest line read, in bytes; a longer one is malformed (no decision line comes near it). */
  maxLineBytes: 64 * 1024,
});

/** The refusals a policy's allowHosts or connectPorts would lift: an enforce-mode log names them. */
const NEGOTIABLE = new Set(['host_not_allowed', 'port_not_allowed', 'dns_not_allowed']);

interface HostTally {
  requests: number;
  /** Requests allowed by an entry (rule), and those let through only by report mode or refused for the allowlist. */
  allowed: number;
  wouldDeny: number;
  /** The first MAX_PORTS ports seen, for the comment; `otherPorts` counts requests on any other. */
  readonly ports: Set<number>;
  otherPorts: number;
  readonly rules: Set<string>;
  /** Whether any tunnel to it was opaque (not TLS): its entry needs `tunnel: opaque`. */
  opaque: boolean;
  /** Refusals after report mode let it through (connect_failed, sni_mismatch), by reason. */
  readonly failures: Map<string, number>;
}

export interface ReportCounts {
  readonly lines: number;
  readonly decisions: number;
  readonly malformed: number;
  /** Lines for hosts past maxHosts, dropped. */
  readonly droppedHosts: number;
}

type Fields = Record<string, unknown>;

/** Rules named in one host's comment. */
const MAX_RULES = 8;
/**
 * Ports named in one host's comment: a run can ask for one name on every port, and a set per
 * host of up to 65,535 grew with the log (connectPorts gets every port from a set of its own).
 */
const MAX_PORTS = 16;

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

export class AllowlistReport {
  private readonly hosts = new Map<string, HostTally>();
  private readonly refused = new Map<string, Map<string, number>>();
  /** Every port an entry's request used: the connectPorts to write. */
  private readonly ports = new Set<number>();
  private lines = 0;
  private decisions = 0;
  private malformed = 0;
  private droppedHosts = 0;
  private droppedRefused = 0;

  get counts(): ReportCounts {
    return { lines: this.lines, decisions: this.decisions, malformed: this.malformed, droppedHosts: this.droppedHosts };
  }

  /** A line too long to read: counted as malformed, never parsed. */
  tooLong(): void {
    this.lines += 1;
    this.malformed += 1;
  }

  /** One line of the log (without its newline). Blank lines are skipped; lines of other events are ignored. */
  add(line: string): void {
    if (line.trim() === '') return;
    this.lines += 1;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      this.malformed += 1;
      return;
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      this.malformed += 1;
      return;
    }
    const fields = value as Fields;
    if (fields[F.event] !== 'decision') return;
    if (!this.decision(fields)) this.malformed += 1;
  }

  /** A decision line; false when it is not one the proxy writes. */
  private decision(fields: Fields): boolean {
    const outcome = fields[F.decision];
    const rawHost = fields[F.host];
    const reason = fields[F.reason];
    const wouldDeny = fields[F.wouldDeny];
    if ((outcome !== 'allow' && outcome !== 'deny') || (outcome === 'deny' && !isCode(reason))) return false;
    if (wouldDeny !== undefined && wouldDeny !== 'host_not_allowed' && wouldDeny !== 'port_not_allowed') return false;
    this.decisions += 1;
    // A refusal before a host name was read (an IP literal, a bad request line): summed up.
    if (rawHost === undefined && outcome === 'deny') {
      this.refuse('(no host name)', String(reason));
      return true;
    }
    if (typeof rawHost !== 'string') return false;
    const port = fields[F.port];
    if (port !== undefined && (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535)) return false;
    const parsed = parseHostName(rawHost);
    if (!parsed.ok) {
      this.refuse(printable(rawHost), parsed.reason);
      return true;
    }
    const negotiable = outcome === 'allow' || wouldDeny !== undefined || NEGOTIABLE.has(String(reason));
    // A name the proxy would reach but no entry may name (a public suffix itself) is no entry.
    if (!negotiable || !parseHostPattern(parsed.name, 'tls').ok) {
      this.refuse(parsed.name, negotiable ? 'not_an_entry' : String(reason));
      return true;
    }
    const tally = this.tally(parsed.name);
    if (tally === undefined) return true;
    tally.requests += 1;
    if (typeof port === 'number') {
      this.ports.add(port);
      if (tally.ports.size < MAX_PORTS || tally.ports.has(port)) tally.ports.add(port);
      else tally.otherPorts += 1;
    }
    const rule = fields[F.rule];
    if (outcome === 'allow' && wouldDeny === undefined && typeof rule === 'string' && tally.rules.size < MAX_RULES) tally.rules.add(printable(rule));
    if (outcome === 'allow' && wouldDeny === undefined) tally.allowed += 1;
    else tally.wouldDeny += 1;
    if (fields[F.tunnel] === 'opaque') tally.opaque = true;
    if (outcome === 'deny' && !NEGOTIABLE.has(String(reason))) bump(tally.failures, String(reason));
    return true;
  }

  private tally(host: string): HostTally | undefined {
    let tally = this.hosts.get(host);
    if (tally !== undefined) return tally;
    if (this.hosts.size >= REPORT_LIMITS.maxHosts) {
      this.droppedHosts += 1;
      return undefined;
    }
    tally = { requests: 0, allowed: 0, wouldDeny: 0, ports: new Set(), otherPorts: 0, rules: new Set(), opaque: false, failures: new Map() };
    this.hosts.set(host, tally);
    return tally;
  }

  private refuse(host: string, reason: string): void {
    let reasons = this.refused.get(host);
    if (reasons === undefined) {
      if (this.refused.size >= REPORT_LIMITS.maxRefused) {
        this.droppedRefused += 1;
        return;
      }
      reasons = new Map();
      this.refused.set(host, reasons);
    }
    bump(reasons, reason);
  }

  /**
   * The policy file: hosts sorted, each with a comment of what was seen; connectPorts when a port
   * other than the defaults was used. Checked by the policy's own parser before it is returned.
   */
  render(source: string): string {
    // A file name is text too: a line break in it would end the comment.
    source = printable(source);
    const names = [...this.hosts.keys()].sort();
    const ports = this.ports;
    const defaults = [...ports].every((p) => DEFAULT_CONNECT_PORTS.includes(p));
    const out = [
      `# allowHosts learned by capybara-egress report from ${source}: ${this.decisions} decision lines, ${names.length} hosts.`,
      '# Review every entry before enforcing it: code in a run can ask for any host, and each one listed here becomes reachable.',
      'version: 1',
      'mode: enforce',
      names.length === 0 ? 'allowHosts: []' : 'allowHosts:',
      ...names.map((name) => this.entry(name, this.hosts.get(name)!)),
    ];
    if (!defaults) out.push(`connectPorts: [${[...ports].sort((a, b) => a - b).join(', ')}]`);
    if (this.refused.size > 0) {
      out.push('# Refused in every mode (no entry lifts these), not listed:');
      for (const [host, reasons] of [...this.refused].sort(([a], [b]) => (a < b ? -1 : 1))) out.push(`#   ${host}: ${summary(reasons)}`);
      if (this.droppedRefused > 0) out.push(`#   (${this.droppedRefused} more refusals of other hosts not held)`);
    }
    if (this.droppedHosts > 0) out.push(`# INCOMPLETE: ${this.droppedHosts} lines named hosts past the first ${REPORT_LIMITS.maxHosts}, not listed`);
    const text = `${out.join('\n')}\n`;
    check(text, source);
    return text;
  }

  private entry(name: string, tally: HostTally): string {
    const seen = [`${tally.requests} request${tally.requests === 1 ? '' : 's'}`];
    if (tally.wouldDeny > 0) seen.push(`${tally.wouldDeny} would_deny`);
    if (tally.allowed > 0) seen.push(`${tally.allowed} allowed${tally.rules.size > 0 ? ` by ${[...tally.rules].sort().join(', ')}` : ''}`);
    if (tally.ports.size > 0) seen.push(`port ${[...tally.ports].sort((a, b) => a - b).join(', ')}${tally.otherPorts > 0 ? ` (and ${tally.otherPorts} requests on other ports)` : ''}`);
    if (tally.failures.size > 0) seen.push(`then refused: ${summary(tally.failures)}`);
    // JSON strings are YAML: a name such as "true" or "null" stays a string.
    const host = JSON.stringify(name);
    const entry = tally.opaque ? `{ host: ${host}, tunnel: opaque }` : host;
    return `  - ${entry} # ${seen.join('; ')}`;
  }
}

/**
 * Reason codes as the proxy writes them, from the catalog; anything else in that field is no
 * decision line of its (and a code of any spelling was a new key in a host's tally, without end).
 */
function isCode(value: unknown): value is string {
  return typeof value === 'string' && isReason(value);
}

/** Log text for a comment: printable ASCII only (no line break can end the comment), and short. */
function printable(text: string): string {
  return text.slice(0, 80).replace(/[^\x20-\x7e]/g, '?');
}

function summary(reasons: Map<string, number>): string {
  return [...reasons].map(([reason, n]) => `${reason} x${n}`).join(', ');
}

/** The rendered file must be a policy the proxy takes: a host it would refuse fails here, not at start. */
function check(text: string, source: string): void {
  const file = parsePolicyText(text, `the report of ${source}`);
  const built = buildPolicy({ allowHosts: file.allowHosts, connectPorts: file.connectPorts });
  if (!built.ok) throw new Error(`the report of ${source} is no valid policy: ${built.problems.map((p) => `${p.path}: ${p.message}`).join('; ')}`);
}
