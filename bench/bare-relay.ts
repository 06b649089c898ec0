/**
 * The floor: the least a Node.js CONNECT relay can do, with no policy, no logging and no limits.
 * Node's HTTP server hands over the CONNECT, the relay connects, answers 200 and pipes both ways.
 * Whatever this costs on a machine is what Node itself costs there; the egress proxy is measured
 * against it. Listens on 127.0.0.1 (port from argv, 0 for any), prints the port, and always
 * connects to 127.0.0.1 at the CONNECT's port.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';

const server = http.createServer();
server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
  const port = Number((req.url ?? '').split(':').pop());
  const upstream = net.connect({ host: '127.0.0.1', port, noDelay: true }, () => {
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    if (head.length > 0) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  });
  const close = (): void => {
    client.destroy();
    upstream.destroy();
  };
  upstream.on('error', close);
  client.on('error', close);
});
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  process.stdout.write(`${(server.address() as AddressInfo).port}\n`);
});
