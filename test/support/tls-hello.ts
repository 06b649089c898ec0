/** The first bytes a real TLS client (Node's OpenSSL) sends, captured on loopback. */
import net from 'node:net';
import tls from 'node:tls';

export async function captureHello(options: tls.ConnectionOptions): Promise<Buffer> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  const first = new Promise<Buffer>((resolve) => server.once('connection', (s) => s.once('data', (d: Buffer) => { resolve(d); s.destroy(); })));
  const client = tls.connect({ host: '127.0.0.1', port, ...options });
  client.on('error', () => undefined);
  const bytes = await first;
  client.destroy();
  server.close();
  return bytes;
}
