/**
 * Starting the measured proxies (the bare Node relay that is the floor, ours, squid, tinyproxy,
 * and smokescreen when a binary is given) and the upstream process, each on a free loopback port
 * with its configuration in a temporary directory, and reading their memory. A peer whose program
 * is not installed is skipped with the apt-get line that installs it.
 */
import { accessSync, chmodSync, chownSync, constants, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startChild, type Child } from './children.js';
import type { UpstreamPorts } from './upstream.js';

export const INSTALL_HINT = 'apt-get install squid tinyproxy wrk';
export type ProxyName = 'floor' | 'capybara' | 'squid' | 'tinyproxy' | 'smokescreen';

export interface RunningProxy {
  readonly name: ProxyName;
  readonly port: number;
  /** Ours only: the address its transparent listeners take TLS on (each connect port). */
  readonly transparentAddress?: string;
  /** The upstream host name to put in CONNECT and URLs: our proxy refuses IP literals. */
  readonly upstreamHost: string;
  readonly child: Child;
}

export interface StartContext {
  readonly tmp: string;
  readonly upstream: UpstreamPorts;
  readonly lifetimeSec: number;
}

/** Full path of an installed program, or undefined (root's PATH has /usr/sbin, others' may not). */
export function findProgram(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/bin', '/sbin', '/bin'];
  for (const dir of dirs.filter(Boolean)) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

function freePort(): Promise<number> {
  const server = net.createServer();
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** One request on a fresh connection; resolves with the raw response text (first chunk). */
function ask(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => socket.write(request));
    socket.setTimeout(1_000, () => socket.destroy(new Error('no answer')));
    socket.once('data', (buf) => {
      socket.destroy();
      resolve(buf.toString('latin1'));
    });
    socket.once('error', reject);
  });
}

/** Polls until `ready` answers, the child exits, or 15 s pass. */
async function waitReady(child: Child, ready: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (!child.running()) throw new Error(`${child.name} exited at start-up: ${child.stderr().trim().slice(-600)}`);
    if (await ready().catch(() => false)) return;
    await sleep(100);
  }
  await child.stop();
  throw new Error(`${child.name} not ready after 15 s: ${child.stderr().trim().slice(-600)}`);
}

/** A CONNECT to the echo upstream answered with 200: the proxy is up and may tunnel. */
const tunnels = (port: number, host: string, upstream: number) => async (): Promise<boolean> =>
  /^HTTP\/1\.[01] 200/.test(await ask(port, `CONNECT ${host}:${upstream} HTTP/1.1\r\nHost: ${host}:${upstream}\r\n\r\n`));

export async function startUpstream(lifetimeSec: number): Promise<{ child: Child; ports: UpstreamPorts }> {
  const script = fileURLToPath(new URL('./upstream.js', import.meta.url));
  const child = await startChild('upstream', process.execPath, [script, '--lifetime-ms', String(lifetimeSec * 1000)], {
    lifetimeSec: lifetimeSec + 5,
    captureStdout: true,
    stdinPipe: true,
  });
  const deadline = Date.now() + 10_000;
  while (!child.stdout().includes('\n')) {
    if (!child.running() || Date.now() > deadline) throw new Error(`upstream did not start: ${child.stderr()}`);
    await sleep(20);
  }
  return { child, ports: JSON.parse(child.stdout().split('\n')[0] ?? '') as UpstreamPorts };
}

/** The bare Node proxy (bench/bare-relay.ts): the floor the proxy is measured against. */
export async function startFloor(ctx: StartContext): Promise<RunningProxy> {
  const port = await freePort();
  const script = fileURLToPath(new URL('./bare-relay.js', import.meta.url));
  const child = await startChild('floor', process.execPath, [script, String(port)], { lifetimeSec: ctx.lifetimeSec });
  await waitReady(child, tunnels(port, 'bench.test', ctx.upstream.echo));
  return { name: 'floor', port, upstreamHost: 'bench.test', child };
}

/**
 * Stripe's smokescreen (Go), from a binary the caller names: no ACL file (every host), loopback
 * allowed as a destination (it refuses private ranges by default), and `localhost` as the name it
 * resolves itself.
 */
export async function startSmokescreen(ctx: StartContext, program: string): Promise<RunningProxy> {
  const port = await freePort();
  const args = ['--listen-ip', '127.0.0.1', '--listen-port', String(port), '--allow-range', '127.0.0.1/32', '--allow-range', '::1/128'];
  const child = await startChild('smokescreen', program, args, { lifetimeSec: ctx.lifetimeSec });
  await waitReady(child, tunnels(port, 'localhost', ctx.upstream.echo));
  return { name: 'smokescreen', port, upstreamHost: 'localhost', child };
}

/** Where our proxy's transparent listeners run: an address of their own on loopback. */
export const TRANSPARENT_ADDRESS = '127.0.0.2';
/** The TLS upstream's name: a `tls` entry, so CONNECT and transparent tunnels both check the hello. */
export const TLS_HOST = 'tls.bench.test';

export async function startCapybara(ctx: StartContext): Promise<RunningProxy> {
  const port = await freePort();
  const cli = fileURLToPath(new URL('../proxy/capybara-egress.mjs', import.meta.url));
  const { echo, source, http, tls } = ctx.upstream;
  // Only our variables: an EGRESS_* left in the caller's environment must not change the run.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('EGRESS_') && k !== 'ALLOW_CONNECT_PORTS'));
  env.CAPYBARA_EGRESS_TEST_HOSTS = JSON.stringify({ 'bench.test': '127.0.0.1', [TLS_HOST]: '127.0.0.1' });
  // The tunnel measurements carry raw bytes to echo and sink services, as they do through the
  // peers, so that entry is an opaque tunnel; TLS tunnels differ only in holding the first record
  // until the ClientHello is read, and the TLS upstream's entry is one (CONNECT and transparent).
  const policy = join(ctx.tmp, 'capybara-policy.yaml');
  writeFileSync(policy, `allowHosts:\n  - { host: bench.test, tunnel: opaque }\n  - ${TLS_HOST}\n`);
  // Transparent mode on an address of its own: TLS on every connect port there (the TLS
  // upstream's port is the one measured), DNS on a free port instead of 53 (no root needed).
  const args = [cli, '--policy', policy, '--connect-ports', `${echo},${source},${http},${tls}`, '--listen', `127.0.0.1:${port}`, '--log-level', 'info',
    '--transparent-listen', TRANSPARENT_ADDRESS, '--transparent-port-map', `53=${await freePort()}`];
  const child = await startChild('capybara', process.execPath, args, { env, lifetimeSec: ctx.lifetimeSec });
  await waitReady(child, async () => /^HTTP\/1\.1 200/.test(await ask(port, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n')));
  return { name: 'capybara', port, upstreamHost: 'bench.test', transparentAddress: TRANSPARENT_ADDRESS, child };
}

/** uid and gid of a local user, from /etc/passwd. */
function userIds(name: string): { uid: number; gid: number } | undefined {
  const line = readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.startsWith(`${name}:`));
  const [, , uid, gid] = line?.split(':') ?? [];
  return uid && gid ? { uid: Number(uid), gid: Number(gid) } : undefined;
}

export async function startSquid(ctx: StartContext, program: string): Promise<RunningProxy> {
  const port = await freePort();
  const dir = join(ctx.tmp, 'squid');
  mkdirSync(dir, { mode: 0o755 });
  // As root, squid switches to cache_effective_user once it has read its configuration, and then
  // writes its log and pid file as that user: the directory must be theirs, and the parent
  // (mkdtemp makes it 0700) must let them through.
  const user = process.getuid?.() === 0 ? ['proxy', 'nobody'].find((n) => userIds(n) !== undefined) : undefined;
  const ids = user === undefined ? undefined : userIds(user);
  if (ids) {
    chmodSync(ctx.tmp, 0o711);
    chownSync(dir, ids.uid, ids.gid);
  }
  const conf = [
    `http_port 127.0.0.1:${port}`,
    'http_access allow localhost', // the built-in acl: 127.0.0.1/32 and ::1
    'http_access deny all',
    'cache deny all',
    'cache_mem 0 MB',
    'access_log none',
    `cache_log ${join(dir, 'cache.log')}`,
    `pid_filename ${join(dir, 'squid.pid')}`,
    `coredump_dir ${dir}`,
    user ? `cache_effective_user ${user}` : '',
    'visible_hostname bench.local',
    'pinger_enable off',
    'shutdown_lifetime 0 seconds',
    'via off',
    'forwarded_for delete',
    '',
  ].join('\n');
  const file = join(dir, 'squid.conf');
  writeFileSync(file, conf, { mode: 0o644 });
  const child = await startChild('squid', program, ['-N', '-f', file], { lifetimeSec: ctx.lifetimeSec });
  await waitReady(child, tunnels(port, '127.0.0.1', ctx.upstream.echo));
  return { name: 'squid', port, upstreamHost: '127.0.0.1', child };
}

export async function startTinyproxy(ctx: StartContext, program: string): Promise<RunningProxy> {
  const port = await freePort();
  const dir = join(ctx.tmp, 'tinyproxy');
  mkdirSync(dir, { mode: 0o755 });
  const conf = [
    `Port ${port}`,
    'Listen 127.0.0.1',
    'Timeout 60',
    'MaxClients 1024',
    'LogLevel Critical',
    `PidFile "${join(dir, 'tinyproxy.pid')}"`,
    'DisableViaHeader Yes',
    // No ConnectPort line: CONNECT to any port, as for the other peers. No Allow line: any client.
    '',
  ].join('\n');
  const file = join(dir, 'tinyproxy.conf');
  writeFileSync(file, conf, { mode: 0o644 });
  const child = await startChild('tinyproxy', program, ['-d', '-c', file], { lifetimeSec: ctx.lifetimeSec });
  await waitReady(child, tunnels(port, '127.0.0.1', ctx.upstream.echo));
  return { name: 'tinyproxy', port, upstreamHost: '127.0.0.1', child };
}

export interface Memory {
  readonly rssKiB: number;
  readonly hwmKiB: number;
}

/** VmRSS (resident now) and VmHWM (peak resident) of one process. */
export function memoryOf(pid: number): Memory | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
    return { rssKiB: field('VmRSS'), hwmKiB: field('VmHWM') };
  } catch {
    return undefined;
  }
}

const USER_HZ = 100; // the unit of utime/stime in /proc/PID/stat on Linux, whatever the kernel HZ

/** User + system CPU milliseconds of a process, all threads. */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the parenthesised command name, which may itself contain spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / USER_HZ;
}
