/**
 * The tunnel load generators, run in the benchmark process: CONNECT set-up latency, round trips
 * over one tunnel, and bulk throughput over one or several tunnels. "Direct" opens a plain TCP
 * connection to the upstream instead of a tunnel, which is the baseline each proxy adds to.
 * Every socket has a deadline, so a stuck peer fails its measurement instead of hanging the run.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';

/** How a client reaches an upstream port: straight, or through a proxy by CONNECT. */
export type Route = { readonly kind: 'direct' } | { readonly kind: 'proxy'; readonly port: number; readonly upstreamHost: string };

const STEP_TIMEOUT_MS = 5_000;

/** Opens a connection to the upstream port through the route; resolves once bytes may flow. */
export function openTunnel(route: Route, upstreamPort: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const fail = (err: Error): void => {
      socket.destroy();
      reject(err);
    };
    const socket = net.connect({ host: '127.0.0.1', port: route.kind === 'direct' ? upstreamPort : route.port, noDelay: true });
    socket.setTimeout(STEP_TIMEOUT_MS, () => fail(new Error('timed out opening the tunnel')));
    socket.once('error', fail);
    const ready = (): void => {
      socket.setTimeout(0);
      socket.off('error', fail);
      resolve(socket);
    };
    if (route.kind === 'direct') {
      socket.once('connect', ready);
      return;
    }
    const authority = `${route.upstreamHost}:${upstreamPort}`;
    socket.once('connect', () => socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
    let head: Buffer = Buffer.alloc(0);
    const onData = (buf: Buffer): void => {
      head = head.length === 0 ? buf : Buffer.concat([head, buf]);
      const end = head.indexOf('\r\n\r\n');
      if (end === -1) {
        if (head.length > 16_384) fail(new Error('response head too large'));
        return;
      }
      socket.off('data', onData);
      socket.pause();
      const status = head.subarray(0, head.indexOf('\r\n')).toString('latin1');
      if (!/^HTTP\/1\.[01] 200/.test(status)) return fail(new Error(`CONNECT refused: ${status}`));
      if (end + 4 < head.length) socket.unshift(head.subarray(end + 4));
      ready();
    };
    socket.on('data', onData);
  });
}

/** Milliseconds from a fresh connection to the 200 of its CONNECT, one after another; a warm-up first, not counted. */
export async function connectSetup(route: Route, upstreamPort: number, count: number, warmup: number): Promise<number[]> {
  const samplesMs: number[] = [];
  for (let i = 0; i < warmup + count; i++) {
    const t0 = performance.now();
    const socket = await openTunnel(route, upstreamPort);
    const t1 = performance.now();
    socket.destroy();
    if (i >= warmup) samplesMs.push(t1 - t0);
  }
  return samplesMs;
}

/** Milliseconds per echo exchange of `size` bytes, one after another over one tunnel. */
export async function roundTrips(route: Route, echoPort: number, count: number, warmup: number, size = 64): Promise<number[]> {
  const socket = await openTunnel(route, echoPort);
  const payload = Buffer.alloc(size, 0x62);
  const samplesMs: number[] = [];
  let got = 0;
  let pending: { resolve: () => void; reject: (err: Error) => void } | undefined;
  let broken: Error | undefined;
  const fail = (err: Error): void => {
    broken ??= err;
    pending?.reject(broken);
    pending = undefined;
  };
  socket.on('data', (buf: Buffer) => {
    got += buf.length;
    if (got >= size && pending) {
      got -= size;
      const p = pending;
      pending = undefined;
      p.resolve();
    }
  });
  socket.on('error', fail);
  socket.on('close', () => fail(new Error('tunnel closed')));
  socket.setTimeout(STEP_TIMEOUT_MS, () => socket.destroy(new Error('echo timed out')));
  socket.resume();
  try {
    for (let i = 0; i < warmup + count; i++) {
      const t0 = performance.now();
      await new Promise<void>((resolve, reject) => {
        if (broken) return reject(broken);
        pending = { resolve, reject };
        socket.write(payload);
      });
      const t1 = performance.now();
      if (i >= warmup) samplesMs.push(t1 - t0);
    }
  } finally {
    socket.destroy();
  }
  return samplesMs;
}

/** Receives `bytes` on a tunnel (or a TLS connection) to the source upstream and throws them away. */
export function drain(socket: net.Socket, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let got = 0;
    socket.setTimeout(STEP_TIMEOUT_MS, () => socket.destroy(new Error('stream stalled')));
    socket.on('data', (buf: Buffer) => {
      got += buf.length;
      if (got >= bytes) {
        socket.destroy();
        resolve();
      }
    });
    socket.once('error', reject);
    socket.once('close', () => (got >= bytes ? resolve() : reject(new Error(`stream ended after ${got} of ${bytes} bytes`))));
    socket.write(`${bytes}\n`);
    socket.resume();
  });
}

/** Aggregate MB/s (10^6 bytes per second) of `streams` parallel tunnels, `bytesEach` each. */
export async function throughput(route: Route, sourcePort: number, streams: number, bytesEach: number): Promise<number> {
  const sockets = await Promise.all(Array.from({ length: streams }, () => openTunnel(route, sourcePort)));
  const t0 = performance.now();
  try {
    await Promise.all(sockets.map((s) => drain(s, bytesEach)));
  } finally {
    for (const s of sockets) s.destroy();
  }
  const seconds = (performance.now() - t0) / 1000;
  return (streams * bytesEach) / seconds / 1e6;
}
