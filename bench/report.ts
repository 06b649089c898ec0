/**
 * The printed result: one table row per measurement and one column per peer, then each target
 * as a ratio with PASS or MISS. A measurement runs in several interleaved rounds; a cell holds one
 * value per round and prints their median with the spread (half the range, as a share of the
 * median). A cell may instead say why it is empty (peer skipped, measurement failed), so a
 * partial run still prints a complete, honest table.
 */

export const PEERS = ['direct', 'floor', 'capybara', 'squid', 'tinyproxy', 'smokescreen'] as const;
export type PeerName = (typeof PEERS)[number];

/** The values of a measurement, one per round, or why there is none. */
export type Cell = number[] | { readonly missing: string };

export interface Row {
  readonly label: string;
  /** Decimal places to print. */
  readonly digits: number;
  readonly cells: Partial<Record<PeerName, Cell>>;
}

export interface Target {
  readonly label: string;
  /** The measured value (ours), and what it is compared with. */
  readonly ours: Cell | number | undefined;
  readonly reference: Cell | number | undefined;
  readonly referenceLabel: string;
  /** ratio = ours / reference; PASS when `ratio <= limit` ('max') or `ratio >= limit` ('min'). */
  readonly bound: 'max' | 'min';
  readonly limit: number;
}

/** Nearest-rank percentile (p in 0..100) of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1] as number;
}

/** Adds one round's value to a cell (a cell that says why it is empty stays so). */
export function put(row: Row, peer: PeerName, value: number | { readonly missing: string }): void {
  const cell = row.cells[peer];
  if (typeof value !== 'number') row.cells[peer] = value;
  else if (cell === undefined) row.cells[peer] = [value];
  else if (Array.isArray(cell)) cell.push(value);
}

/** The median of a cell's rounds, or undefined when it has none. */
export function valueOf(cell: Cell | number | undefined): number | undefined {
  if (typeof cell === 'number') return cell;
  if (!Array.isArray(cell) || cell.length === 0) return undefined;
  return percentile(cell, 50);
}

function show(cell: Cell | number | undefined, digits: number): string {
  if (cell === undefined) return '-';
  if (!Array.isArray(cell) && typeof cell !== 'number') return `(${cell.missing})`;
  const median = valueOf(cell) as number;
  const text = median.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
  if (!Array.isArray(cell) || cell.length < 2 || median === 0) return text;
  const spread = ((Math.max(...cell) - Math.min(...cell)) / 2 / median) * 100;
  return `${text} ±${spread.toFixed(0)}%`;
}

export function formatTable(rows: readonly Row[], columns: readonly PeerName[]): string {
  const header = ['measurement', ...columns];
  const body = rows.map((r) => [r.label, ...columns.map((c) => show(r.cells[c], r.digits))]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((line) => (line[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

export function formatTargets(targets: readonly Target[]): string {
  return targets
    .map((t) => {
      const want = `${t.bound === 'max' ? '<=' : '>='} ${t.limit}x ${t.referenceLabel}`;
      const ours = valueOf(t.ours);
      const reference = valueOf(t.reference);
      if (ours === undefined || reference === undefined) {
        const why = ours === undefined ? 'ours' : t.referenceLabel;
        return `  n/a   ${t.label}: want ${want}; no value for ${why}`;
      }
      const ratio = ours / reference;
      const pass = t.bound === 'max' ? ratio <= t.limit : ratio >= t.limit;
      const fmt = (n: number): string => n.toLocaleString('en-US', { maximumFractionDigits: 2 });
      return `  ${pass ? 'PASS' : 'MISS'}  ${t.label}: ${ratio.toFixed(2)}x (want ${want}; ours ${fmt(ours)} vs ${fmt(reference)})`;
    })
    .join('\n');
}
