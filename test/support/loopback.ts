/** Servers and ports on 127.0.0.1 for the socket tests. */
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type http from 'node:http';
import type https from 'node:https';
import net from 'node:net';

/** Listens on a free loopback port and returns it. */
export async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

/**
 * Listens an HTTP or HTTPS server on a free loopback port until the test ends, when it is closed
 * with every connection it still holds (a keep-alive one would hold the test open); its port.
 */
export async function listenUntilEnd(t: { teardown(fn: () => void): void }, server: http.Server | https.Server): Promise<number> {
  const port = await listen(server as unknown as net.Server);
  t.teardown(() => {
    server.close();
    server.closeAllConnections();
  });
  return port;
}

/**
 * Ports below the kernel's ephemeral range: no listen(0) and no outgoing connection is ever given
 * one, so between freePort's check and the program's own listen, only another explicit port can
 * take it. (A port from listen(0) could be handed to any of the many servers other tests start
 * meanwhile: a program given one failed with EADDRINUSE under load.)
 */
const FIXED_PORTS = ((): { low: number; high: number } | undefined => {
  try {
    const ephemeralLow = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    const high = ephemeralLow - 1;
    const low = Math.max(10_000, high - 12_000);
    return Number.isInteger(high) && high - low >= 1_000 ? { low, high } : undefined;
  } catch {
    return undefined;
  }
})();

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A loopback port that was free a moment ago, for a program that must be given its port. */
export async function freePort(): Promise<number> {
  if (FIXED_PORTS !== undefined) {
    for (let tries = 0; tries < 100; tries++) {
      const port = FIXED_PORTS.low + randomInt(FIXED_PORTS.high - FIXED_PORTS.low + 1);
      if (await canListen(port)) return port;
    }
  }
  const server = net.createServer();
  const port = await listen(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A server that sends 64 KiB chunks to every connection as fast as its reader takes them, forever. */
export async function streamingServer(): Promise<{ port: number; close(): void }> {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => s.destroy());
    s.on('close', () => sockets.delete(s));
    const pump = (): void => {
      while (!s.destroyed && s.write(chunk));
    };
    s.on('drain', pump);
    pump();
  });
  const port = await listen(server);
  return {
    port,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

/** A connection to `port` on 127.0.0.1, once it is connected. */
export function connected(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}
