/**
 * TLS hellos for tests: the first bytes a real TLS client (Node's OpenSSL) sends, captured on
 * loopback, and a half-sent one.
 */
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

/** A ClientHello announced at 32 KiB and left one byte short, in its records, as a flood sends it. */
export function halfHello(): Buffer {
  const body = 32 * 1024;
  const message = Buffer.alloc(4 + body, 0x41);
  message[0] = 1;
  message.writeUIntBE(body, 1, 3);
  const out: Buffer[] = [];
  for (let at = 0; at < message.length; at += 16 * 1024) {
    const part = message.subarray(at, at + 16 * 1024);
    out.push(Buffer.from([22, 3, 1, part.length >> 8, part.length & 0xff]), part);
  }
  return Buffer.concat(out).subarray(0, -1);
}
