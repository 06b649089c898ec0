/**
 * Prometheus metrics (prom-client), on a listener of their own so that the proxy port never
 * serves them to workloads: decisions by outcome and reason, open tunnels, bytes each way, DNS
 * and connect latency, what the transparent DNS responder answered, and the bytes held before a
 * verdict.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
// Imported, not required on first use (common/require-cjs.ts): every proxy keeps its metrics from
// the start, and an import is bundled into the egress command (scripts/build.mjs).
import promClient, { type Registry } from 'prom-client';
import { EGRESS_HEALTH_PATH, EGRESS_METRICS, EGRESS_METRICS_PATH, VERSION } from '../../common/index.js';
import { handleAcceptFailures } from './accept-failures.js';
import type { Logger } from './log.js';
import { SandboxSeries, type SandboxOf } from './sandbox-metrics.js';

const { collectDefaultMetrics, Counter, Gauge, Histogram, Registry: RegistryClass } = promClient;

/** What the proxy reports as it works; the metrics below are one implementation. */
export interface ProxyObserver {
  decision(outcome: 'allow' | 'deny', reason: string): void;
  /** A decision of a shared proxy's connection, by its sandbox. */
  sandboxDecision(who: SandboxOf, outcome: 'allow' | 'deny', reason: string): void;
  /**
   * The registrations a shared proxy holds now: only theirs are counted, and a registration that
   * ended takes its counts with it (else they would pile up, one set per sandbox ever seen, and a
   * late count of an ended one would bring them back or add to a later one of the same name).
   */
  sandboxesRegistered(registrations: ReadonlyArray<{ readonly sandbox: string; readonly lifecycle: string }>): void;
  /** A request report mode let through that enforce mode would have refused for `reason`. */
  wouldDeny(reason: string): void;
  /** `who`: a shared proxy's connection, counted by its registration too (tunnels, bytes). */
  tunnelOpened(who?: SandboxOf): void;
  tunnelClosed(bytesUp: number, bytesDown: number, who?: SandboxOf): void;
  httpBytes(bytesUp: number, bytesDown: number, who?: SandboxOf): void;
  dnsLookup(seconds: number, outcome: string): void;
  connect(seconds: number, ok: boolean): void;
  /** A DNS message to the transparent responder, by what it got (dns-answer.ts), or why it got nothing. */
  dnsQuery(result: string): void;
}

/**
 * Increments of one labelled counter, added up in plain numbers and handed to prom-client when
 * the counter is read (its `collect`, run on every scrape and every `get`): prom-client hashes and
 * validates the label object on every `inc`, even through a child bound by `labels()`, which cost
 * more per request than the decision itself. A scrape sees exactly the counts it would have seen.
 */
class Tally<L extends string> {
  private readonly pending = new Map<string, { readonly labels: Partial<Record<L, string>>; n: number }>();

  /** A slot for one label set: `add` to it costs an addition. */
  slot(labels: Partial<Record<L, string>>): { add(n: number): void } {
    const key = JSON.stringify(labels);
    let entry = this.pending.get(key);
    if (entry === undefined) {
      entry = { labels, n: -1 };
      this.pending.set(key, entry);
    }
    const held = entry;
    // -1: never added to since the last flush (a label set never incremented has no series).
    return { add: (n) => void (held.n = held.n < 0 ? n : held.n + n) };
  }

  /** Hands what was added since the last flush to `counter`. */
  flush(counter: { inc(labels: Partial<Record<L, string>>, value: number): void }): void {
    for (const entry of this.pending.values()) {
      if (entry.n < 0) continue;
      counter.inc(entry.labels, entry.n);
      entry.n = -1;
    }
  }
}

/** A counter of `registry` whose increments go through a Tally. */
function tallied<L extends string>(registry: Registry, name: string, help: string, labelNames: readonly L[]): Tally<L> {
  const tally = new Tally<L>();
  new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect() {
      tally.flush(this);
    },
  });
  return tally;
}

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface ProxyMetrics {
  readonly registry: Registry;
  readonly observer: ProxyObserver;
}

/**
 * `heldBytes`: what the memory budget holds now, and `reportMode`: whether the policy in force is
 * in report mode, each read at each scrape.
 */
export function createProxyMetrics(heldBytes: () => number, reportMode: () => boolean = () => false): ProxyMetrics {
  const registry = new RegistryClass();
  const wouldDeny = new Counter({ name: EGRESS_METRICS.wouldDeny, help: 'Requests report mode allowed that enforce mode would have refused, by that reason', labelNames: ['reason'] as const, registers: [registry] });
  new Gauge({
    name: EGRESS_METRICS.reportMode,
    help: '1 while the policy in force is in report mode (hosts off the allowlist are allowed and logged would_deny: not a boundary), else 0',
    registers: [registry],
    collect() {
      this.set(reportMode() ? 1 : 0);
    },
  });
  const decisionTally = tallied(registry, EGRESS_METRICS.decisions, 'Decisions by outcome and reason', ['outcome', 'reason']);
  const tunnels = new Gauge({ name: EGRESS_METRICS.openTunnels, help: 'CONNECT tunnels open now', registers: [registry] });
  const bytesTally = tallied(registry, EGRESS_METRICS.bytes, 'Bytes relayed, by direction (up: client to upstream)', ['direction', 'kind']);
  const dns = new Histogram({ name: EGRESS_METRICS.dnsSeconds, help: 'DNS lookup latency', labelNames: ['outcome'] as const, buckets: LATENCY_BUCKETS, registers: [registry] });
  new Gauge({
    name: EGRESS_METRICS.heldBytes,
    help: 'Bytes charged to the memory budget: held before a verdict (pending hellos, request heads, waiting requests) and for readers that stopped reading',
    registers: [registry],
    collect() {
      this.set(heldBytes());
    },
  });
  const connect = new Histogram({ name: EGRESS_METRICS.connectSeconds, help: 'Upstream connect latency (all attempts of one request)', labelNames: ['outcome'] as const, buckets: LATENCY_BUCKETS, registers: [registry] });
  new Gauge({ name: EGRESS_METRICS.buildInfo, help: 'Always 1: the version of the running proxy and of Node', labelNames: ['version', 'node'] as const, registers: [registry] })
    .labels({ version: VERSION, node: process.versions.node })
    .set(1);
  const bySandbox = new SandboxSeries(registry);
  const dnsQueries = new Counter({ name: EGRESS_METRICS.dnsQueries, help: 'DNS messages to the transparent responder, by what they got', labelNames: ['result'] as const, registers: [registry] });
  // Per-request counters are tallied (Tally above); each label set's slot is found once.
  const decisionOf = new Map<string, { add(n: number): void }>();
  const decided = (outcome: 'allow' | 'deny', reason: string): { add(n: number): void } => {
    const key = `${outcome} ${reason}`;
    let slot = decisionOf.get(key);
    if (slot === undefined) {
      slot = decisionTally.slot({ outcome, reason });
      decisionOf.set(key, slot);
    }
    return slot;
  };
  const tunnelUp = bytesTally.slot({ direction: 'up', kind: 'tunnel' });
  const tunnelDown = bytesTally.slot({ direction: 'down', kind: 'tunnel' });
  const httpUp = bytesTally.slot({ direction: 'up', kind: 'http' });
  const httpDown = bytesTally.slot({ direction: 'down', kind: 'http' });
  const connectOk = connect.labels({ outcome: 'ok' });
  const connectFailed = connect.labels({ outcome: 'failed' });
  return {
    registry,
    observer: {
      decision: (outcome, reason) => decided(outcome, reason).add(1),
      sandboxDecision: (who, outcome, reason) => bySandbox.decision(who, outcome, reason),
      sandboxesRegistered: (registrations) => bySandbox.registered(registrations),
      wouldDeny: (reason) => wouldDeny.inc({ reason }),
      tunnelOpened: (who) => {
        tunnels.inc();
        bySandbox.tunnelOpened(who);
      },
      tunnelClosed: (up, down, who) => {
        tunnels.dec();
        tunnelUp.add(up);
        tunnelDown.add(down);
        bySandbox.tunnelClosed(who, up, down);
      },
      httpBytes: (up, down, who) => {
        httpUp.add(up);
        httpDown.add(down);
        bySandbox.bytes(who, up, down);
      },
      dnsLookup: (seconds, outcome) => dns.observe({ outcome }, seconds),
      connect: (seconds, ok) => (ok ? connectOk : connectFailed).observe(seconds),
      dnsQuery: (result) => dnsQueries.inc({ result }),
    },
  };
}

/** Each load of the policy, as the process metrics count it. */
export interface PolicyLoads {
  /** The policy was read: at start (always true), or by a reload that succeeded or failed. */
  loaded(ok: boolean): void;
}

/** How often the event-loop lag is sampled (addProcessMetrics). */
export const EVENT_LOOP_SAMPLE_MS = 1_000;

/**
 * The process's own metrics, for the one proxy a process runs (the CLI's): prom-client's
 * defaults (`process_*` CPU, memory and descriptors, `nodejs_*` heap, event-loop lag and GC), and
 * the last policy load: whether it succeeded, when it was tried, when the policy in force was
 * read. A failed reload leaves the old policy in force, which only these gauges show a scraper.
 */
export function addProcessMetrics(registry: Registry, now: () => number = Date.now): PolicyLoads {
  // The event-loop lag is sampled by a timer: prom-client's default of every 10 ms woke an idle
  // proxy 100 times a second, about 1% of a CPU each (an engine's per-sandbox proxies add up). Once
  // a second still catches every stall: a blocked loop delays the pending sample by as long.
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS });
  const successful = new Gauge({ name: EGRESS_METRICS.reloadSuccessful, help: 'Whether the last policy load (start, SIGHUP or file change) succeeded: 1, or 0 while the previous policy stays in force', registers: [registry] });
  const tried = new Gauge({ name: EGRESS_METRICS.reloadSeconds, help: 'When the policy was last loaded or a reload was tried (Unix seconds)', registers: [registry] });
  const inForce = new Gauge({ name: EGRESS_METRICS.policySeconds, help: 'When the policy in force was loaded (Unix seconds)', registers: [registry] });
  return {
    loaded(ok) {
      const seconds = now() / 1000;
      successful.set(ok ? 1 : 0);
      tried.set(seconds);
      if (ok) inForce.set(seconds);
    },
  };
}

export interface MetricsServer {
  readonly address: string;
  readonly bound: AddressInfo;
  close(): Promise<void>;
}

/** Open connections the metrics listener takes (then it closes new ones), and their deadline. */
export const METRICS_MAX_CONNECTIONS = 16;
const METRICS_TIMEOUT_MS = 10_000;

export async function startMetricsServer(endpoint: { readonly host: string; readonly port: number }, registry: Registry, log: Logger): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    // The process's liveness, on slots no proxy client can take (a Kubernetes liveness probe asks
    // here: a proxy port full of clients must make the pod unready, never get it restarted).
    if ((req.method === 'GET' || req.method === 'HEAD') && req.url === EGRESS_HEALTH_PATH) {
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': 3 }).end('ok\n');
      return;
    }
    if (req.method === 'GET' && req.url === EGRESS_METRICS_PATH) {
      registry.metrics().then(
        (text) => res.writeHead(200, { 'Content-Type': registry.contentType }).end(text),
        () => res.writeHead(500).end(),
      );
      return;
    }
    res.writeHead(404, { 'Content-Type': 'text/plain' }).end(`metrics are at ${EGRESS_METRICS_PATH}\n`);
  });
  // Slots of its own, which no proxy client can take, and few of them: a scraper needs one.
  server.maxConnections = METRICS_MAX_CONNECTIONS;
  server.headersTimeout = METRICS_TIMEOUT_MS;
  server.requestTimeout = METRICS_TIMEOUT_MS;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(endpoint.port, endpoint.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // A failed accept loses one scrape, never the process, and is logged like the proxy port's
  // (accept-failures.ts): without a listener, a second accept error was an uncaught exception.
  handleAcceptFailures(server, log, 'metrics');
  const a = server.address() as AddressInfo;
  return {
    address: `${a.address}:${a.port}`,
    bound: a,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
