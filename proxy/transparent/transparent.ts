/**
 * Transparent mode's listeners, on the workload-facing address: the DNS responder, and one TCP
 * listener per TLS or HTTP port (transparent-ports.ts). A connection they accept is handed, with
 * the port its client dialled, to the proxy's own admission (the same connection limits,
 * decision lines and metrics as the explicit proxy), which routes it by its ClientHello or its
 * Host header. Nothing listens on UDP but DNS: QUIC and every other UDP protocol get nothing, and
 * their clients fall back to TCP.
 *
 * The address may not exist yet when the proxy starts: Docker attaches a container's second
 * network only after it has started it, and the workload-facing network is that one. While
 * binding fails for want of the address (EADDRNOTAVAIL) the listeners try again every 20 ms, and
 * the proxy's own port opens only after them, so "the proxy answers" still means "everything it
 * was configured to serve is up".
 */
import net from 'node:net';
import type { Policy } from '../../policy/index.js';
import { DNS_LIMITS, SANDBOX_UDP_SHED_AFTER, startDnsResponder, TcpSlots, type DnsHost, type DnsLimits, type DnsResponder } from '../dns/index.js';
import { F, handleAcceptFailures, logLine, type Logger, type ProxyObserver } from '../record/index.js';
import type { TransparentEntry } from '../admission/index.js';
import type { TransparentPort } from './transparent-ports.js';

export interface TransparentOptions {
  /** The IPv4 address to listen on (`0.0.0.0`: every address of the host, as in a pod). */
  readonly listen: string;
  /** The IPv4 address allowed names resolve to: the proxy's own, as the workloads reach it. */
  readonly answer: string;
  readonly ports: readonly TransparentPort[];
  /** Tests shorten the DNS responder's deadlines and caps. */
  readonly dnsLimits?: Partial<DnsLimits>;
  /**
   * A shared proxy's DNS: a responder per registered sandbox network, on its own address and
   * answering with it, instead of one on `listen` (`answer` is then unused).
   */
  readonly dnsHost?: DnsHost | undefined;
}

export interface TransparentDeps {
  /** The proxy's admission of a client connection (limits, connection state, routing). */
  accept(socket: net.Socket, entry: TransparentEntry): void;
  policy(): Policy;
  readonly observer: ProxyObserver;
  readonly log: Logger;
  /** Whether the proxy has closed meanwhile (the wait for the address then ends). */
  closed(): boolean;
}

export interface Transparent {
  /** What listens, with the ports actually bound (a port of 0 was any free one). */
  readonly ports: readonly TransparentPort[];
  close(): Promise<void>;
}

const ADDRESS_POLL_MS = 20;

function listenTcp(host: string, port: number, log: Logger, onConnection: (socket: net.Socket) => void): Promise<net.Server> {
  const server = net.createServer({ allowHalfOpen: true, noDelay: true }, onConnection);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host, port }, () => {
      server.off('error', reject);
      // A failed accept loses that connection, not the process (accept-failures.ts).
      handleAcceptFailures(server, log, `transparent ${host}:${port}`);
      resolve(server);
    });
  });
}

export async function startTransparent(options: TransparentOptions, deps: TransparentDeps): Promise<Transparent> {
  for (let waiting = false; ; waiting = true) {
    try {
      return await bindAll(options, deps);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EADDRNOTAVAIL') throw err;
      if (deps.closed()) throw new Error(`the proxy closed before ${options.listen} appeared on an interface`, { cause: err });
      if (!waiting) logLine(deps.log, { [F.event]: 'transparent_waiting', address: options.listen, [F.detail]: 'the transparent address is on no interface yet; listening once it appears' });
      await new Promise((r) => setTimeout(r, ADDRESS_POLL_MS));
    }
  }
}

async function bindAll(options: TransparentOptions, deps: TransparentDeps): Promise<Transparent> {
  const servers: net.Server[] = [];
  const responders: Array<Pick<DnsResponder, 'close'>> = [];
  const bound: TransparentPort[] = [];
  const close = async (): Promise<void> => {
    await Promise.all([...servers.map((s) => new Promise<void>((r) => s.close(() => r()))), ...responders.map((d) => d.close())]);
  };
  try {
    for (const port of options.ports) {
      if (port.kind === 'dns' && options.dnsHost !== undefined) {
        // Each serves one sandbox: a UDP flood is shed at the kernel (dns-udp.ts). Their TCP
        // connections are held within one cap together, the one the open-file plan keeps.
        const limits = { udpShedAfter: SANDBOX_UDP_SHED_AFTER, ...options.dnsLimits };
        const tcpSlots = new TcpSlots(limits.maxTcpTotal ?? DNS_LIMITS.maxTcpTotal);
        responders.push(options.dnsHost.serve((address, policy, log, sandbox) => startDnsResponder(address, port.listen, { policy, answer: address, observer: deps.observer, log, limits, tcpSlots, oneClient: true, sandbox })));
        bound.push(port);
        continue;
      }
      if (port.kind === 'dns') {
        const responder = await startDnsResponder(options.listen, port.listen, {
          policy: deps.policy,
          answer: options.answer,
          observer: deps.observer,
          log: deps.log,
          ...(options.dnsLimits ? { limits: options.dnsLimits } : {}),
        });
        responders.push(responder);
        bound.push({ ...port, listen: responder.port });
        continue;
      }
      const entry: TransparentEntry = { kind: port.kind, port: port.dialled };
      const server = await listenTcp(options.listen, port.listen, deps.log, (socket) => deps.accept(socket, entry));
      servers.push(server);
      bound.push({ ...port, listen: (server.address() as net.AddressInfo).port });
    }
  } catch (err) {
    await close();
    throw err;
  }
  logLine(deps.log, {
    [F.event]: 'transparent_listening',
    address: options.listen,
    answer: options.answer,
    ports: bound.map((p) => (p.listen === p.dialled ? `${p.kind}:${p.dialled}` : `${p.kind}:${p.dialled}=${p.listen}`)),
  });
  return { ports: bound, close };
}
