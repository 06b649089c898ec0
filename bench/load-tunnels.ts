/**
 * Load proof for the egress proxy (issue 6), not a test: 10,000 concurrent idle tunnels plus 1,000
 * clients dribbling their request head a byte every 500 ms, while a probe measures CONNECT set-up
 * latency of fresh clients. Reports RSS per idle tunnel, the probe's p99 with and without load and
 * the proxy's file descriptors before, under load and after, each against its target.
 * Loopback only; the proxy (dist/proxy/capybara-egress.mjs) and the upstream run as child processes with a
 * raised descriptor limit and are killed on every way out. Run: `npm run build && node
 * dist/bench/load-tunnels.js` (as root, or where `ulimit -n 65536` is allowed).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort, lineFrom, percentile } from './load-support.js';
import { planDescriptors } from '../proxy/budget/fd-budget.js';

const TUNNELS = Number(process.env.LOAD_TUNNELS ?? 10_000);
const SLOW = Number(process.env.LOAD_SLOW ?? 1_000);
const PROBES = 500;
const WARMUP = 200;
const DEADLINE_MS = 180_000;
const NOFILE = 65_536;
// Several source addresses, so ephemeral ports never run short (each holds its own port range).
const SOURCES = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5'];
const SELF = fileURLToPath(import.meta.url);

/** Runs `node args` with a raised descriptor limit; `exec` keeps the PID that of node itself. */
function spawnNode(args: readonly string[], env: NodeJS.ProcessEnv = process.env): ChildProcess {
  const quoted = args.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
  // Without CAP_SYS_RESOURCE the hard limit is the ceiling: take it, and size the run to it below.
  const raise = `ulimit -n ${NOFILE} 2>/dev/null || ulimit -n "$(ulimit -Hn)"`;
  return spawn('sh', ['-c', `${raise}; exec '${process.execPath}' ${quoted}`], { env, stdio: ['pipe', 'pipe', 'inherit'] });
}

// ---- the upstream child: accepts and holds connections, nothing else ---------------------------

function runUpstream(): void {
  const server = net.createServer((s) => s.on('error', () => s.destroy()));
  server.listen(0, '127.0.0.1', () => process.stdout.write(`${(server.address() as net.AddressInfo).port}\n`));
  // The parent holds our stdin: when it dies, so do we.
  process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume();
}

// ---- measurements ------------------------------------------------------------------------------

/** The soft RLIMIT_NOFILE of a process (children get the same as this one). */
function nofile(pid: number | 'self'): number {
  return Number(/Max open files\s+(\d+)/.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'))?.[1] ?? NaN);
}

function rssKiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
}

function fds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** Opens a CONNECT tunnel; resolves with the socket once the 200 has arrived. */
function openTunnel(proxyPort: number, upPort: number, localAddress?: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port: proxyPort, localAddress, noDelay: true });
    let head = '';
    const fail = (err: Error): void => {
      socket.destroy();
      reject(err);
    };
    socket.setTimeout(10_000, () => fail(new Error('CONNECT timed out')));
    socket.once('error', fail);
    socket.on('data', (d: Buffer) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.removeAllListeners('data');
      socket.setTimeout(0);
      if (!head.startsWith('HTTP/1.1 200')) return fail(new Error(`refused: ${head.split('\r\n')[0]}`));
      socket.off('error', fail);
      socket.on('error', () => socket.destroy());
      resolve(socket);
    });
    socket.write(`CONNECT load.test:${upPort} HTTP/1.1\r\nHost: load.test:${upPort}\r\n\r\n`);
  });
}

/** Set-up latency of fresh CONNECTs, one after another, in ms (warm-up not counted). */
async function probe(proxyPort: number, upPort: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < PROBES + WARMUP; i++) {
    const t0 = performance.now();
    const socket = await openTunnel(proxyPort, upPort);
    if (i >= WARMUP) samples.push(performance.now() - t0);
    socket.destroy();
  }
  return samples;
}

/** Clients that send a CONNECT head a byte every ~500 ms, reconnecting when the proxy cuts them off (408). */
function startSlowClients(proxyPort: number, upPort: number): { stop(): void; open(): number } {
  const request = Buffer.from(`CONNECT load.test:${upPort} HTTP/1.1\r\nHost: load.test:${upPort}\r\nUser-Agent: slow-loris\r\n\r\n`);
  const clients = new Set<{ socket: net.Socket; sent: number }>();
  let running = true;
  let n = 0;
  const add = (): void => {
    const client = { socket: net.connect({ host: '127.0.0.1', port: proxyPort, localAddress: '127.0.0.6' }), sent: 0 };
    client.socket.on('error', () => client.socket.destroy());
    client.socket.on('data', () => undefined);
    client.socket.once('close', () => {
      clients.delete(client);
      if (running) add();
    });
    clients.add(client);
    n += 1;
  };
  for (let i = 0; i < SLOW; i++) add();
  // Ten groups, one every 50 ms: each client writes once per 500 ms, spread out in time.
  let tick = 0;
  const timer = setInterval(() => {
    tick += 1;
    let i = 0;
    for (const c of clients) {
      if (i++ % 10 !== tick % 10 || c.sent >= request.length - 1) continue; // never complete the head
      c.socket.write(request.subarray(c.sent, c.sent + 1));
      c.sent += 1;
    }
  }, 50);
  return {
    stop() {
      running = false;
      clearInterval(timer);
      for (const c of clients) c.socket.destroy();
    },
    open: () => clients.size,
  };
}

async function waitFor(check: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) return false;
    await sleep(100);
  }
  return true;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => resolve(true)).once('error', () => resolve(false));
    s.once('close', () => undefined);
    s.on('connect', () => s.destroy());
  });
}

// ---- the run -----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const children: ChildProcess[] = [];
  const killAll = (): void => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  };
  process.once('exit', killAll);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130));
  const deadline = setTimeout(() => {
    process.stderr.write(`load-tunnels: over ${DEADLINE_MS / 1000} s, giving up\n`);
    process.exit(1);
  }, DEADLINE_MS);
  deadline.unref();

  // Each tunnel costs the proxy two descriptors, and it keeps room for its DNS lookups: it holds
  // the connections its open-file limit fits (fd-budget.ts). Leave room for the slow clients and
  // the probe.
  const room = (planDescriptors(nofile('self'), TUNNELS + SLOW + 1_000)?.maxConnections ?? 0) - SLOW - 250;
  const tunnelCount = Math.min(TUNNELS, room);
  if (tunnelCount < TUNNELS) console.log(`RLIMIT_NOFILE is ${nofile('self')} and cannot be raised here: ${tunnelCount} tunnels instead of ${TUNNELS}`);

  const upstream = spawnNode([SELF, 'upstream']);
  children.push(upstream);
  const upPort = Number(await lineFrom(upstream));
  const proxyPort = await freePort();
  const limit = String(tunnelCount + SLOW + 1_000);
  const proxy = spawnNode(
    // Opaque tunnels: an idle tunnel here is an open one with no traffic; a tls tunnel that never
    // sent its ClientHello would be closed at the hello deadline instead.
    ['dist/proxy/capybara-egress.mjs', '--allow-hosts', 'load.test', '--tunnel-default', 'opaque', '--connect-ports', String(upPort), '--listen', `127.0.0.1:${proxyPort}`,
      '--log-level', 'warn', '--max-connections', limit, '--max-connections-per-client', limit],
    { ...process.env, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'load.test': '127.0.0.1' }) },
  );
  children.push(proxy);
  proxy.stdout!.resume(); // warn-level log lines, not needed
  const pid = proxy.pid!;
  for (let i = 0; !(await accepts(proxyPort)); i++) {
    if (i > 50 || proxy.exitCode !== null) throw new Error('the proxy did not start');
    await sleep(100);
  }

  const unloaded = await probe(proxyPort, upPort);
  await sleep(1_000);
  const before = { rss: rssKiB(pid), fds: fds(pid) };
  console.log(`proxy pid ${pid} (RLIMIT_NOFILE ${nofile(pid)}): ${before.rss} KiB RSS, ${before.fds} fds; unloaded probe p50 ${percentile(unloaded, 50).toFixed(3)} ms, p99 ${percentile(unloaded, 99).toFixed(3)} ms`);

  const t0 = Date.now();
  const tunnels: net.Socket[] = [];
  for (let i = 0; i < tunnelCount; i += 500) {
    const batch = Array.from({ length: Math.min(500, tunnelCount - i) }, (_, k) => openTunnel(proxyPort, upPort, SOURCES[(i + k) % SOURCES.length]));
    tunnels.push(...(await Promise.all(batch)));
  }
  await sleep(2_000);
  const idle = { rss: rssKiB(pid), fds: fds(pid) };
  console.log(`${tunnels.length} idle tunnels open in ${Date.now() - t0} ms: ${idle.rss} KiB RSS, ${idle.fds} fds`);

  const slow = startSlowClients(proxyPort, upPort);
  await sleep(2_000);
  const loaded = await probe(proxyPort, upPort);
  const underLoad = { rss: rssKiB(pid), fds: fds(pid) };
  console.log(`with ${slow.open()} slow clients: ${underLoad.rss} KiB RSS, ${underLoad.fds} fds; loaded probe p50 ${percentile(loaded, 50).toFixed(3)} ms, p99 ${percentile(loaded, 99).toFixed(3)} ms`);

  slow.stop();
  for (const s of tunnels) s.destroy();
  const settled = await waitFor(() => fds(pid) <= before.fds, 15_000);
  const after = { rss: rssKiB(pid), fds: fds(pid) };
  console.log(`after closing everything${settled ? '' : ' (did not settle within 15 s)'}: ${after.rss} KiB RSS, ${after.fds} fds`);

  const perTunnel = (idle.rss - before.rss) / tunnels.length;
  const p99Ratio = percentile(loaded, 99) / percentile(unloaded, 99);
  const rows: [string, string, string, boolean][] = [
    ['RSS per idle tunnel', `${perTunnel.toFixed(2)} KiB (${before.rss} -> ${idle.rss} KiB)`, '<= 16 KiB', perTunnel <= 16],
    ['probe p99 loaded / unloaded', `${p99Ratio.toFixed(2)}x (${percentile(unloaded, 99).toFixed(3)} -> ${percentile(loaded, 99).toFixed(3)} ms)`, '<= 2x', p99Ratio <= 2],
    ['proxy fds before / load / after', `${before.fds} / ${underLoad.fds} / ${after.fds}`, 'after <= before', after.fds <= before.fds],
  ];
  console.log('\n| measure | value | target | result |\n|---|---|---|---|');
  for (const [what, value, target, ok] of rows) console.log(`| ${what} | ${value} | ${target} | ${ok ? 'PASS' : 'MISS'} |`);
  killAll();
  process.exitCode = rows.every((r) => r[3]) ? 0 : 1;
}

if (process.argv[2] === 'upstream') runUpstream();
else if (process.env.LOAD_TUNNELS_NOFILE === undefined) {
  // This process holds some 12,000 sockets itself: re-run it with the raised limit.
  const child = spawnNode([SELF, ...process.argv.slice(2)], { ...process.env, LOAD_TUNNELS_NOFILE: String(NOFILE) });
  child.stdout!.pipe(process.stdout);
  child.once('exit', (code) => process.exit(code ?? 1));
} else
  main().catch((err: unknown) => {
    process.stderr.write(`load-tunnels failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
