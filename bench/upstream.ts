/**
 * The upstream servers that every peer (direct, our proxy, squid, tinyproxy) is measured against,
 * run as a separate process by run.ts. On two cores a proxy benchmark has three busy parties
 * (client, proxy, upstream); keeping the upstream out of the benchmark's event loop means the
 * client's timers and the upstream's writes do not queue behind each other, and each peer meets
 * exactly the same upstream. Listens on 127.0.0.1 only; prints its ports as one JSON line; exits
 * when stdin closes (the benchmark has gone) or after --lifetime-ms.
 *
 *   echo:   echoes every byte (CONNECT set-up and round trips);
 *   source: reads one line "<bytes>\n", sends that many bytes as fast as the socket takes them,
 *           then ends (throughput);
 *   http:   a fixed 200 response to each request head, keep-alive unless the request asks to
 *           close (tinyproxy does); no Node HTTP parser, so the upstream costs next to nothing;
 *   tls:    the source behind TLS (a throwaway certificate made with the openssl command), for
 *           transparent mode's TLS set-up and throughput beside CONNECT's.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';

export interface UpstreamPorts {
  readonly echo: number;
  readonly source: number;
  readonly http: number;
  readonly tls: number;
}

const CHUNK = Buffer.alloc(256 * 1024, 0x61);
const BODY = 'hello, world\n';
const head = (close: boolean): string =>
  `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${BODY.length}\r\n${close ? 'Connection: close\r\n' : ''}\r\n${BODY}`;
const KEEP_ALIVE = Buffer.from(head(false), 'latin1');
const CLOSE = Buffer.from(head(true), 'latin1');
const MAX_HEAD = 64 * 1024;

function onEcho(socket: net.Socket): void {
  socket.on('error', () => socket.destroy());
  socket.pipe(socket);
}

function sendBytes(socket: net.Socket, total: number): void {
  let left = total;
  const pump = (): void => {
    while (left > 0) {
      const n = Math.min(left, CHUNK.length);
      left -= n;
      if (!socket.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) {
        socket.once('drain', pump);
        return;
      }
    }
    socket.end();
  };
  pump();
}

function onSource(socket: net.Socket): void {
  socket.on('error', () => socket.destroy());
  let line = '';
  const onData = (buf: Buffer): void => {
    line += buf.toString('latin1');
    const nl = line.indexOf('\n');
    if (nl === -1) {
      if (line.length > 32) socket.destroy();
      return;
    }
    socket.off('data', onData);
    socket.resume(); // anything after the line is ignored
    const bytes = Number(line.slice(0, nl));
    if (Number.isSafeInteger(bytes) && bytes >= 0) sendBytes(socket, bytes);
    else socket.destroy();
  };
  socket.on('data', onData);
}

/** Wants the connection closed after this response: HTTP/1.0 without keep-alive, or Connection: close. */
function wantsClose(requestHead: string): boolean {
  const lower = requestHead.toLowerCase();
  if (/\r\nconnection:[^\r]*close/.test(lower)) return true;
  return lower.slice(0, lower.indexOf('\r\n')).endsWith('http/1.0') && !/\r\nconnection:[^\r]*keep-alive/.test(lower);
}

function onHttp(socket: net.Socket): void {
  socket.on('error', () => socket.destroy());
  let pending = '';
  socket.on('data', (buf: Buffer) => {
    pending += buf.toString('latin1');
    const out: Buffer[] = [];
    let close = false;
    for (let end = pending.indexOf('\r\n\r\n'); end !== -1 && !close; end = pending.indexOf('\r\n\r\n')) {
      close = wantsClose(pending.slice(0, end));
      out.push(close ? CLOSE : KEEP_ALIVE);
      pending = pending.slice(end + 4);
    }
    if (out.length > 0) socket.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
    if (close) socket.end();
    else if (pending.length > MAX_HEAD) socket.destroy();
  });
}

/** A self-signed P-256 certificate (the clients do not check it: the proxy never looks inside TLS). */
function throwawayCert(): { key: string; cert: string } {
  const dir = mkdtempSync(join(tmpdir(), 'bench-cert-'));
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-days', '2', '-subj', '/CN=bench'], { stdio: 'ignore' });
    return { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function listen(handler: (socket: net.Socket) => void, tlsOptions?: tls.TlsOptions): Promise<number> {
  const server = tlsOptions === undefined ? net.createServer({ noDelay: true }, handler) : tls.createServer(tlsOptions, handler);
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0, backlog: 1024 }, () => resolve((server.address() as net.AddressInfo).port));
  });
}

async function main(): Promise<void> {
  const lifetimeArg = process.argv.indexOf('--lifetime-ms');
  const lifetimeMs = lifetimeArg > 0 ? Number(process.argv[lifetimeArg + 1]) : 600_000;
  setTimeout(() => process.exit(0), lifetimeMs);
  process.stdin.on('close', () => process.exit(0));
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
  const ports: UpstreamPorts = { echo: await listen(onEcho), source: await listen(onSource), http: await listen(onHttp), tls: await listen(onSource, throwawayCert()) };
  process.stdout.write(`${JSON.stringify(ports)}\n`);
}

void main();
