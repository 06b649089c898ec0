/**
 * Transparent TLS beside CONNECT, through our proxy, to the same TLS upstream: set-up (a fresh
 * connection until the TLS handshake is complete: for CONNECT, the CONNECT and its `200` first;
 * transparently, the connection to the proxy's transparent address, routed by the ClientHello)
 * and single-stream throughput of decrypted bytes. Both tunnels are `tls` (the hello checked as
 * it passes), so they differ only in how they are entered. Every step has a deadline.
 */
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';
import { drain, openTunnel, type Route } from './tunnel-load.js';

/** How the client enters: by CONNECT through the proxy port, or straight to the transparent address. */
export type TlsRoute =
  | { readonly kind: 'connect'; readonly proxy: Extract<Route, { kind: 'proxy' }> }
  | { readonly kind: 'transparent'; readonly address: string };

const STEP_TIMEOUT_MS = 5_000;

/** A TLS connection to the upstream's TLS port through the route, once its handshake is complete. */
async function openTls(route: TlsRoute, tlsPort: number, servername: string): Promise<tls.TLSSocket> {
  const options: tls.ConnectionOptions = { servername, rejectUnauthorized: false };
  if (route.kind === 'connect') {
    const raw = await openTunnel({ ...route.proxy, upstreamHost: servername }, tlsPort);
    options.socket = raw;
  } else {
    options.host = route.address;
    options.port = tlsPort;
  }
  return new Promise((resolve, reject) => {
    const socket = tls.connect(options);
    socket.setNoDelay(true);
    const timer = setTimeout(() => socket.destroy(new Error('TLS handshake timed out')), STEP_TIMEOUT_MS);
    socket.once('secureConnect', () => {
      clearTimeout(timer);
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Milliseconds from a fresh connection to a complete TLS handshake, one after another; a warm-up first. */
export async function tlsSetup(route: TlsRoute, tlsPort: number, servername: string, count: number, warmup: number): Promise<number[]> {
  const samplesMs: number[] = [];
  for (let i = 0; i < warmup + count; i++) {
    const t0 = performance.now();
    const socket = await openTls(route, tlsPort, servername);
    const t1 = performance.now();
    socket.destroy();
    if (i >= warmup) samplesMs.push(t1 - t0);
  }
  return samplesMs;
}

/** MB/s (10^6 bytes per second) of `bytes` decrypted from the TLS source over one connection. */
export async function tlsThroughput(route: TlsRoute, tlsPort: number, servername: string, bytes: number): Promise<number> {
  const socket = await openTls(route, tlsPort, servername);
  const t0 = performance.now();
  await drain(socket, bytes);
  return bytes / ((performance.now() - t0) / 1000) / 1e6;
}
