/** Output of the operator CLI: plain aligned tables and durations, and JSON a terminal cannot act on. */

/** A character as a `\uXXXX` escape (a UTF-16 code unit, as JSON writes one). */
const escaped = (ch: string): string => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`;

/**
 * `text` for a terminal: every control character but the newline and the tab (C0, DEL, C1, and
 * U+2028/U+2029) as a `\uXXXX` escape. An error's message can quote what a sandbox wrote (with
 * `commandIsolation: off`, output a leftover process wrote before a command began).
 */
export function terminalText(text: string): string {
  return text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]/g, escaped);
}

/**
 * `value` as JSON with every character outside printable ASCII as a `\uXXXX` escape: the same
 * JSON value, and nothing a terminal acts on. JSON.stringify escapes C0 controls only, and lets
 * DEL, the C1 controls (U+009B is CSI to a terminal that reads 8-bit controls) and U+2028 stand
 * raw in a string; a sandbox's command output, a label or an allowlist entry can carry them.
 */
export function asciiJson(value: unknown, indent?: number): string {
  return JSON.stringify(value, null, indent).replace(/[^\x20-\x7e\n]/g, escaped);
}

/**
 * An aligned table, one line per row: every control character in a cell, the newline and the tab
 * included, is a `\uXXXX` escape. A cell can be a label's value (a name label, gc's SANDBOX),
 * whatever bytes an image's author chose, and terminalText keeps the newlines between rows: a
 * newline in a cell printed a row of its own choosing (`removed  volume  cap-ws.x ...`).
 */
export function table(headers: readonly string[], raw: ReadonlyArray<readonly string[]>): string {
  const rows = raw.map((r) => r.map((c) => c.replace(/[\x00-\x1f\x7f-\x9f\u2028\u2029]/g, escaped)));
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] ?? 0))).join('  ').trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

export function age(seconds: number): string {
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7_200) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 172_800) return `${Math.floor(seconds / 3_600)}h`;
  return `${Math.floor(seconds / 86_400)}d`;
}
