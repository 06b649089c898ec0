/**
 * The DNS responder's TCP side (RFC 7766): connections within their caps, per client, in all and
 * new ones a second (past which a connection is closed unread, so that opening and closing them
 * costs the flooder, not the event loop the other clients share), and each connection's framed,
 * pipelined queries answered in order within its own caps. What a query is answered is the
 * responder's (dns-responder.ts).
 */
import net from 'node:net';
import { RateLimiter } from '../budget/index.js';
import { canonicalAddress } from '../upstream/index.js';
import { MAX_QUERY_BYTES } from './dns-answer.js';

/** The responder's limits this side keeps (dns-responder.ts DNS_LIMITS). */
export interface TcpLimits {
  readonly maxTcpPerClient: number;
  readonly maxTcpTotal: number;
  readonly tcpConnectionsPerSecond: number;
  readonly tcpConnectionBurst: number;
  readonly maxClients: number;
  readonly tcpIdleMs: number;
  readonly maxQueriesPerTcp: number;
  readonly maxTcpBacklog: number;
}

/**
 * The TCP connections every responder of one process holds together, within one cap: a shared
 * proxy runs a responder per sandbox, and the open-file plan keeps descriptors for one cap of them
 * (start-plan.ts dnsReserve), not one per sandbox (review finding: about 17 sandboxes holding
 * their 16 connections each went past it).
 */
export class TcpSlots {
  private held = 0;

  constructor(readonly max: number) {}

  /** Takes a slot, or says there is none. */
  take(): boolean {
    if (this.held >= this.max) return false;
    this.held += 1;
    return true;
  }

  release(): void {
    this.held -= 1;
  }

  get open(): number {
    return this.held;
  }
}

/** What the server asks of its responder: whom it serves, what it counts, and each answer. */
export interface TcpClients {
  /** Whether the responder serves this client (a stranger takes none of its clients' connections, nor of their rate). */
  serves(clientIp: string): boolean;
  /** What the client's rate of new connections is kept by: its address, or one key for a responder that serves one sandbox. */
  rateKey(clientIp: string): string;
  /** A connection refused at the caps. */
  refused(): void;
  /** The answer to one query, or none (the connection then ends). */
  answer(query: Buffer, clientIp: string, client: string): Buffer | undefined;
}

/**
 * The TCP server: connections within their caps (per client, in all, and new ones a second), each
 * served by serveTcp. `slots`: the cap in all, shared with the process's other responders, or
 * this one's own. `share`: the most this responder holds of them, whatever its clients' addresses
 * (a shared proxy's responder serves one sandbox, and a share is per sandbox).
 */
export function tcpServer(limits: TcpLimits, clients: TcpClients, slots = new TcpSlots(limits.maxTcpTotal), share = Infinity): { server: net.Server; sockets: Set<net.Socket> } {
  const perClient = new Map<string, number>();
  const opened = new RateLimiter(limits.tcpConnectionsPerSecond, limits.tcpConnectionBurst, limits.maxClients);
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ noDelay: true }, (socket) => {
    const remote = socket.remoteAddress ?? 'unknown';
    const clientIp = canonicalAddress(remote) ?? remote;
    const fromClient = perClient.get(clientIp) ?? 0;
    socket.on('error', () => socket.destroy());
    // The responder's own share before the shared slots: a sandbox with several addresses in its
    // subnet (review finding: two of them held every slot of a cap of four) takes one share, not
    // one per address, and leaves the other sandboxes theirs.
    if (!clients.serves(clientIp) || fromClient >= limits.maxTcpPerClient || sockets.size >= share || !opened.takeFor(clients.rateKey(clientIp)) || !slots.take()) {
      clients.refused();
      socket.destroy();
      return;
    }
    perClient.set(clientIp, fromClient + 1);
    sockets.add(socket);
    socket.once('close', () => {
      slots.release();
      sockets.delete(socket);
      const left = (perClient.get(clientIp) ?? 1) - 1;
      if (left === 0) perClient.delete(clientIp);
      else perClient.set(clientIp, left);
    });
    serveTcp(socket, limits, (query) => clients.answer(query, clientIp, `${clientIp}:${socket.remotePort ?? 0}`));
  });
  return { server, sockets };
}

/**
 * One TCP connection: messages with their two-byte length (RFC 1035 §4.2.2), pipelined, answered
 * in order. A length that cannot be a query, a query over the rate, or the connection's query cap
 * closes it; so does the idle deadline.
 */
function serveTcp(socket: net.Socket, limits: TcpLimits, handle: (query: Buffer) => Buffer | undefined): void {
  let pending: Buffer = Buffer.alloc(0);
  let served = 0;
  // Restarted by complete queries only: a client trickling bytes does not keep its slot.
  const idle = setTimeout(() => socket.destroy(), limits.tcpIdleMs);
  socket.once('close', () => clearTimeout(idle));
  socket.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.length >= 2) {
      const length = pending.readUInt16BE(0);
      if (length === 0 || length > MAX_QUERY_BYTES) {
        socket.destroy();
        return;
      }
      if (pending.length < 2 + length) break;
      const query = pending.subarray(2, 2 + length);
      pending = pending.subarray(2 + length);
      served += 1;
      idle.refresh();
      const out = served > limits.maxQueriesPerTcp ? undefined : handle(query);
      if (out === undefined) {
        // Over a cap, or a message that gets no answer (a response): the connection ends, since
        // a client waiting on this answer would wait for nothing.
        socket.destroy();
        return;
      }
      const framed = Buffer.allocUnsafe(2 + out.length);
      framed.writeUInt16BE(out.length, 0);
      out.copy(framed, 2);
      socket.write(framed);
    }
    // The half-read message that is left is at most 2 + MAX_QUERY_BYTES.
    if (pending.length > 0) pending = Buffer.from(pending);
    if (socket.writableLength > limits.maxTcpBacklog) {
      socket.pause();
      socket.once('drain', () => socket.resume());
    }
  });
  socket.on('end', () => socket.end());
}
