/**
 * The printed result: one table row per measurement and one column per peer, then each target
 * as a ratio with PASS or MISS. Cells are numbers or a short reason the cell is empty (peer
 * skipped, measurement failed), so a partial run still prints a complete, honest table.
 */

export const PEERS = ['direct', 'capybara', 'squid', 'tinyproxy'] as const;
export type PeerName = (typeof PEERS)[number];

/** A measured value, or why there is none. */
export type Cell = number | { readonly missing: string };

export interface Row {
  readonly label: string;
  /** Decimal places to print. */
  readonly digits: number;
  readonly cells: Partial<Record<PeerName, Cell>>;
}

export interface Target {
  readonly label: string;
  /** The measured value (ours), and what it is compared with. */
  readonly ours: Cell | undefined;
  readonly reference: Cell | undefined;
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

function show(cell: Cell | undefined, digits: number): string {
  if (cell === undefined) return '-';
  if (typeof cell !== 'number') return `(${cell.missing})`;
  return cell.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
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
      if (typeof t.ours !== 'number' || typeof t.reference !== 'number') {
        const why = typeof t.ours !== 'number' ? 'ours' : t.referenceLabel;
        return `  n/a   ${t.label}: want ${want}; no value for ${why}`;
      }
      const ratio = t.ours / t.reference;
      const pass = t.bound === 'max' ? ratio <= t.limit : ratio >= t.limit;
      return `  ${pass ? 'PASS' : 'MISS'}  ${t.label}: ${ratio.toFixed(2)}x (want ${want}; ours ${show(t.ours, 2)} vs ${show(t.reference, 2)})`;
    })
    .join('\n');
}
