/**
 * The DNS responder of transparent mode, on the workload-facing address, over UDP and TCP (RFC
 * 7766: a client retries a truncated answer over TCP). Every message is answered by
 * dns-answer.ts alone; this file, with dns-udp.ts and dns-tcp.ts, owns the sockets and what one
 * client may make them do.
 *
 * A query costs the client nothing, so everything is capped: queries per second per client, per
 * client network (/24, /64: rotating source addresses within one network buys nothing) and in all,
 * each taken in that order, so that one client spends its own share before the total (over the
 * rate a UDP query gets no answer, a TCP connection is closed); TCP connections per client and in
 * all, their idle time, queries per connection, and answers waiting to be written (the connection
 * stops being read until the client reads them). A refused name has a decision line
 * (`dns_not_allowed`, or why it is no host name), but a client asking thousands of names must not
 * become thousands of lines: past a few lines a second per client, or a few dozen in all,
 * refusals are only counted (the decision metric counts every one), and the counts are logged
 * every 10 s. The rate tables are capped and cannot be rotated around (rate-limit.ts).
 */
import dgram from 'node:dgram';
import type { Policy, Reason } from '../../policy/index.js';
import { answerQuery, type DnsVerdict } from './dns-answer.js';
import { F, handleAcceptFailures, logLine, printable, type Logger, type ProxyObserver, LineGate, logSuppressed } from '../record/index.js';
import { networkOf, RateLimiter } from '../budget/index.js';
import { tcpServer, type TcpSlots } from './dns-tcp.js';
import { bindBoth, bindUdp, SheddingUdp, udpSocket } from './dns-udp.js';

/** What one client, and every client together, may make the responder do. */
export const DNS_LIMITS = Object.freeze({
  /** Queries per second from one client address, and its burst. */
  clientQueriesPerSecond: 100,
  clientQueryBurst: 200,
  /** Queries per second from one client network (IPv4 /24, IPv6 /64), and its burst. */
  networkQueriesPerSecond: 400,
  networkQueryBurst: 800,
  /** Queries per second from every client together, and the burst. */
  totalQueriesPerSecond: 2_000,
  totalQueryBurst: 4_000,
  /**
   * Queries per second, and the burst, from every address the responder does not serve together
   * (on a shared proxy, a client of another sandbox's network that reaches this one's address):
   * answered REFUSED within these, dropped past them, and never counted in the rates, the UDP
   * shedding or the TCP connections of the responder's own clients.
   */
  strangerQueriesPerSecond: 50,
  strangerQueryBurst: 100,
  /** Decision lines per second for one client's refused names, and their burst. */
  clientLinesPerSecond: 2,
  clientLineBurst: 20,
  /** Decision lines per second for every client's refused names together, and their burst. */
  totalLinesPerSecond: 50,
  totalLineBurst: 100,
  /** Client addresses the rate tables remember. */
  maxClients: 4_096,
  /** How often the count of refusals logged without a line of their own is written. */
  suppressedReportMs: 10_000,
  maxTcpPerClient: 16,
  maxTcpTotal: 256,
  /**
   * New TCP connections per second from one client, and the burst: past them a connection is
   * closed unread, so that opening and closing them (no query ever sent, so no query rate spent)
   * cannot spend the event loop every other client shares.
   */
  tcpConnectionsPerSecond: 50,
  tcpConnectionBurst: 100,
  /** A TCP connection with no complete query for this long is closed (RFC 7766 §6.2.3: seconds). */
  tcpIdleMs: 10_000,
  maxQueriesPerTcp: 1_000,
  /** Answers waiting to be written to one TCP client before its connection stops being read. */
  maxTcpBacklog: 64 * 1024,
  /**
   * UDP queries over the rate in one second past which the UDP socket is closed for `udpShedMs`
   * (dns-udp.ts): Infinity (never) unless the responder serves one sandbox.
   */
  udpShedAfter: Infinity,
  udpShedMs: 1_000,
});

/** The limits by name: any number for each (the defaults' own types are their literal values). */
export type DnsLimits = { readonly [K in keyof typeof DNS_LIMITS]: number };

export interface DnsResponderOptions {
  /** The policy a client is answered by; none for a client the proxy does not serve (REFUSED). */
  readonly policy: (clientIp: string) => Policy | undefined;
  /** The IPv4 address an allowed name resolves to. */
  readonly answer: string;
  readonly observer: ProxyObserver;
  readonly log: Logger;
  /** Tests shorten deadlines and caps. */
  readonly limits?: Partial<DnsLimits>;
  /** The TCP connections this responder may hold, shared with others of the process (a shared proxy's); else its own maxTcpTotal. */
  readonly tcpSlots?: TcpSlots;
  /**
   * Every client it serves is one client (a shared proxy's responder serves one sandbox): its
   * query rate and refused-name lines are the sandbox's, whatever addresses it uses.
   */
  readonly oneClient?: boolean;
  /** A shared proxy's responder: the sandbox it serves now, named on the refusal lines of its clients. */
  readonly sandbox?: () => string | undefined;
}

export interface DnsResponder {
  /** The UDP and TCP port it listens on (the same). */
  readonly port: number;
  close(): Promise<void>;
}

/**
 * The answers of one responder, within its rates: the client's own share first, then its
 * network's, then the total, so that a client over its rate spends none of what the others have;
 * refused names logged within the line caps.
 */
class Answerer {
  private readonly queries: RateLimiter;
  private readonly networks: RateLimiter;
  private readonly total: RateLimiter;
  private readonly strangers: RateLimiter;
  private readonly lines: LineGate;
  private readonly reporter: NodeJS.Timeout;
  /** Told of each UDP query over the rate (the UDP socket's shedding). */
  onUdpOverRate: () => void = () => undefined;

  constructor(
    private readonly options: DnsResponderOptions,
    limits: DnsLimits,
  ) {
    this.queries = new RateLimiter(limits.clientQueriesPerSecond, limits.clientQueryBurst, limits.maxClients);
    this.networks = new RateLimiter(limits.networkQueriesPerSecond, limits.networkQueryBurst, limits.maxClients);
    this.total = new RateLimiter(limits.totalQueriesPerSecond, limits.totalQueryBurst, 1);
    this.strangers = new RateLimiter(limits.strangerQueriesPerSecond, limits.strangerQueryBurst, 1);
    this.lines = new LineGate({
      clientPerSecond: limits.clientLinesPerSecond,
      clientBurst: limits.clientLineBurst,
      totalPerSecond: limits.totalLinesPerSecond,
      totalBurst: limits.totalLineBurst,
      maxClients: limits.maxClients,
    });
    this.reporter = setInterval(() => this.report(), limits.suppressedReportMs);
    this.reporter.unref();
  }

  /** The answer to one message from `clientIp` (`client` is ip:port), or undefined for none. */
  readonly answer = (query: Buffer, clientIp: string, client: string, transport: 'udp' | 'tcp'): Buffer | undefined => {
    const { observer, log } = this.options;
    const policy = this.options.policy(clientIp);
    // Read in the same turn as the policy: the registration the client was answered by.
    const sandbox = policy === undefined ? undefined : this.options.sandbox?.();
    // A shared proxy's sandbox is one client: its addresses together have one client's share.
    const who = this.options.oneClient === true ? '' : clientIp;
    // Someone else's client spends a share of its own, never this responder's clients'.
    if (policy === undefined ? !this.strangers.take('') : !this.queries.takeFor(who) || !this.networks.take(networkOf(clientIp) ?? clientIp) || !this.total.take('')) {
      observer.dnsQuery('rate_limited');
      if (transport === 'udp' && policy !== undefined) this.onUdpOverRate();
      return undefined;
    }
    let verdict: DnsVerdict;
    try {
      verdict = answerQuery(query, policy, this.options.answer, transport);
    } catch (err) {
      // Fail closed: no answer. Never expected (the codec's errors are caught inside).
      observer.dnsQuery('error');
      if (this.lines.admit(who, 'internal_error')) log.error({ err, [F.event]: 'dns_failed', [F.client]: client }, 'DNS responder failed; no answer');
      return undefined;
    }
    if (verdict.kind === 'drop') {
      observer.dnsQuery(`dropped_${verdict.why}`);
      return undefined;
    }
    observer.dnsQuery(verdict.truncated ? 'truncated' : verdict.result);
    if (verdict.refusal !== undefined) this.refused(verdict, verdict.refusal, who, client, sandbox);
    return verdict.message;
  };

  /** Stops the interval, with a last summary. */
  close(): void {
    clearInterval(this.reporter);
    this.report();
  }

  private refused(verdict: DnsVerdict & { kind: 'reply' }, refusal: { readonly reason: Reason; readonly detail: string }, who: string, client: string, sandbox: string | undefined): void {
    this.options.observer.decision('deny', refusal.reason);
    if (!this.lines.admit(who, refusal.reason)) return;
    logLine(this.options.log, {
      [F.event]: 'decision',
      [F.decision]: 'deny',
      [F.reason]: refusal.reason,
      [F.detail]: refusal.detail,
      [F.client]: client,
      [F.sandbox]: sandbox,
      [F.via]: 'transparent',
      [F.method]: 'DNS',
      [F.host]: printable(Buffer.from(verdict.name ?? '', 'utf8')),
      [F.qtype]: verdict.qtype,
    });
  }

  private report(): void {
    logSuppressed(this.lines, this.options.log, 'dns_lines_suppressed', 'refused DNS names counted without a line of their own (over the line rates); the decision metric counts each');
  }
}

/** Binds UDP and TCP on `host:port` (port 0: one free port for both). */
export async function startDnsResponder(host: string, port: number, options: DnsResponderOptions): Promise<DnsResponder> {
  const limits: DnsLimits = { ...DNS_LIMITS, ...options.limits };
  const answerer = new Answerer(options, limits);
  // Slots shared with other responders (a shared proxy's, one per sandbox): this sandbox holds at
  // most one client's cap of them, whatever its addresses (a sixteenth by default).
  const tcpShare = options.tcpSlots === undefined ? Infinity : limits.maxTcpPerClient;
  const tcp = tcpServer(limits, {
    serves: (clientIp) => options.policy(clientIp) !== undefined,
    rateKey: (clientIp) => (options.oneClient === true ? '' : clientIp),
    refused: () => options.observer.dnsQuery('tcp_refused'),
    answer: (query, clientIp, client) => answerer.answer(query, clientIp, client, 'tcp'),
  }, options.tcpSlots, tcpShare);
  let bound: number;
  let udp: dgram.Socket;
  try {
    ({ udp, port: bound } = await bindBoth(() => udpSocket(answerer.answer), tcp.server, host, port));
  } catch (err) {
    // Its report interval and rate tables go with it (a shared proxy retries a bind for as long
    // as the address is missing).
    answerer.close();
    throw err;
  }
  // Listening now: a failed accept loses that connection, not the process (accept-failures.ts).
  handleAcceptFailures(tcp.server, options.log, `dns ${host}:${bound}`);
  const rebind = async (): Promise<dgram.Socket> => {
    const socket = udpSocket(answerer.answer);
    await bindUdp(socket, host, bound).catch((err: unknown) => {
      socket.close();
      throw err;
    });
    return socket;
  };
  const shedding = new SheddingUdp(udp, rebind, limits.udpShedAfter, limits.udpShedMs, (over) =>
    logLine(options.log, { [F.event]: 'dns_shed', [F.detail]: `${over} UDP queries over the rate within a second: UDP closed for ${limits.udpShedMs} ms (TCP still answered)` }, 'warn'),
  );
  answerer.onUdpOverRate = () => shedding.overRate();
  return {
    port: bound,
    close: async () => {
      answerer.close();
      for (const s of tcp.sockets) s.destroy();
      await Promise.all([shedding.close(), new Promise<void>((r) => tcp.server.close(() => r()))]);
    },
  };
}

/**
 * Starts a responder on `address` (the transparent DNS port), answering allowed names with
 * `address`; `sandbox` is the one its network's registration names now.
 */
export type DnsStarter = (address: string, policy: (clientIp: string) => Policy | undefined, log: Logger, sandbox: () => string | undefined) => Promise<DnsResponder>;

/**
 * A shared proxy's DNS: one responder per registered sandbox network, on the proxy's address on
 * that network, started and stopped as the registrations change.
 */
export interface DnsHost {
  serve(start: DnsStarter): { close(): Promise<void> };
}
