/**
 * Density benchmark (not a test): as many allowlist sandboxes as this machine holds, created
 * --batch (six) at a time through the socket proxy and all left running, up to --max or until the host's
 * MemAvailable falls under --reserve-gib. Each --step sandboxes, one row: create-to-ready p50
 * and p99 of that step's creates, and memory per sandbox (the sandbox container and its egress
 * proxy, from their memory cgroups' memory.stat: rss + mapped_file, page cache excluded) over
 * every sandbox then running. Then the address space: how many sandbox networks the pool holds
 * (the engine's default-address-pools stop at about 30), and how many of the pool this run took.
 * Needs a local engine (cgroup v1 or v2) and the images from scripts/build-images.sh. Everything
 * it creates is labelled with the run and removed at the end.
 *
 *   npm run bench:density -- [--max 250] [--step 25] [--batch 6] [--reserve-gib 6]
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import Docker from 'dockerode';
import { pino } from 'pino';
import { IMAGES } from '../common/index.js';
import { createDockerSandbox, parseDeploymentConfig } from '../controller/index.js';
import { percentile } from './report.js';
import { BENCH_LABEL, removeLabelled, startSocketProxy } from './bench-engine.js';

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

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { max: { type: 'string', default: '250' }, step: { type: 'string', default: '25' }, batch: { type: 'string', default: '6' }, 'reserve-gib': { type: 'string', default: '6' } } });
  const max = Number(values.max);
  const step = Number(values.step);
  const batch = Number(values.batch);
  const reserve = Number(values['reserve-gib']) * 1024 * MIB;
  if (!Number.isInteger(batch) || batch < 1 || !Number.isInteger(max) || max < batch || !Number.isInteger(step) || step < batch || !(reserve >= 0)) {
    throw new Error('--batch must be a positive integer, --max and --step integers of at least --batch, --reserve-gib a number of GiB');
  }
  const engine = new Docker({ socketPath: '/var/run/docker.sock' });
  const proxy = await startSocketProxy(engine, runId);
  const provider = createDockerSandbox({ endpoint: proxy.endpoint, network: `cap-${runId}-shared` }, { labels: { [BENCH_LABEL]: runId } }, { logger: pino({ level: 'warn' }, pino.destination(2)) });
  const rows: string[][] = [];
  const live: string[] = [];
  let stopped = `--max ${max}`;
  let attempts = 0;
  let failed = 0;
  let rowsDone = 0;
  const started = Date.now();
  try {
    let bucket: number[] = [];
    while (live.length < max) {
      if (memAvailable() < reserve) {
        stopped = `MemAvailable ${(memAvailable() / 1024 / MIB).toFixed(1)} GiB under the --reserve-gib ${values['reserve-gib']}`;
        break;
      }
      const ids = Array.from({ length: Math.min(batch, max - live.length) }, (_, i) => `${runId}-d${live.length + i}`);
      const made = await Promise.all(ids.map(async (id) => {
        const t0 = performance.now();
        try {
          await provider.create({ id, image: IMAGES.sandbox, limits: { egress: 'allowlist', allowHosts: ['example.com'], memoryMb: 128 } });
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
      if (Math.floor(live.length / step) === rowsDone && live.length < max) continue;
      rowsDone = Math.floor(live.length / step);
      // Every sandbox still serves: a command in the newest one.
      const newest = live[live.length - 1] ?? '';
      const ran = await provider.exec({ id: newest }, 'echo ok');
      if (ran.stdout !== 'ok\n') throw new Error(`${newest} did not run a command: ${ran.stderr}`);
      const perSandbox: number[] = [];
      for (const name of live) {
        const [sandbox, egress] = await Promise.all([name, `${name}-egress`].map((n) => engine.getContainer(n).inspect()));
        perSandbox.push(containerMemory(sandbox?.Id ?? '') + containerMemory(egress?.Id ?? ''));
      }
      const mean = perSandbox.reduce((a, b) => a + b, 0) / perSandbox.length;
      rows.push([
        String(live.length),
        percentile(bucket, 50).toFixed(0),
        percentile(bucket, 99).toFixed(0),
        (percentile(perSandbox, 50) / MIB).toFixed(1),
        (mean / MIB).toFixed(1),
        (memAvailable() / 1024 / MIB).toFixed(1),
        String(failed),
      ]);
      process.stdout.write(`${rows[rows.length - 1]?.join('\t')}\n`);
      bucket = [];
    }
    const header = ['sandboxes', 'create p50 ms', 'create p99 ms', 'MiB/sandbox p50', 'MiB/sandbox mean', 'host MemAvailable GiB', 'failed creates so far'];
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
    const line = (cells: readonly string[]) => `| ${cells.map((c, i) => c.padStart(widths[i] ?? 0)).join(' | ')} |`;
    const out = [
      `allowlist sandboxes, created ${batch} at a time and left running; create p50/p99 over each row's creates; memory: sandbox + its egress proxy, rss + mapped files (no page cache), over all running`,
      line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line),
      `stopped at ${live.length} sandboxes: ${stopped}; ${((Date.now() - started) / 1000).toFixed(0)} s`,
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
    for (let at = 0; at < live.length; at += batch) {
      await Promise.all(live.slice(at, at + batch).map((name) => provider.destroyByName(name).catch((err: unknown) => {
        process.stderr.write(`destroy of ${name} failed: ${(err as Error).message}\n`);
      })));
    }
    await removeLabelled(engine, runId);
    await proxy.stop();
    process.stdout.write(`destroyed ${live.length} in ${((Date.now() - destroyStarted) / 1000).toFixed(0)} s; left labelled ${BENCH_LABEL}=${runId}: ${(await engine.listContainers({ all: true, filters: { label: [`${BENCH_LABEL}=${runId}`] } })).length} containers, ${(await engine.listNetworks({ filters: { label: [`${BENCH_LABEL}=${runId}`] } })).length} networks\n`);
  }
}

await main();
