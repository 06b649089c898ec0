#!/usr/bin/env -S node --min-semi-space-size=16
/**
 * `capybara-egress`: runs the egress proxy. Exits non-zero with a clear message on any
 * configuration or policy problem at start-up (fail closed). SIGHUP, or a change of the policy
 * file, re-reads the policy: a valid one applies to new requests, an invalid one is logged and the
 * old policy stays.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import v8 from 'node:v8';
import { isCodedError } from '../common/index.js';
import { loadPolicy, OPTIONS, parseConfig, usage, type ProxyConfig } from './config.js';
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
} from './budget/index.js';
import { createLookup } from './dns/index.js';
import { createLogger, startMetricsServer } from './record/index.js';
import { createEgressProxy, type EgressProxy } from './server.js';
import { watchPolicyFile } from './policy-watch.js';
import { installProcessEnd } from './exit.js';
import { planTransparentPorts, type TransparentPort } from './transparent/index.js';

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

async function main(): Promise<number> {
  // SIGHUP from the first line: Node ends a process on a signal nothing listens for, and an
  // operator's reload (or a supervisor's) may come while the proxy starts. Until the proxy can
  // reload, a request is remembered and met once it can.
  let hangUpWaiting = false;
  let onHangUp = (): void => {
    hangUpWaiting = true;
  };
  process.on('SIGHUP', () => onHangUp());
  let config: ProxyConfig | undefined;
  try {
    config = parseConfig(process.argv.slice(2), process.env);
  } catch (err) {
    if (isCodedError(err, 'ConfigError')) {
      process.stderr.write(`capybara-egress: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (config === undefined) {
    process.stdout.write(`${usage()}\n`);
    return 0;
  }

  let policy;
  try {
    // A reload asked for before this read is met by it.
    hangUpWaiting = false;
    policy = loadPolicy(config, read);
  } catch (err) {
    process.stderr.write(`capybara-egress: ${(err as Error).message}\n`);
    return 2;
  }

  // Transparent mode's listeners follow the connect ports at start; a reload that changes them
  // changes what is allowed on each listener, not which listen.
  let transparentPorts: readonly TransparentPort[] | undefined;
  if (config.transparent !== undefined) {
    const plan = planTransparentPorts(policy.connectPorts, config.transparent.portMap);
    if (!plan.ok) {
      process.stderr.write(`capybara-egress: --transparent-port-map (${OPTIONS['transparent-port-map'].env}): ${plan.problem}\n`);
      return 2;
    }
    transparentPorts = plan.ports;
  }

  const nofile = openFileLimit();
  // No limit to read (not Linux) or "unlimited": everything fits.
  const plan = planDescriptors(nofile ?? Infinity, config.limits.maxConnections);
  if (plan === undefined) {
    process.stderr.write(`capybara-egress: the open-file limit is ${String(nofile)}, and the proxy needs at least ${MIN_OPEN_FILES}; raise it (docker run --ulimit nofile=N, ulimit -n N)\n`);
    return 2;
  }
  // The machine's share: its memory, and no more than V8 lets the heap grow.
  const limit = memoryLimit({ cgroup: cgroupLimit(), flag: config.memoryLimitBytes, machine: Math.min(os.totalmem(), v8.getHeapStatistics().heap_size_limit) });
  // A client's share of the memory is its share of the connections, at most a quarter.
  const share = Math.min(MAX_CLIENT_SHARE, config.limits.maxConnectionsPerClient / config.limits.maxConnections);
  const memoryPlan = planMemory(limit, Math.min(plan.maxConnections, config.limits.maxConnections), share);
  if (memoryPlan === undefined) {
    process.stderr.write(
      `capybara-egress: the memory limit is ${Math.floor(limit.bytes / MIB)} MiB (from the ${limit.source}), and the proxy needs at least ${MIN_MEMORY_BYTES / MIB} MiB; raise it (docker run -m, the pod's memory limit, --memory-limit-mb)\n`,
    );
    return 2;
  }
  const log = createLogger(config.logLevel);
  // What a fatal error closes at once: nothing may go on serving after it.
  const serving: { close(): Promise<void> }[] = [];
  end.useLog(log, () => {
    for (const s of serving) void s.close();
  });
  let limits = config.limits;
  if (plan.maxConnections < limits.maxConnections || plan.maxLookupsInFlight < MAX_LOOKUPS_IN_FLIGHT) {
    limits = { ...limits, maxConnections: plan.maxConnections };
    const needed = openFilesFor(config.limits.maxConnections);
    log.warn(
      { event: 'limits_lowered', openFileLimit: nofile, needed, maxConnections: plan.maxConnections, maxLookupsInFlight: plan.maxLookupsInFlight, configured: config.limits.maxConnections },
      `the open-file limit holds ${plan.maxConnections} connections and ${plan.maxLookupsInFlight} DNS lookups in flight; the caps are lowered (raise the limit to ${needed} to keep them)`,
    );
  }
  const memoryLowered = memoryPlan.maxConnections < limits.maxConnections;
  // A lowered total keeps each client to its share of it (clientShare, in the server).
  if (memoryLowered) limits = { ...limits, maxConnections: memoryPlan.maxConnections };
  const mib = (n: number): number => Math.floor(n / MIB);
  log[memoryLowered ? 'warn' : 'info'](
    {
      event: 'memory_budget',
      memoryLimitMb: mib(memoryPlan.limitBytes),
      source: memoryPlan.source,
      budgetMb: mib(memoryPlan.totalBytes),
      perClientMb: mib(memoryPlan.perClientBytes),
      maxConnections: limits.maxConnections,
      maxConnectionsPerClient: clientShare(limits.maxConnections, limits.maxConnectionsPerClient),
      configured: config.limits.maxConnections,
    },
    `${mib(memoryPlan.limitBytes)} MiB of memory (from the ${memoryPlan.source}): up to ${mib(memoryPlan.totalBytes)} MiB held before a verdict, ${mib(memoryPlan.perClientBytes)} MiB per client address, then 503 overloaded` +
      (memoryLowered ? `; it holds ${memoryPlan.maxConnections} connections, and the connection caps are lowered` : ''),
  );
  const proxy: EgressProxy = createEgressProxy({
    policy,
    memory: new MemoryBudget(memoryPlan),
    lookup: createLookup({ servers: config.dnsServers, timeoutMs: limits.dnsTimeoutMs, maxInFlight: plan.maxLookupsInFlight }),
    logger: log,
    limits,
  });
  serving.push(proxy);
  const cfg = config;
  const reload = (why: string): void => {
    try {
      const next = loadPolicy(cfg, read);
      proxy.setPolicy(next);
      log.info({ event: 'policy_reloaded', why, allowHosts: next.allowHosts.length }, 'policy reloaded');
    } catch (err) {
      log.error({ event: 'policy_reload_failed', why, err: (err as Error).message }, 'policy reload failed; the previous policy stays in force');
    }
  };

  // Reload is wired before anything listens, and a listener that cannot start stops the proxy
  // (exit 2): it never serves without its metrics, its policy watch or its reload signal.
  onHangUp = () => reload('SIGHUP');
  if (hangUpWaiting) reload('SIGHUP');
  let metrics: Awaited<ReturnType<typeof startMetricsServer>> | undefined;
  let address;
  try {
    metrics = config.metricsListen ? await startMetricsServer(config.metricsListen, proxy.metrics) : undefined;
    if (metrics) serving.push(metrics);
    // Before the proxy port: a proxy that answers serves everything it was configured to.
    if (config.transparent !== undefined && transparentPorts !== undefined) {
      await proxy.listenTransparent({ listen: config.transparent.listen, answer: config.transparent.answer, ports: transparentPorts });
    }
    address = await proxy.listen(config.listen.host, config.listen.port);
  } catch (err) {
    process.stderr.write(`capybara-egress: cannot listen: ${(err as Error).message}\n`);
    await Promise.all([proxy.close(), metrics?.close()]);
    return 2;
  }
  const watcher = config.policySource.kind === 'file' ? watchPolicyFile(config.policySource.path, log, reload) : undefined;
  log.info({ event: 'listening', address: `${address.address}:${address.port}`, allowHosts: policy.allowHosts.length, metrics: metrics?.address }, 'egress proxy listening');

  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ event: 'stopping', signal }, 'egress proxy stopping');
      resolve();
    };
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  watcher?.close();
  await Promise.all([proxy.close(), metrics?.close()]);
  return 0;
}

main().then(
  (code) => end.exit(code),
  // Nothing may go on serving after a fatal error (a listener already open would): end.fatal
  // closes the listeners, then exits.
  (err: unknown) => end.fatal(err),
);
