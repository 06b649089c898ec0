/**
 * `npm run bench` (`-- --quick` for a short smoke run; `-- --smokescreen PATH` adds Stripe's
 * smokescreen from that binary): the egress proxy measured side by side with no proxy ("direct"),
 * the bare Node relay that is Node's floor on this machine ("floor", bench/bare-relay.ts), squid
 * and tinyproxy, all on 127.0.0.1, against one upstream process (bench/upstream.ts). Every
 * measurement runs in several rounds, each round interleaving the peers after a warm-up; the
 * table shows each median with its spread. A benchmark, not a test: it prints numbers, ratios
 * against the targets and PASS/MISS, and exits 0 whatever they are (non-zero only when it could
 * not run).
 *
 * Layout on two cores: the load generators (except wrk) run in this process, the upstream in its
 * own, each proxy in its own. Every peer meets the same upstream and the same client, and the
 * peers are interleaved per measurement so drift on a shared machine spreads over all of them.
 * Each proxy's CPU time per operation is printed beside the wall-clock figures (bench/measure.ts),
 * and the policy micro-benchmark counts CPU time: both hold when other jobs share the cores.
 * Each count and duration is bounded; children run under `timeout` and are stopped at the end,
 * on error and on SIGINT/SIGTERM (bench/children.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { killAllNow, stopAll } from './children.js';
import { measureConnectSetup, measureHttp, measureMemory, measurePeakMemory, measureRoundTrips, measureThroughput, measureTransparentTls, Results, type Peer, type Plan, type TransparentRows } from './measure.js';
import { findProgram, INSTALL_HINT, startCapybara, startFloor, startSmokescreen, startSquid, startTinyproxy, startUpstream, TLS_HOST, type ProxyName, type RunningProxy, type StartContext } from './peers.js';
import { runPolicyMicro, type MicroOptions } from './policy-micro.js';
import { formatTable, formatTargets, PEERS, type PeerName, type Row, type Target } from './report.js';
import { connectSetup } from './tunnel-load.js';
import { runInspectBench } from './inspect.js';

interface RunPlan extends Plan {
  readonly micro: MicroOptions;
  /** Interleaved rounds of every network measurement. */
  readonly rounds: number;
  /** The whole run stops (children killed) after this long, whatever state it is in. */
  readonly deadlineSec: number;
}

const MiB = 1024 * 1024;
const FULL: RunPlan = {
  connects: 2_000,
  connectWarmup: 200,
  echoes: 5_000,
  echoWarmup: 500,
  singleBytes: 512 * MiB,
  multiStreams: 4,
  multiBytesEach: 256 * MiB,
  warmBytes: 32 * MiB,
  wrkSeconds: 5,
  wrkWarmSeconds: 1,
  micro: { entries: 100_000, rounds: 5, iterationsPerRound: 400_000, warmup: 200_000 },
  rounds: 3,
  deadlineSec: 780,
};
const QUICK: RunPlan = {
  connects: 200,
  connectWarmup: 50,
  echoes: 500,
  echoWarmup: 100,
  singleBytes: 64 * MiB,
  multiStreams: 4,
  multiBytesEach: 32 * MiB,
  warmBytes: 8 * MiB,
  wrkSeconds: 2,
  wrkWarmSeconds: 1,
  micro: { entries: 100_000, rounds: 3, iterationsPerRound: 100_000, warmup: 20_000 },
  rounds: 2,
  deadlineSec: 330,
};
const WRK_CONNECTIONS = 16;
/** How long the proxies idle before their memory at rest is read. */
const AT_REST_MS = 12_000;
const WRK_THREADS = 2;

const say = (text: string): void => void process.stdout.write(`${text}\n`);
const progress = (text: string): void => void process.stderr.write(`bench: ${text}\n`);
const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

let tmp: string | undefined;
function removeTmp(): void {
  if (tmp !== undefined) rmSync(tmp, { recursive: true, force: true });
  tmp = undefined;
}

let stopping = false;
async function abort(why: string, code: number): Promise<void> {
  if (stopping) return;
  stopping = true;
  progress(`${why}; stopping children`);
  await stopAll();
  removeTmp();
  process.exit(code);
}

interface Args {
  readonly quick: boolean;
  readonly smokescreen: string | undefined;
}

function parseArgs(argv: readonly string[]): Args | undefined {
  const at = argv.indexOf('--smokescreen');
  const smokescreen = at === -1 ? undefined : argv[at + 1];
  const rest = at === -1 ? argv : [...argv.slice(0, at), ...argv.slice(at + 2)];
  const unknown = rest.filter((a) => a !== '--quick' && a !== '--help');
  const missing = at !== -1 && (smokescreen === undefined || smokescreen.startsWith('--'));
  if (argv.includes('--help') || unknown.length > 0 || missing) {
    if (unknown.length > 0) progress(`unknown argument ${unknown.join(' ')}`);
    if (missing) progress('--smokescreen needs the path of a smokescreen binary');
    say('usage: npm run bench [-- [--quick] [--smokescreen PATH]]   (--quick: fewer iterations and rounds)');
    process.exitCode = unknown.length > 0 || missing ? 2 : 0;
    return undefined;
  }
  return { quick: argv.includes('--quick'), smokescreen };
}

async function startProxies(ctx: StartContext, skipped: Map<PeerName, string>, smokescreen: string | undefined): Promise<RunningProxy[]> {
  const starters: [ProxyName, () => Promise<RunningProxy>][] = [
    ['floor', () => startFloor(ctx)],
    ['capybara', () => startCapybara(ctx)],
  ];
  for (const [name, start] of [
    ['squid', startSquid],
    ['tinyproxy', startTinyproxy],
  ] as const) {
    const program = findProgram(name);
    if (program === undefined) {
      progress(`${name} is not installed; skipping it (${INSTALL_HINT})`);
      skipped.set(name, 'not installed');
    } else starters.push([name, () => start(ctx, program)]);
  }
  if (smokescreen === undefined) skipped.set('smokescreen', 'not given');
  else starters.push(['smokescreen', () => startSmokescreen(ctx, smokescreen)]);
  const running: RunningProxy[] = [];
  for (const [name, start] of starters) {
    try {
      running.push(await start());
    } catch (err) {
      progress(`${name} did not start, skipping it: ${message(err)}`);
      skipped.set(name, 'did not start');
    }
  }
  return running;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  if (args === undefined) return;
  const plan = args.quick ? QUICK : FULL;
  const deadline = setTimeout(() => void abort(`deadline of ${plan.deadlineSec} s passed`, 1), plan.deadlineSec * 1000);
  deadline.unref();
  const t0 = Date.now();
  const loadBefore = loadavg()[0] ?? 0;
  say(`egress proxy benchmark (${args.quick ? 'quick' : 'full'}) — node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? '?'}), load ${loadBefore.toFixed(1)}, loopback only`);

  progress('policy micro-benchmark');
  const micro = runPolicyMicro(plan.micro);

  tmp = mkdtempSync(join(tmpdir(), 'capybara-bench-'));
  const lifetimeSec = plan.deadlineSec + 30;
  progress('starting upstream and proxies');
  const upstream = await startUpstream(lifetimeSec);
  const ports = upstream.ports;
  const skipped = new Map<PeerName, string>();
  const proxies = await startProxies({ tmp, upstream: ports, lifetimeSec }, skipped, args.smokescreen);
  const peers: Peer[] = [
    { name: 'direct', route: { kind: 'direct' } },
    ...proxies.map((p) => ({ name: p.name, route: { kind: 'proxy', port: p.port, upstreamHost: p.upstreamHost } as const, pid: p.child.pid, running: p.child.running, transparentAddress: p.transparentAddress })),
  ];

  const results = new Results(skipped);
  // Idle: started, one tunnel opened and closed, nothing else yet; then again once at rest, after
  // V8's memory reducer has had its turn (it collects a heap that stopped growing after about 8 s,
  // and returns the young generation that start-up grew).
  for (const peer of peers) if (peer.route.kind === 'proxy') await connectSetup(peer.route, ports.echo, 1, 0).catch(() => undefined);
  measureMemory(results, peers, 'VmRSS right after start-up (MiB)');
  progress(`idle memory: waiting ${AT_REST_MS / 1000} s for every proxy to be at rest`);
  await sleep(AT_REST_MS);
  const idle = measureMemory(results, peers, `VmRSS idle, at rest ${AT_REST_MS / 1000} s later (MiB)`);
  const wrk = findProgram('wrk');
  if (wrk === undefined) progress(`wrk is not installed; skipping the plain-HTTP measurement (${INSTALL_HINT})`);
  let setup: Row | undefined;
  let rtt: Row | undefined;
  let single: Row | undefined;
  let http: Row | undefined;
  let transparent: TransparentRows | undefined;
  const ours = peers.find((p) => p.transparentAddress !== undefined);
  for (let round = 1; round <= plan.rounds; round++) {
    progress(`round ${round} of ${plan.rounds}: CONNECT set-up`);
    setup = await measureConnectSetup(results, peers, ports, plan);
    progress(`round ${round} of ${plan.rounds}: tunnel round trips`);
    rtt = await measureRoundTrips(results, peers, ports, plan);
    progress(`round ${round} of ${plan.rounds}: tunnel throughput`);
    single = await measureThroughput(results, peers, ports, plan);
    if (wrk !== undefined) progress(`round ${round} of ${plan.rounds}: plain HTTP (wrk)`);
    http = await measureHttp(results, peers, ports, plan, wrk === undefined ? undefined : { wrk, tmp, connections: WRK_CONNECTIONS, threads: WRK_THREADS });
    if (ours !== undefined) {
      progress(`round ${round} of ${plan.rounds}: TLS, transparent and by CONNECT`);
      transparent = await measureTransparentTls(results, ours, ports, plan, TLS_HOST, round);
    }
  }
  measureMemory(results, peers, 'VmRSS after the runs (MiB)');
  measurePeakMemory(results, peers);
  for (const p of proxies) {
    if (!p.child.running()) results.notes.push(`${p.name} exited during the run: ${p.child.stderr().trim().slice(-400)}`);
  }
  await stopAll();
  removeTmp();
  const loadAfter = loadavg()[0] ?? 0;

  say('');
  say(formatTable(results.rows, PEERS));
  say('');
  say(`policy decision micro-benchmark (${plan.micro.entries.toLocaleString('en-US')}-entry allowlist, median of ${plan.micro.rounds} rounds)`);
  for (const m of micro) {
    say(`  ${m.label.padEnd(40)} ${m.nsPerOp.toFixed(0).padStart(6)} ns/op CPU  ${m.wallNsPerOp.toFixed(0).padStart(6)} ns/op wall  (${m.iterations.toLocaleString('en-US')} iterations)`);
  }
  const worstDecision = Math.max(...micro.filter((m) => m.label.startsWith('decision')).map((m) => m.nsPerOp));

  const targets: Target[] = [
    { label: 'CONNECT set-up p50 vs the bare Node relay', ours: setup?.cells.capybara, reference: setup?.cells.floor, referenceLabel: 'floor', bound: 'max', limit: 1.15 },
    { label: 'CONNECT set-up p50 vs smokescreen', ours: setup?.cells.capybara, reference: setup?.cells.smokescreen, referenceLabel: 'smokescreen', bound: 'max', limit: 0.8 },
    { label: 'tunnel round trip p50 vs the bare Node relay', ours: rtt?.cells.capybara, reference: rtt?.cells.floor, referenceLabel: 'floor', bound: 'max', limit: 1.2 },
    { label: 'single-stream throughput vs the bare Node relay', ours: single?.cells.capybara, reference: single?.cells.floor, referenceLabel: 'floor', bound: 'min', limit: 0.95 },
    { label: 'plain HTTP req/s vs squid', ours: http?.cells.capybara, reference: http?.cells.squid, referenceLabel: 'squid', bound: 'min', limit: 1.2 },
    { label: 'transparent TLS set-up p50 vs TLS by CONNECT', ours: transparent?.setup.transparent.cells.capybara, reference: transparent?.setup.connect.cells.capybara, referenceLabel: 'CONNECT', bound: 'max', limit: 1.1 },
    { label: 'transparent TLS throughput vs TLS by CONNECT', ours: transparent?.throughput.transparent.cells.capybara, reference: transparent?.throughput.connect.cells.capybara, referenceLabel: 'CONNECT', bound: 'min', limit: 0.95 },
    { label: 'idle resident memory, at rest, vs 60 MiB', ours: idle.cells.capybara, reference: 60, referenceLabel: '60 MiB', bound: 'max', limit: 1.0 },
    { label: 'policy decision, slowest case, vs 1 µs', ours: worstDecision, reference: 1000, referenceLabel: '1000 ns', bound: 'max', limit: 1.0 },
  ];
  say('');
  say('targets (ratio = ours / reference)');
  say(formatTargets(targets));
  const busy = Math.max(loadBefore, loadAfter) > cpus().length;
  if (busy) results.notes.push(`the machine was busy (1-min load average ${loadBefore.toFixed(1)} before, ${loadAfter.toFixed(1)} after, on ${cpus().length} CPUs): wall-clock figures are inflated; the CPU-per-operation rows hold`);
  if (results.notes.length > 0) {
    say('');
    say('notes');
    for (const n of results.notes) say(`  - ${n}`);
  }
  say('');
  // Inspected hosts against SNI-checked tunnels: a proxy and an upstream of their own.
  for (const line of await runInspectBench(plan === QUICK, progress)) say(line);
  say('');
  say(`done in ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  clearTimeout(deadline);
}

process.on('SIGINT', () => void abort('SIGINT', 130));
process.on('SIGTERM', () => void abort('SIGTERM', 143));
process.on('exit', () => {
  killAllNow();
  removeTmp();
});
main().catch((err: unknown) => void abort(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`, 1));
