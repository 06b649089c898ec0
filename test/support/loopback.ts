/** Servers and ports on 127.0.0.1 for the socket tests. */
import net from 'node:net';

/** Listens on a free loopback port and returns it. */
export async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

/** A loopback port that was free a moment ago, for a program that must be given its port. */
export async function freePort(): Promise<number> {
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
