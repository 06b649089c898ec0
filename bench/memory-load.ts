/**
 * Memory proof for the egress proxy (issue 19), not a test: the proxy runs in a memory cgroup of
 * 256 MiB (the controller's egress limit), started inside it so that it sizes its memory budget
 * from the cgroup's limit, and one client tries to get it killed: 4,000 tunnels each sending a
 * ClientHello announced at 32 KiB and left one byte short, then 800 connections each pipelining a
 * large POST body behind a GET the upstream never answers (from a second address, so the whole
 * budget is reached, not only one share). Meanwhile another client measures CONNECT set-up and
 * asks `/healthz`. Reports: the process alive, its peak RSS and the cgroup's peak against the
 * limit, the OOM kills the cgroup saw, the other client's p99 loaded against unloaded, the health
 * check, and how many the proxy refused `overloaded`.
 *
 * Needs root and cgroup v1's memory controller at /sys/fs/cgroup/memory (or v2 at /sys/fs/cgroup):
 * it creates a cgroup of its own and removes it on every way out. Loopback only. Run: `npm run
 * build && node dist/bench/memory-load.js`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort, inCgroup, lineFrom, makeCgroup, percentile, statusKiB } from './load-support.js';

const LIMIT_BYTES = 256 * 1024 * 1024;
const HELLOS = Number(process.env.LOAD_HELLOS ?? 4_000);
const BODIES = Number(process.env.LOAD_BODIES ?? 800);
const PROBES = 300;
const WARMUP = 100;
const DEADLINE_MS = 240_000;
const NOFILE = 65_536;
const ATTACKER = '127.0.0.2';
const BODY_SENDER = '127.0.0.3';
const SELF = fileURLToPath(import.meta.url);

// ---- the upstream child: holds CONNECT tunnels; answers HTTP, except /slow, never -----------------

function runUpstream(): void {
  const tunnels = net.createServer((s) => s.on('error', () => s.destroy()));
  const web = http.createServer((req, res) => {
    if (req.url === '/slow') return; // held: the requests behind it on the client's connection wait
    req.resume();
    req.on('end', () => res.end('ok\n'));
  });
  web.on('clientError', (_err, s) => s.destroy());
  tunnels.listen(0, '127.0.0.1', () =>
    web.listen(0, '127.0.0.1', () => process.stdout.write(`${(tunnels.address() as net.AddressInfo).port} ${(web.address() as net.AddressInfo).port}\n`)),
  );
  process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume();
}

// ---- clients -----------------------------------------------------------------------------------

/** A ClientHello announced at 32 KiB and left one byte short, in its records. */
function halfHello(): Buffer {
  const body = 32 * 1024;
  const message = Buffer.alloc(4 + body, 0x41);
  message[0] = 1;
  message.writeUIntBE(body, 1, 3);
  const out: Buffer[] = [];
  for (let at = 0; at < message.length; at += 16 * 1024) {
    const part = message.subarray(at, at + 16 * 1024);
    out.push(Buffer.from([22, 3, 1, part.length >> 8, part.length & 0xff]), part);
  }
  return Buffer.concat(out).subarray(0, -1);
}

/** Sends `bytes` on a fresh connection and resolves with what came back before `until` (or the close). */
function exchange(port: number, bytes: Buffer | string, localAddress: string | undefined, until: string | undefined, timeoutMs = 10_000): Promise<{ socket: net.Socket; text: string }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress, noDelay: true });
    let text = '';
    const done = (): void => {
      socket.setTimeout(0);
      socket.removeAllListeners('data');
      resolve({ socket, text });
    };
    socket.setTimeout(timeoutMs, done);
    socket.on('error', () => socket.destroy());
    socket.on('close', done);
    socket.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      if (until !== undefined && text.includes(until)) done();
    });
    socket.write(bytes);
  });
}

/** CONNECT set-up latency of fresh clients from 127.0.0.1, one after another, in ms. */
async function probe(port: number, upPort: number): Promise<{ samples: number[]; failed: number }> {
  const samples: number[] = [];
  let failed = 0;
  for (let i = 0; i < PROBES + WARMUP; i++) {
    const t0 = performance.now();
    const { socket, text } = await exchange(port, `CONNECT load.test:${upPort} HTTP/1.1\r\n\r\n`, undefined, '\r\n\r\n');
    socket.destroy();
    if (!text.startsWith('HTTP/1.1 200')) failed += 1;
    else if (i >= WARMUP) samples.push(performance.now() - t0);
  }
  return { samples, failed };
}

async function healthz(port: number): Promise<string> {
  const { socket, text } = await exchange(port, 'GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n', undefined, 'ok\n', 5_000);
  socket.destroy();
  return text.split('\r\n')[0] || 'no answer';
}

async function metric(port: number, pattern: RegExp): Promise<number> {
  const { socket, text } = await exchange(port, 'GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n', undefined, undefined, 5_000);
  socket.destroy();
  return Number(pattern.exec(text)?.[1] ?? 0);
}


// ---- the run -----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const children: ChildProcess[] = [];
  const cgroup = makeCgroup('memory', LIMIT_BYTES);
  let cleaned = false;
  const cleanUp = (): void => {
    if (cleaned) return;
    cleaned = true;
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    if (!cgroup.remove()) process.stderr.write(`memory-load: could not remove ${cgroup.path}\n`);
  };
  process.once('exit', cleanUp);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130));
  const deadline = setTimeout(() => {
    process.stderr.write(`memory-load: over ${DEADLINE_MS / 1000} s, giving up\n`);
    process.exit(1);
  }, DEADLINE_MS);
  deadline.unref();

  const upstream = spawn(process.execPath, [SELF, 'upstream'], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(upstream);
  const [upPort, webPort] = (await lineFrom(upstream)).split(' ').map(Number) as [number, number];
  const port = await freePort();
  const metricsPort = await freePort();
  // The shell enters the cgroup and then becomes node: the proxy reads its limit at start.
  const args = ['dist/proxy/capybara-egress.mjs', '--allow-hosts', 'load.test', '--connect-ports', `${upPort},${webPort}`, '--listen', `127.0.0.1:${port}`, '--metrics-listen', `127.0.0.1:${metricsPort}`, '--log-level', 'warn'];
  const proxy = spawn(...inCgroup(cgroup, [process.execPath, ...args], NOFILE), {
    env: { ...process.env, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'load.test': '127.0.0.1' }) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(proxy);
  let plan = '';
  let killedBy: string | undefined;
  proxy.once('exit', (code, signal) => (killedBy = signal ?? `exit ${code}`));
  proxy.stdout!.on('data', (d: Buffer) => {
    const text = String(d);
    const line = text.split('\n').find((l) => l.includes('"memory_budget"'));
    if (line !== undefined) plan = (JSON.parse(line) as { msg: string }).msg;
  });
  const pid = proxy.pid!;
  for (let i = 0; (await healthz(port)) !== 'HTTP/1.1 200 OK'; i++) {
    if (i > 50 || proxy.exitCode !== null) throw new Error('the proxy did not start');
    await sleep(100);
  }
  const unloaded = await probe(port, upPort);
  // The plan's line is out by now (log lines go in batches of 250 ms).
  console.log(`proxy pid ${pid} in ${cgroup.path} (cgroup v${cgroup.version}, limit ${LIMIT_BYTES / 2 ** 20} MiB): ${plan || 'no memory_budget line'}`);
  const idleRss = statusKiB(pid, 'VmRSS');
  console.log(`idle: ${idleRss} KiB RSS; unloaded CONNECT p50 ${percentile(unloaded.samples, 50).toFixed(3)} ms, p99 ${percentile(unloaded.samples, 99).toFixed(3)} ms`);

  // 4,000 half-sent hellos from one address, in batches of 500. A tunnel the proxy ends after its
  // 200 (the hello deadline, or overloaded once its hello grew) is opened again at once, so the
  // pressure lasts through the measurements below; a CONNECT refused outright is not retried.
  const hello = halfHello();
  const held = new Set<net.Socket>();
  const answers = new Map<string, number>();
  const count = (what: string): void => void answers.set(what, (answers.get(what) ?? 0) + 1);
  let attacking = true;
  let reopened = 0;
  const attack = async (): Promise<void> => {
    const { socket, text } = await exchange(port, `CONNECT load.test:${upPort} HTTP/1.1\r\n\r\n`, ATTACKER, '\r\n\r\n');
    const status = /^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 'none';
    const reason = /X-Egress-Reason: (\S+)/.exec(text)?.[1];
    count(reason === undefined ? status : `${status} ${reason}`);
    if (status !== '200' || socket.destroyed) {
      socket.destroy();
      return;
    }
    socket.write(hello);
    held.add(socket);
    socket.once('close', () => {
      held.delete(socket);
      if (!attacking) return;
      reopened += 1;
      void attack();
    });
  };
  const t0 = Date.now();
  for (let i = 0; i < HELLOS; i += 500) await Promise.all(Array.from({ length: Math.min(500, HELLOS - i) }, attack));
  await sleep(2_000);
  console.log(`${HELLOS} half hellos sent in ${Date.now() - t0} ms, with the reopened ones answered: ${[...answers].map(([k, v]) => `${v} x ${k}`).join(', ')}; ${statusKiB(pid, 'VmRSS')} KiB RSS, alive: ${proxy.exitCode === null && proxy.signalCode === null}`);

  // 800 connections, each a GET the upstream never answers and a large POST pipelined behind it,
  // its body sent as far as the socket takes it and never read back.
  const bodies: net.Socket[] = [];
  const bodyAnswers = new Map<string, number>();
  const body = Buffer.alloc(256 * 1024, 0x62);
  const web = `load.test:${webPort}`;
  for (let i = 0; i < BODIES; i += 200) {
    const batch = Array.from({ length: Math.min(200, BODIES - i) }, () =>
      new Promise<void>((resolve) => {
        const socket = net.connect({ host: '127.0.0.1', port, localAddress: BODY_SENDER });
        socket.on('error', () => socket.destroy());
        let text = '';
        socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
        socket.once('close', () => {
          const reason = /X-Egress-Reason: (\S+)/.exec(text)?.[1] ?? (text === '' ? 'cut' : text.split('\r\n')[0]!);
          bodyAnswers.set(reason, (bodyAnswers.get(reason) ?? 0) + 1);
        });
        socket.write(`GET http://${web}/slow HTTP/1.1\r\nHost: ${web}\r\n\r\nPOST http://${web}/up HTTP/1.1\r\nHost: ${web}\r\nContent-Length: ${1024 * 1024}\r\n\r\n`);
        socket.write(body, () => resolve());
        setTimeout(resolve, 2_000);
        bodies.push(socket);
      }),
    );
    await Promise.all(batch);
  }
  await sleep(3_000);
  const openBodies = bodies.filter((s) => !s.destroyed).length;
  console.log(`${BODIES} pipelined bodies: ${openBodies} connections still open, closed ones: ${[...bodyAnswers].map(([k, v]) => `${v} x ${k}`).join(', ') || 'none'}; ${statusKiB(pid, 'VmRSS')} KiB RSS, alive: ${proxy.exitCode === null && proxy.signalCode === null}`);

  // Under that load: another client's CONNECTs, the health check, the budget's own figures.
  const health = await healthz(port);
  const loaded = await probe(port, upPort);
  const heldBytes = await metric(metricsPort, /^egress_held_bytes (\d+)/m);
  const overloaded = await metric(metricsPort, /^egress_decisions_total\{outcome="deny",reason="overloaded"\} (\d+)/m);
  const healthAfter = await healthz(port);
  console.log(`the attacker held ${held.size} half hellos at the end (${reopened} reopened after a close: the hello deadline, or a refusal after the 200)`);
  const alive = proxy.exitCode === null && proxy.signalCode === null;
  const peakRss = statusKiB(pid, 'VmHWM');
  const rss = statusKiB(pid, 'VmRSS');
  const cgroupPeak = cgroup.peak();
  const ooms = cgroup.oomKills();
  console.log(`loaded: ${rss} KiB RSS (peak ${peakRss} KiB), cgroup peak ${(cgroupPeak / 2 ** 20).toFixed(1)} MiB, ${ooms} OOM kills; held before a verdict ${(heldBytes / 2 ** 20).toFixed(1)} MiB; ${overloaded} refused overloaded; loaded CONNECT p50 ${percentile(loaded.samples, 50).toFixed(3)} ms, p99 ${percentile(loaded.samples, 99).toFixed(3)} ms (${loaded.failed} failed); /healthz ${health}, then ${healthAfter}`);

  attacking = false;
  for (const s of [...held, ...bodies]) s.destroy();
  const ratio = percentile(loaded.samples, 99) / percentile(unloaded.samples, 99);
  const limitKiB = LIMIT_BYTES / 1024;
  const rows: [string, string, string, boolean][] = [
    ['process alive after the load', alive ? 'yes' : `no (${killedBy ?? 'unknown'})`, 'yes', alive],
    ['OOM kills in the cgroup', String(ooms), '0', ooms === 0],
    ['peak RSS', `${(peakRss / 1024).toFixed(1)} MiB`, `< ${limitKiB / 1024} MiB`, peakRss < limitKiB],
    ['cgroup peak (RSS + page cache + kernel)', `${(cgroupPeak / 2 ** 20).toFixed(1)} MiB`, `< ${limitKiB / 1024} MiB`, cgroupPeak < LIMIT_BYTES],
    ['other client CONNECT p99 loaded / unloaded', `${ratio.toFixed(2)}x (${percentile(unloaded.samples, 99).toFixed(3)} -> ${percentile(loaded.samples, 99).toFixed(3)} ms, ${loaded.failed} failed)`, '<= 2x, none failed', ratio <= 2 && loaded.failed === 0],
    ['/healthz under load', `${health}; ${healthAfter}`, '200', health === 'HTTP/1.1 200 OK' && healthAfter === 'HTTP/1.1 200 OK'],
  ];
  console.log('\n| measure | value | target | result |\n|---|---|---|---|');
  for (const [what, value, target, ok] of rows) console.log(`| ${what} | ${value} | ${target} | ${ok ? 'PASS' : 'MISS'} |`);
  process.exitCode = rows.every((r) => r[3]) ? 0 : 1;
  cleanUp();
}

if (process.argv[2] === 'upstream') runUpstream();
else
  main().catch((err: unknown) => {
    process.stderr.write(`memory-load failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
