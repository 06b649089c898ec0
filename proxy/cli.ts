#!/usr/bin/env node
/**
 * `capybara-egress`: runs the egress proxy. Exits non-zero with a clear message on any
 * configuration or policy problem at start-up (fail closed). SIGHUP, or a change of the policy
 * file, re-reads the policy: a valid one applies to new requests, an invalid one is logged and the
 * old policy stays.
 */
import type { AddressInfo } from 'node:net';
import { isCodedError, VERSION } from '../common/index.js';
import type { Policy } from '../policy/index.js';
import { checkArgv, loadPolicy, OPTIONS, parseConfig, policySourceName, usage, type ProxyConfig } from './config.js';
import { MemoryBudget, shareFraction } from './budget/index.js';
import { planResources, plannedLimits, StartError, stop } from './start-plan.js';
import { createLookup, type DnsHost } from './dns/index.js';
import { addProcessMetrics, checkReport, createLogger, logPolicyWarnings } from './record/index.js';
import { createEgressProxy, type EgressProxy } from './server.js';
import { watchPolicyFile } from './policy-watch.js';
import { installProcessEnd, untilStopped } from './exit.js';
import { planTransparentPorts, type TransparentPort } from './transparent/index.js';
import { runReport } from './report/index.js';
import { loadInspection, runCa, type LoadedInspection } from './inspect/index.js';
import { openTenants } from './tenants/index.js';

// Every end of the process goes through here: uncaught exceptions included, and once the logger
// exists, after its lines are written (exit.ts).
const end = installProcessEnd();

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
    policy = loadPolicy(config);
  } catch (err) {
    if (config.check === true && isCodedError(err, 'PolicyError')) throw new PolicyCheckError((err as Error).message);
    stop((err as Error).message);
  }
  if (config.transparent === undefined) return { config, policy, transparentPorts: undefined };
  const plan = planTransparentPorts(policy.connectPorts, config.transparent.portMap);
  if (!plan.ok) stop(`--transparent-port-map (${OPTIONS['transparent-port-map'].env}): ${plan.problem}`);
  return { config, policy, transparentPorts: plan.ports };
}

/** The deployment CA could not be loaded for a policy that inspects: exit 1, as for an invalid policy. */
class InspectionStartError extends StartError {}

/** The inspection a policy needs (none for a policy that inspects nothing); a CA that cannot be had stops start-up. */
async function startInspection(config: ProxyConfig, policy: Policy): Promise<LoadedInspection | undefined> {
  try {
    return await loadInspection(policy.inspected, config.ca, config.upstreamCa);
  } catch (err) {
    if (!isCodedError(err, 'CodedError')) throw err;
    throw new InspectionStartError(`${err.message}; the proxy does not start`);
  }
}

/** True when two inspections would verify and sign alike (a reload that changed nothing keeps the proxy's). */
function sameInspection(a: LoadedInspection | undefined, b: LoadedInspection): boolean {
  return a !== undefined && a.leaves === b.leaves && a.upstreamCa.length === b.upstreamCa.length && a.upstreamCa.every((c, i) => c === b.upstreamCa[i]);
}

type Loads = ReturnType<typeof addProcessMetrics>;

/**
 * Re-reads the policy (and, when it inspects, the CA and the upstream roots: a rotated CA is taken
 * here), one reload at a time. The inspection is set before the policy that needs it; anything
 * that fails leaves the old policy and inspection in force.
 */
function reloader(config: ProxyConfig, proxy: EgressProxy, loads: Loads, log: ReturnType<typeof createLogger>, initial: LoadedInspection | undefined): (why: string) => void {
  let inspection = initial;
  let queue = Promise.resolve();
  const once = async (why: string): Promise<void> => {
    try {
      const next = loadPolicy(config);
      const nextInspection = await loadInspection(next.inspected, config.ca, config.upstreamCa, inspection);
      if (nextInspection !== undefined && !sameInspection(inspection, nextInspection)) {
        proxy.setInspection(nextInspection);
        inspection = nextInspection;
        log.info({ event: 'inspection_loaded', why, ca: nextInspection.fingerprint, upstreamCa: nextInspection.upstreamCa.length }, 'deployment CA loaded for inspected hosts');
      }
      proxy.setPolicy(next);
      loads.loaded(true);
      log.info({ event: 'policy_reloaded', why, allowHosts: next.allowHosts.length, mode: next.mode }, 'policy reloaded');
      logPolicyWarnings(log, next, policySourceName(config));
    } catch (err) {
      loads.loaded(false);
      log.error({ event: 'policy_reload_failed', why, err: (err as Error).message }, 'policy reload failed; the previous policy stays in force');
    }
  };
  return (why) => {
    queue = queue.then(() => once(why));
  };
}

type Metrics = Awaited<ReturnType<EgressProxy['listenMetrics']>>;

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
async function listenAll(proxy: EgressProxy, start: Start, serving: { close(): Promise<void> }[], dnsHost: DnsHost | undefined): Promise<{ address: AddressInfo; metrics: Metrics | undefined }> {
  const { config, transparentPorts } = start;
  let metrics: Metrics | undefined;
  try {
    metrics = config.metricsListen ? await bound('metrics-listen', proxy.listenMetrics(config.metricsListen.host, config.metricsListen.port)) : undefined;
    if (metrics) serving.push(metrics);
    if (config.transparent !== undefined && transparentPorts !== undefined) {
      await bound('transparent-listen', proxy.listenTransparent({ listen: config.transparent.listen, answer: config.transparent.answer, ports: transparentPorts, dnsHost }));
    }
    return { address: await bound('listen', proxy.listen(config.listen.host, config.listen.port)), metrics };
  } catch (err) {
    await Promise.all([proxy.close(), metrics?.close()]);
    return stop(`cannot listen: ${(err as Error).message}`);
  }
}

/** A shared proxy's tenants (--tenants-dir): a directory that cannot be read stops start-up. */
function sharedTenants(config: ProxyConfig, log: ReturnType<typeof createLogger>): ReturnType<typeof openTenants> | undefined {
  if (config.tenantsDir === undefined) return undefined;
  try {
    return openTenants(config.tenantsDir, { tunnelDefault: config.tunnelDefault, requireTls: config.requireTls, testHosts: config.testHosts, refusalHint: config.refusalHint }, log);
  } catch (err) {
    return stop(`--tenants-dir (${OPTIONS['tenants-dir'].env}): ${(err as Error).message}`);
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
    process.stdout.write(checkReport(policySourceName(config), policy));
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
  const lookup = createLookup({
    servers: config.dnsServers, timeoutMs: limits.dnsTimeoutMs, maxInFlight: plans.descriptors.maxLookupsInFlight, shareFraction: shareFraction(config.tenantsDir !== undefined),
  });
  const inspection = await startInspection(config, policy);
  const shared = sharedTenants(config, log);
  const proxy: EgressProxy = createEgressProxy({
    policy, memory: new MemoryBudget(plans.memory), lookup, logger: log, limits, ...(inspection === undefined ? {} : { inspection }), ...(shared && { identities: shared.tenants }),
  });
  serving.push(proxy);
  if (inspection !== undefined) {
    if (proxy.setInspection === undefined) throw new InspectionStartError(`the policy inspects ${policy.inspected.join(', ')}, and this build of the proxy cannot terminate TLS; the proxy does not start`);
    log.info({ event: 'inspection_loaded', why: 'start', ca: inspection.fingerprint, upstreamCa: inspection.upstreamCa.length }, 'deployment CA loaded for inspected hosts');
  }
  const loads = addProcessMetrics(proxy.metrics);
  loads.loaded(true);
  const reload = reloader(config, proxy, loads, log, inspection);
  // Reload is wired before anything listens.
  onHangUp = () => reload('SIGHUP');
  if (hangUpWaiting) reload('SIGHUP');
  const { address, metrics } = await listenAll(proxy, start, serving, shared?.tenants);
  const watcher = config.policySource.kind === 'file' ? watchPolicyFile(config.policySource.path, log, reload) : undefined;
  log.info({ event: 'listening', address: `${address.address}:${address.port}`, allowHosts: policy.allowHosts.length, mode: policy.mode, metrics: metrics?.address }, 'egress proxy listening');
  logPolicyWarnings(log, policy, policySourceName(config));
  await untilStopped(log);
  watcher?.close();
  shared?.stop();
  await Promise.all([proxy.close(), metrics?.close()]);
  return 0;
}

async function main(): Promise<number> {
  if (process.argv[2] === 'report') return runReport(process.argv.slice(3), process);
  if (process.argv[2] === 'ca') return runCa(process.argv.slice(3), { stdout: process.stdout, stderr: process.stderr, env: process.env });
  try {
    return await serve();
  } catch (err) {
    if (err instanceof PolicyCheckError || err instanceof InspectionStartError) {
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
