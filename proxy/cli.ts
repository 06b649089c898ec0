#!/usr/bin/env node
/**
 * `capybara-egress`: runs the egress proxy. Exits non-zero with a clear message on any
 * configuration or policy problem at start-up (fail closed). SIGHUP, or a change of the policy
 * file, re-reads the policy: a valid one applies to new requests, an invalid one is logged and the
 * old policy stays.
 */
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import v8 from 'node:v8';
import { isCodedError, VERSION } from '../common/index.js';
import type { Policy } from '../policy/index.js';
import { checkArgv, checkReport, loadPolicy, OPTIONS, parseConfig, policySourceName, usage, type ProxyConfig } from './config.js';
import {
  cgroupMemoryLimit,
  clientShare,
  MAX_CLIENT_SHARE,
  MAX_LOOKUPS_IN_FLIGHT,
  MemoryBudget,
  memoryLimit,
  MIN_MEMORY_BYTES,
  MIN_OPEN_FILES,
  openFilesFor,
  planDescriptors,
  planMemory,
  softOpenFileLimit,
  type DescriptorPlan,
  type MemoryPlan,
  type MemorySource,
  type ProxyLimits,
  DEFAULT_LIMITS,
} from './budget/index.js';
import { createLookup } from './dns/index.js';
import { addProcessMetrics, createLogger, logPolicyWarnings, startMetricsServer, type Logger } from './record/index.js';
import { createEgressProxy, type EgressProxy } from './server.js';
import { watchPolicyFile } from './policy-watch.js';
import { installProcessEnd, untilStopped } from './exit.js';
import { planTransparentPorts, type TransparentPort } from './transparent/index.js';
import { runReport } from './report/index.js';

const read = (path: string): string => readFileSync(path, 'utf8');

// Every end of the process goes through here: uncaught exceptions included, and once the logger
// exists, after its lines are written (exit.ts).
const end = installProcessEnd();

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
class StartError extends Error {}

/** Why start-up stops, with what to do, as stderr says it. */
function stop(message: string): never {
  throw new StartError(message);
}

interface Start {
  readonly config: ProxyConfig;
  readonly policy: Policy;
  /** Transparent mode's listeners: they follow the connect ports at start (a reload changes what is allowed on each, not which listen). */
  readonly transparentPorts: readonly TransparentPort[] | undefined;
}

/** An invalid policy while checking: exit 1 (a usage error is 2, as at start). */
class PolicyCheckError extends Error {}

/** The configuration and the policy, or undefined for --help (printed). */
function readStart(readingPolicy: () => void): Start | undefined {
  const args = process.argv.slice(2);
  if (args.length === 1 && args[0] === '--version') {
    process.stdout.write(`capybara-egress ${VERSION}\n`);
    return undefined;
  }
  let config: ProxyConfig | undefined;
  try {
    config = parseConfig(checkArgv(args), process.env);
  } catch (err) {
    if (isCodedError(err, 'ConfigError')) stop(err.message);
    throw err;
  }
  if (config === undefined) {
    process.stdout.write(`${usage()}\n`);
    return undefined;
  }

  let policy: Policy;
  try {
    // A reload asked for before this read is met by it.
    readingPolicy();
    policy = loadPolicy(config, read);
  } catch (err) {
    if (config.check === true && isCodedError(err, 'PolicyError')) throw new PolicyCheckError((err as Error).message);
    stop((err as Error).message);
  }
  if (config.transparent === undefined) return { config, policy, transparentPorts: undefined };
  const plan = planTransparentPorts(policy.connectPorts, config.transparent.portMap);
  if (!plan.ok) stop(`--transparent-port-map (${OPTIONS['transparent-port-map'].env}): ${plan.problem}`);
  return { config, policy, transparentPorts: plan.ports };
}

interface Plans {
  readonly nofile: number | undefined;
  readonly descriptors: DescriptorPlan;
  readonly memory: MemoryPlan;
}

/** What the open-file limit and the memory hold; start-up stops when either is below the least the proxy needs. */
function planResources(config: ProxyConfig): Plans {
  const nofile = openFileLimit();
  // No limit to read (not Linux) or "unlimited": everything fits.
  const descriptors = planDescriptors(nofile ?? Infinity, config.limits.maxConnections);
  if (descriptors === undefined) stop(`the open-file limit is ${String(nofile)}, and the proxy needs at least ${MIN_OPEN_FILES}; raise it (docker run --ulimit nofile=N, ulimit -n N)`);
  // The machine's share: its memory, and no more than V8 lets the heap grow.
  const limit = memoryLimit({ cgroup: cgroupLimit(), flag: config.memoryLimitBytes, machine: os.totalmem(), heap: v8.getHeapStatistics().heap_size_limit });
  // A client's share of the memory is its share of the connections, at most a quarter.
  const share = Math.min(MAX_CLIENT_SHARE, config.limits.maxConnectionsPerClient / config.limits.maxConnections);
  const memory = planMemory(limit, Math.min(descriptors.maxConnections, config.limits.maxConnections), share);
  if (memory === undefined) {
    stop(`the memory limit is ${Math.floor(limit.bytes / MIB)} MiB (from ${SOURCE_NAMES[limit.source]}), and the proxy needs at least ${MIN_MEMORY_BYTES / MIB} MiB; raise it (docker run -m, the pod's memory limit, --memory-limit-mb)`);
  }
  return { nofile, descriptors, memory };
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
function plannedLimits(config: ProxyConfig, plans: Plans, log: Logger): ProxyLimits {
  const { descriptors, memory } = plans;
  let limits = config.limits;
  const levelFor = (lowered: number): 'info' | 'warn' => (config.limits.maxConnections === DEFAULT_LIMITS.maxConnections && lowered >= FEW_CONNECTIONS ? 'info' : 'warn');
  if (descriptors.maxConnections < limits.maxConnections || descriptors.maxLookupsInFlight < MAX_LOOKUPS_IN_FLIGHT) {
    limits = { ...limits, maxConnections: descriptors.maxConnections };
    const needed = openFilesFor(config.limits.maxConnections);
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
      maxConnectionsPerClient: clientShare(limits.maxConnections, limits.maxConnectionsPerClient),
      configured: config.limits.maxConnections,
    },
    `${mib(memory.limitBytes)} MiB of memory (from ${SOURCE_NAMES[memory.source]}): up to ${mib(memory.totalBytes)} MiB held before a verdict, ${mib(memory.perClientBytes)} MiB per client address, then 503 overloaded` +
      (memoryLowered ? `; it holds ${memory.maxConnections} connections, and the connection caps are lowered` : ''),
  );
  return limits;
}

type Metrics = Awaited<ReturnType<typeof startMetricsServer>>;

/** A listener of `flag` that could not start, said with the flag and its environment twin. */
async function bound<T>(flag: keyof typeof OPTIONS, listening: Promise<T>): Promise<T> {
  try {
    return await listening;
  } catch (err) {
    const taken = (err as NodeJS.ErrnoException).code === 'EADDRINUSE' ? ': stop what holds that port, or choose another' : '';
    throw new Error(`--${flag} (${OPTIONS[flag].env}): ${(err as Error).message}${taken}`);
  }
}

/**
 * Opens every listener: the metrics, transparent mode's, then the proxy port (a proxy that
 * answers serves everything it was configured to). One that cannot start stops the proxy: it
 * never serves without its metrics, its policy watch or its reload signal.
 */
async function listenAll(proxy: EgressProxy, start: Start, serving: { close(): Promise<void> }[]): Promise<{ address: AddressInfo; metrics: Metrics | undefined }> {
  const { config, transparentPorts } = start;
  let metrics: Metrics | undefined;
  try {
    metrics = config.metricsListen ? await bound('metrics-listen', startMetricsServer(config.metricsListen, proxy.metrics)) : undefined;
    if (metrics) serving.push(metrics);
    if (config.transparent !== undefined && transparentPorts !== undefined) {
      await bound('transparent-listen', proxy.listenTransparent({ listen: config.transparent.listen, answer: config.transparent.answer, ports: transparentPorts }));
    }
    return { address: await bound('listen', proxy.listen(config.listen.host, config.listen.port)), metrics };
  } catch (err) {
    await Promise.all([proxy.close(), metrics?.close()]);
    return stop(`cannot listen: ${(err as Error).message}`);
  }
}

async function serve(): Promise<number> {
  // SIGHUP from the first line: Node ends a process on a signal nothing listens for, and an
  // operator's reload (or a supervisor's) may come while the proxy starts. Until the proxy can
  // reload, a request is remembered and met once it can.
  let hangUpWaiting = false;
  let onHangUp = (): void => {
    hangUpWaiting = true;
  };
  process.on('SIGHUP', () => onHangUp());
  const start = readStart(() => (hangUpWaiting = false));
  if (start === undefined) return 0;
  const { config, policy } = start;
  if (config.check === true) {
    process.stdout.write(checkReport(config, policy));
    return 0;
  }
  const plans = planResources(config);
  const log = createLogger(config.logLevel);
  // What a fatal error closes at once: nothing may go on serving after it.
  const serving: { close(): Promise<void> }[] = [];
  end.useLog(log, () => {
    for (const s of serving) void s.close();
  });
  const limits = plannedLimits(config, plans, log);
  const lookup = createLookup({ servers: config.dnsServers, timeoutMs: limits.dnsTimeoutMs, maxInFlight: plans.descriptors.maxLookupsInFlight });
  const proxy = createEgressProxy({ policy, memory: new MemoryBudget(plans.memory), lookup, logger: log, limits });
  serving.push(proxy);
  const loads = addProcessMetrics(proxy.metrics);
  loads.loaded(true);
  const reload = (why: string): void => {
    try {
      const next = loadPolicy(config, read);
      proxy.setPolicy(next);
      loads.loaded(true);
      log.info({ event: 'policy_reloaded', why, allowHosts: next.allowHosts.length, mode: next.mode }, 'policy reloaded');
      logPolicyWarnings(log, next, policySourceName(config));
    } catch (err) {
      loads.loaded(false);
      log.error({ event: 'policy_reload_failed', why, err: (err as Error).message }, 'policy reload failed; the previous policy stays in force');
    }
  };
  // Reload is wired before anything listens.
  onHangUp = () => reload('SIGHUP');
  if (hangUpWaiting) reload('SIGHUP');
  const { address, metrics } = await listenAll(proxy, start, serving);
  const watcher = config.policySource.kind === 'file' ? watchPolicyFile(config.policySource.path, log, reload) : undefined;
  log.info({ event: 'listening', address: `${address.address}:${address.port}`, allowHosts: policy.allowHosts.length, mode: policy.mode, metrics: metrics?.address }, 'egress proxy listening');
  logPolicyWarnings(log, policy, policySourceName(config));
  await untilStopped(log);
  watcher?.close();
  await Promise.all([proxy.close(), metrics?.close()]);
  return 0;
}

async function main(): Promise<number> {
  if (process.argv[2] === 'report') return runReport(process.argv.slice(3), process);
  try {
    return await serve();
  } catch (err) {
    if (err instanceof PolicyCheckError) {
      process.stderr.write(`capybara-egress: ${err.message}\n`);
      return 1;
    }
    if (!(err instanceof StartError)) throw err;
    process.stderr.write(`capybara-egress: ${err.message}\n`);
    return 2;
  }
}

main().then(
  (code) => end.exit(code),
  // Nothing may go on serving after a fatal error (a listener already open would): end.fatal
  // closes the listeners, then exits.
  (err: unknown) => end.fatal(err),
);
