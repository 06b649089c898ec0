/**
 * What `capybara-sandbox logs` shows of an egress proxy's log: its decision records (one per
 * request), the close record of each tunnel (its bytes), and the summary of refusals that were
 * only counted (over the per-client line rate: without it, `logs` would hide that refusals
 * happened). Start-up and other informational lines are not decisions and are left out.
 *
 * Pure: a log line in, a record or a reason to skip it out; a record in, one line of text out.
 * The log is input even though the proxy is ours: a sandbox chooses the host names the proxy
 * logs, so every string shown is escaped to printable ASCII (a control character would reach the
 * operator's terminal raw) and cut to a length, and a field of an unexpected type is shown as `?`.
 */
import { asciiJson } from './render.js';

/** The record kinds shown, by their `event` field (proxy/record/log.ts spells them). */
export const SHOWN_EVENTS = ['decision', 'tunnel_closed', 'decision_lines_suppressed'] as const;
export type ShownEvent = (typeof SHOWN_EVENTS)[number];

export type LogRecord = Readonly<Record<string, unknown>> & { readonly event: ShownEvent };

export type ParsedLine =
  | { readonly kind: 'record'; readonly record: LogRecord }
  /** A JSON record, but not a decision (start-up, reloads, warnings): not shown. */
  | { readonly kind: 'other' }
  /** Not a JSON object: counted as skipped. */
  | { readonly kind: 'malformed' };

/** Longest a shown string field may be; longer ones are cut, with `...`. */
const FIELD_MAX = 256;

export function parseLogLine(line: string): ParsedLine {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return { kind: 'malformed' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { kind: 'malformed' };
  const event = (value as Record<string, unknown>).event;
  if (typeof event !== 'string' || !(SHOWN_EVENTS as readonly string[]).includes(event)) return { kind: 'other' };
  return { kind: 'record', record: value as LogRecord };
}

/** A refusal: a `deny` decision, or a count of refusals that had no line of their own. */
export function isRefusal(record: LogRecord): boolean {
  return (record.event === 'decision' && record.decision === 'deny') || record.event === 'decision_lines_suppressed';
}

/**
 * Text as printable ASCII: a backslash doubled, any other character outside 0x20-0x7e as `\xNN`
 * or `\u{N}`, so that no byte of the log is a terminal control (C0, DEL, C1 such as U+009B, line
 * separators) and no escape can be forged; cut at `max` characters.
 */
export function escapeText(text: string, max = FIELD_MAX): string {
  let out = '';
  let shown = 0;
  for (const ch of text) {
    if (shown === max) return `${out}...`;
    const code = ch.codePointAt(0) ?? 0;
    if (ch === '\\') out += '\\\\';
    else if (code >= 0x20 && code <= 0x7e) out += ch;
    else if (code < 0x100) out += `\\x${code.toString(16).padStart(2, '0')}`;
    else out += `\\u{${code.toString(16)}}`;
    shown += 1;
  }
  return out;
}

function text(value: unknown): string {
  if (typeof value === 'string') return escapeText(value);
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return '?';
}

function count(value: unknown): string | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? String(value) : undefined;
}

function target(record: LogRecord): string {
  const host = record.host === undefined ? '-' : text(record.host);
  return record.port === undefined ? host : `${host}:${text(record.port)}`;
}

/** `up N B, down N B`, when the record has both counts. */
function bytes(record: LogRecord): string | undefined {
  const up = count(record.bytesUp);
  const down = count(record.bytesDown);
  return up === undefined || down === undefined ? undefined : `up ${up} B, down ${down} B`;
}

function seconds(value: unknown): string | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? `${(value / 1000).toFixed(1)} s` : undefined;
}

function join(parts: ReadonlyArray<string | undefined>): string {
  return parts.filter((p) => p !== undefined && p !== '').join('  ');
}

function decisionLine(record: LogRecord, time: string): string {
  const method = typeof record.method === 'string' ? `${text(record.method)} ` : '';
  const via = record.via === undefined ? undefined : `via ${text(record.via)}`;
  // Report mode: allowed only because the proxy learns an allowlist; enforce mode would refuse it.
  const wouldDeny = record.would_deny === undefined ? undefined : `would_deny ${text(record.would_deny)}`;
  if (record.decision === 'deny') {
    return join([time, 'denied ', `${method}${target(record)}`, `${text(record.reason)}: ${text(record.detail)}`, wouldDeny, via]);
  }
  if (record.decision !== 'allow') return join([time, `${text(record.decision)}?`, `${method}${target(record)}`]);
  const status = record.status === undefined ? undefined : `status ${text(record.status)}`;
  const error = record.error === undefined ? undefined : `error ${text(record.error)}`;
  const rule = record.rule === undefined && wouldDeny !== undefined ? undefined : `rule ${text(record.rule)}`;
  return join([time, 'allowed', `${method}${target(record)}`, rule, wouldDeny, status, bytes(record), error, via]);
}

function suppressedLine(record: LogRecord, time: string): string {
  const byReason = record.byReason;
  const reasons = typeof byReason === 'object' && byReason !== null && !Array.isArray(byReason)
    ? Object.entries(byReason).slice(0, 32).map(([reason, n]) => `${escapeText(reason)}=${text(n)}`).join(', ')
    : '?';
  return join([time, 'denied ', `${count(record.lines) ?? '?'} more refusals, over the log-line rate, without a line of their own (${reasons})`]);
}

/** One record as one line of text (no newline): time, outcome, method and host:port, then why or how much. */
export function formatRecord(record: LogRecord): string {
  const time = text(record.time);
  switch (record.event) {
    case 'decision':
      return decisionLine(record, time);
    case 'tunnel_closed': {
      const by = record.closedBy === undefined ? undefined : `closed by ${text(record.closedBy)}`;
      return join([time, 'closed ', target(record), bytes(record), seconds(record.durationMs), by]);
    }
    case 'decision_lines_suppressed':
      return suppressedLine(record, time);
  }
}

/**
 * A record's line for `--json`: the line as the proxy wrote it when it is printable ASCII (what
 * the proxy writes), else the record serialized again by asciiJson: the same JSON value.
 */
export function jsonLine(line: string, record: LogRecord): string {
  if (/^[\x20-\x7e]*$/.test(line)) return line;
  return asciiJson(record);
}
