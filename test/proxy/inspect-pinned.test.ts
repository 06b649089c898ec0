/**
 * An inspected connection's name is resolved once, when the connection is allowed, and every
 * request inside goes to the addresses checked then: no lookup per request (a resolver round trip
 * each), and a resolver that answers otherwise on the next lookup (rebinding) meets only the next
 * connection. A real DNS server on loopback answers the name with a public address first and
 * loopback after; the proxy's dialer takes that public address to a TLS upstream on loopback, so
 * no byte leaves the machine.
 */
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { defaultConnect } from '../../proxy/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { freePort, listen } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { startTestProxy } from '../support/test-proxy.js';

const NAME = 'rebind.test';
const PUBLIC = '93.184.215.14';
const REQUESTS = 3;

const cert = selfSignedCert([NAME]);
let served = 0;
const upstream = https.createServer({ ...cert, ALPNProtocols: ['http/1.1'] }, (req, res) => {
  served += 1;
  res.end(`served ${req.url}\n`);
});
const upstreamPort = await listen(upstream as unknown as net.Server);
const closedPort = await freePort();
const dns = await startDnsServer();
const leaves = await testLeafIssuer();
t.teardown(async () => {
  upstream.close();
  upstream.closeAllConnections();
  await dns.close();
});

const p = await startTestProxy({
  policy: { allowHosts: [{ host: NAME, inspect: true }], connectPorts: [443] },
  inspection: { leaves, upstreamCa: [cert.cert] },
  dnsServer: dns.address,
  // The public address is the upstream on loopback; any other dial would fail at once.
  connect: (address, _port, purpose) => defaultConnect('127.0.0.1', address === PUBLIC ? upstreamPort : closedPort, purpose),
});
t.teardown(() => p.close());

/** A CONNECT to the name: the TLS inside it once the proxy allowed it, else the proxy's refusal. */
async function open(): Promise<{ secure: tls.TLSSocket } | { refused: string }> {
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(`CONNECT ${NAME}:443 HTTP/1.1\r\nHost: ${NAME}:443\r\n\r\n`);
  const answer = await readUntil(socket, '\r\n\r\n');
  if (!answer.startsWith('HTTP/1.1 200 ')) {
    socket.destroy();
    return { refused: answer };
  }
  const secure = tls.connect({ socket, servername: NAME, ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'] });
  secure.on('error', () => undefined);
  await new Promise<void>((resolve) => secure.once('secureConnect', resolve));
  return { secure };
}

const requestLines = () => p.logs.filter((l) => l.event === 'decision' && typeof l.method === 'string' && l.method !== 'CONNECT');

t.test('every request inside goes to the addresses checked for the connection, with no lookup of its own', async (t) => {
  dns.set(NAME, { first: [PUBLIC], then: ['127.0.0.1'] });
  const opened = await open();
  if (!('secure' in opened)) throw new Error(`the CONNECT was refused: ${opened.refused}`);
  const { secure } = opened;
  t.equal(dns.questions(NAME), 1, 'the name was resolved once, for the CONNECT');
  for (let i = 0; i < REQUESTS; i += 1) {
    secure.write(`GET /r${i} HTTP/1.1\r\nHost: ${NAME}\r\n\r\n`);
    t.match(await readUntil(secure, `served /r${i}\n`), /^HTTP\/1\.1 200 /, `request ${i} answered by the upstream`);
  }
  secure.destroy();
  t.equal(served, REQUESTS, 'every request reached the upstream');
  t.equal(dns.questions(NAME), 1, 'no request inside asked the resolver again (it now answers loopback)');
  await settle(() => requestLines().length === REQUESTS, 'a decision line per request');
  for (const [i, line] of requestLines().entries()) t.match(line, { decision: 'allow', host: NAME, addresses: [PUBLIC], pinnedBy: 'connection' }, `request ${i}: pinned to the connection's checked answer`);
  t.ok(
    p.dialed.every((d) => d === `${PUBLIC}:443`),
    `only the checked address was dialled (${p.dialed.join(', ')})`,
  );
});

t.test('the next connection is resolved again, and meets the new answer', async (t) => {
  const opened = await open();
  t.ok('refused' in opened, 'the CONNECT is refused');
  if ('refused' in opened) t.match(opened.refused, /\r\nX-Egress-Reason: address_not_allowed\r\n/i);
  t.equal(dns.questions(NAME), 2, 'its own lookup');
  t.notOk(p.dialed.includes(`127.0.0.1:443`), 'nothing dialled at the loopback answer');
});
