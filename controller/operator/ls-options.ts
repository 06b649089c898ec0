/**
 * What `ls` shows and of which sandboxes: `-q` (names only), `--format table|json` and
 * `--filter label=KEY[=VALUE]` / `--filter status=STATE`, parsed once from the command line.
 * Labels are matched by the engine (every one must match, as Docker's own label filter);
 * statuses on the rows, and several are alternatives, as in `docker ps`: a container is in
 * exactly one state, so requiring two at once would always list nothing.
 */
import { SandboxError } from '../spec/index.js';
import type { SandboxRow } from './inventory.js';
import { age, asciiJson, table } from './render.js';

export const LS_FORMATS = ['table', 'json'] as const;
export type LsFormat = (typeof LS_FORMATS)[number];
/** Docker's container states (State of GET /containers/json). */
export const LS_STATUSES = ['created', 'restarting', 'running', 'removing', 'paused', 'exited', 'dead'] as const;
export type LsStatus = (typeof LS_STATUSES)[number];
const FILTER_KEYS = ['label', 'status'] as const;

export interface LsOptions {
  readonly quiet: boolean;
  /** undefined: the table, or JSON with the global --json. */
  readonly format: LsFormat | undefined;
  /** Docker label filters, `KEY` or `KEY=VALUE`; each must match. */
  readonly labels: readonly string[];
  /** Empty: any state. */
  readonly statuses: readonly LsStatus[];
}

export interface RawLsOptions {
  readonly quiet: boolean;
  readonly json: boolean;
  readonly format: string | undefined;
  readonly filters: readonly string[];
}

function usage(message: string): SandboxError {
  return new SandboxError('invalid_config', `${message} (see capybara-sandbox ls --help)`);
}

function parseFilter(text: string, into: { labels: string[]; statuses: LsStatus[] }): void {
  const eq = text.indexOf('=');
  const key = eq === -1 ? text : text.slice(0, eq);
  const value = eq === -1 ? '' : text.slice(eq + 1);
  if (!(FILTER_KEYS as readonly string[]).includes(key)) {
    throw usage(`--filter ${JSON.stringify(text)}: unknown filter ${JSON.stringify(key)}; the keys are ${FILTER_KEYS.map((k) => `${k}=`).join(' and ')} (label=KEY, label=KEY=VALUE, status=${LS_STATUSES.join('|')})`);
  }
  if (key === 'label') {
    // A label key is never empty and holds no "="; the value may be anything, "" included.
    if (value === '' || value.startsWith('=')) throw usage(`--filter ${JSON.stringify(text)}: label= needs KEY or KEY=VALUE, e.g. label=team=ml`);
    into.labels.push(value);
    return;
  }
  if (!(LS_STATUSES as readonly string[]).includes(value)) {
    throw usage(`--filter ${JSON.stringify(text)}: status must be one of ${LS_STATUSES.join(', ')}`);
  }
  into.statuses.push(value as LsStatus);
}

export function parseLsOptions(raw: RawLsOptions): LsOptions {
  if (raw.format !== undefined && !(LS_FORMATS as readonly string[]).includes(raw.format)) {
    throw usage(`--format ${JSON.stringify(raw.format)} is not one of ${LS_FORMATS.join(', ')}`);
  }
  const format = raw.format as LsFormat | undefined;
  if (raw.quiet && (format !== undefined || raw.json)) throw usage(`-q prints names only; leave out ${format === undefined ? '--json' : '--format'}`);
  if (raw.json && format === 'table') throw usage('--format table contradicts --json; leave out one of them');
  const into = { labels: [] as string[], statuses: [] as LsStatus[] };
  for (const text of raw.filters) parseFilter(text, into);
  return { quiet: raw.quiet, format, labels: into.labels, statuses: [...new Set(into.statuses)] };
}

function filterRows(rows: readonly SandboxRow[], o: LsOptions): SandboxRow[] {
  return o.statuses.length === 0 ? [...rows] : rows.filter((r) => (o.statuses as readonly string[]).includes(r.state));
}

/** What ls prints: names, one JSON array of the rows, or the table. */
export function lsOutput(all: readonly SandboxRow[], o: LsOptions, json: boolean): string {
  const rows = filterRows(all, o);
  if (o.quiet) return rows.map((r) => `${r.name}\n`).join('');
  if (o.format === 'json' || (o.format === undefined && json)) return `${asciiJson(rows, 2)}\n`;
  return table(['NAME', 'STATE', 'TIER', 'AGE', 'IMAGE', 'EGRESS'], rows.map((r) => [r.name, r.state, r.tier, age(r.ageSeconds), r.image, r.egress]));
}
