/**
 * The floors of an inspected connection (bench/inspect.ts): the least a Node.js proxy does to read
 * inside TLS, with no policy, checks, logging or limits. It takes a CONNECT (answered 200 at once),
 * ends the client's TLS with the certificate it is given, and then, by its mode:
 * - `relay`: opens TLS to the upstream and pipes the plain bytes both ways (TLS at both ends, no
 *   HTTP read);
 * - `http`: hands the connection to Node's HTTP server, and forwards each request through an undici
 *   pool of TLS connections, as the proxy does.
 * What these cost per request on a machine is what TLS, and then Node's HTTP server and undici,
 * cost there; the proxy's inspected path is measured against them. Listens on 127.0.0.1 at the
 * port from argv; always connects to 127.0.0.1 at the upstream port given, verified for its name.
 * argv: port upstreamPort keyFile certFile mode
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { Pool, type Dispatcher } from 'undici';

const [portArg, upstreamArg, keyFile, certFile, mode] = process.argv.slice(2);
if (certFile === undefined || keyFile === undefined || (mode !== 'relay' && mode !== 'http')) {
  process.stderr.write('usage: inspect-floor.js port upstreamPort keyFile certFile relay|http\n');
  process.exit(2);
}
const upstreamPort = Number(upstreamArg);
const cert = readFileSync(certFile, 'utf8');
const context = tls.createSecureContext({ key: readFileSync(keyFile), cert });

function upstreamTls(servername: string): tls.TLSSocket {
  return tls.connect({ host: '127.0.0.1', port: upstreamPort, servername, ca: [cert], ALPNProtocols: ['http/1.1'] });
}

const pools = new Map<string, Pool>();
function poolFor(host: string): Pool {
  let pool = pools.get(host);
  if (pool === undefined) {
    pool = new Pool(`https://${host}:${upstreamPort}`, {
      connect: (_options, callback) => {
        const socket = upstreamTls(host);
        socket.once('secureConnect', () => callback(null, socket));
        socket.once('error', (err) => callback(err, null));
      },
      pipelining: 1,
    });
    pools.set(host, pool);
  }
  return pool;
}

/** One request forwarded through the pool; its response written back as it arrives. */
function forward(host: string, req: http.IncomingMessage, res: http.ServerResponse): void {
  let head: [number, string, string[]] | undefined;
  const flushHead = (): void => {
    if (head !== undefined) res.writeHead(...head);
    head = undefined;
  };
  const handler: Dispatcher.DispatchHandler = {
    onConnect: () => undefined,
    onError: () => res.destroy(),
    onHeaders: (status, raw, _resume, statusText) => {
      const fields: string[] = [];
      for (let i = 0; i < raw.length; i += 2) {
        const name = raw[i]!.toString('latin1');
        if (!/^(connection|keep-alive|transfer-encoding)$/i.test(name)) fields.push(name, raw[i + 1]!.toString('latin1'));
      }
      head = [status, statusText, fields];
      return true;
    },
    onData: (chunk) => {
      flushHead();
      return res.write(chunk);
    },
    onComplete: () => {
      flushHead();
      res.end();
    },
  };
  poolFor(host).dispatch({ method: req.method as Dispatcher.HttpMethod, path: req.url ?? '/', headers: ['host', `${host}:${upstreamPort}`], body: null }, handler);
}

const front = http.createServer({ noDelay: true });
const inside = new WeakMap<net.Socket, string>();
front.on('request', (req, res) => forward(inside.get(req.socket) ?? '', req, res));

net
  .createServer({ noDelay: true }, (client) => {
    client.on('error', () => client.destroy());
    client.once('data', (chunk: Buffer) => {
      const host = (chunk.toString('latin1').split(' ')[1] ?? '').split(':')[0] ?? '';
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const secure = new tls.TLSSocket(client, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
      secure.on('error', () => secure.destroy());
      secure.once('secure', () => {
        if (mode === 'http') {
          inside.set(secure, host);
          front.emit('connection', secure);
          return;
        }
        const upstream = upstreamTls(host);
        upstream.on('error', () => secure.destroy());
        secure.pipe(upstream).pipe(secure);
      });
    });
  })
  .listen(Number(portArg), '127.0.0.1', () => process.stdout.write('ready\n'));
