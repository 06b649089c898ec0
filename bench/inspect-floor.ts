/**
 * The floors of an inspected connection (bench/inspect.ts): the least a Node.js proxy does to read
 * inside TLS, with no policy, checks, logging or limits. It takes a CONNECT (answered 200 at once),
 * ends the client's TLS with the certificate it is given, and then, by its mode:
 * - `relay`: opens TLS to the upstream and pipes the plain bytes both ways (TLS at both ends, no
 *   HTTP read);
 * - `lean`: reads each request head and response head by hand (no bodies but by Content-Length),
 *   over one upstream TLS connection per client connection;
 * - `half`: hands the connection to Node's HTTP server, and sends each request on an upstream TLS
 *   connection of its client's, the response read by hand: as the proxy does;
 * - `http`: Node's HTTP server, each request forwarded through an undici pool of TLS connections,
 *   as the proxy did before its own client.
 * What these cost per request on a machine is what TLS, and then Node's HTTP server and undici,
 * cost there; the proxy's inspected path is measured against them. Listens on 127.0.0.1 at the
 * port from argv; always connects to 127.0.0.1 at the upstream port given, verified for its name.
 * argv: port upstreamPort keyFile certFile relay|lean|half|http
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { Pool, type Dispatcher } from 'undici';

const [portArg, upstreamArg, keyFile, certFile, mode] = process.argv.slice(2);
if (certFile === undefined || keyFile === undefined || (mode !== 'relay' && mode !== 'http' && mode !== 'lean' && mode !== 'half')) {
  process.stderr.write('usage: inspect-floor.js port upstreamPort keyFile certFile relay|http|lean|half\n');
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

/** The fields of a head's lines (the first is the start line): each name in lower case, and its value. */
function fieldsOf(lines: readonly string[]): Array<[string, string]> {
  return lines.slice(1).map((line) => {
    const colon = line.indexOf(':');
    return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()];
  });
}

/** The head at the start of `buffer`: its lines, and where its body starts; undefined until it is whole. */
function headOf(buffer: Buffer): { lines: string[]; bodyAt: number } | undefined {
  const end = buffer.indexOf('\r\n\r\n');
  return end < 0 ? undefined : { lines: buffer.toString('latin1', 0, end).split('\r\n'), bodyAt: end + 4 };
}

/** A response head's Content-Length (0 without), and its fields but the hop-by-hop ones. */
function responseFields(lines: readonly string[]): { length: number; fields: Array<[string, string]> } {
  let length = 0;
  const fields: Array<[string, string]> = [];
  for (const [name, value] of fieldsOf(lines)) {
    if (name === 'content-length') length = Number(value);
    if (name !== 'connection' && name !== 'keep-alive') fields.push([name, value]);
  }
  return { length, fields };
}

/**
 * `lean`: one upstream TLS connection per client connection, and each request and response head
 * read by hand (bodies by Content-Length only; the floor's requests have none).
 */
function lean(client: tls.TLSSocket, host: string): void {
  const upstream = upstreamTls(host);
  upstream.on('error', () => client.destroy());
  let pending: Buffer = Buffer.alloc(0);
  client.on('data', (chunk: Buffer) => {
    pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
    for (let head = headOf(pending); head !== undefined; head = headOf(pending)) {
      const { lines } = head;
      pending = pending.subarray(head.bodyAt);
      const [method, target] = (lines[0] ?? '').split(' ');
      const fields: string[] = [];
      for (const [name, value] of fieldsOf(lines)) if (name !== 'host' && name !== 'connection') fields.push(`${name}: ${value}`);
      upstream.write(`${method} ${target} HTTP/1.1\r\nhost: ${host}:${upstreamPort}\r\n${fields.map((f) => `${f}\r\n`).join('')}\r\n`);
    }
  });
  let response: Buffer = Buffer.alloc(0);
  let bodyLeft = 0;
  upstream.on('data', (chunk: Buffer) => {
    let data = chunk;
    while (data.length > 0) {
      if (bodyLeft > 0) {
        const part = data.subarray(0, bodyLeft);
        bodyLeft -= part.length;
        client.write(part);
        data = data.subarray(part.length);
        continue;
      }
      response = response.length === 0 ? data : Buffer.concat([response, data]);
      const head = headOf(response);
      if (head === undefined) return;
      data = response.subarray(head.bodyAt);
      response = Buffer.alloc(0);
      const { length, fields } = responseFields(head.lines);
      const out = [head.lines[0]!, ...fields.map(([name, value]) => `${name}: ${value}`)];
      const bodyNow = data.subarray(0, length);
      client.write(Buffer.concat([Buffer.from(`${out.join('\r\n')}\r\n\r\n`, 'latin1'), bodyNow]));
      bodyLeft = length - bodyNow.length;
      data = data.subarray(bodyNow.length);
    }
  });
}

/** `half`: Node's HTTP server, and each request sent on one upstream connection of its client's, its response read by hand. */
const upstreams = new WeakMap<net.Socket, { socket: tls.TLSSocket; waiting: http.ServerResponse[] }>();
function half(host: string, req: http.IncomingMessage, res: http.ServerResponse): void {
  let up = upstreams.get(req.socket);
  if (up === undefined) {
    const socket = upstreamTls(host);
    const own = { socket, waiting: [] as http.ServerResponse[] };
    up = own;
    upstreams.set(req.socket, own);
    let response: Buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      response = response.length === 0 ? chunk : Buffer.concat([response, chunk]);
      for (let head = headOf(response); head !== undefined; head = headOf(response)) {
        const { length, fields } = responseFields(head.lines);
        if (response.length < head.bodyAt + length) return;
        const body = response.subarray(head.bodyAt, head.bodyAt + length);
        response = response.subarray(head.bodyAt + length);
        const [, code, ...reason] = (head.lines[0] ?? '').split(' ');
        const out = own.waiting.shift();
        out?.writeHead(Number(code), reason.join(' '), fields.flat());
        out?.end(body);
      }
    });
  }
  up.waiting.push(res);
  up.socket.write(`${req.method} ${req.url} HTTP/1.1\r\nhost: ${host}:${upstreamPort}\r\n\r\n`);
}

const front = http.createServer({ noDelay: true });
const inside = new WeakMap<net.Socket, string>();
front.on('request', (req, res) => (mode === 'half' ? half : forward)(inside.get(req.socket) ?? '', req, res));

net
  .createServer({ noDelay: true }, (client) => {
    client.on('error', () => client.destroy());
    client.once('data', (chunk: Buffer) => {
      const host = (chunk.toString('latin1').split(' ')[1] ?? '').split(':')[0] ?? '';
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const secure = new tls.TLSSocket(client, { isServer: true, secureContext: context, ALPNProtocols: ['http/1.1'] });
      secure.on('error', () => secure.destroy());
      secure.once('secure', () => {
        if (mode === 'lean') return lean(secure, host);
        if (mode === 'http' || mode === 'half') {
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
