/**
 * Inspected hosts measured against SNI-checked tunnels, side by side in one run (the last part of
 * `npm run bench`; alone: `npm run bench:inspect`, `-- --quick` for a short run). One proxy (the
 * CLI, in its own process, with a deployment CA in a directory of its own) allows two names of one
 * HTTPS upstream: `inspect.bench.test` inspected, `tunnel.bench.test` a `tls` tunnel. The upstream
 * runs in this process beside the clients; both paths meet the same upstream, the same client and
 * the same TLS work at the ends, and are interleaved round by round.
 *
 * - keep-alive throughput: CONNECTIONS connections, each one CONNECT then requests one after the
 *   other for a while; requests per second, each round's inspected rate over the tunnel's in the
 *   same round (target: the median of those ratios at least 0.5). Beside it, the proxy's own CPU
 *   time per request (/proc/PID/stat): on a shared machine throughput moves with the neighbours,
 *   CPU per request much less. The same again in the same rounds, answered with a head of 26
 *   fields (an API's): an inspected response's fields are each read, checked and written again,
 *   a tunnel's are bytes; the target is the plain request's, this says what wide heads add.
 * - first request: a new connection, CONNECT, TLS, one request, its response; the median (target:
 *   inspected, with its leaf cached, at most 2x).
 * - a new leaf: the CA module signing leaves for fresh names in this process (target: 5 ms).
 * - memory: the resident memory grown by IDLE connections that made one request and stay open,
 *   per connection, in a proxy of its own that carried no load before; against what the proxy
 *   charges an inspected one to its budget.
 * - floors, last, in rounds of their own (nothing above changes for them): the same keep-alive
 *   throughput through bench/inspect-floor.ts, which ends TLS and then relays the bytes, reads
 *   both heads by hand, serves requests with Node's HTTP server and reads the upstream by hand (as
 *   the proxy does), or uses Node's HTTP server and an undici pool, with no checks; each round
 *   beside a tunnel through the proxy. Where the proxy's time goes: TLS, HTTP, its own.
 *
 * The proxy logs at its default level (info), its lines into /dev/null: a decision line per
 * inspected request is part of what an inspected request costs.
 *
 * Both paths run once, unmeasured, before the rounds (the floors too), so that no round measures
 * code still being compiled. With two CPUs or more, the proxy and the floors run on CPU 1 and this
 * process on CPU 0 (`pin`).
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { createAuthority } from '../common/index.js';
import { INSPECT_CONNECTION_BYTES, LeafCertificates } from '../proxy/inspect/index.js';
import { startChild, stopAll, type Child } from './children.js';
import { freePort } from './load-support.js';
import { cpuMs, memoryOf } from './peers.js';

const INSPECTED = 'inspect.bench.test';
const TUNNELED = 'tunnel.bench.test';
const RESPONSE = Buffer.from('HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\nhello, world\n', 'latin1');
/** A request for this path is answered with a head of 26 fields, as an API such as GitHub's sends: each field is read and checked. */
const WIDE_PATH = '/wide';
const WIDE_FIELDS = [
  'Date: Sun, 06 Dec 2026 12:00:00 GMT', 'Content-Type: application/json; charset=utf-8', 'Cache-Control: private, max-age=60, s-maxage=60',
  'Vary: Accept, Authorization, Cookie, X-GitHub-OTP', 'ETag: W/"0123456789abcdef0123456789abcdef"', 'Last-Modified: Sat, 05 Dec 2026 10:00:00 GMT',
  'X-OAuth-Scopes: repo, workflow', 'X-Accepted-OAuth-Scopes: repo', 'X-GitHub-Media-Type: github.v3; format=json', 'X-GitHub-Api-Version-Selected: 2022-11-28',
  'X-RateLimit-Limit: 5000', 'X-RateLimit-Remaining: 4999', 'X-RateLimit-Reset: 1765000000', 'X-RateLimit-Used: 1', 'X-RateLimit-Resource: core',
  'Access-Control-Expose-Headers: ETag, Link, Location, Retry-After, X-GitHub-OTP, X-RateLimit-Limit, X-RateLimit-Remaining',
  'Access-Control-Allow-Origin: *', 'Strict-Transport-Security: max-age=31536000; includeSubdomains; preload', 'X-Frame-Options: deny',
  'X-Content-Type-Options: nosniff', 'X-XSS-Protection: 0', 'Referrer-Policy: origin-when-cross-origin, strict-origin-when-cross-origin',
  "Content-Security-Policy: default-src 'none'", 'Server: github.com', 'Content-Length: 13', 'X-GitHub-Request-Id: ABCD:1234:5678:9ABC:DEF0',
];
const WIDE_RESPONSE = Buffer.from(`HTTP/1.1 200 OK\r\n${WIDE_FIELDS.join('\r\n')}\r\n\r\nhello, world\n`, 'latin1');

interface Plan {
  readonly rounds: number;
  readonly seconds: number;
  readonly connections: number;
  readonly firsts: number;
  readonly leaves: number;
  readonly idle: number;
}
const FULL: Plan = { rounds: 7, seconds: 2, connections: 8, firsts: 100, leaves: 300, idle: 400 };
const QUICK: Plan = { rounds: 2, seconds: 1, connections: 4, firsts: 40, leaves: 60, idle: 100 };

/** The middle value; of an even count (the quick run's two rounds), the mean of the middle two. */
const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : ((sorted[mid - 1] ?? NaN) + (sorted[mid] ?? NaN)) / 2;
};

/**
 * With two CPUs or more, the measured server (the proxy, a floor) gets CPU 1 to itself and this
 * process (the clients and the upstream) CPU 0: left to the scheduler, the two often share one
 * CPU for part of a round, and a round's throughput then moves by half. Every thread, `taskset -a`.
 * False where it cannot (one CPU, no taskset): the run goes on unpinned and says so.
 */
const PINNED = availableParallelism() >= 2;

function pin(pid: number, cpus: string): boolean {
  if (!PINNED) return false;
  try {
    execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** An HTTPS upstream answering every request at once, with a certificate for both names. */
async function startUpstream(dir: string): Promise<{ server: tls.Server; port: number; cert: string }> {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', join(dir, 'up-key.pem'), '-out', join(dir, 'up.pem'),
    '-days', '2', '-subj', '/CN=bench upstream', '-addext', `subjectAltName=DNS:${INSPECTED},DNS:${TUNNELED}`], { stdio: 'ignore' });
  const cert = readFileSync(join(dir, 'up.pem'), 'utf8');
  const server = tls.createServer({ key: readFileSync(join(dir, 'up-key.pem')), cert, ALPNProtocols: ['http/1.1'] }, (socket) => {
    socket.on('error', () => socket.destroy());
    let pending = '';
    socket.on('data', (buf: Buffer) => {
      pending += buf.toString('latin1');
      for (let end = pending.indexOf('\r\n\r\n'); end !== -1; end = pending.indexOf('\r\n\r\n')) {
        socket.write(pending.startsWith(`GET ${WIDE_PATH} `) ? WIDE_RESPONSE : RESPONSE);
        pending = pending.slice(end + 4);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as net.AddressInfo).port, cert };
}

/** A floor (bench/inspect-floor.ts) in its own process, listening. */
async function startFloor(dir: string, upstreamPort: number, mode: 'relay' | 'lean' | 'half' | 'http'): Promise<{ child: Child; port: number }> {
  const script = fileURLToPath(new URL('./inspect-floor.js', import.meta.url));
  const port = await freePort();
  const child = await startChild(`floor-${mode}`, process.execPath, [script, String(port), String(upstreamPort), join(dir, 'up-key.pem'), join(dir, 'up.pem'), mode], { lifetimeSec: 600 });
  pin(child.pid, '1');
  const deadline = Date.now() + 15_000;
  while (!(await accepts(port))) {
    if (!child.running()) throw new Error(`the ${mode} floor exited at start-up: ${child.stderr().slice(-600)}`);
    if (Date.now() > deadline) throw new Error(`the ${mode} floor was not listening within 15 s`);
    await sleep(100);
  }
  return { child, port };
}

async function startProxy(dir: string, upstreamPort: number): Promise<{ child: Child; port: number; ca: string }> {
  const cli = fileURLToPath(new URL('../proxy/capybara-egress.mjs', import.meta.url));
  const policy = join(dir, 'policy.yaml');
  writeFileSync(policy, `allowHosts:\n  - { host: ${INSPECTED}, inspect: true }\n  - ${TUNNELED}\nconnectPorts: [${upstreamPort}]\n`);
  const caDir = join(dir, 'ca');
  mkdirSync(caDir, { mode: 0o700 });
  const port = await freePort();
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('EGRESS_')));
  Object.assign(env, {
    CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ [INSPECTED]: '127.0.0.1', [TUNNELED]: '127.0.0.1' }),
    EGRESS_CA_DIR: caDir,
    EGRESS_UPSTREAM_CA: join(dir, 'up.pem'),
  });
  // At its default log level, as deployed: every inspected request writes its decision line (into
  // /dev/null here), a tunnel one per connection.
  const child = await startChild('capybara', process.execPath, [cli, '--policy', policy, '--listen', `127.0.0.1:${port}`], { env, lifetimeSec: 600 });
  pin(child.pid, '1');
  // Listening means started: the CA was made (or read) before the listeners open.
  const deadline = Date.now() + 15_000;
  while (!(await accepts(port))) {
    if (!child.running()) throw new Error(`the proxy exited at start-up: ${child.stderr().slice(-600)}`);
    if (Date.now() > deadline) throw new Error('the proxy was not listening within 15 s');
    await sleep(100);
  }
  return { child, port, ca: readFileSync(join(caDir, 'ca.crt'), 'utf8') };
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

interface Target {
  readonly proxyPort: number;
  readonly upstreamPort: number;
  /** What the client trusts: the deployment CA (inspected) or the upstream's certificate (tunnel). */
  readonly ca: string;
}

/** CONNECT, then TLS inside: the secure socket. */
async function open(target: Target, host: string): Promise<tls.TLSSocket> {
  const socket = net.connect(target.proxyPort, '127.0.0.1');
  socket.setNoDelay(true);
  socket.write(`CONNECT ${host}:${target.upstreamPort} HTTP/1.1\r\nHost: ${host}:${target.upstreamPort}\r\n\r\n`);
  await new Promise<void>((resolve, reject) => {
    socket.once('data', (b: Buffer) => (b.toString('latin1').startsWith('HTTP/1.1 200') ? resolve() : reject(new Error(b.toString('latin1')))));
    socket.once('error', reject);
  });
  const secure = tls.connect({ socket, servername: host, ca: target.ca, ALPNProtocols: ['http/1.1'] });
  await new Promise<void>((resolve, reject) => {
    secure.once('secureConnect', resolve);
    secure.once('error', reject);
  });
  // A failure later fails the run by its deadline: a benchmark, not a test.
  secure.on('error', () => undefined);
  return secure;
}

const BODY_END = 'hello, world\n';

/** One request for `path` on `secure`, resolved at the end of its response's body (the proxy rewrites the head). */
function request(secure: tls.TLSSocket, host: string, port: number, path = '/'): Promise<void> {
  return new Promise((resolve) => {
    let tail = '';
    const onData = (b: Buffer): void => {
      tail = (tail + b.toString('latin1')).slice(-BODY_END.length);
      if (tail === BODY_END) {
        secure.off('data', onData);
        resolve();
      }
    };
    secure.on('data', onData);
    secure.write(`GET ${path} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  });
}

/** Requests per second (for `path`), and the proxy's (`pid`) CPU microseconds per request meanwhile. */
async function throughput(target: Target, host: string, plan: Plan, pid: number, path = '/'): Promise<{ rps: number; cpuUs: number }> {
  const end = Date.now() + plan.seconds * 1000;
  let count = 0;
  const cpuBefore = cpuMs(pid);
  await Promise.all(
    Array.from({ length: plan.connections }, async () => {
      const secure = await open(target, host);
      while (Date.now() < end) {
        await request(secure, host, target.upstreamPort, path);
        count += 1;
      }
      secure.destroy();
    }),
  );
  return { rps: count / plan.seconds, cpuUs: ((cpuMs(pid) - cpuBefore) * 1000) / count };
}

async function firstRequest(target: Target, host: string, plan: Plan): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < plan.firsts; i++) {
    const t0 = performance.now();
    const secure = await open(target, host);
    await request(secure, host, target.upstreamPort);
    samples.push(performance.now() - t0);
    secure.destroy();
  }
  return median(samples);
}

async function leafCost(plan: Plan): Promise<{ median: number; p95: number }> {
  const leaves = new LeafCertificates(await createAuthority());
  await leaves.contextFor('warm.bench.test');
  const samples: number[] = [];
  for (let i = 0; i < plan.leaves; i++) {
    const t0 = performance.now();
    await leaves.contextFor(`n${i}.leaf.bench.test`);
    samples.push(performance.now() - t0);
  }
  samples.sort((a, b) => a - b);
  return { median: median(samples), p95: samples[Math.floor(samples.length * 0.95)] ?? NaN };
}

/** Bytes of resident memory the proxy (`pid`) grew by per connection, `count` more of them opened, one request each, and held in `held`. */
async function memoryPerConnection(target: Target, host: string, pid: number, count: number, held: tls.TLSSocket[]): Promise<number> {
  await sleep(500);
  const before = memoryOf(pid)?.rssKiB ?? NaN;
  for (let i = 0; i < count; i++) {
    const secure = await open(target, host);
    await request(secure, host, target.upstreamPort);
    held.push(secure);
  }
  await sleep(500);
  return (((memoryOf(pid)?.rssKiB ?? NaN) - before) * 1024) / count;
}

/**
 * Memory per open connection, tunnel then inspected, in a proxy of its own that carried no load
 * before: in the proxy of the throughput rounds, a collection of their garbage landed inside a
 * batch and read it as less than nothing. Both batches stay open until the end (a batch closed
 * is garbage for the next one to meet).
 */
async function memoryPerPath(dir: string, upstream: { port: number; cert: string }, count: number): Promise<{ tunnel: number; inspect: number }> {
  const own = join(dir, 'memory');
  mkdirSync(own);
  copyFileSync(join(dir, 'up.pem'), join(own, 'up.pem'));
  const proxy = await startProxy(own, upstream.port);
  const inspected: Target = { proxyPort: proxy.port, upstreamPort: upstream.port, ca: proxy.ca };
  const tunneled: Target = { ...inspected, ca: upstream.cert };
  const held: tls.TLSSocket[] = [];
  try {
    // Warm: code compiled, the leaf made, and the young generation grown to what load makes it,
    // as in the throughput rounds (else the first batch measured carries that growth).
    for (const [target, host] of [[tunneled, TUNNELED], [inspected, INSPECTED]] as const) await throughput(target, host, { ...QUICK, seconds: 1 }, proxy.child.pid);
    const tunnel = await memoryPerConnection(tunneled, TUNNELED, proxy.child.pid, count, held);
    const inspect = await memoryPerConnection(inspected, INSPECTED, proxy.child.pid, count, held);
    return { tunnel, inspect };
  } finally {
    for (const s of held) s.destroy();
    await proxy.child.stop();
  }
}

/**
 * The floors' lines: keep-alive throughput and CPU per request through each floor, in rounds of
 * their own, each beside a tunnel through the proxy (`tunneled`, proxy `pid`) in the same round.
 * `floor` is the inspected target with the proxy's port replaced by each floor's.
 */
async function floorLines(dir: string, tunneled: Target, floor: Target, plan: Plan, pid: number, progress: (text: string) => void): Promise<string[]> {
  const modes = ['relay', 'lean', 'half', 'http'] as const;
  const started = { relay: await startFloor(dir, floor.upstreamPort, 'relay'), lean: await startFloor(dir, floor.upstreamPort, 'lean'), half: await startFloor(dir, floor.upstreamPort, 'half'), http: await startFloor(dir, floor.upstreamPort, 'http') };
  const tunnel: number[] = [];
  const measured = { relay: { rps: [] as number[], cpu: [] as number[] }, lean: { rps: [] as number[], cpu: [] as number[] }, half: { rps: [] as number[], cpu: [] as number[] }, http: { rps: [] as number[], cpu: [] as number[] } };
  for (const mode of modes) await throughput({ ...floor, proxyPort: started[mode].port }, INSPECTED, { ...plan, seconds: 1 }, started[mode].child.pid); // compiled before its rounds
  for (let round = 1; round <= plan.rounds; round++) {
    progress(`inspect: floors, round ${round}/${plan.rounds}`);
    tunnel.push((await throughput(tunneled, TUNNELED, plan, pid)).rps);
    for (const mode of modes) {
      const one = await throughput({ ...floor, proxyPort: started[mode].port }, INSPECTED, plan, started[mode].child.pid);
      measured[mode].rps.push(one.rps);
      measured[mode].cpu.push(one.cpuUs);
    }
  }
  await Promise.all(modes.map((mode) => started[mode].child.stop()));
  const line = (label: string, mode: (typeof modes)[number]): string =>
    `    ${label}  req/s ${median(measured[mode].rps).toFixed(0)}  ratio ${(median(measured[mode].rps) / median(tunnel)).toFixed(2)}  CPU per request (us) ${median(measured[mode].cpu).toFixed(0)}`;
  return [
    `  floors, no checks (bench/inspect-floor.ts; median of ${plan.rounds} rounds of their own, ratio to a tunnel through the proxy in the same rounds, req/s ${median(tunnel).toFixed(0)}):`,
    line('TLS ended and opened again, bytes relayed', 'relay'),
    line('+ HTTP/1.1 heads read by hand, no checks  ', 'lean'),
    line("+ Node's HTTP server, upstream by hand    ", 'half'),
    line("+ Node's HTTP server and an undici pool   ", 'http'),
  ];
}

/** The inspection section of the bench: its lines, ready to print. */
export async function runInspectBench(quick: boolean, progress: (text: string) => void): Promise<string[]> {
  const plan = quick ? QUICK : FULL;
  const dir = mkdtempSync(join(tmpdir(), 'bench-inspect-'));
  const upstream = await startUpstream(dir);
  const pinned = pin(process.pid, '0');
  try {
    const proxy = await startProxy(dir, upstream.port);
    const inspected: Target = { proxyPort: proxy.port, upstreamPort: upstream.port, ca: proxy.ca };
    const tunneled: Target = { ...inspected, ca: upstream.cert };
    const rps = { inspect: [] as number[], tunnel: [] as number[], inspectWide: [] as number[], tunnelWide: [] as number[] };
    const cpu = { inspect: [] as number[], tunnel: [] as number[], inspectWide: [] as number[], tunnelWide: [] as number[] };
    const pid = proxy.child.pid;
    const first = { inspect: [] as number[], tunnel: [] as number[] };
    await firstRequest(inspected, INSPECTED, { ...plan, firsts: 10 }); // the leaf, cached from here on
    // Both paths compiled before their rounds, as the floors' are: a first round on code still
    // being compiled costs the proxy up to four times the CPU per request of the next.
    const paths = [['tunnel', tunneled, TUNNELED, '/'], ['inspect', inspected, INSPECTED, '/'], ['tunnelWide', tunneled, TUNNELED, WIDE_PATH], ['inspectWide', inspected, INSPECTED, WIDE_PATH]] as const;
    for (const [, target, host, path] of paths) await throughput(target, host, { ...plan, seconds: 1 }, pid, path);
    for (let round = 1; round <= plan.rounds; round++) {
      progress(`inspect: round ${round}/${plan.rounds}`);
      for (const [kind, target, host, path] of paths) {
        const measured = await throughput(target, host, plan, pid, path);
        rps[kind].push(measured.rps);
        cpu[kind].push(measured.cpuUs);
      }
      first.tunnel.push(await firstRequest(tunneled, TUNNELED, plan));
      first.inspect.push(await firstRequest(inspected, INSPECTED, plan));
    }
    progress('inspect: leaves and memory');
    const leaf = await leafCost(plan);
    const mem = await memoryPerPath(dir, upstream, plan.idle);
    const floors = await floorLines(dir, tunneled, { ...inspected, ca: upstream.cert }, plan, pid, progress);
    const r = { inspect: median(rps.inspect), tunnel: median(rps.tunnel) };
    // Each round's inspected rate against the tunnel's right before it: the machine's neighbours
    // move both alike within a round, and a round they hit moves one ratio, not the verdict.
    const ratios = rps.inspect.map((v, i) => v / rps.tunnel[i]!);
    const ratio = median(ratios);
    const wideRatios = rps.inspectWide.map((v, i) => v / rps.tunnelWide[i]!);
    const spread = (values: readonly number[], digits: number): string => `${median(values).toFixed(digits)} [${Math.min(...values).toFixed(digits)}-${Math.max(...values).toFixed(digits)}]`;
    const f = { inspect: median(first.inspect), tunnel: median(first.tunnel) };
    const verdict = (ok: boolean): string => (ok ? 'PASS' : 'MISS');
    const kib = (bytes: number): string => `${(bytes / 1024).toFixed(1)} KiB`;
    return [
      `inspected hosts vs SNI-checked tunnels (median of ${plan.rounds} rounds; one proxy, one upstream, interleaved; ${pinned ? 'the proxy and the floors on CPU 1, clients and upstream on CPU 0' : 'not pinned to CPUs'})`,
      `  keep-alive HTTPS req/s (${plan.connections} connections)  inspected ${r.inspect.toFixed(0)}  tunnel ${r.tunnel.toFixed(0)}  ratio ${spread(ratios, 2)} (>= 0.5) ${verdict(ratio >= 0.5)}  (median [min-max] of each round's ratio)`,
      `  proxy CPU per keep-alive request (us)    inspected ${spread(cpu.inspect, 0)}  tunnel ${spread(cpu.tunnel, 0)}  (median [min-max] of the rounds; user + system, all threads)`,
      `  the same, a response head of ${WIDE_FIELDS.length} fields (an API's, such as GitHub's): req/s inspected ${median(rps.inspectWide).toFixed(0)}  tunnel ${median(rps.tunnelWide).toFixed(0)}  ratio ${spread(wideRatios, 2)}  proxy CPU per request (us) inspected ${spread(cpu.inspectWide, 0)}  tunnel ${spread(cpu.tunnelWide, 0)}`,
      `  first request, leaf cached (ms)          inspected ${f.inspect.toFixed(2)}  tunnel ${f.tunnel.toFixed(2)}  ratio ${(f.inspect / f.tunnel).toFixed(2)} (<= 2) ${verdict(f.inspect / f.tunnel <= 2)}`,
      `  a new leaf (ms, ECDSA P-256)             median ${leaf.median.toFixed(2)}  p95 ${leaf.p95.toFixed(2)}  (<= 5) ${verdict(leaf.median <= 5)}`,
      `  resident memory per open connection      inspected ${kib(mem.inspect)}  tunnel ${kib(mem.tunnel)}  (${plan.idle} of each, in a proxy of their own)  charged to the budget per inspected connection: ${kib(INSPECT_CONNECTION_BYTES)} beside the tunnel's own`,
      ...floors,
    ];
  } finally {
    if (pinned) pin(process.pid, `0-${availableParallelism() - 1}`);
    upstream.server.close();
    await stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  runInspectBench(process.argv.includes('--quick'), (text) => void process.stderr.write(`bench: ${text}\n`)).then(
    (lines) => {
      process.stdout.write(`${lines.join('\n')}\n`);
      process.exit(0);
    },
    (err: unknown) => {
      process.stderr.write(`bench: inspect failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
