/**
 * The floor: the least a Node.js proxy can do, with no policy, no logging and no limits. Node's
 * HTTP server hands over a CONNECT, the relay connects, answers 200 and pipes both ways; a
 * request by absolute URL goes through an undici pool per origin, its response piped back, as
 * the proxy forwards plain HTTP. Whatever this costs on a machine is what Node (and undici) cost
 * there; the egress proxy is measured against it. Listens on 127.0.0.1 (port from argv, 0 for
 * any), prints the port, and always connects to 127.0.0.1 at the port asked for.
 */
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { Pool } from 'undici';

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

const pools = new Map<string, Pool>();
server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
  const url = new URL(req.url ?? '');
  const origin = `http://127.0.0.1:${url.port || 80}`;
  let pool = pools.get(origin);
  if (pool === undefined) {
    pool = new Pool(origin);
    pools.set(origin, pool);
  }
  pool.request({ method: 'GET', path: `${url.pathname}${url.search}`, headers: { host: url.host } }).then(
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers as http.OutgoingHttpHeaders);
      answer.body.pipe(res);
    },
    () => res.writeHead(502).end(),
  );
});

server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  process.stdout.write(`${(server.address() as AddressInfo).port}\n`);
});
