/**
 * The egress proxy over real sockets on loopback: tunnels and forwarding to local upstreams
 * pinned by test hosts, every refusal decided before a dial, failover, half-closed and abruptly
 * closed tunnels, malformed input, limits, log lines and metrics.
 */
import http from 'node:http';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { REASONS } from '../../policy/index.js';
import { listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { startDnsServer } from '../support/dns-server.js';
import { policyOf, startTestProxy } from '../support/test-proxy.js';
import { needUnmet, toolMissing } from '../support/needs.js';

// Upstreams: a TCP service that answers each chunk with "echo:" + chunk and reports end of
// input, and an HTTP server that returns what it received.
const upstreamSockets = new Set<net.Socket>();
let upstreamBytes = 0;
const echo = net.createServer({ allowHalfOpen: true }, (s) => {
  upstreamSockets.add(s);
  s.on('close', () => upstreamSockets.delete(s));
  s.on('data', (d: Buffer) => {
    upstreamBytes += d.length;
    s.write(`echo:${d.toString()}`);
  });
  s.on('end', () => s.end('upstream saw end\n'));
  s.on('error', () => undefined);
});
const web = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d: Buffer) => (body += d.toString()));
  req.on('end', () => {
    const text = JSON.stringify({ url: req.url, headers: req.headers, body });
    res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) }).end(text);
  });
});
const echoPort = await listen(echo);
const webPort = await listen(web);
const dns = await startDnsServer();
t.teardown(async () => {
  echo.close();
  web.close();
  await dns.close();
});

// echo.test carries plain bytes, so its entry is an opaque tunnel; tls.test is the same service
// with the default tunnel mode, where a ClientHello naming the host must come first.
const allowHosts = [{ host: 'echo.test', tunnel: 'opaque' as const }, 'tls.test', 'web.test', { host: 'twice.test', tunnel: 'opaque' as const }, 'dead.test', '*.dns.test'];
const testHosts = {
  'echo.test': '127.0.0.1',
  'tls.test': '127.0.0.1',
  'web.test': '127.0.0.1',
  // The first address has no listener on the port: the dialer must move on to the second.
  'twice.test': ['127.0.0.2', '127.0.0.1'],
  'dead.test': '127.0.0.3',
};
const proxyT = await startTestProxy({
  policy: { allowHosts, connectPorts: [echoPort, webPort, 443, 80], testHosts },
  dnsServer: dns.address,
  dnsTimeoutMs: 500,
});
t.teardown(() => proxyT.close());
const { port } = proxyT;

t.test('CONNECT tunnels bytes both ways to the pinned address and logs the close', async (t) => {
  const res = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: evil.net:443\r\n\r\n`);
  t.equal(res.status, 200);
  res.socket.write('hello');
  t.match(await readUntil(res.socket, 'echo:hello'), 'echo:hello');
  res.socket.end();
  t.match(await readUntil(res.socket, undefined), 'upstream saw end', 'half-close reaches upstream, its answer comes back');
  await settle(() => proxyT.logs.some((l) => l.event === 'tunnel_closed' && l.host === 'echo.test'), 'close line');
  const close = proxyT.logs.find((l) => l.event === 'tunnel_closed' && l.host === 'echo.test');
  t.equal(close?.bytesUp, 5);
  t.equal(close?.bytesDown, 'echo:hello'.length + 'upstream saw end\n'.length);
  const allow = proxyT.logs.find((l) => l.event === 'decision' && l.decision === 'allow' && l.host === 'echo.test');
  t.same(allow?.addresses, ['127.0.0.1']);
  t.equal(allow?.pinnedBy, 'test_host');
  t.ok(typeof allow?.client === 'string' && typeof allow?.conn === 'number', 'per-connection fields');
});

t.test('bytes sent with the CONNECT request are forwarded', async (t) => {
  const res = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\nearly`);
  t.equal(res.status, 200);
  t.match(await readUntil(res.socket, 'echo:early'), 'echo:early');
  res.socket.destroy();
});

t.test('an abrupt client close tears down the upstream side', async (t) => {
  const res = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  res.socket.write('x');
  await readUntil(res.socket, 'echo:x');
  res.socket.resetAndDestroy();
  await settle(() => upstreamSockets.size === 0, 'upstream sockets to close');
  await settle(() => proxyT.proxy.openConnections === 0, 'proxy connections to close');
  t.pass('no socket left open');
});

t.test('an abrupt upstream close ends the client side', async (t) => {
  const res = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  res.socket.write('y');
  await readUntil(res.socket, 'echo:y');
  for (const s of upstreamSockets) s.resetAndDestroy();
  await readUntil(res.socket, undefined);
  t.ok(true, 'client side closed');
  res.socket.destroy();
});

/** Opens a tunnel and starts TLS through it with the given server name. */
async function tlsThrough(host: string, servername: string): Promise<string> {
  const res = await rawRequest(port, `CONNECT ${host}:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  res.socket.resume();
  return new Promise((resolve) => {
    const s = tls.connect({ socket: res.socket, servername });
    s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    s.on('secureConnect', () => resolve('connected'));
  });
}

t.test('a TLS server name that differs from the CONNECT host is refused', async (t) => {
  const before = upstreamBytes;
  const outcome = await tlsThrough('tls.test', 'evil.net');
  t.match(outcome, /ACCESS_DENIED|ECONNRESET|socket disconnected/i, 'the TLS client is told no');
  await settle(() => proxyT.logs.some((l) => l.event === 'decision' && l.reason === 'sni_mismatch'), 'sni_mismatch line');
  t.equal(upstreamBytes, before, 'no client byte reached the upstream');
  const line = proxyT.logs.find((l) => l.event === 'decision' && l.reason === 'sni_mismatch');
  t.equal(line?.sni, 'evil.net');
});

t.test('a matching TLS server name is passed through', async () => {
  const before = upstreamBytes;
  await tlsThrough('tls.test', 'TLS.test');
  await settle(() => upstreamBytes > before, 'the ClientHello to reach the upstream');
  await settle(() => proxyT.logs.some((l) => l.event === 'tunnel_closed' && l.sni === 'TLS.test'), 'the close line with the server name');
});

t.test('failover to the second checked address', async (t) => {
  const before = proxyT.dialed.length;
  const res = await rawRequest(port, `CONNECT twice.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.equal(res.status, 200);
  t.same(proxyT.dialed.slice(before), [`127.0.0.2:${echoPort}`, `127.0.0.1:${echoPort}`]);
  res.socket.destroy();
});

t.test('no checked address reachable is 502 connect_failed', async (t) => {
  const res = await rawRequest(port, `CONNECT dead.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.equal(res.status, 502);
  t.equal(res.reason, 'connect_failed');
  t.match(res.body, /^egress failed dead\.test:\d+: connect_failed: .*\n$/);
  const plain = await rawRequest(port, `GET http://dead.test:${webPort}/ HTTP/1.1\r\nHost: dead.test:${webPort}\r\n\r\n`);
  t.equal(plain.status, 502);
  t.equal(plain.reason, 'connect_failed');
});

/** A POST with a body and proxy credentials (`c2VjcmV0`), neither of which may reach the log. */
const postWithCredentials = `POST http://web.test:${webPort}//a//b?x=1&y=%2F HTTP/1.1\r\nHost: web.test:${webPort}\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nX-Kept: yes\r\nContent-Length: 4\r\n\r\nbody`;

t.test('plain HTTP is forwarded with the exact path, without hop-by-hop or Proxy-* fields', async (t) => {
  const res = await rawRequest(port, postWithCredentials);
  t.equal(res.status, 200);
  const echoed = JSON.parse(res.body) as { url: string; headers: Record<string, string>; body: string };
  t.equal(echoed.url, '//a//b?x=1&y=%2F', 'path as sent');
  t.equal(echoed.body, 'body');
  t.equal(echoed.headers.host, `web.test:${webPort}`);
  t.equal(echoed.headers['x-kept'], 'yes');
  for (const h of ['proxy-authorization', 'proxy-connection', 'x-secret', 'keep-alive', 'te']) t.notOk(echoed.headers[h], `${h} dropped`);
  t.notOk(echoed.headers['x-forwarded-for'], 'the client address is not disclosed');
  res.socket.destroy();
  await settle(() => proxyT.logs.some((l) => l.method === 'POST' && l.decision === 'allow' && typeof l.bytesDown === 'number'), 'the request line');
  const line = proxyT.logs.find((l) => l.method === 'POST' && l.decision === 'allow');
  t.ok((line?.bytesUp as number) > 'body'.length, 'request head and body counted');
  t.ok((line?.bytesDown as number) > res.body.length, 'response bytes counted');
});

t.test('keep-alive: several requests on one client connection', async (t) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  for (let i = 0; i < 3; i++) {
    const body = await new Promise<string>((resolve, reject) => {
      http
        .get({ host: '127.0.0.1', port, path: `http://web.test:${webPort}/n${i}`, headers: { Host: `web.test:${webPort}` }, agent }, (res) => {
          let b = '';
          res.on('data', (d: Buffer) => (b += d.toString()));
          res.on('end', () => resolve(b));
        })
        .on('error', reject);
    });
    t.match(body, `/n${i}`);
  }
  agent.destroy();
});

const refusals: { name: string; request: string; status: number; reason: string; dns?: Parameters<typeof dns.set>[1] }[] = [
  { name: 'host not allowed', request: 'CONNECT evil.net:443', status: 403, reason: 'host_not_allowed' },
  { name: 'IP literal', request: 'CONNECT 127.0.0.1:443', status: 403, reason: 'ip_literal' },
  { name: 'malformed host', request: 'CONNECT a..dns.test:443', status: 400, reason: 'malformed_host' },
  { name: 'port not allowed', request: 'CONNECT a.dns.test:22', status: 403, reason: 'port_not_allowed' },
  { name: 'private answer', request: 'CONNECT priv.dns.test:443', status: 403, reason: 'address_not_allowed', dns: { answers: ['10.0.0.1'] } },
  { name: 'one private answer among public ones', request: 'CONNECT mixed.dns.test:443', status: 403, reason: 'address_not_allowed', dns: { answers: ['93.184.215.14', '::ffff:169.254.169.254'] } },
  { name: 'NXDOMAIN', request: 'CONNECT gone.dns.test:443', status: 502, reason: 'dns_failed', dns: { nxdomain: true } },
  { name: 'DNS timeout', request: 'CONNECT slow.dns.test:443', status: 504, reason: 'dns_timeout', dns: { timeout: true } },
  { name: 'plain HTTP, host not allowed', request: 'GET http://evil.net/', status: 403, reason: 'host_not_allowed' },
  { name: 'plain HTTP, private answer', request: 'GET http://priv2.dns.test/', status: 403, reason: 'address_not_allowed', dns: { answers: ['127.0.0.1'] } },
  { name: 'origin-form request', request: 'GET /', status: 400, reason: 'bad_request' },
  { name: 'unsupported scheme', request: 'GET ftp://a.dns.test/', status: 400, reason: 'bad_request' },
  { name: 'CONNECT without a port', request: 'CONNECT a.dns.test', status: 400, reason: 'bad_request' },
];
/** The host a refusal row names. */
const hostOf = (c: (typeof refusals)[number]): string => (c.request.split(' ')[1] ?? '').replace(/^http:\/\//, '').split(/[:/]/)[0] ?? '';
/** Sends a refusal row's request, with its DNS behaviour set. */
function sendRefusal(c: (typeof refusals)[number]): ReturnType<typeof rawRequest> {
  const host = hostOf(c);
  if (c.dns) dns.set(host, c.dns);
  const hostHeader = c.request.startsWith('GET http') ? `Host: ${host}\r\n` : 'Host: x\r\n';
  return rawRequest(port, `${c.request} HTTP/1.1\r\n${hostHeader}\r\n`);
}
for (const c of refusals) {
  t.test(`refusal: ${c.name}`, async (t) => {
    const host = hostOf(c);
    const before = proxyT.dialed.length;
    const res = await sendRefusal(c);
    t.equal(res.status, c.status);
    t.equal(res.reason, c.reason);
    t.match(res.body, new RegExp(`^egress (denied|failed).*: ${c.reason}: .+; .+\\n$`), 'one line naming the reason and the remedy');
    t.match(res.head, /connection: close/i);
    t.match(res.head.split('\r\n')[0], new RegExp(`^HTTP/1\\.1 ${c.status} [A-Za-z ]+ \\(${c.reason}: [ -~]+\\)$`), 'the status line says why too');
    t.same(proxyT.dialed.slice(before), [], 'nothing dialed');
    if (c.dns && !('timeout' in c.dns)) t.equal(dns.questions(host), 1, 'resolved once');
  });
}

t.test('a client that shows only the status line of a refused CONNECT shows why (Python\'s http.client, as pip uses it)', async (t) => {
  const missing = toolMissing('python3', ['--version'], 'apt-get install python3');
  if (missing) return needUnmet(t, missing);
  // http.client's tunnel raises OSError("Tunnel connection failed: <status> <reason phrase>"),
  // which pip prints inside its ProxyError; the body and the header it never shows.
  const script = `import http.client, sys
c = http.client.HTTPSConnection("127.0.0.1", ${port}, timeout=10)
c.set_tunnel("evil.net", 443)
try:
    c.connect()
except OSError as e:
    print(e)`;
  // Not spawnSync: the proxy answers on this process's event loop.
  const out = await promisify(execFile)('python3', ['-c', script], { encoding: 'utf8', timeout: 30_000 });
  t.equal(out.stdout, 'Tunnel connection failed: 403 Forbidden (host_not_allowed: evil.net is not on the allowlist)\n', out.stderr);
});

const malformed: { name: string; bytes: string; status: number; reason: string }[] = [
  { name: 'garbage', bytes: '\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03', status: 400, reason: 'bad_request' },
  { name: 'bare LF', bytes: 'CONNECT echo.test:443 HTTP/1.1\nHost: x\n\n', status: 400, reason: 'bad_request' },
  { name: 'NUL in the request line', bytes: 'CONNECT echo.test\x00:443 HTTP/1.1\r\n\r\n', status: 400, reason: 'bad_request' },
  { name: 'HTTP/2 preface', bytes: 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', status: 400, reason: 'bad_request' },
  { name: 'two Host headers', bytes: 'GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\nHost: evil.net\r\n\r\n', status: 400, reason: 'bad_request' },
  { name: 'Host header for another host', bytes: 'GET http://web.test/ HTTP/1.1\r\nHost: evil.net\r\n\r\n', status: 400, reason: 'bad_request' },
  { name: 'userinfo', bytes: 'GET http://evil.net@web.test/ HTTP/1.1\r\nHost: web.test\r\n\r\n', status: 400, reason: 'bad_request' },
  { name: 'chunked and Content-Length', bytes: 'POST http://web.test/ HTTP/1.1\r\nHost: web.test\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n', status: 400, reason: 'bad_request' },
  { name: 'oversized head', bytes: `GET http://web.test/ HTTP/1.1\r\nHost: web.test\r\nX: ${'a'.repeat(20_000)}\r\n\r\n`, status: 431, reason: 'headers_too_large' },
];
for (const c of malformed) {
  t.test(`malformed: ${c.name} gets ${c.status} ${c.reason}`, async (t) => {
    const res = await rawRequest(port, Buffer.from(c.bytes, 'latin1'));
    t.equal(res.status, c.status);
    t.equal(res.reason, c.reason);
  });
}

t.test('a client gone while its request is decided still gets exactly one decision line', async (t) => {
  for (const [name, request] of [
    ['late1.dns.test', 'CONNECT late1.dns.test:443 HTTP/1.1\r\n\r\n'],
    ['late2.dns.test', 'GET http://late2.dns.test/ HTTP/1.1\r\nHost: late2.dns.test\r\n\r\n'],
  ] as const) {
    dns.set(name, { answers: ['93.184.215.14'], delayMs: 200 });
    const before = proxyT.dialed.length;
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    socket.on('error', () => undefined);
    await settle(() => dns.questions(name) > 0, 'the lookup');
    socket.resetAndDestroy(); // abruptly: a FIN alone would be a half-close, which a tunnel may carry
    await settle(() => proxyT.logs.some((l) => l.event === 'decision' && l.host === name), 'the decision line');
    await new Promise((r) => setTimeout(r, 300));
    const lines = proxyT.logs.filter((l) => l.event === 'decision' && l.host === name);
    t.equal(lines.length, 1, `${name}: one line`);
    t.match(lines[0], { decision: 'allow', error: 'client_closed' });
    t.same(proxyT.dialed.slice(before), [], `${name}: nothing dialed`);
  }
});

t.test('a request head that never completes times out with 408', async (t) => {
  const slow = await startTestProxy({ policy: { allowHosts: ['a.example'] }, limits: { headerTimeoutMs: 300 } });
  t.teardown(() => slow.close());
  const res = await rawRequest(slow.port, 'CONNECT a.example:443 HTTP/1.1\r\nX-Slow: ');
  t.equal(res.status, 408);
  t.equal(res.reason, 'header_timeout');
  res.socket.destroy();
  await settle(() => slow.proxy.openConnections === 0, 'connection to close');
});

t.test('one client holds at most a quarter of the connections: the others, and the health check, are still served', async (t) => {
  const limited = await startTestProxy({ policy: { allowHosts: ['a.example'] }, limits: { maxConnections: 40, maxConnectionsPerClient: 40 } });
  t.teardown(() => limited.close());
  const connect = (localAddress: string): Promise<net.Socket> =>
    new Promise((resolve) => {
      const s = net.connect({ port: limited.port, host: '127.0.0.1', localAddress }, () => resolve(s));
    });
  const held = await Promise.all(Array.from({ length: 10 }, () => connect('127.0.0.2')));
  t.teardown(() => held.forEach((s) => s.destroy()));
  await settle(() => limited.proxy.openConnections === 10, 'its share open');
  const over = await rawRequest(limited.port, 'GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.2');
  t.equal(over.reason, 'client_limit', 'past a quarter of 40, the client is refused');
  t.match(limited.logs.find((l) => l.reason === 'client_limit')?.detail, /10 connections are open from 127\.0\.0\.2 \(its share: 10\)/);
  const other = await connect('127.0.0.3');
  t.teardown(() => other.destroy());
  await settle(() => limited.proxy.openConnections === 11, 'another client is served');
  const refused = await rawRequest(limited.port, 'GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.3');
  t.not(refused.reason, 'client_limit', 'and its requests are decided on');
  const health = await rawRequest(limited.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.2');
  t.equal(health.status, 200, 'the health check is answered even from the client at its share');
});

t.test('connection limits answer 429 per client and 503 overall, with Retry-After', async (t) => {
  const limited = await startTestProxy({ policy: { allowHosts: ['a.example'] }, limits: { maxConnectionsPerClient: 2, maxConnections: 3 } });
  t.teardown(() => limited.close());
  const held = await Promise.all([0, 1].map(() => new Promise<net.Socket>((resolve) => { const s = net.connect(limited.port, '127.0.0.1', () => resolve(s)); })));
  await settle(() => limited.proxy.openConnections === 2, 'two connections');
  const request = 'GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n';
  const third = await rawRequest(limited.port, request);
  t.equal(third.status, 429);
  t.equal(third.reason, 'client_limit');
  t.match(third.head, /retry-after: 1/i);
  const other = await new Promise<net.Socket>((resolve) => { const s = net.connect({ port: limited.port, host: '127.0.0.1', localAddress: '127.0.0.2' }, () => resolve(s)); });
  await settle(() => limited.proxy.openConnections === 3, 'three connections');
  // Both limits are reached now; the total is checked first.
  const fourth = await rawRequest(limited.port, request, '127.0.0.1');
  t.equal(fourth.status, 503);
  t.equal(fourth.reason, 'too_many_connections');
  // The health check has slots of its own: answered, whoever holds the connections.
  const health = await rawRequest(limited.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', '127.0.0.1');
  t.equal(health.status, 200, '/healthz is answered with every slot taken');
  const overall = await new Promise<string>((resolve) => {
    const s = net.connect({ port: limited.port, host: '127.0.0.1', localAddress: '127.0.0.3' });
    let text = '';
    s.on('data', (d: Buffer) => (text += d.toString()));
    s.on('close', () => resolve(text));
  });
  t.match(overall, /^HTTP\/1\.1 503 /);
  t.match(overall, /x-egress-reason: too_many_connections/i);
  for (const s of [...held, other]) s.destroy();
});

t.test('a client that never reads stalls only its own tunnel', async (t) => {
  const stalled = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  stalled.socket.pause();
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  for (let i = 0; i < 320; i++) stalled.socket.write(chunk); // 20 MiB echoed back to a reader that never reads
  await new Promise((r) => setTimeout(r, 300));
  const other = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  const started = Date.now();
  other.socket.write('ping');
  t.match(await readUntil(other.socket, 'echo:ping', 2_000), 'echo:ping');
  t.ok(Date.now() - started < 1_000, `another tunnel answers at once (${Date.now() - started} ms)`);
  other.socket.destroy();
  stalled.socket.destroy();
});

t.test('idle tunnels and tunnels past their lifetime are closed', async (t) => {
  // Two proxies. The idle tunnel's has a short idle timeout, far below its lifetime. The busy
  // tunnel's idle timeout is twenty of its writes, so that a pause of the test process or of the
  // machine (the writer and the proxy share one event loop) cannot make a busy tunnel look idle;
  // its lifetime is twice that timeout, so a tunnel that the writes did not keep open would close
  // at the idle timeout, well before the bound below.
  const policy = { allowHosts: [{ host: 'echo.test', tunnel: 'opaque' as const }], connectPorts: [echoPort], testHosts: { 'echo.test': '127.0.0.1' } };
  const shortIdle = await startTestProxy({ policy, limits: { idleTimeoutMs: 300, maxTunnelMs: 3_000 } });
  t.teardown(() => shortIdle.close());
  const longIdle = await startTestProxy({ policy, limits: { idleTimeoutMs: 2_000, maxTunnelMs: 4_000 } });
  t.teardown(() => longIdle.close());
  const open = (proxyPort: number): Promise<net.Socket> =>
    rawRequest(proxyPort, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`).then((r) => r.socket);
  const closedBy = (p: typeof shortIdle): unknown[] => p.logs.filter((l) => l.event === 'tunnel_closed').map((l) => l.closedBy);
  const idle = await open(shortIdle.port);
  const idleStart = Date.now();
  await readUntil(idle, undefined);
  t.ok(Date.now() - idleStart < 2_800, `the idle tunnel was closed before its lifetime ended (${Date.now() - idleStart} ms)`);
  await settle(() => closedBy(shortIdle).length === 1, 'its close line');
  t.same(closedBy(shortIdle), ['idle_timeout'], 'by the idle timeout');
  const busy = await open(longIdle.port);
  const busyStart = Date.now();
  const ticker = setInterval(() => busy.write('.'), 100);
  busy.resume();
  await new Promise<void>((resolve) => busy.once('close', () => resolve()));
  clearInterval(ticker);
  const lived = Date.now() - busyStart;
  // The lifetime runs from the CONNECT, a moment before busyStart: the lower bound leaves a second
  // for that and stays a second above the idle timeout.
  t.ok(lived >= 3_000 && lived < 8_000, `a busy tunnel lived until its limit (${lived} ms)`);
  await settle(() => closedBy(longIdle).length === 1, 'its close line');
  t.same(closedBy(longIdle), ['max_lifetime'], 'by its lifetime');
});

t.test('a new policy applies to new requests and leaves open tunnels alone', async (t) => {
  const res = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.equal(res.status, 200);
  proxyT.proxy.setPolicy(policyOf({ allowHosts: ['web.test'], connectPorts: [echoPort, webPort], testHosts }));
  res.socket.write('still');
  t.match(await readUntil(res.socket, 'echo:still'), 'echo:still', 'open tunnel still works');
  const denied = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  t.equal(denied.reason, 'host_not_allowed');
  proxyT.proxy.setPolicy(policyOf({ allowHosts, connectPorts: [echoPort, webPort, 443, 80], testHosts }));
  res.socket.destroy();
});

t.test('health endpoint and metrics', async (t) => {
  // A proxy of its own, so the counts below are this test's alone.
  const own = await startTestProxy({ policy: { allowHosts: [{ host: 'echo.test', tunnel: 'opaque' }, '*.dns.test'], connectPorts: [echoPort, 443], testHosts }, dnsServer: dns.address, dnsTimeoutMs: 300 });
  t.teardown(() => own.close());
  const res = await rawRequest(own.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(res.status, 200);
  t.equal(res.body, 'ok\n');
  res.socket.destroy();
  for (let i = 0; i < 2; i++) (await rawRequest(own.port, 'CONNECT evil.net:443 HTTP/1.1\r\n\r\n')).socket.destroy();
  dns.set('metrics-slow.dns.test', { timeout: true });
  (await rawRequest(own.port, 'CONNECT metrics-slow.dns.test:443 HTTP/1.1\r\n\r\n')).socket.destroy();
  const tunnel = await rawRequest(own.port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\n\r\n`);
  tunnel.socket.write('abc');
  await readUntil(tunnel.socket, 'echo:abc');
  tunnel.socket.end();
  await readUntil(tunnel.socket, undefined); // the echo service answers the half-close, then closes
  await settle(() => own.logs.some((l) => l.event === 'tunnel_closed'), 'the tunnel to close');
  const text = await own.proxy.metrics.metrics();
  t.match(text, /egress_decisions_total\{outcome="deny",reason="host_not_allowed"\} 2\n/);
  t.match(text, /egress_decisions_total\{outcome="allow",reason="allowed"\} 1\n/);
  t.match(text, /egress_bytes_total\{direction="up",kind="tunnel"\} 3\n/);
  t.match(text, /egress_bytes_total\{direction="down",kind="tunnel"\} 25\n/, 'echo:abc and the answer to the half-close');
  t.match(text, /egress_dns_seconds_count\{outcome="dns_timeout"\} 1\n/);
  t.match(text, /egress_open_tunnels 0\n/);
});

/**
 * Some of everything above (every refusal and malformed row, a POST with a body and credentials,
 * tunnels reset and half-closed), for the cases below that judge what traffic leaves behind (log
 * lines, open connections): run in the whole file they judge all of it, run alone this.
 */
async function mixedTraffic(): Promise<void> {
  for (const c of refusals) (await sendRefusal(c)).socket.destroy();
  for (const c of malformed) (await rawRequest(port, Buffer.from(c.bytes, 'latin1'))).socket.destroy();
  const post = await rawRequest(port, postWithCredentials);
  post.socket.destroy();
  const reset = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  reset.socket.write('x');
  await readUntil(reset.socket, 'echo:x');
  reset.socket.resetAndDestroy();
  const half = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: x\r\n\r\n`);
  half.socket.end('y');
  await readUntil(half.socket, undefined);
  half.socket.destroy();
}

t.test('every decision line has the fixed fields; bodies are never logged', async (t) => {
  await mixedTraffic();
  await settle(() => proxyT.logs.filter((l) => l.event === 'tunnel_closed').length >= 2, 'the tunnels to close');
  const decisions = proxyT.logs.filter((l) => l.event === 'decision');
  t.ok(decisions.length > 20);
  // Each path's line: the connection and client, and an allowed request's destination (one
  // builder, destinationOf) or a refusal's catalogued reason and its sentence.
  const paths = new Set<string>();
  for (const l of decisions) {
    t.match(l, { conn: Number, client: /^127\.0\.0\.1:\d+$/ }, 'the connection and client');
    if (l.decision === 'allow') {
      paths.add(`allow ${String(l.method)}`);
      t.match(l, { host: /^[a-z0-9.-]+$/, port: Number, rule: String, addresses: Array, pinnedBy: /^(dns|test_host)$/ }, `allow ${String(l.method)}: the destination`);
      t.ok((l.addresses as unknown[]).length > 0, 'the checked addresses');
    } else {
      paths.add(`deny ${String(l.method)}`);
      t.equal(l.decision, 'deny');
      t.ok(Object.hasOwn(REASONS, String(l.reason)), `deny: a catalogued reason (${String(l.reason)})`);
      t.match(l, { detail: /\S/ }, 'deny: its sentence');
    }
  }
  t.ok(paths.has('allow CONNECT') && paths.has('allow POST') && paths.has('deny CONNECT') && paths.has('deny GET'), `every path had a line: ${[...paths].join(', ')}`);
  t.notMatch(JSON.stringify(proxyT.logs), /c2VjcmV0|"body"/, 'no credentials or bodies in the log');
});

t.test('after all of this the proxy holds no connection', async (t) => {
  await mixedTraffic();
  await settle(() => proxyT.proxy.openConnections === 0, 'all connections to close', 5_000);
  t.pass('back to zero');
});

t.test('the head deadline counts from the accept, whatever path the first bytes take', async (t) => {
  const slow = await startTestProxy({ policy: { allowHosts: ['a.example'] }, limits: { headerTimeoutMs: 1_000 } });
  t.teardown(() => slow.close());
  // Nothing at all: refused at the deadline.
  const silent = net.connect(slow.port, '127.0.0.1');
  const started = Date.now();
  const text = await readUntil(silent, undefined, 5_000);
  t.match(text, /^HTTP\/1\.1 408 /);
  t.match(text, /x-egress-reason: header_timeout/i);
  t.ok(Date.now() - started < 2_500, `answered at the deadline (${Date.now() - started} ms)`);
  // A first byte late, then nothing: the deadline is not restarted by the first byte.
  // Written 700 ms in, the byte leaves 300 ms of the first deadline; a restarted one would give
  // 1,000 ms more. The bound sits just below that, so a loaded machine has 680 ms of room (with a
  // 400 ms deadline it had 280, which a stall of this process could take).
  const late = net.connect(slow.port, '127.0.0.1');
  let wroteAt = 0;
  setTimeout(() => {
    late.write('G');
    wroteAt = Date.now();
  }, 700);
  const lateText = await readUntil(late, undefined, 5_000);
  t.match(lateText, /^HTTP\/1\.1 408 /);
  t.ok(wroteAt > 0 && Date.now() - wroteAt < 980, `still at the first deadline (${Date.now() - wroteAt} ms after the byte)`);
  await settle(() => slow.proxy.openConnections === 0, 'connections to close');
});

t.test('a client that closes before sending anything frees its slot at once', async (t) => {
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  await new Promise<void>((r) => socket.once('connect', () => r()));
  await settle(() => proxyT.proxy.openConnections === 1, 'the connection to count');
  socket.end();
  // Well before the 10 s head deadline.
  await settle(() => proxyT.proxy.openConnections === 0, 'the slot to be freed', 2_000);
  t.pass('freed');
  socket.destroy();
});

t.test('a CONNECT hiding a framing field behind 2000 others is still refused', async (t) => {
  const filler = 'a:\r\n'.repeat(2_000);
  const res = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\n${filler}Transfer-Encoding: chunked\r\n\r\n`);
  t.equal(res.status, 400);
  t.equal(res.reason, 'bad_request');
  res.socket.destroy();
});

t.test('an Upgrade request is refused with its reason, one decision line', async (t) => {
  const before = proxyT.logs.length;
  const res = await rawRequest(port, `GET http://web.test:${webPort}/ HTTP/1.1\r\nHost: web.test:${webPort}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nGET http://web.test:${webPort}/two HTTP/1.1\r\nHost: web.test:${webPort}\r\n\r\n`);
  t.equal(res.status, 400);
  t.equal(res.reason, 'bad_request');
  t.match(res.body, /protocol upgrades are not forwarded/);
  res.socket.destroy();
  await settle(() => proxyT.logs.slice(before).some((l) => l.event === 'decision'), 'the line');
  t.same(proxyT.logs.slice(before).filter((l) => l.event === 'decision').map((l) => l.reason), ['bad_request']);
});

t.test('a client that resets after a completed request gets no refusal line', async (t) => {
  const before = proxyT.logs.length;
  const socket = net.connect(port, '127.0.0.1');
  socket.write(`GET http://web.test:${webPort}/done HTTP/1.1\r\nHost: web.test:${webPort}\r\n\r\n`);
  await readUntil(socket, '"body"');
  socket.resetAndDestroy();
  await settle(() => proxyT.logs.slice(before).some((l) => l.event === 'decision' && l.decision === 'allow'), 'the allow line');
  await new Promise((r) => setTimeout(r, 200));
  t.same(proxyT.logs.slice(before).filter((l) => l.event === 'decision').map((l) => l.decision), ['allow']);
});

t.test('a head that times out gets one refusal, not one from each timer', async (t) => {
  const slow = await startTestProxy({ policy: { allowHosts: ['a.example'] }, limits: { headerTimeoutMs: 300 } });
  t.teardown(() => slow.close());
  const res = await rawRequest(slow.port, 'GET http://a.example/ HTTP/1.1\r\n');
  t.equal(res.status, 408);
  res.socket.destroy();
  await new Promise((r) => setTimeout(r, 1_200));
  t.equal(slow.logs.filter((l) => l.event === 'decision').length, 1);
});
