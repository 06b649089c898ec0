/**
 * The DNS responder's UDP socket, bound beside its TCP twin, and its shedding. A query over its
 * client's rate gets no answer, but it has already cost a read and an event: a client that sends
 * as fast as it can spends the event loop every other client shares. A responder that serves one
 * sandbox (a shared proxy's, tenant-dns.ts) sheds such a flood at the kernel instead: past
 * `shedAfter` queries over the rate in one second, its UDP socket is closed for `shedMs` (the
 * kernel drops what comes meanwhile), then bound again. Only that sandbox's UDP DNS stops; TCP
 * is still answered. Off (Infinity) where one responder serves every client.
 */
import dgram from 'node:dgram';
import type net from 'node:net';
import { performance } from 'node:perf_hooks';

export type UdpAnswer = (query: Buffer, clientIp: string, client: string, transport: 'udp' | 'tcp') => Buffer | undefined;

const WINDOW_MS = 1_000;

/**
 * A one-sandbox responder's shedding point: 2,000 UDP queries over the rate in a second. Its
 * client's rate is 100 a second (burst 200), so only a flood gets there, never a resolver's retries.
 */
export const SANDBOX_UDP_SHED_AFTER = 2_000;

/** The UDP socket: each message from a client port answered to it. */
export function udpSocket(answer: UdpAnswer): dgram.Socket {
  const socket = dgram.createSocket({ type: 'udp4' });
  socket.on('message', (msg, peer) => {
    // Port 0 is no client's.
    if (peer.port === 0) return;
    const out = answer(msg, peer.address, `${peer.address}:${peer.port}`, 'udp');
    if (out !== undefined) socket.send(out, peer.port, peer.address);
  });
  // A send that fails (an ICMP error from a client gone away) ends nothing.
  socket.on('error', () => undefined);
  return socket;
}

function bindUdp(udp: dgram.Socket, host: string, port: number): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    udp.once('error', reject);
    udp.bind({ address: host, port, exclusive: true }, () => {
      udp.off('error', reject);
      resolve(udp.address().port);
    });
  });
}

/** Binds a UDP socket and the TCP server on one port (a free one for both when `port` is 0). */
export async function bindBoth(makeUdp: () => dgram.Socket, tcp: net.Server, host: string, port: number): Promise<{ udp: dgram.Socket; port: number }> {
  for (let attempt = 0; ; attempt++) {
    const udp = makeUdp();
    let udpPort: number;
    try {
      udpPort = await bindUdp(udp, host, port);
    } catch (err) {
      // A bind that failed still holds its descriptor until closed: the shared proxy retries a
      // responder whose address is not there yet every few hundred milliseconds.
      udp.close();
      throw err;
    }
    try {
      await new Promise<void>((resolve, reject) => {
        tcp.once('error', reject);
        tcp.listen({ host, port: udpPort }, () => {
          tcp.off('error', reject);
          resolve();
        });
      });
      return { udp, port: udpPort };
    } catch (err) {
      await new Promise<void>((r) => udp.close(() => r()));
      // A free UDP port whose TCP twin is taken: another pair, when any port would do.
      if (port !== 0 || attempt >= 20 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
    }
  }
}

/** The responder's UDP socket over its life: closed for a while when a flood over the rate comes. */
export class SheddingUdp {
  private windowStart = 0;
  private over = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private socket: dgram.Socket | undefined,
    private readonly rebind: () => Promise<dgram.Socket>,
    private readonly shedAfter: number,
    private readonly shedMs: number,
    private readonly onShed: (over: number) => void,
  ) {}

  /** A UDP query went unanswered, over its client's rate. */
  overRate(): void {
    const now = performance.now();
    if (now - this.windowStart > WINDOW_MS) {
      this.windowStart = now;
      this.over = 0;
    }
    this.over += 1;
    if (this.over <= this.shedAfter || this.socket === undefined || this.closed) return;
    const socket = this.socket;
    this.socket = undefined;
    socket.close();
    this.onShed(this.over);
    this.timer = setTimeout(() => void this.reopen(), this.shedMs);
  }

  private async reopen(): Promise<void> {
    if (this.closed) return;
    try {
      const socket = await this.rebind();
      if (this.closed) socket.close();
      else this.socket = socket;
    } catch {
      // Taken meanwhile, or the address gone: tried again after another pause.
      this.timer = setTimeout(() => void this.reopen(), this.shedMs);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const socket = this.socket;
    this.socket = undefined;
    if (socket !== undefined) await new Promise<void>((r) => socket.close(() => r()));
  }

  /** Whether the socket is open now (tests). */
  get open(): boolean {
    return this.socket !== undefined;
  }
}

export { bindUdp };
