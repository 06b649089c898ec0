/**
 * Runs inside a private network namespace (`unshare -n`, started by netns.test.ts): the public
 * addresses the cases need live on this namespace's loopback, so allowed requests, failover and
 * unreachable addresses are exercised for real while nothing leaves the namespace. Prints one
 * JSON result per case on stdout.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { startDnsServer, type DnsBehaviour } from '../support/dns-server.js';
import { startTestProxy } from '../support/test-proxy.js';
import { requireOwnNamespaces } from '../support/own-namespace.js';

interface Case {
  id: string;
  request: string;
  dns?: string[] | string | { first: string[]; then: string[] };
  refuse?: string[];
}

const fixture = JSON.parse(readFileSync(process.argv[2] ?? '', 'utf8')) as {
  allowHosts: string[];
  connectPorts: number[];
  defaultDns: string[];
  cases: Case[];
};

const PUBLIC = ['93.184.215.14', '93.184.215.15', '2606:4700:4700::1111', '64:ff9b::808:808'];
requireOwnNamespaces(['net']);

const ip = (...args: string[]): void => {
  execFileSync('ip', args, { stdio: 'ignore' });
};
ip('link', 'set', 'lo', 'up');
for (const a of PUBLIC) ip('addr', 'add', a.includes(':') ? `${a}/128` : `${a}/32`, 'dev', 'lo');

// The upstream on both ports answers plain HTTP, and on a connection that starts with a TLS
// record, HTTP inside TLS: allowed tunnels carry TLS (the proxy requires a ClientHello naming the
// CONNECT host), while plain-HTTP cases may name port 443 too.
const web = http.createServer((req, res) => res.writeHead(200, { 'Content-Type': 'text/plain' }).end(`upstream ok ${req.url ?? ''}\n`));
const tlsServer = tls.createServer(selfSignedCert(), (socket) => web.emit('connection', socket));
const upstream = (): net.Server =>
  net.createServer((socket) => {
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.unshift(first);
      // TLS takes the socket's handle and would miss the byte read here: it gets a stream view.
      if (first[0] === 0x16) tlsServer.emit('connection', Duplex.from({ readable: socket, writable: socket }));
      else web.emit('connection', socket);
      socket.resume();
    });
  });
const servers = [upstream(), upstream()];
await Promise.all(servers.map((s, i) => new Promise<void>((resolve) => s.listen(i === 0 ? 443 : 80, '::', resolve))));

const dns = await startDnsServer();
const proxy = await startTestProxy({ policy: { allowHosts: fixture.allowHosts, connectPorts: fixture.connectPorts }, dnsServer: dns.address, dnsTimeoutMs: 800 });

function hostOf(request: string): string {
  const target = request.split(' ')[1] ?? '';
  const authority = target.startsWith('http://') ? (target.slice(7).split(/[/?#]/)[0] ?? '') : target;
  const host = authority.startsWith('[') ? authority : (authority.split(':')[0] ?? '');
  return host.toLowerCase().replace(/\.$/, '');
}

function behaviour(c: Case): DnsBehaviour {
  if (c.dns === undefined) return { answers: fixture.defaultDns };
  if (c.dns === 'TIMEOUT') return { timeout: true };
  if (c.dns === 'NXDOMAIN') return { nxdomain: true };
  if (Array.isArray(c.dns)) return { answers: c.dns };
  if (typeof c.dns === 'object') return c.dns;
  throw new Error(`unknown dns spec in ${c.id}`);
}

for (const c of fixture.cases) {
  const host = hostOf(c.request);
  // A fresh name per case, so that lookup counts are per case.
  dns.set(host, behaviour(c));
  const dialedBefore = proxy.dialed.length;
  for (const a of c.refuse ?? []) ip('addr', 'del', `${a}/32`, 'dev', 'lo');
  let result: Record<string, unknown>;
  try {
    const res = await rawRequest(proxy.port, c.request);
    let reached = false;
    if (res.status === 200 && c.request.startsWith('CONNECT')) {
      res.socket.resume();
      const secure = tls.connect({ socket: res.socket, servername: host, rejectUnauthorized: false });
      secure.on('error', () => undefined);
      secure.write('GET /through-tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      reached = (await readUntil(secure, 'upstream ok')).includes('upstream ok /through-tunnel');
      secure.destroy();
    } else {
      reached = res.body.includes('upstream ok');
    }
    res.socket.destroy();
    result = { id: c.id, status: res.status, reason: res.reason, reached, lookups: dns.questions(host), dialed: proxy.dialed.slice(dialedBefore) };
  } catch (err) {
    result = { id: c.id, error: (err as Error).message };
  } finally {
    for (const a of c.refuse ?? []) ip('addr', 'add', `${a}/32`, 'dev', 'lo');
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
await proxy.close();

// A proxy on every address of the namespace, whose own port and metrics port are connect ports:
// a listed name that resolves to one of its addresses must not make it dial itself, nor fetch its
// metrics (every sandbox's counts, on a shared proxy) for a client.
const SELF_PORT = 3128;
const METRICS_PORT = 9464;
const self = await startTestProxy({
  policy: { allowHosts: ['self.test'], connectPorts: [SELF_PORT, METRICS_PORT] },
  dnsServer: dns.address,
  dnsTimeoutMs: 800,
  listen: { host: '0.0.0.0', port: SELF_PORT },
});
const metrics = await self.proxy.listenMetrics('0.0.0.0', METRICS_PORT);
dns.set('self.test', { answers: [PUBLIC[0]!] });
for (const [id, request] of [
  ['SELF-CONNECT', `CONNECT self.test:${SELF_PORT} HTTP/1.1\r\nHost: self.test:${SELF_PORT}\r\n\r\n`],
  ['SELF-HTTP', `GET http://self.test:${SELF_PORT}/ HTTP/1.1\r\nHost: self.test:${SELF_PORT}\r\n\r\n`],
  ['SELF-METRICS-CONNECT', `CONNECT self.test:${METRICS_PORT} HTTP/1.1\r\nHost: self.test:${METRICS_PORT}\r\n\r\n`],
  ['SELF-METRICS-HTTP', `GET http://self.test:${METRICS_PORT}/metrics HTTP/1.1\r\nHost: self.test:${METRICS_PORT}\r\n\r\n`],
] as const) {
  const res = await rawRequest(SELF_PORT, request);
  res.socket.destroy();
  const detail = self.logs.filter((l) => l.event === 'decision').at(-1)?.detail;
  process.stdout.write(`${JSON.stringify({ id, status: res.status, reason: res.reason, detail, dialed: self.dialed.slice(), connections: self.proxy.openConnections })}\n`);
}
await metrics.close();
await self.close();
await dns.close();
for (const s of servers) s.close();
