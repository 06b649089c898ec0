/**
 * TLS session resumption on inspected connections, with Node's (OpenSSL) client and the proxy's
 * own TLS server on loopback. A resumed handshake skips the certificate step, and with it the SNI
 * callback that checks the hello's name: a session issued on a connection for one host, offered
 * on a connection allowed for another (with that host's name, another name, or none), would
 * complete without the check. The proxy therefore issues no session it would resume: every
 * client, offering a session or not, gets a full handshake whose name is checked.
 */
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import type { Inspection } from '../../proxy/admission/index.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { listenUntilEnd } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { startTestProxy } from '../support/test-proxy.js';

const upstreamCert = selfSignedCert(['one.test', 'two.test']);
const upstream = https.createServer({ ...upstreamCert, ALPNProtocols: ['http/1.1'] }, (req, res) => res.end(`upstream ${req.headers.host ?? ''}\n`));
const port = await listenUntilEnd(t, upstream);
const leaves = await testLeafIssuer();
const inspection: Inspection = { leaves, upstreamCa: [upstreamCert.cert] };
const policy = {
  allowHosts: [
    { host: 'one.test', inspect: true },
    { host: 'two.test', inspect: true },
  ],
  connectPorts: [port],
  testHosts: { 'one.test': '127.0.0.1', 'two.test': '127.0.0.1' },
};

interface Inspected {
  readonly secure: tls.TLSSocket;
  /** The session the server issued, once the client has it (TLS 1.3 sends it after the handshake). */
  readonly session: Promise<Buffer>;
}

/** A CONNECT to `host`, then TLS inside it with `options` (a `session` to offer, a `servername`). */
async function inspected(proxyPort: number, host: string, options: tls.ConnectionOptions): Promise<Inspected> {
  const socket = net.connect(proxyPort, '127.0.0.1');
  socket.write(`CONNECT ${host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  const answer = await readUntil(socket, '\r\n\r\n', 5_000);
  if (!answer.startsWith('HTTP/1.1 200')) throw new Error(`CONNECT refused: ${answer}`);
  // The client offering a session checks no name: it is the one trying to get past the check.
  const secure = tls.connect({ socket, ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'], checkServerIdentity: () => undefined, ...options });
  const session = new Promise<Buffer>((resolve) => secure.once('session', resolve));
  await new Promise<void>((resolve, reject) => {
    secure.once('secureConnect', () => resolve());
    secure.once('error', (err) => {
      socket.destroy();
      reject(err);
    });
  });
  return { secure, session };
}

/** One request for `host` inside `secure`: the upstream's answer. */
async function fetchThrough(secure: tls.TLSSocket, host: string): Promise<string> {
  secure.write(`GET / HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  return readUntil(secure as unknown as net.Socket, `upstream ${host}`, 5_000);
}

const VERSIONS = [
  { name: 'TLS 1.2 (session ticket or session ID)', version: 'TLSv1.2' },
  { name: 'TLS 1.3 (PSK from a NewSessionTicket)', version: 'TLSv1.3' },
] as const;

for (const { name, version } of VERSIONS) {
  t.test(`${name}: a session offered again is never resumed, so the hello's name is always checked`, async (t) => {
    const proxy = await startTestProxy({ policy, inspection });
    t.teardown(() => proxy.close());
    const decisions = (): Record<string, unknown>[] => proxy.logs.filter((l) => l.event === 'decision');
    const pinned = { minVersion: version, maxVersion: version };
    const first = await inspected(proxy.port, 'one.test', { ...pinned, servername: 'one.test' });
    t.match(await fetchThrough(first.secure, 'one.test'), /^HTTP\/1\.1 200 /);
    // The client holds a session to offer: without one, nothing below would test resumption.
    const session = await first.session;
    first.secure.destroy();

    const again = await inspected(proxy.port, 'one.test', { ...pinned, servername: 'one.test', session });
    t.equal(again.secure.isSessionReused(), false, 'the same host and name: a full handshake, not a resumption');
    t.match(await fetchThrough(again.secure, 'one.test'), /^HTTP\/1\.1 200 /, 'and the connection works');
    again.secure.destroy();

    const renamed = await inspected(proxy.port, 'two.test', { ...pinned, servername: 'two.test', session });
    t.equal(renamed.secure.isSessionReused(), false, 'another allowed host, named: a full handshake too');
    renamed.secure.destroy();

    await t.rejects(inspected(proxy.port, 'two.test', { ...pinned, servername: 'one.test', session }), 'a connection for two.test naming one.test, with one.test\'s session, fails its handshake');
    await settle(() => decisions().some((l) => l.reason === 'sni_mismatch'), 'the sni_mismatch line');
    t.match(decisions().find((l) => l.reason === 'sni_mismatch'), { decision: 'deny', host: 'two.test' }, 'refused sni_mismatch');

    await t.rejects(inspected(proxy.port, 'two.test', { ...pinned, servername: '', session }), 'a connection for two.test naming nothing, with a session, fails its handshake');
    await settle(() => decisions().some((l) => l.reason === 'sni_missing'), 'the sni_missing line');
    t.match(decisions().find((l) => l.reason === 'sni_missing'), { decision: 'deny', host: 'two.test' }, 'refused sni_missing');
  });
}
