/**
 * The proxy's memory plan, like its descriptor plan (fd-budget.ts): how much memory the process
 * may use, and what fits in it. That is the lowest of its cgroup's limit (v2 `memory.max`, v1
 * `memory.limit_in_bytes`, of its own cgroup and every one above it: a parent's limit binds its
 * children), `--memory-limit-mb`, and the machine (its memory, and the most V8 lets the heap
 * grow). Out of it comes a reserve for Node itself, room for the connections at rest (the
 * connection cap is lowered to fit, as for descriptors), and the rest is the budget of bytes held
 * before a verdict (memory-budget.ts), with each client's share in proportion to its connection
 * cap. Pure: the entry point reads the files and passes their text.
 */
import type { MemoryBudgetSize } from './memory-budget.js';

const MIB = 1024 * 1024;

/**
 * Node and the proxy at rest (measured: ~70 MiB resident, the young generation included), and
 * what V8 lets pile up between collections: chunks already read and copied, requests and
 * refusals just ended.
 */
const RUNTIME_BYTES = 96 * MIB;

/**
 * What a tunnel's upstream reads into once it carries bulk data, one buffer for the rest of the
 * tunnel's life (upstream/own-buffer.ts): Node's own read size. Smaller costs throughput
 * (measured on loopback: 32 KiB 1.2x the CPU per MB of 64 KiB, 16 KiB 1.5x).
 */
export const TUNNEL_READ_BYTES = 64 * 1024;

/**
 * One open connection: at rest, the client's socket and its upstream's, their Node objects and
 * kernel structures (measured by `npm run bench:load`, bench/share-load.ts: 15-18 KiB per idle
 * tunnel in a 256 MiB cgroup, ~12 KiB more per tunnel moving data), and the read buffer of a
 * tunnel's upstream once it has carried bulk data. What a tunnel holds for a reader that stopped
 * is charged to the budget while it lasts (memory-budget.ts: measured ~84-103 KiB per stalled
 * tunnel, charged at least READ_AHEAD_BYTES and 16 KiB on top of this).
 */
export const CONNECTION_BYTES = 24 * 1024 + TUNNEL_READ_BYTES;

/** The least memory the proxy starts with: the reserve, and a little for connections and the budget. */
export const MIN_MEMORY_BYTES = 128 * MIB;

/** v1's way of saying "no limit": PAGE_COUNTER_MAX pages, a number near 2^63. */
const UNLIMITED_FROM = 2 ** 60;

/** Where the limit came from: `heap` is V8's heap limit, when it is below the machine's memory. */
export type MemorySource = 'cgroup' | 'flag' | 'machine' | 'heap';

export interface MemoryPlan extends MemoryBudgetSize {
  /** Memory the process may use, and where that figure came from. */
  readonly limitBytes: number;
  readonly source: MemorySource;
  /** The connection cap that fits next to the budget (the configured one when it fits). */
  readonly maxConnections: number;
}

/**
 * The memory limit of the cgroup a process is in, from its /proc/<pid>/cgroup text and a reader
 * of files under /sys/fs/cgroup (undefined for a file that cannot be read): the lowest limit of
 * its cgroup and of every one above it, in the v2 hierarchy or the v1 memory controller's.
 * Undefined when none is set. Inside a container the cgroup path names the host's hierarchy while
 * /sys/fs/cgroup shows the container's own cgroup at its root: the paths that do not exist are
 * skipped, and the root's file is the container's limit.
 */
export function cgroupMemoryLimit(procCgroup: string, read: (path: string) => string | undefined): number | undefined {
  let lowest: number | undefined;
  for (const line of procCgroup.split('\n')) {
    const m = /^(\d+):([^:]*):(\/.*)$/.exec(line.trim());
    if (m === null) continue;
    const [, id, controllers, path] = m as unknown as [string, string, string, string];
    const v2 = id === '0' && controllers === '';
    if (!v2 && !controllers.split(',').includes('memory')) continue;
    const [mount, file] = v2 ? ['/sys/fs/cgroup', 'memory.max'] : ['/sys/fs/cgroup/memory', 'memory.limit_in_bytes'];
    const parts = path.split('/').filter((p) => p !== '' && p !== '.' && p !== '..');
    for (let depth = parts.length; depth >= 0; depth--) {
      const limit = limitOf(read([mount, ...parts.slice(0, depth), file].join('/')));
      if (limit !== undefined && (lowest === undefined || limit < lowest)) lowest = limit;
    }
  }
  return lowest;
}

/** A limit file's value: bytes, or undefined for "max", v1's near-2^63 "unlimited", or anything unreadable. */
function limitOf(text: string | undefined): number | undefined {
  const value = text?.trim();
  if (value === undefined || !/^\d+$/.test(value)) return undefined;
  const bytes = Number(value);
  return bytes >= UNLIMITED_FROM ? undefined : bytes;
}

/** The memory the process may use, and which source set it: the lowest one known. */
export function memoryLimit(sources: { cgroup: number | undefined; flag: number | undefined; machine: number; heap?: number }): { bytes: number; source: MemorySource } {
  let best: { bytes: number; source: MemorySource } = { bytes: sources.machine, source: 'machine' };
  if (sources.heap !== undefined && sources.heap < best.bytes) best = { bytes: sources.heap, source: 'heap' };
  if (sources.cgroup !== undefined && sources.cgroup < best.bytes) best = { bytes: sources.cgroup, source: 'cgroup' };
  if (sources.flag !== undefined && sources.flag < best.bytes) best = { bytes: sources.flag, source: 'flag' };
  return best;
}

/**
 * What a limit of `limit.bytes` holds: connections at rest take what they need, at most half of
 * what is left after the runtime's reserve (the cap of `maxConnections` is lowered beyond), and
 * the budget gets the rest; a client's share of it is `clientShare` (its share of the
 * connections, as configured). Undefined when the limit is below MIN_MEMORY_BYTES.
 */
export function planMemory(limit: { bytes: number; source: MemorySource }, maxConnections: number, clientShare: number): MemoryPlan | undefined {
  if (limit.bytes < MIN_MEMORY_BYTES) return undefined;
  const spare = limit.bytes - RUNTIME_BYTES;
  const connections = Math.max(1, Math.min(maxConnections, Math.floor(spare / 2 / CONNECTION_BYTES)));
  const totalBytes = spare - connections * CONNECTION_BYTES;
  return { limitBytes: limit.bytes, source: limit.source, maxConnections: connections, totalBytes, perClientBytes: Math.floor(totalBytes * Math.min(1, clientShare)) };
}
