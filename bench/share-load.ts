/**
 * Shares proof for the egress proxy (issue 27), not a test: the proxy runs in a memory cgroup of
 * 256 MiB (the compose recipe's limit) with default settings and transparent mode on, and one
 * client tries to kill it, starve another client, or flood the log:
 *
 * 1. It measures what one connection costs (cgroup and RSS, per connection): an idle tunnel, a
 *    tunnel moving data, and a tunnel whose client stopped reading, against what the memory plan
 *    reserves per connection and what a stalled direction is charged (memory-budget.ts).
 * 2. One client opens 5,000 tunnels to a server that streams, and reads none of them.
 * 3. Holding what it may of those, it floods the DNS responder with 100,000 queries in 5 s from
 *    250 rotating source addresses, for names that are refused.
 *
 * Meanwhile a second client measures CONNECT set-up, asks `/healthz`, asks DNS, and opens tunnels.
 * Reports each figure against its target, and the log bytes the proxy wrote per second of each
 * flood. Needs root (the cgroup, binding 127.0.x.y). Loopback only. Run: `npm run build && node
 * dist/bench/share-load.js`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import dgram from 'node:dgram';
import { unlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import dnsPacket from 'dns-packet';
import { CONNECTION_BYTES } from '../proxy/budget/memory-plan.js';
import { READ_AHEAD_BYTES } from '../proxy/budget/memory-budget.js';
import { freePort, inCgroup, lineFrom, makeCgroup, percentile, statusKiB } from './load-support.js';

const LIMIT_BYTES = 256 * 1024 * 1024;
const TUNNELS = Number(process.env.LOAD_STALLED ?? 5_000);
const DNS_QUERIES = Number(process.env.LOAD_DNS_QUERIES ?? 100_000);
const DNS_SECONDS = 5;
const SOURCES = 250;
const SAMPLE = 100;
const PROBES = 200;
const DEADLINE_MS = 300_000;
const NOFILE = 65_536;
const ATTACKER = '127.0.0.2';
/** The transparent listeners' address, and the DNS port they are told to use (53 may be taken). */
const TRANSPARENT = '127.0.10.1';
const SELF = fileURLToPath(import.meta.url);
const KIB = 1024;
/**
 * The least a stalled tunnel is charged beyond the connection's reserve: the read-ahead, and the
 * destination's queue at its 16 KiB high-water mark (a write that returns false holds at least that).
 */
const STALL_LEAST = CONNECTION_BYTES + READ_AHEAD_BYTES + 16 * KIB;
const MIB = 1024 * KIB;

// ---- the upstream child: one server that streams to every connection, one that stays silent ----

function runUpstream(): void {
  const chunk = Buffer.alloc(64 * KIB, 0x61);
  const streaming = net.createServer((s) => {
    s.on('error', () => s.destroy());
    const pump = (): void => {
      while (!s.destroyed && s.write(chunk));
    };
    s.on('drain', pump);
    pump();
  });
  const silent = net.createServer((s) => s.on('error', () => s.destroy()).resume());
  streaming.listen(0, '127.0.0.1', () =>
    silent.listen(0, '127.0.0.1', () => process.stdout.write(`${(streaming.address() as net.AddressInfo).port} ${(silent.address() as net.AddressInfo).port}\n`)),
  );
  process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume();
}

// ---- clients -----------------------------------------------------------------------------------

/** A CONNECT through the proxy: the socket and the status of its answer ('none' when it closed first). */
function tunnel(port: number, target: string, localAddress?: string): Promise<{ socket: net.Socket; status: string; reason: string | undefined }> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, localAddress, noDelay: true });
    let text = '';
    let error: string | undefined;
    const done = (): void => {
      socket.setTimeout(0);
      socket.off('data', onData);
      resolve({ socket, status: /^HTTP\/1\.1 (\d+)/.exec(text)?.[1] ?? 'none', reason: /X-Egress-Reason: (\S+)/i.exec(text)?.[1] ?? error });
    };
    const onData = (d: Buffer): void => {
      text += d.toString('latin1');
      if (text.includes('\r\n\r\n')) done();
    };
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error ??= err.code;
      socket.destroy();
    });
    socket.on('data', onData);
    socket.once('close', done);
    socket.setTimeout(10_000, () => {
      error ??= 'timeout';
      socket.destroy();
    });
    socket.write(`CONNECT ${target} HTTP/1.1\r\n\r\n`);
  });
}

/** CONNECT set-up latency of fresh clients from 127.0.0.1, one after another, in ms. */
async function probe(port: number, target: string): Promise<{ samples: number[]; failed: number }> {
  const samples: number[] = [];
  let failed = 0;
  for (let i = 0; i < PROBES + 50; i++) {
    const t0 = performance.now();
    const { socket, status } = await tunnel(port, target);
    socket.destroy();
    if (status !== '200') failed += 1;
    else if (i >= 50) samples.push(performance.now() - t0);
  }
  return { samples, failed };
}

async function healthz(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    let text = '';
    socket.on('error', () => resolve('no answer'));
    socket.setTimeout(5_000, () => socket.destroy());
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.once('close', () => resolve(text.split('\r\n')[0] || 'no answer'));
    socket.write('GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n');
  });
}

/** Asks `name` over UDP from 127.0.0.1 and waits up to a second: whether it was answered. */
function ask(port: number, name: string, id: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const done = (answered: boolean): void => {
      clearTimeout(timer);
      socket.close();
      resolve(answered);
    };
    const timer = setTimeout(() => done(false), 1_000);
    socket.on('message', () => done(true));
    socket.bind(0, '127.0.0.1', () => socket.send(dnsPacket.encode({ id, type: 'query', questions: [{ type: 'A', name }] }), port, TRANSPARENT));
  });
}


// ---- the run -----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const children: ChildProcess[] = [];
  const cgroup = makeCgroup('shares', LIMIT_BYTES);
  let cleaned = false;
  const cleanUp = (): void => {
    if (cleaned) return;
    cleaned = true;
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    if (!cgroup.remove()) process.stderr.write(`share-load: could not remove ${cgroup.path}\n`);
  };
  process.once('exit', cleanUp);
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => process.exit(130));
  setTimeout(() => {
    process.stderr.write(`share-load: over ${DEADLINE_MS / 1000} s, giving up\n`);
    process.exit(1);
  }, DEADLINE_MS).unref();

  const upstream = spawn(process.execPath, [SELF, 'upstream'], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(upstream);
  const [streamPort, silentPort] = (await lineFrom(upstream)).split(' ').map(Number) as [number, number];
  const port = await freePort();
  const dnsPort = await freePort();
  const policyFile = path.join(os.tmpdir(), `capybara-share-load-${process.pid}.yaml`);
  writeFileSync(policyFile, `version: 1\nallowHosts:\n  - host: stream.test\n    tunnel: opaque\n  - host: silent.test\n    tunnel: opaque\nconnectPorts: [${streamPort}, ${silentPort}]\n`);
  process.once('exit', () => unlinkSync(policyFile));
  const args = [
    'dist/proxy/capybara-egress.mjs',
    '--policy', policyFile,
    '--listen', `127.0.0.1:${port}`,
    '--transparent-listen', TRANSPARENT,
    '--transparent-port-map', `53=${dnsPort}`,
  ];
  // The shell enters the cgroup and then becomes node: the proxy reads its limit at start.
  const proxy = spawn(...inCgroup(cgroup, [process.execPath, ...args], NOFILE), {
    env: { ...process.env, CAPYBARA_EGRESS_TEST_HOSTS: JSON.stringify({ 'stream.test': '127.0.0.1', 'silent.test': '127.0.0.1' }) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(proxy);
  let logBytes = 0;
  let plan = '';
  const events = new Map<string, number>();
  proxy.stdout!.on('data', (d: Buffer) => {
    logBytes += d.length;
    for (const line of String(d).split('\n')) {
      const event = /"event":"([a-z_]+)"/.exec(line)?.[1];
      if (event !== undefined) events.set(event, (events.get(event) ?? 0) + 1);
      if (line.includes('"memory_budget"')) plan = /"msg":"([^"]*)"/.exec(line)?.[1] ?? '';
    }
  });
  let killedBy: string | undefined;
  proxy.once('exit', (code, signal) => (killedBy = signal ?? `exit ${code}`));
  const alive = (): boolean => proxy.exitCode === null && proxy.signalCode === null;
  for (let i = 0; (await healthz(port)) !== 'HTTP/1.1 200 OK'; i++) {
    if (i > 50 || !alive()) throw new Error('the proxy did not start');
    await sleep(100);
  }
  const pid = proxy.pid!;
  const stream = `stream.test:${streamPort}`;
  const unloaded = await probe(port, stream);
  await sleep(300);
  console.log(`proxy pid ${pid} in ${cgroup.path} (cgroup v${cgroup.version}, limit ${LIMIT_BYTES / MIB} MiB): ${plan}`);
  console.log(`idle: ${(statusKiB(pid, 'VmRSS') * KIB / MIB).toFixed(1)} MiB RSS, cgroup ${(cgroup.usage() / MIB).toFixed(1)} MiB; unloaded CONNECT p50 ${percentile(unloaded.samples, 50).toFixed(3)} ms, p99 ${percentile(unloaded.samples, 99).toFixed(3)} ms`);

  // 1. What one connection costs, in three states: the growth from a second batch of SAMPLE
  // connections over a first, so that what the first left behind (the allocator keeps freed read
  // buffers, and the heap grows in steps) is not counted as theirs. Each batch comes from an
  // address of its own, fewer than one client's share of memory holds stalled.
  let nextSource = 4;
  const batch = async (target: string, read: boolean): Promise<net.Socket[]> => {
    const from = `127.0.0.${nextSource++}`;
    const held: net.Socket[] = [];
    for (let i = 0; i < SAMPLE; i += 50) {
      const opened = await Promise.all(Array.from({ length: 50 }, () => tunnel(port, target, from)));
      for (const o of opened) {
        if (read) o.socket.resume();
        else o.socket.pause();
        held.push(o.socket);
      }
    }
    await sleep(1_500);
    return held;
  };
  const cost = async (what: string, target: string, read: boolean): Promise<number> => {
    const first = await batch(target, read);
    const before = cgroup.usage();
    const rssBefore = statusKiB(pid, 'VmRSS') * KIB;
    const second = await batch(target, read);
    const per = (cgroup.usage() - before) / second.length;
    const rssPer = (statusKiB(pid, 'VmRSS') * KIB - rssBefore) / second.length;
    console.log(`${what}: ${(per / KIB).toFixed(1)} KiB per connection in the cgroup, ${(rssPer / KIB).toFixed(1)} KiB RSS (the growth from ${second.length} more over ${first.length})`);
    for (const s of [...first, ...second]) s.destroy();
    await sleep(1_500);
    return per;
  };
  const idleCost = await cost('an idle tunnel', `silent.test:${silentPort}`, true);
  const movingCost = await cost('a tunnel moving data', stream, true);
  const stalledCost = await cost('a tunnel whose client stopped reading', stream, false);

  // 2. 5,000 unread streaming tunnels from one client.
  const answers = new Map<string, number>();
  const count = (what: string): void => void answers.set(what, (answers.get(what) ?? 0) + 1);
  const attackers: net.Socket[] = [];
  const logAtStart = logBytes;
  const t0 = performance.now();
  for (let i = 0; i < TUNNELS && alive(); i += 250) {
    const opened = await Promise.all(Array.from({ length: Math.min(250, TUNNELS - i) }, () => tunnel(port, stream, ATTACKER)));
    for (const o of opened) {
      count(o.reason === undefined ? o.status : `${o.status} ${o.reason}`);
      o.socket.pause();
      attackers.push(o.socket);
    }
  }
  await sleep(2_000);
  const health = await healthz(port);
  const loaded = await probe(port, stream);
  const tunnelSeconds = (performance.now() - t0) / 1000;
  const tunnelLogRate = (logBytes - logAtStart) / tunnelSeconds;
  const ratio = percentile(loaded.samples, 99) / percentile(unloaded.samples, 99);
  console.log(
    `${TUNNELS} unread tunnels in ${tunnelSeconds.toFixed(1)} s: ${[...answers].map(([k, v]) => `${v} x ${k}`).join(', ')}; ` +
      `${attackers.filter((s) => !s.destroyed).length} still open on the client side; RSS ${(statusKiB(pid, 'VmRSS') * KIB / MIB).toFixed(1)} MiB, cgroup ${(cgroup.usage() / MIB).toFixed(1)} MiB; ` +
      `${events.get('tunnel_closed') ?? 0} close lines; /healthz ${health}; loaded CONNECT p99 ${percentile(loaded.samples, 99).toFixed(3)} ms (${loaded.failed} failed)`,
  );

  // 3. The DNS flood from rotating sources, while the attacker holds its tunnels.
  const floodLogStart = logBytes;
  const sockets = await Promise.all(
    Array.from({ length: SOURCES }, (_, i) =>
      new Promise<dgram.Socket>((resolve) => {
        const s = dgram.createSocket('udp4');
        s.on('error', () => undefined);
        s.bind(0, `127.0.20.${i + 1}`, () => resolve(s));
      }),
    ),
  );
  let sent = 0;
  const perTick = Math.ceil(DNS_QUERIES / (DNS_SECONDS * 100));
  const flood = setInterval(() => {
    for (let k = 0; k < perTick && sent < DNS_QUERIES; k++, sent++) {
      const q = dnsPacket.encode({ id: sent & 0xffff, type: 'query', questions: [{ type: 'A', name: `x${sent}.flood.example` }] });
      sockets[sent % SOURCES]!.send(q, dnsPort, TRANSPARENT);
    }
  }, 10);
  const floodStart = performance.now();
  let asked = 0;
  let answered = 0;
  let served = 0;
  let tunnelsTried = 0;
  while (performance.now() - floodStart < DNS_SECONDS * 1000) {
    const [ok, opened] = await Promise.all([ask(dnsPort, 'stream.test', asked), asked % 5 === 0 ? tunnel(port, stream) : Promise.resolve(undefined)]);
    asked += 1;
    if (ok) answered += 1;
    if (opened !== undefined) {
      tunnelsTried += 1;
      if (opened.status === '200') served += 1;
      opened.socket.destroy();
    }
    await sleep(40);
  }
  clearInterval(flood);
  const floodSeconds = (performance.now() - floodStart) / 1000;
  await sleep(500);
  const floodLogRate = (logBytes - floodLogStart) / floodSeconds;
  for (const s of sockets) s.close();
  const healthAfter = await healthz(port);
  console.log(`DNS flood: ${sent} queries from ${SOURCES} sources in ${floodSeconds.toFixed(1)} s; the other client: ${answered} of ${asked} queries answered, ${served} of ${tunnelsTried} tunnels served; /healthz ${healthAfter}`);
  console.log(`log lines by event: ${[...events].map(([k, v]) => `${k} ${v}`).join(', ')}`);

  const isAlive = alive();
  const ooms = cgroup.oomKills();
  const peak = cgroup.peak();
  for (const s of attackers) s.destroy();
  const rows: [string, string, string, boolean | undefined][] = [
    ['cost of an idle tunnel (cgroup)', `${(idleCost / KIB).toFixed(1)} KiB`, `<= the plan's reserve, ${CONNECTION_BYTES / KIB} KiB`, idleCost <= CONNECTION_BYTES],
    // Data in flight is mostly garbage awaiting collection: the figure swings with when V8 collects.
    ['cost of a tunnel moving data (cgroup)', `${(movingCost / KIB).toFixed(1)} KiB`, 'transient: what is in flight', undefined],
    ['cost of a tunnel whose client stopped reading (cgroup)', `${(stalledCost / KIB).toFixed(1)} KiB`, `<= the reserve and the least a stall is charged, ${STALL_LEAST / KIB} KiB`, stalledCost <= STALL_LEAST],
    ['process alive after both floods', isAlive ? 'yes' : `no (${killedBy ?? 'unknown'})`, 'yes', isAlive],
    ['OOM kills in the cgroup', String(ooms), '0', ooms === 0],
    ['cgroup peak', `${(peak / MIB).toFixed(1)} MiB`, `< ${LIMIT_BYTES / MIB} MiB`, peak < LIMIT_BYTES],
    ['/healthz under the tunnel flood, after the DNS flood', `${health}; ${healthAfter}`, '200', health === 'HTTP/1.1 200 OK' && healthAfter === 'HTTP/1.1 200 OK'],
    ['other client CONNECT p99 loaded / unloaded', `${ratio.toFixed(2)}x (${percentile(unloaded.samples, 99).toFixed(3)} -> ${percentile(loaded.samples, 99).toFixed(3)} ms, ${loaded.failed} failed)`, '<= 2x, none failed', ratio <= 2 && loaded.failed === 0],
    ['other client DNS answered during the DNS flood', `${((100 * answered) / asked).toFixed(1)}% (${answered} of ${asked})`, '>= 95%', answered >= 0.95 * asked],
    ['other client tunnels served during the DNS flood', `${served} of ${tunnelsTried}`, 'all', served === tunnelsTried],
    ['log bytes per second, tunnel flood', `${(tunnelLogRate / KIB).toFixed(1)} KiB/s`, '<= 64 KiB/s', tunnelLogRate <= 64 * KIB],
    ['log bytes per second, DNS flood', `${(floodLogRate / KIB).toFixed(1)} KiB/s`, '<= 64 KiB/s', floodLogRate <= 64 * KIB],
  ];
  console.log('\n| measure | value | target | result |\n|---|---|---|---|');
  for (const [what, value, target, ok] of rows) console.log(`| ${what} | ${value} | ${target} | ${ok === undefined ? 'measured' : ok ? 'PASS' : 'MISS'} |`);
  process.exitCode = rows.every((r) => r[3] !== false) ? 0 : 1;
  cleanUp();
}

if (process.argv[2] === 'upstream') runUpstream();
else
  main().catch((err: unknown) => {
    process.stderr.write(`share-load failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
