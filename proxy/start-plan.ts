/**
 * What the egress proxy's start-up plans from the machine: its open-file limit and its memory
 * (the cgroup's, the flag's, the machine's), the caps they leave, and the log lines that say so.
 * Start-up stops here, with what to do, when either is below the least the proxy needs.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import v8 from 'node:v8';
import type { ProxyConfig } from './config.js';
import {
  cgroupMemoryLimit,
  clientShare,
  DEFAULT_LIMITS,
  shareFraction,
  memoryLimit,
  MIN_MEMORY_BYTES,
  minOpenFiles,
  openFilesFor,
  planDescriptors,
  planMemory,
  softOpenFileLimit,
  MAX_LOOKUPS_IN_FLIGHT,
  type DescriptorPlan,
  type MemoryPlan,
  type MemorySource,
  type ProxyLimits,
} from './budget/index.js';
import { DNS_LIMITS } from './dns/index.js';
import type { Logger } from './record/index.js';

const read = (path: string): string => readFileSync(path, 'utf8');

/** A file's text, or undefined when it cannot be read. */
function readIfThere(path: string): string | undefined {
  try {
    return read(path);
  } catch {
    return undefined;
  }
}

/** The memory limit of this process's cgroup, where Linux tells it. */
function cgroupLimit(): number | undefined {
  const cgroup = readIfThere('/proc/self/cgroup');
  return cgroup === undefined ? undefined : cgroupMemoryLimit(cgroup, readIfThere);
}

const MIB = 1024 * 1024;

/** This process's soft open-file limit, where Linux tells it. */
function openFileLimit(): number | undefined {
  try {
    return softOpenFileLimit(read('/proc/self/limits'));
  } catch {
    return undefined;
  }
}

/** Start-up cannot go on: said on stderr, and the process exits 2. */
export class StartError extends Error {}

/** Why start-up stops, with what to do, as stderr says it. */
export function stop(message: string): never {
  throw new StartError(message);
}

export interface Plans {
  readonly nofile: number | undefined;
  /** Descriptors kept for connections besides the clients' and the lookups': the DNS responder's TCP cap in transparent mode. */
  readonly reserved: number;
  readonly descriptors: DescriptorPlan;
  readonly memory: MemoryPlan;
}

/**
 * In transparent mode the DNS responder holds up to its TCP cap of connections, a descriptor each;
 * a shared proxy's responders, one per sandbox, hold that cap together (dns-tcp.ts TcpSlots).
 */
export function dnsReserve(config: Pick<ProxyConfig, 'transparent'>): number {
  return config.transparent === undefined ? 0 : DNS_LIMITS.maxTcpTotal;
}

/** What the open-file limit and the memory hold; start-up stops when either is below the least the proxy needs. */
export function planResources(config: ProxyConfig): Plans {
  const nofile = openFileLimit();
  // No limit to read (not Linux) or "unlimited": everything fits.
  const reserved = dnsReserve(config);
  const descriptors = planDescriptors(nofile ?? Infinity, config.limits.maxConnections, reserved);
  if (descriptors === undefined) {
    const dns = reserved > 0 ? ` (${reserved} of them for the DNS responder's TCP connections in transparent mode)` : '';
    stop(`the open-file limit is ${String(nofile)}, and the proxy needs at least ${minOpenFiles(reserved)}${dns}; raise it (docker run --ulimit nofile=N, ulimit -n N)`);
  }
  // The machine's share: its memory, and no more than V8 lets the heap grow.
  const limit = memoryLimit({ cgroup: cgroupLimit(), flag: config.memoryLimitBytes, machine: os.totalmem(), heap: v8.getHeapStatistics().heap_size_limit });
  // A client's share of the memory is its share of the connections, at most a quarter (a
  // sandbox's share on a shared proxy).
  const share = Math.min(shareFraction(config.tenantsDir !== undefined), config.limits.maxConnectionsPerClient / config.limits.maxConnections);
  const memory = planMemory(limit, Math.min(descriptors.maxConnections, config.limits.maxConnections), share);
  if (memory === undefined) {
    stop(`the memory limit is ${Math.floor(limit.bytes / MIB)} MiB (from ${SOURCE_NAMES[limit.source]}), and the proxy needs at least ${MIN_MEMORY_BYTES / MIB} MiB; raise it (docker run -m, the pod's memory limit, --memory-limit-mb)`);
  }
  return { nofile, reserved, descriptors, memory };
}

/** Where the memory limit came from, as the log says it. */
const SOURCE_NAMES: Record<MemorySource, string> = { cgroup: 'the cgroup', flag: '--memory-limit-mb', machine: 'the machine', heap: 'V8\'s heap limit' };

/** Below this many connections a lowered cap is worth a warning even when the default was lowered. */
const FEW_CONNECTIONS = 256;

/**
 * The limits the plans leave, each lowering logged: a warning when it lowers a cap the operator
 * set or leaves few connections, information when it fits the default cap to the machine or the
 * container (a healthy start warns of nothing).
 */
export function plannedLimits(config: ProxyConfig, plans: Plans, log: Logger): ProxyLimits {
  const { descriptors, memory } = plans;
  let limits = config.limits;
  const levelFor = (lowered: number): 'info' | 'warn' => (config.limits.maxConnections === DEFAULT_LIMITS.maxConnections && lowered >= FEW_CONNECTIONS ? 'info' : 'warn');
  if (descriptors.maxConnections < limits.maxConnections || descriptors.maxLookupsInFlight < MAX_LOOKUPS_IN_FLIGHT) {
    limits = { ...limits, maxConnections: descriptors.maxConnections };
    const needed = openFilesFor(config.limits.maxConnections, plans.reserved);
    log[levelFor(descriptors.maxConnections)](
      { event: 'limits_lowered', openFileLimit: plans.nofile, needed, maxConnections: descriptors.maxConnections, maxLookupsInFlight: descriptors.maxLookupsInFlight, configured: config.limits.maxConnections },
      `the open-file limit holds ${descriptors.maxConnections} connections and ${descriptors.maxLookupsInFlight} DNS lookups in flight; the caps are lowered (raise the limit to ${needed} to keep them)`,
    );
  }
  const memoryLowered = memory.maxConnections < limits.maxConnections;
  // A lowered total keeps each client to its share of it (clientShare, in the server).
  if (memoryLowered) limits = { ...limits, maxConnections: memory.maxConnections };
  const mib = (n: number): number => Math.floor(n / MIB);
  log[memoryLowered ? levelFor(memory.maxConnections) : 'info'](
    {
      event: 'memory_budget',
      memoryLimitMb: mib(memory.limitBytes),
      source: memory.source,
      budgetMb: mib(memory.totalBytes),
      perClientMb: mib(memory.perClientBytes),
      maxConnections: limits.maxConnections,
      maxConnectionsPerClient: clientShare(limits.maxConnections, limits.maxConnectionsPerClient, shareFraction(config.tenantsDir !== undefined)),
      configured: config.limits.maxConnections,
    },
    `${mib(memory.limitBytes)} MiB of memory (from ${SOURCE_NAMES[memory.source]}): up to ${mib(memory.totalBytes)} MiB held before a verdict, ${mib(memory.perClientBytes)} MiB per ${config.tenantsDir === undefined ? 'client address' : 'sandbox'}, then 503 overloaded` +
      (memoryLowered ? `; it holds ${memory.maxConnections} connections, and the connection caps are lowered` : ''),
  );
  return limits;
}
