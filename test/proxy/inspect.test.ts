/**
 * Inspected entries on loopback, with real TLS stacks on both sides: Node's (OpenSSL) and curl's
 * clients, Node's HTTPS server as the upstream, pinned by test hosts. The proxy terminates the
 * client's TLS with a leaf of the deployment CA, reads each request (Host must be the server
 * name; methods and paths apply; the head is judged as plain forwarding judges it) and forwards
 * it over TLS it verifies itself. The CONNECT and each request inside get a decision line.
 */
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import { Duplex } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import t, { type Test } from 'tap';
import type { Transparent } from '../../proxy/transparent/transparent.js';
import type { Inspection } from '../../proxy/admission/index.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { listen } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { startTestProxy, type TestProxy } from '../support/test-proxy.js';

// The upstream: a name of its own, a certificate the proxy's trust store holds, and a record of
// every request that reached it.
const upstreamCert = selfSignedCert(['api.test', 'rules.test']);
const strangerCert = selfSignedCert(['stranger.test']);
const seen: { method: string; url: string; host: string; body: string }[] = [];
const upstream = https.createServer({ ...upstreamCert, ALPNProtocols: ['http/1.1'] }, (req, res) => {
  let body = '';
  req.on('data', (d: Buffer) => (body += d.toString()));
  req.on('end', () => {
    seen.push({ method: req.method ?? '', url: req.url ?? '', host: req.headers.host ?? '', body });
    res.end(`upstream ${req.method} ${req.url} ${body}\n`);
  });
});
const port = await listen(upstream as unknown as net.Server);
// An upstream whose certificate names another host, signed by nobody the proxy trusts.
const stranger = https.createServer(strangerCert, (_req, res) => res.end('stranger\n'));
const strangerPort = await listen(stranger as unknown as net.Server);
t.teardown(() => {
  upstream.close();
  upstream.closeAllConnections();
  stranger.close();
  stranger.closeAllConnections();
});

const leaves = await testLeafIssuer();
const inspection: Inspection = { leaves, upstreamCa: [upstreamCert.cert] };
const policy = {
  allowHosts: [
    { host: 'api.test', inspect: true },
    { host: 'rules.test', inspect: true, methods: ['GET'], paths: ['/repos/org/*'] },
    { host: 'stranger.test', inspect: true },
    // Served by the trusted upstream, whose certificate names api.test and rules.test only.
    { host: 'impostor.test', inspect: true },
    'plain.test',
  ],
  connectPorts: [port, strangerPort],
  testHosts: { 'api.test': '127.0.0.1', 'rules.test': '127.0.0.1', 'stranger.test': '127.0.0.1', 'impostor.test': '127.0.0.1', 'plain.test': '127.0.0.1' },
};

async function setup(t: Test): Promise<TestProxy> {
  const proxy = await startTestProxy({ policy, inspection, limits: { helloTimeoutMs: 2_000 } });
  t.teardown(() => proxy.close());
  return proxy;
}

const decisions = (proxy: TestProxy): Record<string, unknown>[] => proxy.logs.filter((l) => l.event === 'decision');

/** A CONNECT through the proxy, then TLS inside it: the secure socket, or the error that ended it. */
async function inspectedClient(proxyPort: number, host: string, options: tls.ConnectionOptions = {}, connectPort = port): Promise<tls.TLSSocket> {
  const socket = net.connect(proxyPort, '127.0.0.1');
  socket.write(`CONNECT ${host}:${connectPort} HTTP/1.1\r\nHost: ${host}:${connectPort}\r\n\r\n`);
  const answer = await readUntil(socket, '\r\n\r\n', 5_000);
  if (!answer.startsWith('HTTP/1.1 200')) throw new Error(`CONNECT refused: ${answer}`);
  const secure = tls.connect({ socket, servername: host, ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'], ...options });
  await new Promise<void>((resolve, reject) => {
    secure.once('secureConnect', () => resolve());
    secure.once('error', (err) => {
      // The TLS socket over a socket it was given leaves that one open.
      socket.destroy();
      reject(err);
    });
  });
  return secure;
}

/** Whether `text` holds one whole response framed by Content-Length. */
function whole(text: string): boolean {
  const end = text.indexOf('\r\n\r\n');
  if (end === -1) return false;
  const length = /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, end));
  return length !== null && text.length >= end + 4 + Number(length[1]);
}

/** Writes `request` and reads one response (by Content-Length), or what came before the close. */
function exchange(secure: tls.TLSSocket, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const done = (): void => {
      clearTimeout(timer);
      secure.off('data', onData);
      secure.off('close', done);
      resolve(text);
    };
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('latin1');
      if (whole(text)) done();
    };
    const timer = setTimeout(() => reject(new Error(`timed out; got ${JSON.stringify(text)}`)), 5_000);
    secure.on('data', onData);
    secure.once('close', done);
    secure.write(request);
  });
}

t.test('an inspected CONNECT: TLS terminated with a leaf of the CA, each request read and forwarded over verified TLS', async (t) => {
  const proxy = await setup(t);
  const before = seen.length;
  const secure = await inspectedClient(proxy.port, 'api.test');
  t.equal(secure.alpnProtocol, 'http/1.1', 'ALPN gave http/1.1');
  const peer = secure.getPeerCertificate(true);
  t.match(peer.subjectaltname, /DNS:api\.test/, 'the client was shown a leaf for the CONNECT host');
  const first = await exchange(secure, `GET /one HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`);
  t.match(first, /^HTTP\/1\.1 200 /, 'answered');
  t.match(first, /upstream GET \/one/);
  const second = await exchange(secure, `POST /two HTTP/1.1\r\nHost: api.test:${port}\r\nContent-Length: 4\r\n\r\nbody`);
  t.match(second, /upstream POST \/two body/, 'a second request on the same connection, with a body');
  secure.destroy();
  t.same(seen.slice(before).map((s) => [s.method, s.url, s.host]), [['GET', '/one', `api.test:${port}`], ['POST', '/two', `api.test:${port}`]], 'the upstream got both, with the checked Host');
  await settle(() => decisions(proxy).length >= 3, 'the decision lines');
  const lines = decisions(proxy);
  t.match(lines[0], { method: 'CONNECT', decision: 'allow', tunnel: 'inspect', host: 'api.test' }, 'the CONNECT line says inspect');
  t.match(lines.slice(1), [{ method: 'GET', decision: 'allow', via: 'inspect', status: 200 }, { method: 'POST', decision: 'allow', via: 'inspect', status: 200 }], 'each request has its own line');
});

t.test('a hello sent with the CONNECT head, or a head split over writes, is read the same way', async (t) => {
  const proxy = await setup(t);
  // A real client's first TLS flight, sent in one write with the head.
  const socket = net.connect(proxy.port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  // Its first write goes out behind the CONNECT head, in one write; the rest as it comes.
  const connectHead = Buffer.from(`CONNECT api.test:${port} HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`);
  let first = true;
  const capture = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, done) {
      socket.write(first ? Buffer.concat([connectHead, chunk]) : chunk);
      first = false;
      done();
    },
  });
  let established = false;
  socket.on('data', (b: Buffer) => {
    if (!established) {
      const text = b.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      t.match(text, /^HTTP\/1\.1 200 /, 'established');
      established = true;
      if (end + 4 < b.length) capture.push(b.subarray(end + 4));
      return;
    }
    capture.push(b);
  });
  const secure = tls.connect({ socket: capture as unknown as net.Socket, servername: 'api.test', ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'] });
  await new Promise<void>((resolve, reject) => {
    secure.once('secureConnect', () => resolve());
    secure.once('error', reject);
  });
  t.match(await exchange(secure, `GET /pipelined HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`), /upstream GET \/pipelined/, 'the hello behind the head was the handshake\'s start');
  secure.destroy();
  socket.destroy();
  // A head in two writes goes through Node's parser instead of the fast reader.
  const split = net.connect(proxy.port, '127.0.0.1');
  split.write(`CONNECT api.test:${port} HTTP/1.1\r\n`);
  await new Promise((r) => setTimeout(r, 50));
  split.write(`Host: api.test:${port}\r\nUser-Agent: split\r\n\r\n`);
  t.match(await readUntil(split, '\r\n\r\n', 3_000), /^HTTP\/1\.1 200 /);
  const secureSplit = tls.connect({ socket: split, servername: 'api.test', ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'] });
  await new Promise((r) => secureSplit.once('secureConnect', r));
  t.match(await exchange(secureSplit, `GET /split HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`), /upstream GET \/split/);
  secureSplit.destroy();
});

t.test('domain fronting: a Host other than the server name is refused host_mismatch, and nothing reaches the upstream', async (t) => {
  const proxy = await setup(t);
  const before = seen.length;
  for (const host of [`plain.test:${port}`, `stranger.test:${port}`, `api.test.evil:${port}`, `evil.api.test:${port}`]) {
    const secure = await inspectedClient(proxy.port, 'api.test');
    const answer = await exchange(secure, `GET /x HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    t.match(answer, /^HTTP\/1\.1 421 .*\r\nX-Egress-Reason: host_mismatch\r\n/s, `Host "${host}" refused host_mismatch`);
    secure.destroy();
  }
  // Another port (a Host without one means 443 here), or no Host at all: refused as malformed.
  for (const host of ['api.test', 'api.test:1', '']) {
    const secure = await inspectedClient(proxy.port, 'api.test');
    t.match(await exchange(secure, `GET /x HTTP/1.1\r\nHost: ${host}\r\n\r\n`), /^HTTP\/1\.1 400 /, `Host "${host}" refused bad_request`);
    secure.destroy();
  }
  const twoHosts = await inspectedClient(proxy.port, 'api.test');
  t.match(await exchange(twoHosts, `GET /x HTTP/1.1\r\nHost: api.test:${port}\r\nHost: plain.test\r\n\r\n`), /^HTTP\/1\.1 400 /, 'two Host headers refused');
  twoHosts.destroy();
  const absolute = await inspectedClient(proxy.port, 'api.test');
  t.match(await exchange(absolute, `GET http://plain.test/x HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`), /^HTTP\/1\.1 400 /, 'an absolute URL inside refused');
  absolute.destroy();
  t.equal(seen.length, before, 'the upstream saw none of them');
});

t.test('request framing inside is the plain forwarder\'s: smuggling shapes refused, upgrades and CONNECT refused', async (t) => {
  const proxy = await setup(t);
  const before = seen.length;
  const cases = [
    `POST /x HTTP/1.1\r\nHost: api.test:${port}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    `POST /x HTTP/1.1\r\nHost: api.test:${port}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
    `GET /x HTTP/1.1\r\nHost: api.test:${port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
    `CONNECT plain.test:443 HTTP/1.1\r\nHost: plain.test:443\r\n\r\n`,
  ];
  for (const request of cases) {
    const secure = await inspectedClient(proxy.port, 'api.test');
    t.match(await exchange(secure, request), /^HTTP\/1\.1 400 /, request.split('\r\n')[0]!);
    secure.destroy();
  }
  t.equal(seen.length, before, 'nothing reached the upstream');
});

t.test('method and path rules apply to each request inside an inspected entry, whose CONNECT they no longer refuse', async (t) => {
  const proxy = await setup(t);
  const before = seen.length;
  const secure = await inspectedClient(proxy.port, 'rules.test');
  t.match(await exchange(secure, `GET /repos/org/a HTTP/1.1\r\nHost: rules.test:${port}\r\n\r\n`), /upstream GET \/repos\/org\/a/, 'allowed path');
  t.match(await exchange(secure, `GET /repos/other HTTP/1.1\r\nHost: rules.test:${port}\r\n\r\n`), /^HTTP\/1\.1 403 .*X-Egress-Reason: path_not_allowed/s, 'path refused');
  secure.destroy();
  const again = await inspectedClient(proxy.port, 'rules.test');
  t.match(await exchange(again, `DELETE /repos/org/a HTTP/1.1\r\nHost: rules.test:${port}\r\n\r\n`), /^HTTP\/1\.1 403 .*X-Egress-Reason: method_not_allowed/s, 'method refused');
  again.destroy();
  const encoded = await inspectedClient(proxy.port, 'rules.test');
  t.match(await exchange(encoded, `GET /repos/org%2f..%2fother HTTP/1.1\r\nHost: rules.test:${port}\r\n\r\n`), /path_not_allowed/, 'an ambiguous encoding refused');
  encoded.destroy();
  t.same(seen.slice(before).map((s) => s.url), ['/repos/org/a'], 'only the allowed request reached the upstream');
});

t.test('an upstream whose certificate does not verify for the name is refused upstream_tls_invalid', async (t) => {
  const proxy = await setup(t);
  const secure = await inspectedClient(proxy.port, 'stranger.test', {}, strangerPort);
  const answer = await exchange(secure, `GET / HTTP/1.1\r\nHost: stranger.test:${strangerPort}\r\n\r\n`);
  t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: upstream_tls_invalid/s, 'refused, with the reason');
  t.notMatch(answer, /stranger\n$/, 'nothing of the upstream passed');
  secure.destroy();
  const line = decisions(proxy).find((l) => l.method === 'GET');
  t.match(line, { decision: 'deny', reason: 'upstream_tls_invalid' });
});

// A hijacked route or a poisoned resolver sends the proxy to a server whose certificate chains to
// a trusted CA but names another host (any public certificate would do): verifying the chain
// alone would hand that server the request in clear, and the secrets put into it.
t.test('an upstream with a trusted certificate for another name is refused upstream_tls_invalid, and gets no request', async (t) => {
  const proxy = await setup(t);
  const before = seen.length;
  const secure = await inspectedClient(proxy.port, 'impostor.test');
  const answer = await exchange(secure, `GET /leak HTTP/1.1\r\nHost: impostor.test:${port}\r\n\r\n`);
  secure.destroy();
  t.match(answer, /^HTTP\/1\.1 502 .*X-Egress-Reason: upstream_tls_invalid/s, 'refused, with the reason');
  t.equal(seen.length, before, 'the server reached nothing of the request');
  t.match(decisions(proxy).find((l) => l.method === 'GET'), { decision: 'deny', reason: 'upstream_tls_invalid', host: 'impostor.test' });
});

t.test('a client that does not trust the CA fails its handshake; the line says client_rejected_ca and how to trust it', async (t) => {
  const proxy = await setup(t);
  const dir = mkdtempSync(join(tmpdir(), 'inspect-ca-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  // curl verifies inside the handshake (OpenSSL), so it tells the server with an alert.
  writeFileSync(join(dir, 'other.pem'), strangerCert.cert);
  const refused = await curl('--proxy', `http://127.0.0.1:${proxy.port}`, '--cacert', join(dir, 'other.pem'), `https://api.test:${port}/`);
  t.not(refused.code, 0, 'curl refused the leaf');
  await settle(() => decisions(proxy).some((l) => l.reason === 'client_rejected_ca'), 'the decision lines');
  const line = decisions(proxy).find((l) => l.reason === 'client_rejected_ca');
  t.match(line, { method: 'CONNECT', decision: 'deny', detail: /does not trust the deployment CA.*capybara-egress ca/ });
  // Node's client checks the certificate itself and closes without an alert (TLS 1.3).
  await t.rejects(inspectedClient(proxy.port, 'api.test', { ca: strangerCert.cert }), { code: 'UNABLE_TO_VERIFY_LEAF_SIGNATURE' });
  await settle(() => decisions(proxy).filter((l) => l.reason === 'client_rejected_ca').length === 2, 'the second line');
  t.match(decisions(proxy).filter((l) => l.reason === 'client_rejected_ca')[1], { detail: /closed during the TLS handshake.*most likely it does not trust/ });
  // With the CA, the same curl goes through.
  writeFileSync(join(dir, 'ca.pem'), leaves.caCertificatePem);
  const ok = await curl('--proxy', `http://127.0.0.1:${proxy.port}`, '--cacert', join(dir, 'ca.pem'), `https://api.test:${port}/curl`);
  t.equal(ok.code, 0, ok.stderr);
  t.match(ok.stdout, /upstream GET \/curl/);
});

t.test('the hello must name the CONNECT host (a hello with no name is refused too); a client offering only h2 is refused, since only HTTP/1.1 is read', async (t) => {
  const proxy = await setup(t);
  await t.rejects(inspectedClient(proxy.port, 'api.test', { servername: 'plain.test' }), 'another server name fails the handshake');
  await settle(() => decisions(proxy).some((l) => l.reason === 'sni_mismatch'), 'the decision lines');
  t.ok(decisions(proxy).some((l) => l.reason === 'sni_mismatch'), 'logged sni_mismatch');
  // No server name at all (a client that does not check the name it is shown): never shown the
  // leaf, so never served a request.
  await t.rejects(inspectedClient(proxy.port, 'api.test', { servername: '', checkServerIdentity: () => undefined }), 'a hello with no server name fails the handshake');
  await settle(() => decisions(proxy).some((l) => l.reason === 'sni_missing'), 'the decision lines');
  t.ok(decisions(proxy).some((l) => l.reason === 'sni_missing' && l.host === 'api.test'), 'logged sni_missing');
  await t.rejects(inspectedClient(proxy.port, 'api.test', { ALPNProtocols: ['h2'] }), 'h2 alone fails the handshake');
  await settle(() => decisions(proxy).some((l) => typeof l.detail === 'string' && l.detail.includes('only http/1.1')), 'the decision lines');
  t.ok(decisions(proxy).some((l) => typeof l.detail === 'string' && l.detail.includes('only http/1.1')), 'logged why');
});

t.test('a proxy without the CA refuses an inspected entry (fail closed), and non-inspected entries stay tunnels', async (t) => {
  const proxy = await startTestProxy({ policy });
  t.teardown(() => proxy.close());
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.write(`CONNECT api.test:${port} HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`);
  t.match(await readUntil(socket, '\r\n\r\n', 3_000), /^HTTP\/1\.1 500 .*no deployment CA/s);
  socket.destroy();
  // plain.test is not inspected: its tunnel carries the upstream's own certificate, end to end.
  const tunnel = net.connect(proxy.port, '127.0.0.1');
  tunnel.write(`CONNECT plain.test:${port} HTTP/1.1\r\nHost: plain.test:${port}\r\n\r\n`);
  await readUntil(tunnel, '\r\n\r\n', 3_000);
  const secure = tls.connect({ socket: tunnel, servername: 'plain.test', rejectUnauthorized: false });
  await new Promise((r) => secure.once('secureConnect', r));
  t.equal(secure.getPeerCertificate().fingerprint256, new crypto.X509Certificate(upstreamCert.cert).fingerprint256, 'the upstream\'s own certificate');
  secure.destroy();
});

t.test('the transparent TLS listener inspects an inspected entry too, by the hello\'s name', async (t) => {
  const proxy = await setup(t);
  const transparent: Transparent = await proxy.proxy.listenTransparent({ listen: '127.0.0.2', answer: '127.0.0.2', ports: [{ kind: 'tls', dialled: port, listen: 0 }] });
  const listenPort = transparent.ports[0]!.listen;
  const secure = tls.connect({ host: '127.0.0.2', port: listenPort, servername: 'api.test', ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'] });
  await new Promise<void>((resolve, reject) => {
    secure.once('secureConnect', () => resolve());
    secure.once('error', reject);
  });
  t.match(await exchange(secure, `GET /transparent HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`), /upstream GET \/transparent/);
  t.match(await exchange(secure, `GET /x HTTP/1.1\r\nHost: plain.test:${port}\r\n\r\n`), /host_mismatch/, 'fronting refused here too');
  secure.destroy();
  t.match(decisions(proxy)[0], { tunnel: 'inspect', via: 'transparent', sni: 'api.test' });
});

function curl(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile('curl', ['-sS', '--max-time', '5', ...args], (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

t.test('a handshake that does not finish within the hello deadline ends the connection, with its line', async (t) => {
  const proxy = await startTestProxy({ policy, inspection, limits: { helloTimeoutMs: 300 } });
  t.teardown(() => proxy.close());
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.write(`CONNECT api.test:${port} HTTP/1.1\r\nHost: api.test:${port}\r\n\r\n`);
  t.match(await readUntil(socket, '\r\n\r\n', 3_000), /^HTTP\/1\.1 200 /);
  const started = Date.now();
  // Half a hello, then silence.
  socket.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]));
  await readUntil(socket, undefined, 3_000);
  t.ok(Date.now() - started < 2_000, 'closed at the deadline');
  t.match(decisions(proxy)[0], { method: 'CONNECT', decision: 'deny', reason: 'tls_hello_timeout' });
});
