/**
 * A second, throwaway dockerd for tests that need an engine of their own (mTLS on a loopback
 * port). It shares nothing with the machine's engine: its own data root, exec root (and with
 * it its own supervised containerd), pid file, unix socket and an empty config file, so
 * /etc/docker/daemon.json cannot leak in. `--iptables=false --ip-masq=false` keep it away from
 * the host's firewall, and its default bridge is one this helper creates for it (`capdd<hex>`,
 * removed at stop). Not `--bridge=none`: with that, dockerd deletes the host's `docker0` at
 * start, which breaks the machine's own engine (its default bridge, and every `docker build`).
 *
 * Teardown always runs: SIGTERM (dockerd stops its containers and containerd), SIGKILL after
 * a grace period, then every process still naming the state directory (containerd, shims) is
 * killed by pid, mounts under it are detached, and the directory is removed.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, readdirSync, rmSync, writeFileSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Docker from 'dockerode';
import { freePort } from './loopback.js';

export interface SecondEngine {
  readonly dir: string;
  readonly port: number;
  readonly socketPath: string;
  /** dockerode on the engine's own unix socket (setup and checks, never the product path). */
  readonly docker: Docker;
  log(): string;
  stop(): Promise<void>;
}

export interface SecondEngineTls {
  readonly caCert: string;
  readonly serverCert: string;
  readonly serverKey: string;
}

/** Why a second engine cannot run here at all (not the test's fault), or null. */
export function secondEngineUnsupported(): string | null {
  if (process.getuid?.() !== 0) return 'a second dockerd needs root (the test runs as a regular user)';
  for (const [tool, args] of [['dockerd', ['--version']], ['ip', ['-V']]] as const) {
    try {
      execFileSync(tool, args, { stdio: 'ignore' });
    } catch {
      return `no ${tool} binary on PATH`;
    }
  }
  return null;
}

function exited(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/** Pids of processes whose command line names `dir` (only processes this engine started can). */
function processesUnder(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(dir)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

function detachMounts(dir: string): void {
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
    .map((line) => line.split(' ')[4] ?? '')
    .filter((mountPoint) => mountPoint === dir || mountPoint.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const mountPoint of mounts) {
    try {
      execFileSync('umount', ['-l', mountPoint], { stdio: 'ignore' });
    } catch {
      // already gone with its parent
    }
  }
}

export async function startSecondEngine(tls: SecondEngineTls, startTimeoutMs = 30_000): Promise<SecondEngine> {
  // Short path: containerd puts unix sockets under it (108-byte limit).
  const dir = mkdtempSync('/tmp/cap-dd-');
  // Below the ephemeral range (freePort): dockerd binds it only seconds later, and a port from
  // listen(0) could meanwhile be handed to any server another test starts (dockerd then exits).
  const port = await freePort();
  const socketPath = join(dir, 'docker.sock');
  writeFileSync(join(dir, 'daemon.json'), '{}\n');
  const bridge = `capdd${randomBytes(4).toString('hex')}`;
  execFileSync('ip', ['link', 'add', 'name', bridge, 'type', 'bridge']);
  const logFd = openSync(join(dir, 'dockerd.log'), 'a');
  const child = spawn('dockerd', [
    '--config-file', join(dir, 'daemon.json'),
    '--data-root', join(dir, 'data'),
    '--exec-root', join(dir, 'exec'),
    '--pidfile', join(dir, 'dockerd.pid'),
    '-H', `unix://${socketPath}`,
    '-H', `tcp://127.0.0.1:${port}`,
    '--tlsverify', '--tlscacert', tls.caCert, '--tlscert', tls.serverCert, '--tlskey', tls.serverKey,
    `--bridge=${bridge}`, '--iptables=false', '--ip-masq=false',
  ], { stdio: ['ignore', logFd, logFd] });
  closeSync(logFd);
  const log = (): string => {
    try {
      return readFileSync(join(dir, 'dockerd.log'), 'utf8');
    } catch {
      return '';
    }
  };
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      if (!(child.exitCode !== null || child.signalCode !== null)) {
        child.kill('SIGTERM');
        if (!(await exited(child, 20_000))) {
          child.kill('SIGKILL');
          await exited(child, 5_000);
        }
      }
      for (const pid of processesUnder(dir)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already ended
        }
      }
      detachMounts(dir);
      rmSync(dir, { recursive: true, force: true });
      try {
        execFileSync('ip', ['link', 'del', bridge], { stdio: 'ignore' });
      } catch {
        // never created, or already gone
      }
    })();
    return stopped;
  };
  const docker = new Docker({ socketPath });
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      const text = log();
      await stop();
      throw new Error(`second dockerd exited during start (${child.exitCode ?? child.signalCode}):\n${text.slice(-2000)}`);
    }
    if (await docker.ping().then(() => true, () => false)) break;
    if (Date.now() > deadline) {
      const text = log();
      await stop();
      throw new Error(`second dockerd did not answer on ${socketPath} within ${startTimeoutMs} ms:\n${text.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { dir, port, socketPath, docker, log, stop };
}
