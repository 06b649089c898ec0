/**
 * What the load benchmarks (load-tunnels.ts, memory-load.ts, share-load.ts) share: a free loopback
 * port, the first line a child prints (its ports), a percentile of samples, and a memory cgroup.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import net from 'node:net';

export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
}

export async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as net.AddressInfo;
  await new Promise((resolve) => s.close(resolve));
  return port;
}

export async function lineFrom(child: ChildProcess): Promise<string> {
  let text = '';
  for await (const chunk of child.stdout!) {
    text += String(chunk);
    if (text.includes('\n')) return text.trim();
  }
  throw new Error('child ended before printing its ports');
}

/** A memory cgroup of the bench's own (v1's memory controller, or v2), removed by the caller. */
export interface Cgroup {
  readonly path: string;
  readonly version: 1 | 2;
  /** Bytes charged to it now (RSS, page cache, and kernel memory where the version counts it: v2 counts socket buffers). */
  usage(): number;
  /** Bytes charged to it at its peak. */
  peak(): number;
  /** OOM kills inside it. */
  oomKills(): number;
  /** Removes it, waiting (up to 5 s) for the processes in it to have left; false if it could not. */
  remove(): boolean;
}

/** Makes a memory cgroup limited to `limitBytes`, without swap. Needs root. */
export function makeCgroup(purpose: string, limitBytes: number): Cgroup {
  const name = `capybara-bench-${purpose}-${process.pid}`;
  const v1 = '/sys/fs/cgroup/memory';
  if (existsSync(`${v1}/memory.limit_in_bytes`)) {
    const path = `${v1}/${name}`;
    mkdirSync(path);
    writeFileSync(`${path}/memory.limit_in_bytes`, String(limitBytes));
    // No swap to hide behind, where the kernel accounts it.
    if (existsSync(`${path}/memory.memsw.limit_in_bytes`)) writeFileSync(`${path}/memory.memsw.limit_in_bytes`, String(limitBytes));
    return {
      path,
      version: 1,
      usage: () => Number(readFileSync(`${path}/memory.usage_in_bytes`, 'utf8')),
      peak: () => Number(readFileSync(`${path}/memory.max_usage_in_bytes`, 'utf8')),
      oomKills: () => Number(/oom_kill (\d+)/.exec(readFileSync(`${path}/memory.oom_control`, 'utf8'))?.[1] ?? 0),
      remove: () => removeWhenEmpty(path),
    };
  }
  const path = `/sys/fs/cgroup/${name}`;
  mkdirSync(path);
  writeFileSync(`${path}/memory.max`, String(limitBytes));
  writeFileSync(`${path}/memory.swap.max`, '0');
  return {
    path,
    version: 2,
    usage: () => Number(readFileSync(`${path}/memory.current`, 'utf8')),
    peak: () => (existsSync(`${path}/memory.peak`) ? Number(readFileSync(`${path}/memory.peak`, 'utf8')) : NaN),
    oomKills: () => Number(/oom_kill (\d+)/.exec(readFileSync(`${path}/memory.events`, 'utf8'))?.[1] ?? 0),
    remove: () => removeWhenEmpty(path),
  };
}

/** A cgroup directory can go once its last process has left (a killed one a moment after its signal). */
function removeWhenEmpty(path: string): boolean {
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(path);
      return true;
    } catch {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
    }
  }
  return false;
}

/**
 * The command that runs `argv` inside `cgroup` with an open-file limit of `nofile` (or the hard
 * limit, without CAP_SYS_RESOURCE): the shell enters the cgroup and then becomes the program, so
 * the program sees the cgroup's limit from its start.
 */
export function inCgroup(cgroup: Cgroup, argv: readonly string[], nofile: number): [file: string, args: string[]] {
  const quoted = argv.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
  return ['sh', ['-c', `echo $$ > '${cgroup.path}/cgroup.procs' && { ulimit -n ${nofile} 2>/dev/null || ulimit -n "$(ulimit -Hn)"; } && exec ${quoted}`]];
}

/** A field of /proc/PID/status in KiB (VmRSS, VmHWM), or NaN once the process is gone. */
export function statusKiB(pid: number, field: string): number {
  try {
    return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
  } catch {
    return NaN;
  }
}
