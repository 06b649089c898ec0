/**
 * The egress proxy server, wired: admission (admission/) counts every connection of every
 * listener against the limits; the first bytes (front/) send it to the tunnel (tunnel/) or to
 * Node's strict HTTP parser, whose requests go to the forwarder (http/); transparent mode's
 * listeners (transparent/) feed the same admission. Nothing a client sends can crash the process.
 */
import type http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import type { Registry } from 'prom-client';
import type { Policy } from '../policy/index.js';
import { Admission, byAddress, type ClientConnection, type Identities, type Inspection, type ProxyContext } from './admission/index.js';
import { clientShare, DEFAULT_LIMITS, MemoryBudget, shareFraction, type ProxyLimits } from './budget/index.js';
import type { ClientLookup } from './dns/index.js';
import { createHttpFront, FirstBytes, Handlers } from './front/index.js';
import { Inspector } from './inspect/index.js';
import { Closer, createProxyMetrics, Decisions, handleAcceptFailures, startMetricsServer, type Logger, type MetricsServer } from './record/index.js';
import { startTransparent, type Transparent, type TransparentOptions } from './transparent/index.js';
import { defaultConnect, OwnListeners, UpstreamPools, type Connect } from './upstream/index.js';

export interface EgressProxyOptions {
  readonly policy: Policy;
  /** Lookups for the pinned resolution; a ClientLookup (createLookup's) holds each client to its share. */
  readonly lookup: ClientLookup;
  readonly logger: Logger;
  readonly limits?: Partial<ProxyLimits>;
  /** Opens upstream TCP connections; tests inject one to observe dials. */
  readonly connect?: Connect;
  /**
   * The process's budget of bytes held before a verdict (memory-plan.ts sizes it), shared by
   * every listener's connections; without one, nothing is refused for memory.
   */
  readonly memory?: MemoryBudget;
  /** The deployment CA's leaves and the upstream trust store: needed by a policy with inspected entries. */
  readonly inspection?: Inspection | undefined;
  /**
   * Who each client is (a shared proxy's tenants, proxy/tenants/); default: by address, under
   * `policy`. With tenants, each sandbox's share of the connections is a sandbox's (shareFraction).
   */
  readonly identities?: Identities;
}

export interface EgressProxy {
  listen(host: string, port: number): Promise<AddressInfo>;
  /**
   * Starts transparent mode's DNS, TLS and HTTP listeners; resolves once they listen (after
   * waiting for their address to appear on an interface, if it has not yet).
   */
  listenTransparent(options: TransparentOptions): Promise<Transparent>;
  /** Serves `metrics` on a listener of their own (record/metrics.ts), which is never dialled either. */
  listenMetrics(host: string, port: number): Promise<MetricsServer>;
  /** Stops accepting, then closes every open connection and tunnel. */
  close(): Promise<void>;
  /** Replaces the policy for new requests; open tunnels are left alone. */
  setPolicy(policy: Policy): void;
  /** Replaces the CA and trust store for new inspected connections and requests (a reload). */
  setInspection(inspection: Inspection | undefined): void;
  readonly openConnections: number;
  /** Prometheus registry of this proxy's metrics. */
  readonly metrics: Registry;
}

/** Upstream destinations with keep-alive pools (upstream-pools.ts), in all. */
const MAX_POOLS = 1024;
/**
 * Idle pooled connections closed at once past the descriptor plan, as a part of the plan: finding
 * the owner holding the most reads every pool's count, a pass over every pooled connection (about
 * the plan's count at that point), so closing a 256th of it at once keeps that pass to a few
 * hundred connections' reads per dial, where one closed per dial made it a whole pass each.
 */
const SHED_PART = 256;

/** What every handler shares, around a policy that `setPolicy` replaces. */
function contextOf(
  options: EgressProxyOptions,
  limits: ProxyLimits,
  observer: ProxyContext['observer'],
  own: OwnListeners,
  live: { policy: () => Policy; inspection: () => Inspection | undefined; inspector: Inspector },
): ProxyContext {
  const dial = options.connect ?? defaultConnect;
  // The descriptor plan gives each client connection one upstream socket (fd-budget.ts), and a
  // connection has at most one in use (a tunnel, or the request it forwards now); the pools'
  // idle keep-alive connections come on top. One client cycling its few connections through many
  // destinations left an idle one per request for seconds, and with them ran the process out of
  // descriptors: every other client's dials failed. Past the plan's count, idle pooled
  // connections are closed before another upstream socket is opened.
  let upstreams = 0;
  // Idle connections shed whose close is not reported yet (it comes a turn of the event loop
  // later): counted as gone, so that the dials before it do not each shed (and pass) again.
  // Any close reported takes one off, so a count that was wrong wears off.
  let closing = 0;
  const connect: Connect = (address, port, purpose) => {
    const over = upstreams - closing - limits.maxConnections;
    if (over >= 0) closing += pools.shedIdle(over + Math.ceil(limits.maxConnections / SHED_PART));
    const socket = dial(address, port, purpose);
    upstreams += 1;
    socket.once('close', () => {
      upstreams -= 1;
      closing = Math.max(0, closing - 1);
    });
    return socket;
  };
  // A shared proxy's sandbox keeps a sandbox's share of the pools (upstream-pools.ts); a proxy of one tenant, all of them.
  const maxPoolsPerOwner = options.identities === undefined ? MAX_POOLS : clientShare(MAX_POOLS, Infinity, shareFraction(true));
  const pools: UpstreamPools = new UpstreamPools({ connect, connectTimeoutMs: limits.connectTimeoutMs, idleTimeoutMs: limits.idleTimeoutMs, maxHeaderBytes: 64 * 1024, maxPools: MAX_POOLS, maxPoolsPerOwner });
  const lookup: ClientLookup = async (name, client) => {
    const t = performance.now();
    const outcome = await options.lookup(name, client);
    observer.dnsLookup((performance.now() - t) / 1000, outcome.ok ? 'ok' : outcome.reason);
    return outcome;
  };
  return { policy: live.policy, lookup, ownListener: own.has, limits, connect, pools, observer, inspection: live.inspection, inspector: live.inspector };
}

/** Listens on `host:port`; resolves with the bound address. */
function listenOn(netServer: net.Server, httpServer: http.Server, host: string, port: number, log: Logger): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    netServer.once('error', reject);
    netServer.listen({ host, port }, () => {
      netServer.off('error', reject);
      const bound = netServer.address() as AddressInfo;
      handleAcceptFailures(netServer, log, `proxy ${bound.address}:${bound.port}`);
      // The HTTP server never listens itself (connections are handed to it), but its
      // header-timeout sweep starts on 'listening'.
      httpServer.emit('listening');
      resolve(bound);
    });
  });
}

export function createEgressProxy(options: EgressProxyOptions): EgressProxy {
  const configured: ProxyLimits = { ...DEFAULT_LIMITS, ...options.limits };
  // One client's connections stay a share of the total, however the total was lowered.
  const fraction = shareFraction(options.identities !== undefined);
  const limits: ProxyLimits = Object.freeze({ ...configured, maxConnectionsPerClient: clientShare(configured.maxConnections, configured.maxConnectionsPerClient, fraction) });
  const log = options.logger;
  let policy = options.policy;
  let inspection = options.inspection;
  const budget = options.memory ?? new MemoryBudget({ totalBytes: Infinity, perClientBytes: Infinity });
  const metrics = createProxyMetrics(() => budget.used, () => policy.mode === 'report');
  const { observer } = metrics;
  // Every address and port the proxy listens on: never dialled.
  const own = new OwnListeners();
  // An inspected connection's inside is served like any connection's first bytes.
  const inspector = new Inspector((connection) => firstBytes.read(connection), limits.helloTimeoutMs);
  const ctx = contextOf(options, limits, observer, own, { policy: () => policy, inspection: () => inspection, inspector });
  const decisions = new Decisions(observer, log);
  const handlers = new Handlers(ctx, decisions, log);
  const httpServer = createHttpFront(limits, budget, handlers);
  const firstBytes = new FirstBytes({ limits, budget, httpServer, handlers });
  const serve = (connection: ClientConnection): void => {
    if (connection.entry?.kind === 'tls') handlers.transparentTls(connection, connection.entry.port);
    else firstBytes.read(connection);
  };
  const identities = options.identities ?? byAddress(() => policy);
  identities.observe?.(observer);
  const admission = new Admission({ limits, budget, closer: new Closer(), decisions, log, serve, identities });
  const netServer = net.createServer({ allowHalfOpen: true, noDelay: true }, (socket) => admission.accept(socket));
  let transparent: Transparent | undefined;
  let closed = false;
  return {
    async listen(host, port) {
      const bound = await listenOn(netServer, httpServer, host, port, log);
      own.add(bound.address, bound.port);
      return bound;
    },
    async listenTransparent(options) {
      if (transparent !== undefined) throw new Error('transparent mode is already listening');
      const started = await startTransparent(options, { accept: admission.accept, policy: () => policy, observer, log, closed: () => closed });
      // Closed while it was binding: nothing may stay listening.
      if (closed) await started.close();
      else {
        transparent = started;
        for (const p of started.ports) own.add(options.listen, p.listen);
      }
      return started;
    },
    async listenMetrics(host, port) {
      const server = await startMetricsServer({ host, port }, metrics.registry, log);
      own.add(server.bound.address, server.bound.port);
      return server;
    },
    close() {
      closed = true;
      decisions.close();
      void transparent?.close();
      return new Promise((resolve) => {
        netServer.close(() => resolve());
        httpServer.close(() => undefined); // stops the header-timeout sweep
        httpServer.closeAllConnections();
        admission.destroyAll();
        ctx.pools.destroy();
      });
    },
    setPolicy(next) {
      policy = next;
    },
    setInspection(next) {
      inspection = next;
    },
    get openConnections() {
      return admission.openConnections;
    },
    metrics: metrics.registry,
  };
}
