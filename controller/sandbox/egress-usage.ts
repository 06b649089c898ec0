/**
 * Per-sandbox egress accounting. Each egress proxy serves its Prometheus metrics on the loopback
 * of its own container only (the sandbox cannot read or reset them); the controller reads them
 * with an exec in that container, through the socket proxy like every other call. A shard of the
 * shared egress counts by sandbox too (`egress_sandbox_*`): a sandbox on one is read from those.
 */
import { EGRESS_METRICS, EGRESS_METRICS_PATH, EGRESS_METRICS_PORT } from '../../common/index.js';
import { finishedWithin, type SandboxEngine } from '../docker/index.js';
import { OutputCapture } from '../exec/index.js';
import { LABEL_EGRESS, LABEL_EGRESS_ISOLATION, SandboxError, egressHostOfLabels, namesFor } from '../spec/index.js';
import { shardOfLabels } from './shards.js';

export interface EgressUsage {
  /** Bytes from the sandbox to the outside (tunnels and plain HTTP). */
  readonly bytesUp: number;
  /** Bytes from the outside to the sandbox. */
  readonly bytesDown: number;
  readonly allowed: number;
  readonly denied: number;
  /** Denials by reason code (`host_not_allowed`, ...). */
  readonly deniedByReason: Readonly<Record<string, number>>;
  readonly openTunnels: number;
}

/** Run with `node -e` inside the egress container: prints the metrics text. */
const METRICS_SCRIPT = `require('http').get({host:'127.0.0.1',port:${EGRESS_METRICS_PORT},path:'${EGRESS_METRICS_PATH}',timeout:5000},r=>{r.pipe(process.stdout);r.on('end',()=>process.exit(r.statusCode===200?0:1))}).on('error',e=>{process.stderr.write(String(e));process.exit(1)})`;

/**
 * What a read of the metrics may print, and how long it may take. The text is the proxy's, but the
 * proxy is what a sandbox talks to, and a process that took it over runs as the user of this
 * exec: held whole and waited for without end, one such proxy (a shard's, serving sandboxes of
 * every tenant) could fill the controller's heap or hold the call for good. A shard's series for
 * all its sandboxes are a few hundred kilobytes.
 */
const METRICS_MAX_BYTES = 16 * 1024 * 1024;
const METRICS_DEADLINE_MS = 30_000;

const SAMPLE = /^([a-z_]+)(?:\{([^}]*)\})? ([0-9.eE+-]+)$/;

function labelsOf(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of (text ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)) out[m[1] as string] = m[2] as string;
  return out;
}

/** The series a usage is read from: a proxy's own totals, or one sandbox's on a shard. */
const PROCESS_SERIES = { bytes: EGRESS_METRICS.bytes, decisions: EGRESS_METRICS.decisions, reasons: EGRESS_METRICS.decisions, openTunnels: EGRESS_METRICS.openTunnels };
const SANDBOX_SERIES = { bytes: EGRESS_METRICS.sandboxBytes, decisions: EGRESS_METRICS.sandboxDecisions, reasons: EGRESS_METRICS.sandboxDenials, openTunnels: EGRESS_METRICS.sandboxOpenTunnels };

function samples(text: string): Array<{ readonly name: string; readonly labels: Record<string, string>; readonly value: number }> {
  const out = [];
  for (const line of text.split('\n')) {
    const m = SAMPLE.exec(line.trim());
    if (m) out.push({ name: m[1] as string, labels: labelsOf(m[2]), value: Number(m[3]) });
  }
  return out;
}

/** Sums the proxy's counters from Prometheus text format: those of `sandbox` alone on a shard. */
export function parseEgressUsage(text: string, sandbox?: string): EgressUsage {
  const series = sandbox === undefined ? PROCESS_SERIES : SANDBOX_SERIES;
  let bytesUp = 0;
  let bytesDown = 0;
  let allowed = 0;
  let denied = 0;
  let openTunnels = 0;
  const deniedByReason: Record<string, number> = {};
  for (const { name, labels, value } of samples(text)) {
    if (sandbox !== undefined && labels.sandbox !== sandbox) continue;
    if (name === series.bytes) {
      if (labels.direction === 'up') bytesUp += value;
      else if (labels.direction === 'down') bytesDown += value;
    } else if (name === series.openTunnels) {
      openTunnels = value;
    }
    if (name === series.decisions) {
      if (labels.outcome === 'allow') allowed += value;
      else if (labels.outcome === 'deny') denied += value;
    }
    // A proxy's own decisions carry their reason; a shard counts a sandbox's refusals by reason apart.
    if (name === series.reasons && labels.outcome !== 'allow') {
      const reason = labels.reason ?? 'unknown';
      deniedByReason[reason] = (deniedByReason[reason] ?? 0) + value;
    }
  }
  return { bytesUp, bytesDown, allowed, denied, deniedByReason, openTunnels };
}

/**
 * The usage of sandbox `name`'s egress: its own proxy's totals, or its share of its shard's; null
 * when it has no egress proxy or that one is not running.
 */
export async function readSandboxEgressUsage(engine: SandboxEngine, name: string, sharedNetwork: string): Promise<EgressUsage | null> {
  const view = await engine.inspectContainer(name);
  const onShard = view !== undefined && egressHostOfLabels(view.labels[LABEL_EGRESS], view.labels[LABEL_EGRESS_ISOLATION]) === 'shard';
  const shard = onShard ? shardOfLabels(view.labels, sharedNetwork) : undefined;
  if (onShard && shard === undefined) return null;
  return shard === undefined ? readEgressUsage(engine, namesFor(name).egress) : readEgressUsage(engine, shard.name, name);
}

/**
 * The usage of one egress proxy container (of `sandbox` alone, on a shard), or null when it is not
 * running. A paused proxy counts as not running: never exec into a paused container (on Docker
 * 20.10 with cgroup v1 that exec can hang holding the container lock, which then blocks inspect,
 * unpause and remove).
 */
async function readEgressUsage(engine: SandboxEngine, egress: string, sandbox?: string): Promise<EgressUsage | null> {
  const view = await engine.inspectContainer(egress);
  if (view === undefined || !view.running || view.paused) return null;
  const out = new OutputCapture(METRICS_MAX_BYTES);
  const err = new OutputCapture(200);
  // The image's own non-root user.
  const run = await engine.startExec(egress, { cmd: ['node', '-e', METRICS_SCRIPT], user: view.user || 'egress', onOutput: (s, c) => (s === 'stdout' ? out : err).push(c) });
  const code = await finishedWithin(run, METRICS_DEADLINE_MS);
  if (code === 'late') throw new SandboxError('engine_error', `Reading the egress metrics of ${egress} did not finish within ${METRICS_DEADLINE_MS / 1000} s.`);
  if (code !== 0) {
    throw new SandboxError('engine_error', `Reading the egress metrics of ${egress} failed (exit ${String(code)}): ${err.text()}`);
  }
  if (out.truncated) throw new SandboxError('engine_error', `The egress metrics of ${egress} are over ${METRICS_MAX_BYTES} bytes: not the proxy's.`);
  return parseEgressUsage(out.text(), sandbox);
}
