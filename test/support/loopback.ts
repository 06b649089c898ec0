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
