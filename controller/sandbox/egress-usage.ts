/**
 * Per-sandbox egress accounting. Each egress proxy serves its Prometheus metrics on the loopback
 * of its own container only (the sandbox cannot read or reset them); the controller reads them
 * with an exec in that container, through the socket proxy like every other call.
 */
import { EGRESS_METRICS, EGRESS_METRICS_PATH, EGRESS_METRICS_PORT } from '../../common/index.js';
import type { SandboxEngine } from '../docker/index.js';
import { SandboxError } from '../spec/index.js';

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

const SAMPLE = /^([a-z_]+)(?:\{([^}]*)\})? ([0-9.eE+-]+)$/;

function labelsOf(text: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of (text ?? '').matchAll(/([a-z_]+)="([^"]*)"/g)) out[m[1] as string] = m[2] as string;
  return out;
}

/** Sums the proxy's counters from Prometheus text format. */
export function parseEgressUsage(text: string): EgressUsage {
  let bytesUp = 0;
  let bytesDown = 0;
  let allowed = 0;
  let denied = 0;
  let openTunnels = 0;
  const deniedByReason: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = SAMPLE.exec(line.trim());
    if (!m) continue;
    const value = Number(m[3]);
    const labels = labelsOf(m[2]);
    if (m[1] === EGRESS_METRICS.bytes) {
      if (labels.direction === 'up') bytesUp += value;
      else if (labels.direction === 'down') bytesDown += value;
    } else if (m[1] === EGRESS_METRICS.decisions) {
      if (labels.outcome === 'allow') allowed += value;
      else if (labels.outcome === 'deny') {
        denied += value;
        const reason = labels.reason ?? 'unknown';
        deniedByReason[reason] = (deniedByReason[reason] ?? 0) + value;
      }
    } else if (m[1] === EGRESS_METRICS.openTunnels) {
      openTunnels = value;
    }
  }
  return { bytesUp, bytesDown, allowed, denied, deniedByReason, openTunnels };
}

/**
 * The usage of one egress proxy container, or null when it is not running. A paused proxy counts
 * as not running: never exec into a paused container (on Docker 20.10 with cgroup v1 that exec
 * can hang holding the container lock, which then blocks inspect, unpause and remove).
 */
export async function readEgressUsage(engine: SandboxEngine, egress: string): Promise<EgressUsage | null> {
  const view = await engine.inspectContainer(egress);
  if (view === undefined || !view.running || view.paused) return null;
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  // The image's own non-root user.
  const run = await engine.startExec(egress, { cmd: ['node', '-e', METRICS_SCRIPT], user: view.user || 'egress', onOutput: (s, c) => (s === 'stdout' ? out : err).push(c) });
  const code = await run.finished;
  if (code !== 0) {
    throw new SandboxError('engine_error', `Reading the egress metrics of ${egress} failed (exit ${String(code)}): ${Buffer.concat(err).toString().slice(0, 200)}`);
  }
  return parseEgressUsage(Buffer.concat(out).toString());
}
