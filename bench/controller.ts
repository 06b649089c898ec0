/**
 * Controller benchmark (not a test), everything side by side in one run on one engine:
 *   - create to ready, tiers none and allowlist (a proxy of its own, on a shard of the shared
 *     egress, and on a warm network slot the shard joined before), against one and two plain `docker run -d`s (an allowlist sandbox with a proxy of its
 *     own is two containers), in interleaved rounds so that load from other work on the machine
 *     falls on all of them alike; medians, spread and per-round ratios; beside the warm slot its
 *     floor: one `docker run -d` onto an internal network (its embedded DNS is set up at the
 *     start, which `--network none` skips) and one `docker exec` (as the probe of the proxy);
 *   - each step of those creates, from the controller's own engine-call log (engine-timeline.ts);
 *   - the egress image's start-to-listening, and a bare Node server's in the same image
 *     (egress-listen.ts);
 *   - exec round trip through the socket proxy against `docker exec`, interleaved, and an allowlist
 *     sandbox's with and without the read of its registration (once per period, recovery.ts);
 *   - 20 MB file throughput and 20 concurrent creates.
 * Needs a local engine and the images from scripts/build-images.sh. Everything it creates is
 * named cap-bench<run>-... and labelled, and removed at the end.
 *
 *   npm run bench:controller -- [--rounds N]
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { parseArgs, promisify } from 'node:util';
import Docker from 'dockerode';
import { IMAGES } from '../common/index.js';
import { createDockerSandbox, type DockerSandboxProvider } from '../controller/index.js';
import { percentile } from './report.js';
import { EngineTimeline, type StepSpan } from './engine-timeline.js';
import { egressStartToListening, type ListenSample } from './egress-listen.js';
import { BENCH_LABEL, removeLabelled, startSocketProxy } from './bench-engine.js';

const run = promisify(execFile);
const SANDBOX_IMAGE = IMAGES.sandbox;
const EGRESS_IMAGE = IMAGES.egress;
const runId = `bench${randomBytes(3).toString('hex')}`;
const LABEL = BENCH_LABEL;
const labels = { [LABEL]: runId };
const TARGET_ALLOWLIST_RATIO = 1.5;
/** Issue 28: a sandbox on a shard costs its own container only. */
const TARGET_SHARED_RATIO = 1.0;
/** Issue 28: with a warm network slot ready (warmSlots). */
const TARGET_WARM_RATIO = 0.6;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

async function docker(...args: string[]): Promise<string> {
  return (await run('docker', args)).stdout.trim();
}

/** "p50 [min-max]" of samples in ms. */
function spread(samples: readonly number[]): string {
  if (samples.length === 0) return '-';
  const ms = (v: number) => v.toFixed(0);
  return `${ms(percentile(samples, 50))} [${ms(Math.min(...samples))}-${ms(Math.max(...samples))}]`;
}

function ratioSpread(samples: readonly number[]): string {
  return `x${percentile(samples, 50).toFixed(2)} [${Math.min(...samples).toFixed(2)}-${Math.max(...samples).toFixed(2)}]`;
}

/**
 * Plain `docker run -d`s one after the other (what a person would type), then removed. `on`: the
 * network they join (none unless given), and whether one `docker exec` follows in the last.
 */
async function plainRun(tag: string, images: readonly string[], on: { network: string; exec: boolean } = { network: 'none', exec: false }): Promise<number> {
  const names = images.map((_, j) => `cap-${runId}-plain-${tag}-${j}`);
  const ms = await timed(async () => {
    for (const [j, image] of images.entries()) {
      await docker('run', '-d', '--name', names[j] ?? '', '--label', `${LABEL}=${runId}`, '--network', on.network, image, ...(image === SANDBOX_IMAGE ? ['sleep', 'infinity'] : []));
    }
    if (on.exec) await docker('exec', names.at(-1) ?? '', 'true');
  });
  await docker('rm', '-f', ...names);
  return ms;
}

type Tier = 'none' | 'allowlist';

async function create(provider: DockerSandboxProvider, timeline: EngineTimeline, tag: string, egress: Tier): Promise<{ ms: number; steps: StepSpan[] }> {
  const id = `${runId}-${egress}-${tag}`;
  timeline.take(0, '');
  const since = Date.now();
  const ms = await timed(() => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress, allowHosts: egress === 'allowlist' ? ['example.com'] : [] } }));
  const steps = timeline.take(since, `cap-${id}`);
  await provider.destroyByName(`cap-${id}`);
  return { ms, steps };
}

/** Per step of a tier's creates: duration, start and end offset, each p50 [min-max]. */
function stepTable(rounds: readonly StepSpan[][]): string {
  const byLabel = new Map<string, StepSpan[]>();
  for (const steps of rounds) for (const s of steps) byLabel.set(s.label, [...(byLabel.get(s.label) ?? []), s]);
  const rows = [...byLabel]
    .map(([label, spans]) => ({ label, spans, start: percentile(spans.map((s) => s.start), 50) }))
    .sort((a, b) => a.start - b.start)
    .map(({ label, spans }) => [
      `${label}${spans.some((s) => s.calls > 1) ? ` (x${percentile(spans.map((s) => s.calls), 50)})` : ''}${spans.length < rounds.length ? ` (${spans.length}/${rounds.length} rounds)` : ''}`,
      spread(spans.map((s) => s.end - s.start)),
      spread(spans.map((s) => s.start)),
      spread(spans.map((s) => s.end)),
    ]);
  const header = ['step (engine call)', 'duration ms', 'starts at ms', 'ends at ms'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0))).join('  ');
  return [line(header), ...rows.map(line)].join('\n');
}

interface Samples {
  none: number[];
  plainOne: number[];
  allowlist: number[];
  plainTwo: number[];
  listen: ListenSample[];
  bareListen: ListenSample[];
  noneSteps: StepSpan[][];
  allowlistSteps: StepSpan[][];
  shared: number[];
  sharedSteps: StepSpan[][];
  warm: number[];
  warmSteps: StepSpan[][];
  /** A warm create's floor: one `docker run -d` onto an internal network, then one `docker exec`. */
  warmFloor: number[];
}

/**
 * One round: each measurement once, starting at a different one each round. Round 0 is a warm-up
 * (first creates pay for cold caches in the engine and the socket proxy) and is not recorded.
 */
async function round(r: number, providers: { own: DockerSandboxProvider; shared: DockerSandboxProvider; warm: DockerSandboxProvider }, timeline: EngineTimeline, engine: Docker, networks: { listen: string; internal: string }, samples: Samples | undefined): Promise<void> {
  const tag = `r${r}`;
  const provider = providers.own;
  const work: Array<() => Promise<void>> = [
    async () => { const c = await create(providers.shared, timeline, `${tag}-sh`, 'allowlist'); samples?.shared.push(c.ms); samples?.sharedSteps.push(c.steps); },
    async () => {
      // The slot ready before the create, as the pool's background refill has it between creates.
      if ((await providers.warm.warmUp()) !== 1) throw new Error('no warm network slot could be made (the log says why)');
      const c = await create(providers.warm, timeline, `${tag}-wm`, 'allowlist');
      samples?.warm.push(c.ms);
      samples?.warmSteps.push(c.steps);
    },
    async () => { const c = await create(provider, timeline, tag, 'none'); samples?.none.push(c.ms); samples?.noneSteps.push(c.steps); },
    async () => { const ms = await plainRun(`${tag}-one`, [SANDBOX_IMAGE]); samples?.plainOne.push(ms); },
    async () => { const c = await create(provider, timeline, tag, 'allowlist'); samples?.allowlist.push(c.ms); samples?.allowlistSteps.push(c.steps); },
    async () => { const ms = await plainRun(`${tag}-two`, [SANDBOX_IMAGE, EGRESS_IMAGE]); samples?.plainTwo.push(ms); },
    async () => { const ms = await plainRun(`${tag}-floor`, [SANDBOX_IMAGE], { network: networks.internal, exec: true }); samples?.warmFloor.push(ms); },
    ...[false, true].map((bareNode) => async () => {
      const name = `cap-${runId}-listen-${tag}${bareNode ? '-bare' : ''}`;
      const s = await egressStartToListening(docker, engine, { image: EGRESS_IMAGE, name, network: networks.listen, label: `${LABEL}=${runId}`, bareNode });
      await docker('rm', '-f', name);
      (bareNode ? samples?.bareListen : samples?.listen)?.push(s);
    }),
  ];
  for (let i = 0; i < work.length; i += 1) await work[(i + r) % work.length]!();
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { rounds: { type: 'string', default: '9' } } });
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a positive integer, not ${values.rounds}`);
  const engine = new Docker({ socketPath: '/var/run/docker.sock' });
  const proxy = await startSocketProxy(engine, runId);
  const network = `cap-${runId}-shared`;
  const listenNetwork = `cap-${runId}-listen`;
  const internalNetwork = `cap-${runId}-internal`;
  const timeline = new EngineTimeline();
  const provider = createDockerSandbox({ endpoint: proxy.endpoint, network }, { labels }, { logger: timeline.logger });
  const shared = createDockerSandbox({ endpoint: proxy.endpoint, network, egressIsolation: 'shared' }, { labels }, { logger: timeline.logger });
  const warm = createDockerSandbox({ endpoint: proxy.endpoint, network, egressIsolation: 'shared', warmSlots: 1 }, { labels }, { logger: timeline.logger });
  const out: string[] = [];
  try {
    await docker('network', 'create', '--label', `${LABEL}=${runId}`, listenNetwork);
    await docker('network', 'create', '--internal', '--label', `${LABEL}=${runId}`, internalNetwork);
    const samples: Samples = { none: [], plainOne: [], allowlist: [], plainTwo: [], listen: [], bareListen: [], noneSteps: [], allowlistSteps: [], shared: [], sharedSteps: [], warm: [], warmSteps: [], warmFloor: [] };
    // The shard is started by the warm-up round's create; from then on a create joins it.
    for (let r = 0; r <= rounds; r += 1) await round(r, { own: provider, shared, warm }, timeline, engine, { listen: listenNetwork, internal: internalNetwork }, r === 0 ? undefined : samples);
    const paired = (a: number[], b: number[]) => a.map((v, i) => v / (b[i] ?? NaN));

    out.push(`create to ready, ${rounds} interleaved rounds after a warm-up; ms p50 [min-max]; ratios per round`);
    out.push(`  create none:      ${spread(samples.none)}  vs one docker run -d:   ${spread(samples.plainOne)}  ${ratioSpread(paired(samples.none, samples.plainOne))}`);
    out.push(`  create allowlist: ${spread(samples.allowlist)}  vs two docker run -ds: ${spread(samples.plainTwo)}  ${ratioSpread(paired(samples.allowlist, samples.plainTwo))} (target <= ${TARGET_ALLOWLIST_RATIO}; ratio of medians x${(percentile(samples.allowlist, 50) / percentile(samples.plainTwo, 50)).toFixed(2)})`);
    out.push(`  create allowlist, shared egress: ${spread(samples.shared)}  vs two docker run -ds: ${ratioSpread(paired(samples.shared, samples.plainTwo))} (target <= ${TARGET_SHARED_RATIO}; ratio of medians x${(percentile(samples.shared, 50) / percentile(samples.plainTwo, 50)).toFixed(2)}); vs one: ${ratioSpread(paired(samples.shared, samples.plainOne))}`);
    out.push(`  create allowlist, warm slot: ${spread(samples.warm)}  vs two docker run -ds: ${ratioSpread(paired(samples.warm, samples.plainTwo))} (target <= ${TARGET_WARM_RATIO}; ratio of medians x${(percentile(samples.warm, 50) / percentile(samples.plainTwo, 50)).toFixed(2)}); vs one: ${ratioSpread(paired(samples.warm, samples.plainOne))}`);
    // What no warm slot takes off: the sandbox's own container joins its internal network (dockerd
    // sets up its embedded DNS there, which --network none skips), and one exec sees the proxy answer.
    out.push(`    its floor, one docker run -d onto an internal network and one docker exec: ${spread(samples.warmFloor)}  vs two docker run -ds: ${ratioSpread(paired(samples.warmFloor, samples.plainTwo))}; the warm create vs its floor: ${ratioSpread(paired(samples.warm, samples.warmFloor))}`);
    for (const [label, listen] of [['egress image start-to-listening:', samples.listen], ['  the same image, bare Node server:', samples.bareListen]] as const) {
      out.push(`  ${label} docker run -d ${spread(listen.map((s) => s.runMs))}, then it answers after ${spread(listen.map((s) => s.afterRunMs))}, in all ${spread(listen.map((s) => s.runMs + s.afterRunMs))}`);
    }
    out.push(`  egress image in all against two docker run -ds: ${ratioSpread(paired(samples.listen.map((s) => s.runMs + s.afterRunMs), samples.plainTwo))}`);
    out.push('', 'allowlist create, by step (offsets from the start of create):', stepTable(samples.allowlistSteps));
    out.push('', 'allowlist create on a shard, by step:', stepTable(samples.sharedSteps));
    out.push('', 'allowlist create on a warm slot, by step:', stepTable(samples.warmSteps));
    out.push('', 'none create, by step:', stepTable(samples.noneSteps));
    process.stdout.write(`${out.join('\n')}\n`);

    const h = await provider.create({ id: `${runId}-exec`, image: SANDBOX_IMAGE, limits: { egress: 'none' } });
    const rtt: number[] = [];
    const cli: number[] = [];
    for (let i = 0; i < 30; i += 1) {
      rtt.push(await timed(() => provider.exec(h, 'true')));
      cli.push(await timed(() => docker('exec', '-u', '1000', h.id, 'true')));
    }
    process.stdout.write(`\nexec round trip: ${spread(rtt)} (p99 ${percentile(rtt, 99).toFixed(0)}) vs docker exec ${spread(cli)} (p99 ${percentile(cli, 99).toFixed(0)}), interleaved, n=30\n`);

    // An allowlist sandbox's command reads its registration in the proxy once per period and
    // controller process: a new controller for each first command, the same one for the next.
    for (const [kind, on] of [['own proxy', provider], ['shard', shared]] as const) {
      const a = await on.create({ id: `${runId}-exec-${kind === 'shard' ? 'sh' : 'own'}`, image: SANDBOX_IMAGE, limits: { egress: 'allowlist', allowHosts: ['example.com'] } });
      const read: number[] = [];
      const cached: number[] = [];
      for (let i = 0; i < 30; i += 1) {
        const fresh = createDockerSandbox({ endpoint: proxy.endpoint, network, egressIsolation: kind === 'shard' ? 'shared' : 'sandbox' }, { labels }, { logger: timeline.logger });
        read.push(await timed(() => fresh.exec(a, 'true')));
        cached.push(await timed(() => fresh.exec(a, 'true')));
      }
      process.stdout.write(`exec round trip, allowlist, ${kind}: reading its registration ${spread(read)}, within the period ${spread(cached)}, n=30\n`);
      await on.destroy(a);
    }

    const data = new Uint8Array(randomBytes(20 * 1024 * 1024));
    const writeMs = await timed(() => provider.writeFile(h, '/workspace/bench.bin', data));
    let back: Uint8Array = new Uint8Array();
    const readMs = await timed(async () => { back = await provider.readFile(h, '/workspace/bench.bin'); });
    if (!Buffer.from(back).equals(Buffer.from(data))) throw new Error('20 MB round trip mismatch');
    process.stdout.write(`20 MB: write ${(20.97 / (writeMs / 1000)).toFixed(0)} MB/s, read ${(20.97 / (readMs / 1000)).toFixed(0)} MB/s\n`);
    await provider.destroy(h);

    const ids = Array.from({ length: 20 }, (_, i) => `${runId}-c${i}`);
    const concurrentMs = await timed(() => Promise.all(ids.map((id) => provider.create({ id, image: SANDBOX_IMAGE, limits: { egress: 'none' } }))));
    await Promise.all(ids.map((id) => provider.destroyByName(`cap-${id}`)));
    process.stdout.write(`20 concurrent creates (none): ${concurrentMs.toFixed(0)} ms\n`);
  } finally {
    await removeLabelled(engine, runId);
    await proxy.stop();
  }
}

await main();
