/**
 * The network measurements, each run for every peer in turn (interleaved, so drift on a shared
 * machine spreads over all peers), each adding one round's value to its table rows; run.ts calls
 * them once per round. Beside every wall-clock figure the
 * proxy's own CPU time per operation is recorded from /proc/PID/stat: on a machine where other
 * jobs steal cores, latency and throughput move with the neighbours, CPU per operation does not.
 * A failing cell records why and the run goes on.
 */
import { cpuMs, memoryOf } from './peers.js';
import { percentile, put, type PeerName, type Row } from './report.js';
import { tlsSetup, tlsThroughput, type TlsRoute } from './transparent-load.js';
import { connectSetup, roundTrips, throughput, type Route } from './tunnel-load.js';
import type { UpstreamPorts } from './upstream.js';
import { runWrk, type WrkTarget } from './wrk.js';

export interface Plan {
  readonly connects: number;
  readonly connectWarmup: number;
  readonly echoes: number;
  readonly echoWarmup: number;
  readonly singleBytes: number;
  readonly multiStreams: number;
  readonly multiBytesEach: number;
  readonly warmBytes: number;
  readonly wrkSeconds: number;
  readonly wrkWarmSeconds: number;
}

export interface Peer {
  readonly name: PeerName;
  readonly route: Route;
  /** The proxy process, for CPU and memory; none for direct. */
  readonly pid?: number;
  readonly running?: () => boolean;
  /** Ours only: where its transparent listeners are. */
  readonly transparentAddress?: string;
}

const MiB = 1024 * 1024;

export class Results {
  readonly rows: Row[] = [];
  readonly notes: string[] = [];

  constructor(private readonly skipped: ReadonlyMap<PeerName, string>) {}

  /** The row with this label, created on first use (later rounds add to it). */
  row(label: string, digits: number): Row {
    const existing = this.rows.find((r) => r.label === label);
    if (existing !== undefined) return existing;
    const r: Row = { label, digits, cells: Object.fromEntries([...this.skipped].map(([p, why]) => [p, { missing: why }])) };
    this.rows.push(r);
    return r;
  }

  /** Runs one measurement into one cell; a failure becomes a note and a "(failed)" cell. */
  async record(row: Row, peer: PeerName, measure: () => Promise<number>): Promise<void> {
    try {
      put(row, peer, await measure());
    } catch (err) {
      put(row, peer, { missing: 'failed' });
      this.notes.push(`${row.label}, ${peer}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}

/** Runs `work` and stores the proxy's CPU µs per unit of work (units counted by `work`). */
async function withCpu<T>(peer: Peer, row: Row, unitsOf: (result: T) => number, work: () => Promise<T>): Promise<T> {
  const before = peer.pid === undefined ? undefined : cpuMs(peer.pid);
  const result = await work();
  if (peer.pid !== undefined && before !== undefined) put(row, peer.name, ((cpuMs(peer.pid) - before) * 1000) / unitsOf(result));
  return result;
}

/** Returns the p50 row, which a target compares. */
export async function measureConnectSetup(results: Results, peers: readonly Peer[], ports: UpstreamPorts, plan: Plan): Promise<Row> {
  const p50 = results.row(`CONNECT set-up p50 (µs; direct = TCP connect), n=${plan.connects}`, 0);
  const p99 = results.row('CONNECT set-up p99 (µs)', 0);
  const cpu = results.row('  proxy CPU per CONNECT (µs)', 0);
  for (const peer of peers) {
    let samples: readonly number[] = [];
    await results.record(p50, peer.name, async () => {
      samples = await withCpu(peer, cpu, () => plan.connects + plan.connectWarmup, () => connectSetup(peer.route, ports.echo, plan.connects, plan.connectWarmup));
      return percentile(samples, 50) * 1000;
    });
    if (samples.length > 0) put(p99, peer.name, percentile(samples, 99) * 1000);
  }
  return p50;
}

/** Returns the p50 row, which a target compares. */
export async function measureRoundTrips(results: Results, peers: readonly Peer[], ports: UpstreamPorts, plan: Plan): Promise<Row> {
  const p50 = results.row(`tunnel round trip 64 B p50 (µs), n=${plan.echoes}`, 1);
  const p99 = results.row('tunnel round trip 64 B p99 (µs)', 1);
  for (const peer of peers) {
    let samples: readonly number[] = [];
    await results.record(p50, peer.name, async () => {
      samples = await roundTrips(peer.route, ports.echo, plan.echoes, plan.echoWarmup);
      return percentile(samples, 50) * 1000;
    });
    if (samples.length > 0) put(p99, peer.name, percentile(samples, 99) * 1000);
  }
  return p50;
}

/** Returns the single-stream row, which a target compares. */
export async function measureThroughput(results: Results, peers: readonly Peer[], ports: UpstreamPorts, plan: Plan): Promise<Row> {
  const single = results.row(`throughput, 1 stream x ${plan.singleBytes / MiB} MiB (MB/s)`, 0);
  const cpu = results.row('  proxy CPU per MB, 1 stream (µs)', 0);
  const multi = results.row(`throughput, ${plan.multiStreams} streams x ${plan.multiBytesEach / MiB} MiB (MB/s total)`, 0);
  for (const peer of peers) {
    await results.record(single, peer.name, async () => {
      await throughput(peer.route, ports.source, 1, plan.warmBytes);
      return withCpu(peer, cpu, () => plan.singleBytes / 1e6, () => throughput(peer.route, ports.source, 1, plan.singleBytes));
    });
    await results.record(multi, peer.name, () => throughput(peer.route, ports.source, plan.multiStreams, plan.multiBytesEach));
  }
  return single;
}

export interface HttpOptions {
  readonly wrk: string;
  readonly tmp: string;
  readonly connections: number;
  readonly threads: number;
}

/** Returns the requests/s row, which a target compares. */
export async function measureHttp(results: Results, peers: readonly Peer[], ports: UpstreamPorts, plan: Plan, options: HttpOptions | undefined): Promise<Row> {
  const rps = results.row(`plain HTTP keep-alive, wrk -c${options?.connections ?? '?'} -t${options?.threads ?? '?'} -d${plan.wrkSeconds}s (req/s)`, 0);
  const cpu = results.row('  proxy CPU per request (µs)', 1);
  for (const peer of peers) {
    if (options === undefined) {
      put(rps, peer.name, { missing: 'no wrk' });
      continue;
    }
    const { route } = peer;
    const target: WrkTarget =
      route.kind === 'direct' ? { connectPort: ports.http } : { connectPort: route.port, absoluteUrl: `http://${route.upstreamHost}:${ports.http}/` };
    await results.record(rps, peer.name, async () => {
      await runWrk(peer.name, target, { ...options, seconds: plan.wrkWarmSeconds });
      const result = await withCpu(peer, cpu, (r) => r.requests, () => runWrk(peer.name, target, { ...options, seconds: plan.wrkSeconds }));
      if (result.failures > 0) {
        const closes = result.closesPerRequest ? ' (the proxy closes the connection after every response; wrk counts each close as a read error)' : '';
        results.notes.push(`wrk ${peer.name}: ${result.failures} errors in ${result.requests} requests: ${result.detail}${closes}`);
      }
      return result.requestsPerSec;
    });
  }
  return rps;
}

/** Resident memory of each proxy now, as one round of the row `label`. */
export function measureMemory(results: Results, peers: readonly Peer[], label: string): Row {
  const rss = results.row(label, 1);
  for (const peer of peers) {
    if (peer.pid === undefined) continue;
    const mem = peer.running?.() === false ? undefined : memoryOf(peer.pid);
    put(rss, peer.name, mem ? mem.rssKiB / 1024 : { missing: 'exited' });
  }
  return rss;
}

/** Peak resident memory of each proxy over the whole run. */
export function measurePeakMemory(results: Results, peers: readonly Peer[]): void {
  const hwm = results.row('VmHWM, peak resident over the run (MiB)', 1);
  for (const peer of peers) {
    if (peer.pid === undefined) continue;
    const mem = peer.running?.() === false ? undefined : memoryOf(peer.pid);
    put(hwm, peer.name, mem ? mem.hwmKiB / 1024 : { missing: 'exited' });
  }
}


/** The rows transparent TLS is compared by, each in our column: CONNECT's and transparent's. */
export interface TransparentRows {
  readonly setup: { readonly connect: Row; readonly transparent: Row };
  readonly throughput: { readonly connect: Row; readonly transparent: Row };
}

/**
 * TLS through our proxy to the TLS upstream, entered by CONNECT and transparently, in turn (the
 * order swapped every round): set-up p50 and single-stream throughput, with the proxy's CPU time.
 * A quarter of the CONNECT count and half the bytes: every sample is a full TLS handshake.
 */
export async function measureTransparentTls(results: Results, peer: Peer, ports: UpstreamPorts, plan: Plan, servername: string, round: number): Promise<TransparentRows> {
  const count = Math.max(50, Math.floor(plan.connects / 4));
  const bytes = plan.singleBytes / 2;
  const label = { connect: 'via CONNECT', transparent: 'transparent' } as const;
  const rows = {
    setup: {
      connect: results.row(`TLS set-up ${label.connect} p50 (µs), n=${count}`, 0),
      transparent: results.row(`TLS set-up ${label.transparent} p50 (µs), n=${count}`, 0),
    },
    setupCpu: { connect: results.row(`  proxy CPU per TLS set-up ${label.connect} (µs)`, 0), transparent: results.row(`  proxy CPU per TLS set-up ${label.transparent} (µs)`, 0) },
    throughput: {
      connect: results.row(`TLS throughput ${label.connect}, 1 stream x ${bytes / MiB} MiB (MB/s)`, 0),
      transparent: results.row(`TLS throughput ${label.transparent}, 1 stream x ${bytes / MiB} MiB (MB/s)`, 0),
    },
    throughputCpu: { connect: results.row(`  proxy CPU per MB, TLS ${label.connect} (µs)`, 0), transparent: results.row(`  proxy CPU per MB, TLS ${label.transparent} (µs)`, 0) },
  };
  if (peer.route.kind !== 'proxy' || peer.transparentAddress === undefined) return rows;
  const routes: Record<'connect' | 'transparent', TlsRoute> = {
    connect: { kind: 'connect', proxy: peer.route },
    transparent: { kind: 'transparent', address: peer.transparentAddress },
  };
  const order = round % 2 === 0 ? (['connect', 'transparent'] as const) : (['transparent', 'connect'] as const);
  for (const which of order) {
    const route = routes[which];
    await results.record(rows.setup[which], peer.name, async () => {
      const samples = await withCpu(peer, rows.setupCpu[which], () => count + plan.connectWarmup, () => tlsSetup(route, ports.tls, servername, count, plan.connectWarmup));
      return percentile(samples, 50) * 1000;
    });
  }
  for (const which of order) {
    const route = routes[which];
    await results.record(rows.throughput[which], peer.name, async () => {
      await tlsThroughput(route, ports.tls, servername, plan.warmBytes);
      return withCpu(peer, rows.throughputCpu[which], () => bytes / 1e6, () => tlsThroughput(route, ports.tls, servername, bytes));
    });
  }
  return rows;
}
