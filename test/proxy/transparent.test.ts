/**
 * Transparent mode in-process, on real sockets on loopback: the proxy's transparent listeners on
 * 127.0.0.2, upstreams on 127.0.0.1 pinned by test hosts. The listeners use the port map (they
 * listen on free ports and decide on the upstreams' ports, as a Kubernetes Service's remapping
 * would), so no test needs a privileged port. Real clients: Node's TLS (OpenSSL), curl, and a DNS
 * resolver (c-ares).
 *
 * TLS is routed by the ClientHello's server name, through the same decision as a CONNECT host,
 * and refused with a TLS alert (access_denied for the policy, internal_error for the network);
 * HTTP by its Host header, refused with the explicit proxy's readable refusals. Both share the
 * explicit proxy's limits and decision lines (marked `via: "transparent"`), and the explicit
 * proxy keeps working beside them.
 */
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import { promises as dns } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import t, { type Test } from 'tap';
import type { Transparent } from '../../proxy/transparent/transparent.js';
import type { TransparentPort } from '../../proxy/transparent/transparent-ports.js';
import { startDnsServer } from '../support/dns-server.js';
import { listen } from '../support/loopback.js';
import { needUnmet, toolMissing } from '../support/needs.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { startOpensslUpstream } from '../support/tls-upstreams.js';
import { policyOf, startTestProxy, type TestProxy } from '../support/test-proxy.js';

const ADDRESS = '127.0.0.2';
const ACCESS_DENIED = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]);
const INTERNAL_ERROR = Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50]);

// An HTTPS server (Node's OpenSSL) saying which name it was asked for; a plain HTTP server
// echoing the request line and Host it got.
const cert = selfSignedCert(['tls.test']);
const httpsServer = https.createServer(cert, (req, res) => res.end(`https ${(req.socket as tls.TLSSocket & { servername?: string }).servername} ${req.url}\n`));
const webServer = http.createServer((req, res) => res.end(`http ${req.method} ${req.url} host=${req.headers.host}\n`));
const tlsPort = await listen(httpsServer as unknown as net.Server);
const webPort = await listen(webServer);
const retrying = await startOpensslUpstream('P-256');
const deadServer = net.createServer();
const deadPort = await listen(deadServer);
// Nothing listens there any more: a connect to it fails at once.
await new Promise<void>((r) => deadServer.close(() => r()));
const dnsServer = await startDnsServer();
dnsServer.set('private.dns.test', { answers: ['10.0.0.1'] });
t.teardown(async () => {
  httpsServer.close();
  httpsServer.closeAllConnections();
  webServer.close();
  webServer.closeAllConnections();
  await retrying.close();
  await dnsServer.close();
});

const policyInput = {
  allowHosts: ['tls.test', 'web.test', '*.wild.test', '*.dns.test', 'dead.test', 'retry.test', { host: 'opaque.test', tunnel: 'opaque' as const }],
  connectPorts: [tlsPort, webPort, retrying.port, 443],
  testHosts: { 'tls.test': '127.0.0.1', 'web.test': '127.0.0.1', 'x.wild.test': '127.0.0.1', 'opaque.test': '127.0.0.1', 'retry.test': '127.0.0.1', 'dead.test': '127.0.0.3' },
};

interface Setup {
  readonly proxy: TestProxy;
  readonly transparent: Transparent;
  /** The listening port for a dialled one. */
  port(dialled: number): number;
}

async function setup(t: Test, limits = {}): Promise<Setup> {
  const proxy = await startTestProxy({ policy: policyInput, dnsServer: dnsServer.address, limits: { helloTimeoutMs: 500, ...limits } });
  const ports: TransparentPort[] = [
    { kind: 'dns', dialled: 53, listen: 0 },
    { kind: 'tls', dialled: tlsPort, listen: 0 },
    { kind: 'tls', dialled: retrying.port, listen: 0 },
    { kind: 'tls', dialled: 443, listen: 0 },
    { kind: 'tls', dialled: deadPort, listen: 0 },
    { kind: 'http', dialled: webPort, listen: 0 },
  ];
  const transparent = await proxy.proxy.listenTransparent({ listen: ADDRESS, answer: ADDRESS, ports });
  t.teardown(() => proxy.close());
  return {
    proxy,
    transparent,
    port: (dialled) => {
      const p = transparent.ports.find((x) => x.dialled === dialled);
      if (p === undefined) throw new Error(`no listener for ${dialled}`);
      return p.listen;
    },
  };
}

/** A TLS client to the transparent listener: what the server said, or the error that ended it. */
function tlsClient(port: number, servername: string | undefined, options: tls.ConnectionOptions = {}): Promise<{ text: string; error?: string }> {
  return new Promise((resolve) => {
    let text = '';
    const socket = tls.connect({ host: ADDRESS, port, rejectUnauthorized: false, ...(servername === undefined ? {} : { servername }), ...options });
    socket.on('data', (d: Buffer) => (text += d.toString()));
    socket.on('error', (err: NodeJS.ErrnoException) => resolve({ text, error: err.code ?? err.message }));
    socket.on('close', () => resolve({ text }));
    socket.on('secureConnect', () => socket.write('GET /hello HTTP/1.1\r\nHost: tls.test\r\nConnection: close\r\n\r\n'));
  });
}

/** Raw bytes to a transparent listener; what came back before it closed. */
async function rawExchange(port: number, bytes: Buffer | undefined): Promise<Buffer> {
  const socket = net.connect({ host: ADDRESS, port });
  socket.on('error', () => undefined);
  await new Promise((r) => socket.once('connect', r));
  if (bytes !== undefined) socket.write(bytes);
  const out = await readUntil(socket, undefined, 5_000);
  socket.destroy();
  return Buffer.from(out, 'latin1');
}

function curl(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('curl', ['-sS', '--max-time', '5', ...args], (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

const decisions = (proxy: TestProxy): Record<string, unknown>[] => proxy.logs.filter((l) => l.event === 'decision');

t.test('TLS: routed by the server name, through the same checks, to the pinned upstream', async (t) => {
  const s = await setup(t);
  const ok = await tlsClient(s.port(tlsPort), 'tls.test');
  t.equal(ok.text.split('\r\n\r\n')[1], 'https tls.test /hello\n', 'the allowlisted server answered, over TLS end to end');
  const curlMissing = toolMissing('curl', ['--version'], 'apt-get install curl');
  if (curlMissing !== undefined) needUnmet(t, curlMissing);
  else {
    const c = await curl('-k', '--connect-to', `tls.test:${tlsPort}:${ADDRESS}:${s.port(tlsPort)}`, `https://tls.test:${tlsPort}/from-curl`);
    t.same([c.code, c.stdout], [0, 'https tls.test /from-curl\n'], `curl https ${c.stderr}`);
  }
  const wild = await tlsClient(s.port(tlsPort), 'X.Wild.Test.');
  t.match(wild.text, /https X\.Wild\.Test\. \/hello/, 'a wildcard match, case and a trailing dot normalised as for CONNECT');
  await settle(() => decisions(s.proxy).length === 3 && s.proxy.logs.filter((l) => l.event === 'tunnel_closed').length === 3, 'three lines and three close lines');
  t.match(decisions(s.proxy)[0], { decision: 'allow', via: 'transparent', host: 'tls.test', port: tlsPort, rule: 'tls.test', addresses: ['127.0.0.1'], sni: 'tls.test', tunnel: 'tls', pinnedBy: 'test_host', dialed: [`127.0.0.1:${tlsPort}`] });
  t.notOk('method' in decisions(s.proxy)[0]!, 'no method: there was no request line');
  t.match(s.proxy.logs.find((l) => l.event === 'tunnel_closed'), { via: 'transparent', host: 'tls.test', sni: 'tls.test' });
});

t.test('TLS: a retry (HelloRetryRequest) is watched as in a tls tunnel', async (t) => {
  const s = await setup(t);
  const r = await tlsClient(s.port(retrying.port), 'retry.test', { ecdhCurve: 'X25519:P-256' });
  t.equal(r.error, undefined);
  t.match(r.text, /^openssl retry\.test/, 'the second hello named the same host and passed');
  t.same(retrying.handshakes.slice(-1), ['retry.test']);
});

t.test('TLS refusals: an alert and a decision line, nothing upstream', async (t) => {
  const s = await setup(t, {});
  const rows: { name: string; run: () => Promise<unknown>; reason: string; check: (out: unknown) => void }[] = [
    {
      name: 'a name off the allowlist',
      run: () => tlsClient(s.port(tlsPort), 'evil.test'),
      reason: 'host_not_allowed',
      check: (out) => t.match(out, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED', text: '' }, 'access_denied'),
    },
    {
      name: 'no server name',
      run: () => tlsClient(s.port(tlsPort), undefined),
      reason: 'sni_missing',
      check: (out) => t.match(out, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED' }),
    },
    {
      name: 'an IP literal as the server name',
      run: () => tlsClient(s.port(tlsPort), '127.0.0.1'),
      reason: 'ip_literal',
      check: (out) => t.match(out, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED' }),
    },
    {
      name: 'an empty record before the hello (malformed)',
      run: () => rawExchange(s.port(tlsPort), Buffer.from([0x16, 0x03, 0x01, 0x00, 0x00])),
      reason: 'tls_hello_malformed',
      check: (out) => t.same(out, ACCESS_DENIED, 'the alert, and nothing else'),
    },
    {
      name: 'plain HTTP to a TLS port',
      run: () => rawExchange(s.port(tlsPort), Buffer.from('GET / HTTP/1.1\r\nHost: tls.test\r\n\r\n')),
      reason: 'sni_missing',
      check: (out) => t.same((out as Buffer).length, 0, 'closed without an alert the client would not read'),
    },
    {
      name: 'no hello in time',
      run: () => rawExchange(s.port(tlsPort), undefined),
      reason: 'tls_hello_timeout',
      check: (out) => t.same(out, ACCESS_DENIED),
    },
    {
      name: 'a name whose DNS gives a private address',
      run: () => tlsClient(s.port(443), 'private.dns.test'),
      reason: 'address_not_allowed',
      check: (out) => t.match(out, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED' }),
    },
    {
      name: 'a dialled port that is not a connect port',
      run: () => tlsClient(s.port(deadPort), 'dead.test'),
      reason: 'port_not_allowed',
      check: (out) => t.match(out, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED' }),
    },
  ];
  for (const row of rows) {
    const before = decisions(s.proxy).length;
    row.check(await row.run());
    await settle(() => decisions(s.proxy).length === before + 1, `${row.name}: one line`);
    t.match(decisions(s.proxy)[before], { decision: 'deny', reason: row.reason, via: 'transparent' }, row.name);
  }
  t.match(decisions(s.proxy).find((l) => l.reason === 'host_not_allowed'), { sni: 'evil.test', host: 'evil.test', port: tlsPort });
});

t.test('TLS: a connect failure is an internal_error alert', async (t) => {
  const proxy = await startTestProxy({ policy: { ...policyInput, connectPorts: [deadPort] }, limits: { connectTimeoutMs: 1_000 } });
  t.teardown(() => proxy.close());
  const transparent = await proxy.proxy.listenTransparent({ listen: ADDRESS, answer: ADDRESS, ports: [{ kind: 'tls', dialled: deadPort, listen: 0 }] });
  const hello = await tlsClient(transparent.ports[0]!.listen, 'dead.test');
  t.match(hello, { error: 'ERR_SSL_TLSV1_ALERT_INTERNAL_ERROR' });
  await settle(() => decisions(proxy).length === 1, 'its line');
  t.match(decisions(proxy)[0], { reason: 'connect_failed', host: 'dead.test', sni: 'dead.test', via: 'transparent' });
  const raw = await rawExchange(transparent.ports[0]!.listen, await (await import('../support/tls-hello.js')).captureHello({ servername: 'dead.test' }));
  t.same(raw, INTERNAL_ERROR);
});

t.test('TLS: an opaque entry reached transparently is still held to its ClientHello', async (t) => {
  const s = await setup(t);
  const r = await tlsClient(s.port(tlsPort), 'opaque.test');
  t.match(r.text, /https opaque\.test/);
  await settle(() => decisions(s.proxy).length === 1, 'its line');
  t.match(decisions(s.proxy)[0], { decision: 'allow', rule: 'opaque.test', tunnel: 'tls' });
});

t.test('HTTP: routed by the Host header, with the explicit proxy\'s framing rules and refusals', async (t) => {
  const s = await setup(t);
  const port = s.port(webPort);
  const authority = `web.test:${webPort}`;
  const ok = await rawRequest(port, `GET /path?q=1 HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`, ADDRESS);
  t.same([ok.status, ok.body], [200, `http GET /path?q=1 host=${authority}\n`], 'forwarded, Host as checked');
  const health = await rawRequest(port, `GET /healthz HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`, ADDRESS);
  t.same([health.status, health.body], [200, `http GET /healthz host=${authority}\n`], '/healthz is the server\'s, not the proxy\'s');
  const curlMissing = toolMissing('curl', ['--version'], 'apt-get install curl');
  if (curlMissing === undefined) {
    const c = await curl('--connect-to', `web.test:${webPort}:${ADDRESS}:${port}`, `http://${authority}/from-curl`);
    t.same([c.code, c.stdout], [0, `http GET /from-curl host=${authority}\n`], `curl http ${c.stderr}`);
  }
  const rows = [
    { name: 'a name off the allowlist', request: `GET / HTTP/1.1\r\nHost: evil.test:${webPort}\r\n\r\n`, status: 403, reason: 'host_not_allowed' },
    { name: 'no Host', request: 'GET / HTTP/1.0\r\n\r\n', status: 400, reason: 'bad_request' },
    { name: 'two Host headers', request: `GET / HTTP/1.1\r\nHost: ${authority}\r\nHost: evil.test:${webPort}\r\n\r\n`, status: 400, reason: 'bad_request' },
    { name: 'Host with another port than the one dialled', request: `GET / HTTP/1.1\r\nHost: web.test:8080\r\n\r\n`, status: 400, reason: 'bad_request' },
    { name: 'Host without a port, on a port other than 80', request: 'GET / HTTP/1.1\r\nHost: web.test\r\n\r\n', status: 400, reason: 'bad_request' },
    { name: 'Host with userinfo', request: `GET / HTTP/1.1\r\nHost: x@web.test:${webPort}\r\n\r\n`, status: 400, reason: 'bad_request' },
    { name: 'Host as an IP literal', request: `GET / HTTP/1.1\r\nHost: 127.0.0.1:${webPort}\r\n\r\n`, status: 403, reason: 'ip_literal' },
    { name: 'an absolute URL (proxy form)', request: `GET http://${authority}/ HTTP/1.1\r\nHost: ${authority}\r\n\r\n`, status: 400, reason: 'bad_request' },
    { name: 'CONNECT', request: `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`, status: 400, reason: 'bad_request' },
    { name: 'a Connection header naming Content-Length', request: `POST / HTTP/1.1\r\nHost: ${authority}\r\nConnection: content-length\r\nContent-Length: 1\r\n\r\nx`, status: 400, reason: 'bad_request' },
  ];
  for (const row of rows) {
    const r = await rawRequest(port, row.request, ADDRESS);
    t.same([r.status, r.reason], [row.status, row.reason], row.name);
  }
  await settle(() => decisions(s.proxy).length >= rows.length + 2, 'every line');
  for (const line of decisions(s.proxy)) t.equal(line.via, 'transparent', `${String(line.reason ?? line.decision)}: via transparent`);
});

t.test('the explicit proxy keeps working beside it, and shares its connection limits', async (t) => {
  const s = await setup(t, { maxConnectionsPerClient: 2 });
  const tunnel = await rawRequest(s.proxy.port, `CONNECT tls.test:${tlsPort} HTTP/1.1\r\nHost: tls.test:${tlsPort}\r\n\r\n`);
  t.equal(tunnel.status, 200, 'CONNECT through the proxy port');
  t.notOk('via' in (decisions(s.proxy)[0] ?? {}), 'no via on the explicit proxy\'s lines');
  const held = net.connect({ host: ADDRESS, port: s.port(webPort) });
  await new Promise((r) => held.once('connect', r));
  await settle(() => s.proxy.proxy.openConnections === 2, 'two connections counted');
  const third = await tlsClient(s.port(tlsPort), 'tls.test');
  t.match(third, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED' }, 'the third connection of the client, a transparent one, is refused');
  await settle(() => decisions(s.proxy).some((l) => l.reason === 'client_limit'), 'its line');
  t.match(decisions(s.proxy).find((l) => l.reason === 'client_limit'), { via: 'transparent', port: tlsPort });
  tunnel.socket.destroy();
  held.destroy();
});

t.test('DNS on the same address answers with it; UDP to any other port gets nothing', async (t) => {
  const s = await setup(t);
  const resolver = new dns.Resolver({ timeout: 1_000, tries: 1 });
  resolver.setServers([`${ADDRESS}:${s.port(53)}`]);
  t.same(await resolver.resolve4('tls.test'), [ADDRESS]);
  await t.rejects(resolver.resolve4('evil.test'), { code: 'ENOTFOUND' });
  const socket = dgram.createSocket('udp4');
  let got = 0;
  socket.on('message', () => got++);
  socket.on('error', () => undefined);
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
  socket.send(Buffer.from('quic-ish initial packet'), s.port(tlsPort), ADDRESS);
  await new Promise((r) => setTimeout(r, 300));
  socket.close();
  t.equal(got, 0, 'a UDP datagram to the TLS port: no answer');
});

t.test('a listen address on no interface: the listeners wait for it, and a close ends the wait', async (t) => {
  const proxy = await startTestProxy({ policy: policyInput });
  // TEST-NET-1 (RFC 5737): on no interface of this machine; nothing is ever sent to it.
  let settled = false;
  const pending = proxy.proxy.listenTransparent({ listen: '192.0.2.1', answer: '192.0.2.1', ports: [{ kind: 'dns', dialled: 53, listen: 0 }] }).then(
    () => 'listening',
    (err: Error) => err.message,
  ).finally(() => (settled = true));
  await settle(() => proxy.logs.some((l) => l.event === 'transparent_waiting'), 'the waiting line');
  await new Promise((r) => setTimeout(r, 200));
  t.notOk(settled, 'still waiting');
  await proxy.close();
  t.match(await pending, /closed before 192\.0\.2\.1 appeared/);
});

t.test('the policy in force decides each connection (a reload that drops a port)', async (t) => {
  const s = await setup(t);
  s.proxy.proxy.setPolicy(policyOf({ ...policyInput, connectPorts: [webPort] }));
  const r = await tlsClient(s.port(tlsPort), 'tls.test');
  t.match(r, { error: 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED' });
  await settle(() => decisions(s.proxy).length === 1, 'its line');
  t.match(decisions(s.proxy)[0], { reason: 'port_not_allowed', port: tlsPort });
});
