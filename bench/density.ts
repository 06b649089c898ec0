/**
 * Density benchmark (not a test): as many allowlist sandboxes as this machine holds, created
 * --batch (six) at a time through the socket proxy and all left running, up to --max or until the
 * host's MemAvailable falls under --reserve-gib, with the deployment's --isolation (shared: the
 * shards of one egress serve them all, --shard-size each; sandbox: a proxy container each). Each
 * --step sandboxes,
 * one row (and one at 10):
 * - create-to-ready p50 and p99 of that step's creates;
 * - the host's MemAvailable, and what it lost since the start per running sandbox: all-in (the
 *   sandbox, the containerd shims, the egress or its share of it, dockerd's and containerd's own
 *   growth, the kernel's network devices);
 * - the containers' own memory per sandbox (memory cgroups' rss + mapped files, no page cache:
 *   the sandbox and its proxy, or its share of the shards);
 * - dockerd's and containerd's RSS, whose growth per network is the engine's own cost;
 * - in a second table, the p50 of each engine call of that step's creates (from the controller's
 *   own engine-call log, engine-timeline.ts): which of them grows with the number of networks;
 *   beside them the host's iptables rules and the time of one iptables-save, the table each of
 *   dockerd's iptables calls reads;
 * - whether the first sandbox still runs a command and fetches a page transparently (no proxy
 *   settings: its name server is its egress) from a server on the host.
 * With --warm-slots N (shared only), the controller keeps N warm networks (warm-networks.ts) and
 * the bench waits for the pool to be full before each batch, outside the creates' time: with N at
 * least --batch, every create takes one, and the rows say what the slots take off the create
 * path at each density. Their own making shows in the second table apart: "warm network", and
 * the legs (a leg's call names the network by id), which are then all the refills'.
 * Then the address space: how many sandbox networks the pool holds, and how many this run took.
 * Needs a local engine (cgroup v1 or v2) and the images from scripts/build-images.sh. Everything
 * it creates is labelled with the run and removed at the end.
 *
 *   npm run bench:density -- [--isolation shared] [--shard-size 250] [--warm-slots 0] [--max 1000] [--step 100] [--batch 6] [--reserve-gib 2]
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import Docker from 'dockerode';
import { IMAGES } from '../common/index.js';
import { createDockerSandbox, parseDeploymentConfig } from '../controller/index.js';
import { percentile } from './report.js';
import { BENCH_LABEL, removeLabelled, startSocketProxy } from './bench-engine.js';
import { EngineTimeline } from './engine-timeline.js';

const runId = `bench${randomBytes(3).toString('hex')}`;
const MIB = 1024 * 1024;

/** The host's MemAvailable, in bytes. */
function memAvailable(): number {
  const m = /^MemAvailable:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'));
  if (m === null) throw new Error('/proc/meminfo has no MemAvailable');
  return Number(m[1]) * 1024;
}

/** A container's memory without page cache: anonymous memory and mapped files (cgroup v1 or v2). */
function containerMemory(id: string): number {
  const candidates = [
    { file: `/sys/fs/cgroup/memory/docker/${id}/memory.stat`, keys: ['total_rss', 'total_mapped_file'] },
    { file: `/sys/fs/cgroup/system.slice/docker-${id}.scope/memory.stat`, keys: ['anon', 'file_mapped'] },
    { file: `/sys/fs/cgroup/docker/${id}/memory.stat`, keys: ['anon', 'file_mapped'] },
  ];
  for (const { file, keys } of candidates) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue; // the other layout
    }
    const stat = new Map(text.trim().split('\n').map((l) => l.split(' ') as [string, string]));
    return keys.reduce((sum, k) => sum + Number(stat.get(k) ?? NaN), 0);
  }
  throw new Error(`no memory cgroup found for container ${id}`);
}

/** The summed RSS of every process whose command name is `comm` (shared pages counted in each). */
function rssOf(comm: string): number {
  let sum = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      if (/^Name:\s+(\S+)$/m.exec(status)?.[1] !== comm) continue;
      sum += Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? 0) * 1024;
    } catch {
      // gone meanwhile
    }
  }
  return sum;
}

/** The engine calls of a create shown per row, by a pattern of their log label. */
const STEP_KINDS: ReadonlyArray<readonly [string, RegExp]> = [
  // A warm pool's refills first: they are not on any create's path.
  ['warm network', /^create of network cap-warm\./],
  ['network create', /^create of network /],
  ['network listing', /^listing of networks/],
  ['container create', /^create of container cap-bench[0-9a-f]+-d\d+$/],
  ['registration', /^registration in /],
  ['proxy leg', /^connection of \S+ to network /],
  ['workspace hand-over', /^hand-over of the workspace/],
  ['sandbox start', /^start of container cap-bench[0-9a-f]+-d\d+$/],
];

function stepKind(label: string): string | undefined {
  return STEP_KINDS.find(([, pattern]) => pattern.test(label))?.[0];
}

/**
 * The host's iptables rules (dockerd adds some for each network, and runs iptables on each
 * network create, connect and container start) and how long one iptables-save of them takes: each
 * of dockerd's iptables calls reads the whole table. Undefined where iptables cannot be read.
 */
function iptablesNow(): { rules: string; ms: string } | undefined {
  try {
    const t0 = performance.now();
    const saved = execFileSync('iptables-save', { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], maxBuffer: 256 * MIB });
    const ms = performance.now() - t0;
    return { rules: String(saved.split('\n').filter((l) => l.startsWith('-A ')).length), ms: ms.toFixed(0) };
  } catch {
    return undefined;
  }
}

const UPSTREAM_HOST = 'upstream.density.test';
const UPSTREAM_BODY = 'density upstream';

function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) => `| ${cells.map((c, i) => c.padStart(widths[i] ?? 0)).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)];
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      isolation: { type: 'string', default: 'shared' },
      'shard-size': { type: 'string', default: '250' },
      'warm-slots': { type: 'string', default: '0' },
      max: { type: 'string', default: '1000' },
      step: { type: 'string', default: '100' },
      batch: { type: 'string', default: '6' },
      'reserve-gib': { type: 'string', default: '2' },
    },
  });
  const isolation = values.isolation;
  if (isolation !== 'shared' && isolation !== 'sandbox') throw new Error('--isolation is shared or sandbox');
  const max = Number(values.max);
  const step = Number(values.step);
  const batch = Number(values.batch);
  const shardSize = Number(values['shard-size']);
  const warmSlots = Number(values['warm-slots']);
  if (!Number.isInteger(warmSlots) || warmSlots < 0 || (warmSlots > 0 && isolation !== 'shared')) throw new Error('--warm-slots is a whole number, and more than 0 only with --isolation shared');
  const reserve = Number(values['reserve-gib']) * 1024 * MIB;
  if (!Number.isInteger(batch) || batch < 1 || !Number.isInteger(max) || max < batch || !Number.isInteger(step) || step < batch || !(reserve >= 0)) {
    throw new Error('--batch must be a positive integer, --max and --step integers of at least --batch, --reserve-gib a number of GiB');
  }
  const engine = new Docker({ socketPath: '/var/run/docker.sock' });
  const proxy = await startSocketProxy(engine, runId);
  const sharedNetwork = `cap-${runId}-shared`;
  // Made here, as the controller makes it (inter-container traffic off), to know its gateway:
  // the page the first sandbox fetches is served on the host at that address.
  await engine.createNetwork({
    Name: sharedNetwork, Driver: 'bridge', CheckDuplicate: true, Options: { 'com.docker.network.bridge.enable_icc': 'false' },
    Labels: { [BENCH_LABEL]: runId, 'dev.capybara.sandbox': '1', 'dev.capybara.sandbox.shared-network': sharedNetwork },
  });
  const gateway = (await engine.getNetwork(sharedNetwork).inspect()).IPAM?.Config?.[0]?.Gateway ?? '';
  const timeline = new EngineTimeline();
  const upstream = createServer((_req, res) => res.end(UPSTREAM_BODY));
  await new Promise<void>((resolve) => upstream.listen(80, gateway, resolve));
  const provider = createDockerSandbox(
    { endpoint: proxy.endpoint, network: sharedNetwork, egressIsolation: isolation, egressShardSize: shardSize, warmSlots },
    { labels: { [BENCH_LABEL]: runId }, egressTestHosts: { [UPSTREAM_HOST]: gateway } },
    { logger: timeline.logger },
  );
  const baseline = memAvailable();
  const rows: string[][] = [];
  const stepRows: string[][] = [];
  const live: string[] = [];
  let stopped = `--max ${max}`;
  let attempts = 0;
  let failed = 0;
  // The first row at 10 sandboxes (the baseline of create latency), then every --step.
  let nextRow = Math.min(10, step);
  const started = Date.now();
  try {
    let bucket: number[] = [];
    while (live.length < max) {
      if (memAvailable() < reserve) {
        stopped = `MemAvailable ${(memAvailable() / 1024 / MIB).toFixed(1)} GiB under the --reserve-gib ${values['reserve-gib']}`;
        break;
      }
      // The pool full before the batch, outside its creates' time.
      if (warmSlots > 0) await provider.warmUp();
      const ids = Array.from({ length: Math.min(batch, max - live.length) }, (_, i) => `${runId}-d${live.length + i}`);
      const made = await Promise.all(ids.map(async (id) => {
        const t0 = performance.now();
        try {
          await provider.create({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: [UPSTREAM_HOST], memoryMb: 128 } });
          return performance.now() - t0;
        } catch (err) {
          // Counted, not fatal: on a loaded machine a proxy may miss its start-up deadline (the
          // create removes what it made); the row says how many failed.
          process.stderr.write(`create of ${id} failed: ${(err as Error).message}\n`);
          return undefined;
        }
      }));
      attempts += ids.length;
      for (const [k, ms] of made.entries()) {
        if (ms === undefined) failed += 1;
        else {
          live.push(`cap-${ids[k] ?? ''}`);
          bucket.push(ms);
        }
      }
      if (failed > Math.max(10, attempts / 10)) {
        stopped = `${failed} of ${attempts} creates failed`;
        break;
      }
      if (live.length < nextRow && live.length < max) continue;
      nextRow = (Math.floor(live.length / step) + 1) * step;
      // The first sandbox still serves: a command, and a transparent fetch through its egress.
      const first = live[0] ?? '';
      const ran = await provider.exec({ id: first }, `echo ok; curl -s -m 10 --noproxy '*' http://${UPSTREAM_HOST}/`).catch((err: unknown) => ({ stdout: String(err), stderr: '' }));
      const serves = ran.stdout === `ok\n${UPSTREAM_BODY}` ? 'yes' : `NO (${JSON.stringify(ran.stdout.slice(0, 60))})`;
      const perSandbox: number[] = [];
      const shards = new Map<string, number>();
      for (const name of live) {
        const sandbox = await engine.getContainer(name).inspect();
        let proxyShare = 0;
        if (isolation === 'sandbox') {
          proxyShare = containerMemory((await engine.getContainer(`${name}-egress`).inspect()).Id);
        } else {
          const shard = `cap-egress.${sandbox.Config.Labels['dev.capybara.sandbox.egress-shard'] ?? '?'}.${sharedNetwork}`;
          if (!shards.has(shard)) shards.set(shard, containerMemory((await engine.getContainer(shard).inspect()).Id));
          proxyShare = (shards.get(shard) ?? 0) / live.length;
        }
        perSandbox.push(containerMemory(sandbox.Id) + proxyShare);
      }
      const mean = perSandbox.reduce((a, b) => a + b, 0) / perSandbox.length;
      const available = memAvailable();
      rows.push([
        String(live.length),
        percentile(bucket, 50).toFixed(0),
        percentile(bucket, 99).toFixed(0),
        (available / 1024 / MIB).toFixed(1),
        ((baseline - available) / live.length / MIB).toFixed(1),
        (mean / MIB).toFixed(1),
        ((rssOf('dockerd') + rssOf('containerd')) / MIB).toFixed(0),
        serves,
        String(failed),
      ]);
      const steps = timeline.drain(stepKind);
      const rules = iptablesNow();
      stepRows.push([String(live.length), ...STEP_KINDS.map(([kind]) => {
        const ms = steps.get(kind);
        return ms === undefined ? '-' : percentile(ms, 50).toFixed(0);
      }), rules?.rules ?? '-', rules?.ms ?? '-']);
      process.stdout.write(`${rows[rows.length - 1]?.join('\t')}\t| ${stepRows[stepRows.length - 1]?.slice(1).join('\t')}\n`);
      bucket = [];
    }
    const header = ['sandboxes', 'create p50 ms', 'create p99 ms', 'MemAvailable GiB', 'host MiB/sandbox all-in', 'container MiB/sandbox', 'dockerd+containerd MiB', 'first serves', 'failed'];
    const out = [
      `allowlist sandboxes (egressIsolation ${isolation}${isolation === 'shared' ? `, egressShardSize ${shardSize}, warmSlots ${warmSlots}` : ''}), created ${batch} at a time and left running; create p50/p99 over each row's creates; all-in: MemAvailable lost since the start per sandbox; `
      + `container: the sandbox + its egress proxy or its share of the shards, rss + mapped files (no page cache), mean over all running`,
      ...markdownTable(header, rows),
      `stopped at ${live.length} sandboxes: ${stopped}; ${((Date.now() - started) / 1000).toFixed(0)} s`,
      '',
      'the engine calls of each row\'s creates, p50 ms (each one of the creates running at once):',
      ...markdownTable(['sandboxes', ...STEP_KINDS.map(([kind]) => (kind === 'proxy leg' && warmSlots >= batch ? 'proxy leg (the refills\')' : kind)), 'iptables rules', 'iptables-save ms'], stepRows),
    ];
    // The defaults a deployment gets without addressPool or subnetPrefix.
    const { addressPool, subnetPrefix } = parseDeploymentConfig({ endpoint: 'unix:///var/run/docker.sock' });
    const poolPrefix = Number(addressPool.split('/')[1]);
    const capacity = 2 ** (subnetPrefix - poolPrefix);
    const subnets = new Set((await engine.listNetworks({ filters: { label: [`${BENCH_LABEL}=${runId}`, 'dev.capybara.sandbox.subnet'] } })).map((n) => n.IPAM?.Config?.[0]?.Subnet));
    out.push(
      `address space: addressPool ${addressPool} in /${subnetPrefix}s holds 2^(${subnetPrefix}-${poolPrefix}) = ${capacity} sandbox networks (${(capacity / 1000).toFixed(1)}x 1,000); `
      + `this run held ${subnets.size} distinct subnets at once; allocation past 1,000 is exercised in test/controller/spec/address-pool.test.ts (2,000 networks).`,
    );
    process.stdout.write(`\n${out.join('\n')}\n`);
  } finally {
    const destroyStarted = Date.now();
    await provider.drainWarm().catch((err: unknown) => void process.stderr.write(`draining the warm networks failed: ${(err as Error).message}\n`));
    for (let at = 0; at < live.length; at += batch) {
      await Promise.all(live.slice(at, at + batch).map((name) => provider.destroyByName(name).catch((err: unknown) => {
        process.stderr.write(`destroy of ${name} failed: ${(err as Error).message}\n`);
      })));
    }
    await removeLabelled(engine, runId);
    upstream.close();
    await proxy.stop();
    process.stdout.write(`destroyed ${live.length} in ${((Date.now() - destroyStarted) / 1000).toFixed(0)} s; left labelled ${BENCH_LABEL}=${runId}: ${(await engine.listContainers({ all: true, filters: { label: [`${BENCH_LABEL}=${runId}`] } })).length} containers, ${(await engine.listNetworks({ filters: { label: [`${BENCH_LABEL}=${runId}`] } })).length} networks\n`);
  }
}

await main();
