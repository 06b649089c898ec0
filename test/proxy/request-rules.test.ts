/**
 * Method and path rules through the real proxy, on loopback, against a real HTTP upstream that
 * records every request it parses: what a rule allows reaches it (the path in the normal form
 * that was compared); everything else is refused with its status, `X-Egress-Reason`, sentence and
 * decision line, and nothing reaches the upstream, not even a connection. Encoded traversal is
 * refused, not repaired. A tunnel to an entry with rules (CONNECT, transparent TLS) is refused
 * before any dial, since the requests inside it would pass the rules unseen. Transparent HTTP by
 * Host is held to the same rules as the explicit proxy.
 */
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import type { TransparentPort } from '../../proxy/transparent/transparent-ports.js';
import { listen } from '../support/loopback.js';
import { rawRequest } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

const seen: { method: string; url: string; host: string | undefined }[] = [];
let upstreamConnections = 0;
const web = http.createServer((req, res) => {
  seen.push({ method: req.method ?? '', url: req.url ?? '', host: req.headers.host });
  const text = `seen ${req.method} ${req.url}\n`;
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': Buffer.byteLength(text) }).end(req.method === 'HEAD' ? undefined : text);
});
web.on('connection', () => (upstreamConnections += 1));
const webPort = await listen(web);
t.teardown(() => {
  web.close();
  web.closeAllConnections();
});

const proxyT = await startTestProxy({
  policy: {
    allowHosts: [{ host: 'api.test', methods: ['GET', 'HEAD'], paths: ['/repos/org/*', '/exact'] }, { host: '*.post.test', methods: ['POST'] }, 'open.test'],
    connectPorts: [webPort, 443],
    testHosts: { 'api.test': '127.0.0.1', 'x.post.test': '127.0.0.1', 'open.test': '127.0.0.1' },
  },
});
t.teardown(() => proxyT.close());
const { port } = proxyT;
const api = `api.test:${webPort}`;
const decisions = (): Record<string, unknown>[] => proxyT.logs.filter((l) => l.event === 'decision');

function get(method: string, host: string, path: string): string {
  return `${method} http://${host}${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;
}

t.test('what the rules allow reaches the upstream, the path as compared', async (t) => {
  const rows: { name: string; method: string; path: string; upstream: string }[] = [
    { name: 'GET below the prefix', method: 'GET', path: '/repos/org/x?page=2', upstream: '/repos/org/x?page=2' },
    { name: 'HEAD on the exact path', method: 'HEAD', path: '/exact', upstream: '/exact' },
    { name: 'an unreserved escape, decoded', method: 'GET', path: '/%72epos/org/%7Euser', upstream: '/repos/org/~user' },
    { name: 'a reserved escape, kept upper-cased', method: 'GET', path: '/repos/org/a%3ab', upstream: '/repos/org/a%3Ab' },
    { name: 'the query as sent, never compared', method: 'GET', path: '/exact?x=/../%2f', upstream: '/exact?x=/../%2f' },
  ];
  for (const row of rows) {
    seen.length = 0;
    const res = await rawRequest(port, get(row.method, api, row.path));
    t.equal(res.status, 200, row.name);
    await settle(() => seen.length === 1, `${row.name}: the upstream request`);
    t.same(seen[0], { method: row.method, url: row.upstream, host: api }, row.name);
    await settle(() => decisions().at(-1)?.decision === 'allow', `${row.name}: its line`);
    t.match(decisions().at(-1), { decision: 'allow', method: row.method, host: 'api.test', rule: 'api.test' }, row.name);
  }
});

t.test("a real client (Node's http through the proxy) is served", async (t) => {
  seen.length = 0;
  const body = await new Promise<string>((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'GET', path: `http://${api}/repos/org/readme`, headers: { Host: api } }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve(`${res.statusCode} ${text}`));
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(body, '200 seen GET /repos/org/readme\n');
});

t.test('everything else is refused with its reason and sentence, and reaches nothing', async (t) => {
  const rows: { name: string; request: string; reason: string; body: RegExp }[] = [
    { name: 'a method not listed', request: get('POST', api, '/repos/org/x').replace('\r\n\r\n', '\r\nContent-Length: 2\r\n\r\nhi'), reason: 'method_not_allowed', body: /POST is not allowed by the allowHosts entry api\.test \(methods GET, HEAD; paths \/repos\/org\/\*, \/exact\); use a method/ },
    { name: 'DELETE on an allowed path', request: get('DELETE', api, '/exact'), reason: 'method_not_allowed', body: /DELETE is not allowed/ },
    { name: 'a path not listed', request: get('GET', api, '/repos/other/x'), reason: 'path_not_allowed', body: /\/repos\/other\/x is not allowed by the allowHosts entry api\.test .*; request a path the host's allowHosts entry lists/ },
    { name: 'the prefix without its slash', request: get('GET', api, '/repos/org'), reason: 'path_not_allowed', body: /\/repos\/org is not allowed/ },
    { name: 'encoded slashes out of the prefix', request: get('GET', api, '/repos/org/..%2f..%2fother'), reason: 'path_not_allowed', body: /encoded "\/" \(%2F\)/ },
    { name: 'an encoded dot-dot', request: get('GET', api, '/repos/org/%2e%2e/x'), reason: 'path_not_allowed', body: /"\.\." segment/ },
    { name: 'a raw dot-dot', request: get('GET', api, '/repos/org/../../admin'), reason: 'path_not_allowed', body: /"\.\." segment/ },
    { name: 'a Tomcat dot-dot', request: get('GET', api, '/repos/org/..;/admin'), reason: 'path_not_allowed', body: /"\.\." segment/ },
    { name: 'an empty first segment', request: get('GET', api, '//repos/org'), reason: 'path_not_allowed', body: /empty segment/ },
    { name: 'an encoded NUL', request: get('GET', api, '/repos/org/x%00'), reason: 'path_not_allowed', body: /encoded control byte \(%00\)/ },
    { name: 'a double-encoded dot-dot', request: get('GET', api, '/repos/org/%252e%252e/x'), reason: 'path_not_allowed', body: /double-encoded/ },
    { name: 'an overlong dot', request: get('GET', api, '/repos/org/%c0%ae%c0%ae/x'), reason: 'path_not_allowed', body: /not UTF-8/ },
    { name: 'a backslash', request: get('GET', api, '/repos/org/..\\..\\admin'), reason: 'path_not_allowed', body: /backslash/ },
    { name: 'a method-override header', request: get('GET', api, '/exact').replace('\r\n\r\n', '\r\nX-HTTP-Method-Override: DELETE\r\n\r\n'), reason: 'method_not_allowed', body: /the X-HTTP-Method-Override header asks the server for DELETE/ },
    { name: 'the wrong method on a wildcard entry', request: get('GET', `x.post.test:${webPort}`, '/'), reason: 'method_not_allowed', body: /allowHosts entry \*\.post\.test \(methods POST\)/ },
  ];
  for (const row of rows) {
    seen.length = 0;
    const connections = upstreamConnections;
    const before = decisions().length;
    const res = await rawRequest(port, row.request);
    t.equal(res.status, 403, `${row.name}: 403`);
    t.equal(res.reason, row.reason, `${row.name}: X-Egress-Reason`);
    t.match(res.body, row.body, `${row.name}: the sentence`);
    t.match(res.head, new RegExp(`^HTTP/1\\.1 403 Forbidden \\(${row.reason}: `), `${row.name}: the status line says why`);
    await settle(() => decisions().length === before + 1, `${row.name}: one line`);
    t.match(decisions()[before], { decision: 'deny', reason: row.reason, method: row.request.split(' ')[0], rule: /\.test$/, port: webPort }, `${row.name}: its decision line`);
    await new Promise((r) => setTimeout(r, 20));
    t.same([seen.length, upstreamConnections], [0, connections], `${row.name}: nothing reached the upstream`);
  }
  const metric = (await proxyT.proxy.metrics.getMetricsAsJSON()).find((m) => m.name === 'egress_decisions_total');
  const count = (reason: string): number => metric?.values.find((v) => v.labels.outcome === 'deny' && v.labels.reason === reason)?.value ?? 0;
  t.same([count('method_not_allowed'), count('path_not_allowed')], [4, 11], 'the metric counts each refusal by its reason');
});

t.test('a refused request on a kept-alive connection closes it after the refusal; the one before was served', async (t) => {
  seen.length = 0;
  const both = `GET http://${api}/exact HTTP/1.1\r\nHost: ${api}\r\n\r\nPUT http://${api}/exact HTTP/1.1\r\nHost: ${api}\r\nContent-Length: 0\r\n\r\n`;
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  let out = '';
  socket.on('data', (d: Buffer) => (out += d.toString('latin1')));
  socket.write(both);
  await new Promise((r) => socket.once('close', r));
  t.match(out, /^HTTP\/1\.1 200 [\s\S]*HTTP\/1\.1 403 Forbidden \(method_not_allowed: PUT /);
  t.same(seen.map((s) => `${s.method} ${s.url}`), ['GET /exact'], 'only the allowed request reached the upstream');
});

t.test('CONNECT to an entry with rules is refused before any dial; one without rules still tunnels', async (t) => {
  const dialed = proxyT.dialed.length;
  const connections = upstreamConnections;
  for (const host of ['api.test', 'x.post.test']) {
    const res = await rawRequest(port, `CONNECT ${host}:${webPort} HTTP/1.1\r\nHost: ${host}:${webPort}\r\n\r\n`);
    res.socket.destroy();
    t.equal(res.status, 403, host);
    t.equal(res.reason, 'tunnel_not_allowed', host);
    t.match(res.body, /has rules \(.*\) that the proxy can check only in plain HTTP, so it allows no tunnel; .*send an absolute http:\/\/ URL/, host);
  }
  t.same([proxyT.dialed.length, upstreamConnections], [dialed, connections], 'nothing dialled');
  await settle(() => decisions().filter((l) => l.reason === 'tunnel_not_allowed').length === 2, 'their lines');
  t.match(decisions().find((l) => l.reason === 'tunnel_not_allowed'), { decision: 'deny', method: 'CONNECT', host: 'api.test', port: webPort });
  const open = await rawRequest(port, `CONNECT open.test:${webPort} HTTP/1.1\r\n\r\n`);
  open.socket.destroy();
  t.equal(open.status, 200, 'open.test has no rules: its tunnel opens');
});

t.test('transparent mode: HTTP by Host under the same rules; TLS to an entry with rules refused with an alert', async (t) => {
  const ports: TransparentPort[] = [
    { kind: 'http', dialled: webPort, listen: 0 },
    { kind: 'tls', dialled: 443, listen: 0 },
  ];
  const transparent = await proxyT.proxy.listenTransparent({ listen: '127.0.0.2', answer: '127.0.0.2', ports });
  const listening = (dialled: number): number => transparent.ports.find((p) => p.dialled === dialled)?.listen ?? 0;
  const origin = (method: string, path: string): string => `${method} ${path} HTTP/1.1\r\nHost: ${api}\r\nConnection: close\r\n\r\n`;

  seen.length = 0;
  const ok = await rawRequest(listening(webPort), origin('GET', '/repos/org/%7Ea'), '127.0.0.2');
  t.equal(ok.status, 200);
  await settle(() => seen.length === 1, 'the upstream request');
  t.same(seen[0], { method: 'GET', url: '/repos/org/~a', host: api }, 'reached, in normal form');

  seen.length = 0;
  const traversal = await rawRequest(listening(webPort), origin('GET', '/repos/org/%2e%2e/%2e%2e/admin'), '127.0.0.2');
  t.same([traversal.status, traversal.reason], [403, 'path_not_allowed']);
  const method = await rawRequest(listening(webPort), origin('OPTIONS', '/exact'), '127.0.0.2');
  t.same([method.status, method.reason], [403, 'method_not_allowed']);
  t.equal(seen.length, 0, 'neither reached the upstream');
  await settle(() => decisions().filter((l) => l.via === 'transparent').length === 3, 'three transparent lines');

  const dialed = proxyT.dialed.length;
  const refused = await new Promise<string | undefined>((resolve) => {
    const socket = tls.connect({ host: '127.0.0.2', port: listening(443), servername: 'api.test', rejectUnauthorized: false });
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code));
    socket.on('secureConnect', () => resolve('connected'));
    socket.on('close', () => resolve('closed'));
  });
  t.equal(refused, 'ERR_SSL_TLSV1_ALERT_ACCESS_DENIED', 'access_denied: the policy refused');
  await settle(() => decisions().some((l) => l.via === 'transparent' && l.reason === 'tunnel_not_allowed'), 'its line');
  t.match(decisions().find((l) => l.via === 'transparent' && l.reason === 'tunnel_not_allowed'), { decision: 'deny', host: 'api.test', port: 443, sni: 'api.test' });
  t.equal(proxyT.dialed.length, dialed, 'nothing dialled');
});
