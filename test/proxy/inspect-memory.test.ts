/**
 * An inspected connection is charged to its client's memory budget for its life
 * (INSPECT_CONNECTION_BYTES, what terminating its TLS holds beyond a tunnel, measured by
 * `npm run bench:inspect`), and one the client has no room for is refused `overloaded` before any
 * handshake. Real TLS on loopback, a real budget.
 */
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { ACCEPT_BYTES, MemoryBudget } from '../../proxy/index.js';
import { INSPECT_CONNECTION_BYTES } from '../../proxy/inspect/index.js';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { listen } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { selfSignedCert } from '../support/tls-cert.js';
import { startTestProxy } from '../support/test-proxy.js';

const KIB = 1024;
const cert = selfSignedCert(['inspected.test']);
const upstream = tls.createServer({ ...cert, ALPNProtocols: ['http/1.1'] }, (s) => s.on('error', () => undefined));
const port = await listen(upstream as unknown as net.Server);
const leaves = await testLeafIssuer();
t.teardown(() => upstream.close());

async function proxyWith(budget: MemoryBudget) {
  const p = await startTestProxy({
    policy: { allowHosts: [{ host: 'inspected.test', inspect: true }], connectPorts: [port], testHosts: { 'inspected.test': '127.0.0.1' } },
    inspection: { leaves, upstreamCa: [cert.cert] },
    memory: budget,
  });
  t.teardown(() => p.close());
  return p;
}

/** A CONNECT to the inspected host from `localAddress`: the proxy's answer to it. */
async function connect(proxyPort: number, localAddress: string): Promise<{ socket: net.Socket; answer: string }> {
  const socket = net.connect({ port: proxyPort, host: '127.0.0.1', localAddress });
  socket.on('error', () => undefined);
  socket.write(`CONNECT inspected.test:${port} HTTP/1.1\r\nHost: inspected.test:${port}\r\n\r\n`);
  return { socket, answer: await readUntil(socket, '\r\n\r\n') };
}

t.test('an inspected connection is charged for its life, and the charge goes with it', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 64 * 1024 * KIB, perClientBytes: 16 * 1024 * KIB });
  const p = await proxyWith(budget);
  const client = '127.0.0.31';
  const { socket, answer } = await connect(p.port, client);
  t.match(answer, /^HTTP\/1\.1 200 /);
  const secure = tls.connect({ socket, servername: 'inspected.test', ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'] });
  secure.on('error', () => undefined);
  await new Promise<void>((resolve) => secure.once('secureConnect', resolve));
  t.ok(budget.usedBy(client) >= INSPECT_CONNECTION_BYTES, `charged ${budget.usedBy(client)} bytes, at least ${INSPECT_CONNECTION_BYTES}`);
  secure.destroy();
  await settle(() => budget.usedBy(client) === 0, `the charge to go with the connection (charged ${budget.usedBy(client)})`);
});

t.test('an inspected connection its client has no room for is refused overloaded, before a handshake', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 64 * 1024 * KIB, perClientBytes: ACCEPT_BYTES + INSPECT_CONNECTION_BYTES / 2 });
  const p = await proxyWith(budget);
  const client = '127.0.0.32';
  const { socket, answer } = await connect(p.port, client);
  t.match(answer, /^HTTP\/1\.1 503 /);
  t.match(answer, /\r\nX-Egress-Reason: overloaded\r\n/i);
  socket.destroy();
  await settle(() => p.logs.some((l) => l.event === 'decision' && l.reason === 'overloaded'), 'the decision line');
  await settle(() => budget.usedBy(client) === 0, 'nothing left charged');
});
