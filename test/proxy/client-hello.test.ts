import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { scanClientHello } from '../../proxy/index.js';

/** The first bytes a real TLS client (Node's OpenSSL) sends, captured on loopback. */
async function captureHello(options: tls.ConnectionOptions): Promise<Buffer> {
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

t.test('reads the server name of a real ClientHello', async (t) => {
  const hello = await captureHello({ servername: 'api.example.com' });
  t.same(scanClientHello(hello), { kind: 'tls', sni: 'api.example.com' });
  t.same(scanClientHello(hello.subarray(0, 3)), { kind: 'incomplete' }, 'a partial header waits for more');
  t.same(scanClientHello(hello.subarray(0, hello.length - 1)), { kind: 'incomplete' }, 'a partial record waits for more');
});

t.test('a ClientHello without a server name', async (t) => {
  const hello = await captureHello({ servername: '' });
  t.same(scanClientHello(hello), { kind: 'tls', sni: undefined });
});

const others: { name: string; bytes: Buffer; want: ReturnType<typeof scanClientHello> }[] = [
  { name: 'nothing yet', bytes: Buffer.alloc(0), want: { kind: 'incomplete' } },
  { name: 'plain HTTP', bytes: Buffer.from('GET / HTTP/1.1\r\n'), want: { kind: 'not_tls' } },
  { name: 'SSH banner', bytes: Buffer.from('SSH-2.0-OpenSSH_9.6\r\n'), want: { kind: 'not_tls' } },
  { name: 'handshake byte with a wrong version', bytes: Buffer.from([0x16, 0x09, 0x01, 0x00, 0x01, 0x01]), want: { kind: 'not_tls' } },
  { name: 'a record that is not a ClientHello', bytes: Buffer.from([0x16, 0x03, 0x01, 0x00, 0x01, 0x02]), want: { kind: 'tls', sni: undefined } },
  { name: 'a truncated ClientHello body', bytes: Buffer.from([0x16, 0x03, 0x01, 0x00, 0x03, 0x01, 0x00, 0x00]), want: { kind: 'tls', sni: undefined } },
];
for (const c of others) t.test(c.name, async (t) => t.same(scanClientHello(c.bytes), c.want));

t.test('never throws on arbitrary bytes', async (t) => {
  const fc = await import('fast-check');
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 600 }), fc.boolean(), (arr, tlsHeader) => {
      const bytes = Buffer.from(arr);
      if (tlsHeader && bytes.length > 4) {
        bytes[0] = 0x16;
        bytes[1] = 0x03;
        bytes.writeUInt16BE(bytes.length - 5, 3);
      }
      scanClientHello(bytes);
      return true;
    }),
    { numRuns: 5_000 },
  );
  t.pass('property held');
});
