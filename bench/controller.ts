/**
 * Controller benchmark (not a test): create-to-ready against plain `docker run`, exec round trip
 * through the socket proxy against `docker exec`, 20 MB file throughput, 20 concurrent creates.
 * Needs a local engine and the images from scripts/build-images.sh. Everything it creates is
 * named cap-bench-<run>-... and labelled, and removed at the end.
 *
 *   npm run build && node dist/bench/controller.js
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { createDockerSandbox, type SandboxProvider } from '../controller/index.js';

const run = promisify(execFile);
const SANDBOX_IMAGE = 'capybara-sandbox:latest';
const EGRESS_IMAGE = 'capybara-sandbox-egress:latest';
const PROXY_IMAGE = 'capybara-sandbox-proxy:latest';
const runId = `bench${randomBytes(3).toString('hex')}`;
const LABEL = 'dev.capybara.bench';
const labels = { [LABEL]: runId };

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

async function docker(...args: string[]): Promise<string> {
  return (await run('docker', args)).stdout.trim();
}

async function startSocketProxy(engine: Docker): Promise<{ endpoint: string; stop: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), `cap-${runId}-`));
  const name = `cap-${runId}-sockproxy`;
  const container = await engine.createContainer({
    _query: { name },
    _body: {
      Image: PROXY_IMAGE,
      Labels: labels,
      Env: ['SOCKET_PROXY_BIND=unix@/run/capybara-proxy/docker.sock', 'DOCKER_SOCKET=/var/run/docker.sock'],
      HostConfig: {
        Binds: ['/var/run/docker.sock:/var/run/docker.sock', `${dir}:/run/capybara-proxy`],
        NetworkMode: 'none', CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'], ReadonlyRootfs: true,
      },
    },
  } as unknown as Docker.ContainerCreateOptions);
  await container.start();
  const socket = join(dir, 'docker.sock');
  for (let i = 0; i < 150 && !existsSync(socket); i += 1) await new Promise((r) => setTimeout(r, 100));
  await new Promise((r) => setTimeout(r, 300));
  return {
    endpoint: `unix://${socket}`,
    stop: async () => {
      await container.remove({ force: true }).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function cleanup(engine: Docker): Promise<void> {
  const filters = { label: [`${LABEL}=${runId}`] };
  for (const c of await engine.listContainers({ all: true, filters })) await engine.getContainer(c.Id).remove({ force: true, v: true }).catch(() => undefined);
  for (const n of await engine.listNetworks({ filters })) await engine.getNetwork(n.Id).remove().catch(() => undefined);
  const { Volumes } = await engine.listVolumes({ filters });
  for (const v of Volumes ?? []) await engine.getVolume(v.Name).remove({ force: true }).catch(() => undefined);
}

async function plainRuns(n: number, images: string[]): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i += 1) {
    const names = images.map((_, j) => `cap-${runId}-plain-${i}-${j}`);
    out.push(await timed(async () => {
      for (const [j, image] of images.entries()) {
        await docker('run', '-d', '--name', names[j] ?? '', '--label', `${LABEL}=${runId}`, '--network', 'none', image, ...(image === SANDBOX_IMAGE ? ['sleep', 'infinity'] : []));
      }
    }));
    await docker('rm', '-f', ...names);
  }
  return out;
}

async function creates(provider: SandboxProvider, n: number, egress: 'none' | 'allowlist'): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i += 1) {
    const id = `${runId}-${egress}-${i}`;
    out.push(await timed(() => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress, allowHosts: egress === 'allowlist' ? ['example.com'] : [] } })));
    await provider.destroyByName(`cap-${id}`);
  }
  return out;
}

async function main(): Promise<void> {
  const engine = new Docker({ socketPath: '/var/run/docker.sock' });
  const proxy = await startSocketProxy(engine);
  const network = `cap-${runId}-shared`;
  const provider = createDockerSandbox({ endpoint: proxy.endpoint, network }, { labels });
  const results: Record<string, unknown> = {};
  const fmt = (ms: number) => `${ms.toFixed(0)} ms`;
  try {
    const rounds = 5;
    const noneCreate = await creates(provider, rounds, 'none');
    const plainOne = await plainRuns(rounds, [SANDBOX_IMAGE]);
    const allowCreate = await creates(provider, rounds, 'allowlist');
    const plainTwo = await plainRuns(rounds, [SANDBOX_IMAGE, EGRESS_IMAGE]);
    results.createNone = { p50: quantile(noneCreate, 0.5), plainDockerRun: quantile(plainOne, 0.5), ratio: quantile(noneCreate, 0.5) / quantile(plainOne, 0.5) };
    results.createAllowlist = { p50: quantile(allowCreate, 0.5), twoPlainDockerRuns: quantile(plainTwo, 0.5), ratio: quantile(allowCreate, 0.5) / quantile(plainTwo, 0.5) };

    const h = await provider.create({ id: `${runId}-exec`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
    const rtt: number[] = [];
    for (let i = 0; i < 60; i += 1) rtt.push(await timed(() => provider.exec(h, 'true')));
    const cli: number[] = [];
    for (let i = 0; i < 30; i += 1) cli.push(await timed(() => docker('exec', '-u', '1000', h.id, 'true')));
    results.execRoundTrip = { p50: quantile(rtt, 0.5), p99: quantile(rtt, 0.99), dockerExecP50: quantile(cli, 0.5), dockerExecP99: quantile(cli, 0.99) };

    const data = new Uint8Array(randomBytes(20 * 1024 * 1024));
    const writeMs = await timed(() => provider.writeFile(h, '/workspace/bench.bin', data));
    let back: Uint8Array = new Uint8Array();
    const readMs = await timed(async () => { back = await provider.readFile(h, '/workspace/bench.bin'); });
    if (!Buffer.from(back).equals(Buffer.from(data))) throw new Error('20 MB round trip mismatch');
    results.files20MB = { writeMs, readMs, writeMBps: 20.97 / (writeMs / 1000), readMBps: 20.97 / (readMs / 1000) };
    await provider.destroy(h);

    const ids = Array.from({ length: 20 }, (_, i) => `${runId}-c${i}`);
    const concurrentMs = await timed(() => Promise.all(ids.map((id) => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'none' } }))));
    await Promise.all(ids.map((id) => provider.destroyByName(`cap-${id}`)));
    results.concurrent20 = { totalMs: concurrentMs, perSandboxMs: concurrentMs / 20 };

    process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
    const r = results as Record<string, Record<string, number>>;
    process.stdout.write([
      `create none: ${fmt(r.createNone!.p50!)} vs docker run ${fmt(r.createNone!.plainDockerRun!)} (x${r.createNone!.ratio!.toFixed(2)})`,
      `create allowlist: ${fmt(r.createAllowlist!.p50!)} vs two docker runs ${fmt(r.createAllowlist!.twoPlainDockerRuns!)} (x${r.createAllowlist!.ratio!.toFixed(2)}; target <= 1.5)`,
      `exec round trip: p50 ${fmt(r.execRoundTrip!.p50!)} p99 ${fmt(r.execRoundTrip!.p99!)} vs docker exec p50 ${fmt(r.execRoundTrip!.dockerExecP50!)} (target p50 <= 30 ms)`,
      `20 MB: write ${r.files20MB!.writeMBps!.toFixed(0)} MB/s, read ${r.files20MB!.readMBps!.toFixed(0)} MB/s`,
      `20 concurrent creates: ${fmt(r.concurrent20!.totalMs!)}`,
    ].join('\n') + '\n');
  } finally {
    await cleanup(engine);
    await proxy.stop();
  }
}

await main();
