/**
 * A forwarded request's upstream dial belongs to the request: a client that goes while its plain
 * HTTP (or inspected) request waits for a connection gives the dial up at once, TLS handshake
 * included. Otherwise each such request left a socket (a descriptor no connection slot counts)
 * for the whole connect timeout, or the TLS handshake's, after its client had gone: undici can
 * take back a request only once it has a connection. Another request to the same destination
 * waiting meanwhile keeps its own dial, and is answered.
 */
import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { testLeafIssuer } from '../support/inspect-ca.js';
import { heldDials } from '../support/held-dials.js';
import { listen } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

/** The hook's sockets for these stand for dials still under way: never connected, or when the test says. */
const SILENT = '127.0.0.9';
const GATED = '127.0.0.8';
const held = heldDials(SILENT, GATED);
const dialsTo = held.to;

// What a gated dial reaches once let through.
const web = http.createServer((req, res) => res.end(`seen ${req.url}\n`));
const webPort = await listen(web);
// An upstream that takes the TCP connection and never answers the proxy's TLS hello.
const mute: { socket: net.Socket; closed: boolean; heard: number }[] = [];
const muteServer = net.createServer((socket) => {
  const seen = { socket, closed: false, heard: 0 };
  mute.push(seen);
  socket.on('error', () => undefined);
  socket.on('data', (d: Buffer) => (seen.heard += d.length));
  socket.on('close', () => (seen.closed = true));
});
const mutePort = await listen(muteServer);

const leaves = await testLeafIssuer();
const proxy = await startTestProxy({
  policy: {
    allowHosts: ['silent.test', 'gated.test', { host: 'mute.test', inspect: true }],
    connectPorts: [80, mutePort],
    testHosts: { 'silent.test': SILENT, 'gated.test': GATED, 'mute.test': '127.0.0.1' },
  },
  limits: { connectTimeoutMs: 120_000 },
  inspection: { leaves, upstreamCa: [leaves.caCertificatePem] },
  connect: held.connect,
});
t.teardown(async () => {
  held.destroy();
  for (const { socket } of mute) socket.destroy();
  await proxy.close();
  web.close();
  muteServer.close();
});

const linesOf = (host: string): Record<string, unknown>[] => proxy.logs.filter((l) => l.event === 'decision' && l.host === host && l.method !== 'CONNECT');

/** A client connection to the proxy that has sent `request`. */
function sent(request: string): net.Socket {
  const client = net.connect(proxy.port, '127.0.0.1');
  client.on('error', () => undefined);
  client.write(request);
  return client;
}

// A request with a body is dialled a microtask after it is handed to undici, one without at once.
const plain = [
  { name: 'GET', request: 'GET http://silent.test/ HTTP/1.1\r\nHost: silent.test\r\n\r\n' },
  { name: 'POST with a body', request: 'POST http://silent.test/ HTTP/1.1\r\nHost: silent.test\r\nContent-Length: 4\r\n\r\nbody' },
];
for (const { name, request } of plain) {
  t.test(`a plain-HTTP client that resets while its request (${name}) is dialled ends the dial`, async (t) => {
    const before = { dials: dialsTo(SILENT).length, lines: linesOf('silent.test').length };
    const client = sent(request);
    await settle(() => dialsTo(SILENT).length === before.dials + 1, 'the dial started');
    // A reset: the proxy's socket closes at once (a FIN alone is a half-close, which keeps it open).
    client.resetAndDestroy();
    // Far inside the 120 s connect timeout, with room for a loaded machine (a 1 s bound was one stall away from failing).
    await settle(() => dialsTo(SILENT)[before.dials]?.destroyed === true, 'the abandoned dial destroyed', 30_000);
    await settle(() => linesOf('silent.test').length > before.lines, 'its line');
    t.match(linesOf('silent.test').slice(before.lines), [{ decision: 'allow', error: 'client_closed' }], 'one line: allowed, the client closed (not connect_failed)');
  });
}

t.test('an inspected client that goes during the upstream TLS handshake ends the handshake and its connection', async (t) => {
  const raw = net.connect(proxy.port, '127.0.0.1');
  raw.on('error', () => undefined);
  raw.write(`CONNECT mute.test:${mutePort} HTTP/1.1\r\nHost: mute.test:${mutePort}\r\n\r\n`);
  t.match(await readUntil(raw, '\r\n\r\n'), /^HTTP\/1\.1 200 /, 'the CONNECT is answered');
  const secure = tls.connect({ socket: raw, servername: 'mute.test', ca: leaves.caCertificatePem, ALPNProtocols: ['http/1.1'] });
  secure.on('error', () => undefined);
  await new Promise((resolve) => secure.once('secureConnect', resolve));
  secure.write(`GET /x HTTP/1.1\r\nHost: mute.test:${mutePort}\r\n\r\n`);
  await settle(() => (mute[0]?.heard ?? 0) > 0, 'the proxy dialled the upstream and sent its hello');
  raw.resetAndDestroy();
  // Far inside the 120 s handshake timeout, with room for a loaded machine.
  await settle(() => mute[0]?.closed === true, 'the upstream connection closed', 30_000);
  await settle(() => linesOf('mute.test').length >= 1, 'its line');
  t.match(linesOf('mute.test'), [{ decision: 'allow', error: 'client_closed' }], 'one line: allowed, the client closed');
});

t.test('of two requests dialled to one destination, the one whose client goes ends only its own dial', async (t) => {
  const gone = sent('GET http://gated.test/gone HTTP/1.1\r\nHost: gated.test\r\n\r\n');
  await settle(() => dialsTo(GATED).length === 1, 'the first dial started');
  const stays = sent('GET http://gated.test/stays HTTP/1.1\r\nHost: gated.test\r\nConnection: close\r\n\r\n');
  await settle(() => dialsTo(GATED).length === 2, 'the second dial started');
  const [first, second] = dialsTo(GATED) as [net.Socket, net.Socket];
  gone.resetAndDestroy();
  await settle(() => first.destroyed, 'the dial of the client gone destroyed', 30_000);
  t.notOk(second.destroyed, 'the other dial goes on');
  second.connect(webPort, '127.0.0.1');
  t.match(await readUntil(stays, undefined), /^HTTP\/1\.1 200 [^]*seen \/stays\n$/, 'the other request is answered');
  await settle(() => linesOf('gated.test').length >= 2, 'both lines');
  t.match(
    linesOf('gated.test').map((l) => l.error ?? 'none'),
    ['client_closed', 'none'],
    'the client gone has its line, the other completed',
  );
});
