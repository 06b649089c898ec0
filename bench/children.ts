/**
 * The benchmark's child processes, and the guarantee that none outlives it. Every child runs
 * under coreutils `timeout`, so even a benchmark killed with SIGKILL leaves nothing running past
 * its deadline; on a normal end, an error, SIGINT or SIGTERM, each child gets SIGTERM and, two
 * seconds later, SIGKILL.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ChildOptions {
  readonly env?: NodeJS.ProcessEnv;
  /** Keep stdout (default: it goes to /dev/null, as the proxy's log does in production). */
  readonly captureStdout?: boolean;
  /** A pipe on stdin that closes when the benchmark dies; children may watch it. */
  readonly stdinPipe?: boolean;
  /** `timeout` kills the child after this many seconds, whatever else happens. */
  readonly lifetimeSec: number;
}

export interface Child {
  readonly name: string;
  /** PID of the program itself, not of its `timeout` wrapper (for /proc/PID/status). */
  readonly pid: number;
  running(): boolean;
  stdout(): string;
  /** The last few kilobytes of stderr, for error messages. */
  stderr(): string;
  /** Resolves with the exit code (null after a signal). */
  readonly exited: Promise<number | null>;
  stop(): Promise<void>;
}

const KEEP_BYTES = 16 * 1024;
const children = new Set<{ wrapper: number; inner: number; done: () => boolean; stop: () => Promise<void> }>();

function keepTail(text: string, more: string): string {
  const all = text + more;
  return all.length > KEEP_BYTES ? all.slice(-KEEP_BYTES) : all;
}

function trySignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

/** The one child of `timeout`: /proc lists it once `timeout` has forked. */
async function innerPid(wrapper: number, done: () => boolean): Promise<number> {
  for (let i = 0; i < 200 && !done(); i++) {
    try {
      const first = readFileSync(`/proc/${wrapper}/task/${wrapper}/children`, 'utf8').trim().split(/\s+/)[0];
      if (first) return Number(first);
    } catch {
      break;
    }
    await sleep(10);
  }
  return wrapper;
}

export async function startChild(name: string, command: string, args: readonly string[], options: ChildOptions): Promise<Child> {
  const proc = spawn('timeout', ['-k', '3', String(Math.ceil(options.lifetimeSec)), command, ...args], {
    env: options.env ?? process.env,
    stdio: [options.stdinPipe ? 'pipe' : 'ignore', options.captureStdout ? 'pipe' : 'ignore', 'pipe'],
  });
  let out = '';
  let err = '';
  let done = false;
  proc.stdout?.setEncoding('utf8').on('data', (s: string) => (out = keepTail(out, s)));
  proc.stderr?.setEncoding('utf8').on('data', (s: string) => (err = keepTail(err, s)));
  const exited = new Promise<number | null>((resolve) => {
    proc.once('error', (e) => {
      err = keepTail(err, `${e.message}\n`);
      done = true;
      resolve(null);
    });
    proc.once('exit', (code) => {
      done = true;
      resolve(code);
    });
  });
  const wrapper = proc.pid ?? -1;
  const pid = wrapper > 0 ? await innerPid(wrapper, () => done) : -1;
  const stop = async (): Promise<void> => {
    if (done) return;
    trySignal(pid, 'SIGTERM');
    trySignal(wrapper, 'SIGTERM');
    const ended = await Promise.race([exited.then(() => true), sleep(2_000).then(() => false)]);
    if (!ended) {
      trySignal(pid, 'SIGKILL');
      trySignal(wrapper, 'SIGKILL');
      await exited;
    }
  };
  const entry = { wrapper, inner: pid, done: () => done, stop };
  children.add(entry);
  void exited.then(() => children.delete(entry));
  return { name, pid, running: () => !done, stdout: () => out, stderr: () => err, exited, stop };
}

/** Stops every child still running, in parallel. */
export async function stopAll(): Promise<void> {
  await Promise.all([...children].map((c) => c.stop()));
}

/** For process 'exit': no awaiting there, so straight to SIGKILL. */
export function killAllNow(): void {
  for (const c of children) {
    if (c.done()) continue;
    trySignal(c.inner, 'SIGKILL');
    trySignal(c.wrapper, 'SIGKILL');
  }
}
