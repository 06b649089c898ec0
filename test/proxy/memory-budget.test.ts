/**
 * The refusal path of the memory budget, against a running proxy with a small budget (not a timed
 * test; the figures under a real 256 MiB cgroup are `npm run bench:load`). A client past its share
 * gets `503 overloaded` for a new connection, with its decision line and metric, while a tunnel
 * admitted before keeps working, another client is still served, and the health check is still
 * answered; a hello that grows past the share is refused after its `200`; a request that would wait
 * its turn with a body it cannot be charged for cuts its connection; the budget is back to nothing
 * once everyone has left.
 */
import net from 'node:net';
import t from 'tap';
import { ACCEPT_BYTES, MemoryBudget } from '../../proxy/index.js';
import { listen } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { captureHello, halfHello } from '../support/tls-hello.js';
import { startTestProxy, type TestProxy } from '../support/test-proxy.js';

const KIB = 1024;
// An echo service (a tls tunnel's hello comes back as its first record, which is TLS), and an
// HTTP upstream that never answers (a request held there keeps the ones behind it waiting).
const upstreams = new Set<net.Socket>();
const track = (s: net.Socket): void => {
  upstreams.add(s);
  s.on('close', () => upstreams.delete(s));
  s.on('error', () => undefined);
};
const echo = net.createServer({ allowHalfOpen: true }, (s) => {
  track(s);
  s.on('data', (d: Buffer) => s.write(d));
  s.on('end', () => s.end());
});
const hold = net.createServer((s) => {
  track(s);
  s.resume();
});
const [echoPort, holdPort] = await Promise.all([listen(echo), listen(hold)]);
t.teardown(() => {
  echo.close();
  hold.close();
  for (const s of upstreams) s.destroy();
});

const hello = await captureHello({ servername: 'tls.test' });
// A head limit of 1 KiB makes a connection that Node's parser reads cost ACCEPT_BYTES + 12 KiB:
// four of them fill a 64 KiB share exactly, so the fifth connection has no room for even its floor.
const SHARE = 4 * (ACCEPT_BYTES + 12 * KIB);
const policy = {
  allowHosts: ['tls.test', 'web.test'],
  connectPorts: [echoPort, holdPort],
  testHosts: { 'tls.test': '127.0.0.1', 'web.test': '127.0.0.1' },
};

async function proxyWith(budget: MemoryBudget): Promise<TestProxy> {
  const p = await startTestProxy({ policy, limits: { maxHeaderBytes: 1024, headerTimeoutMs: 60_000, helloTimeoutMs: 60_000 }, memory: budget });
  t.teardown(() => p.close());
  return p;
}

/** A connection from `from` (a loopback address of its own, so a client of its own) to `host:port`. */
function connectFrom(port: number, from: string, host = '127.0.0.1'): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host, localAddress: from, allowHalfOpen: true }, () => resolve(s));
    s.once('error', reject);
  });
}

/** A tls tunnel from `from` whose hello was echoed back: admitted, decided, open. */
async function openTunnel(port: number, from: string): Promise<net.Socket> {
  const s = await connectFrom(port, from);
  s.on('error', () => undefined);
  s.write(`CONNECT tls.test:${echoPort} HTTP/1.1\r\n\r\n`);
  await readUntil(s, '\r\n\r\n');
  s.write(hello);
  await readUntil(s, hello.subarray(-8).toString('latin1'));
  return s;
}

/** Echoes `text` through an open tunnel. */
async function echoes(s: net.Socket, text: string): Promise<boolean> {
  s.write(text);
  return (await readUntil(s, text, 3_000)).includes(text);
}

const decisions = (p: TestProxy): Record<string, unknown>[] => p.logs.filter((l) => l.event === 'decision');
async function overloadedMetric(p: TestProxy): Promise<number> {
  const metric = (await p.proxy.metrics.getMetricsAsJSON()).find((m) => m.name === 'egress_decisions_total');
  return (metric?.values ?? []).find((v) => v.labels.reason === 'overloaded')?.value ?? 0;
}

t.test('a client past its share: a new connection gets 503 overloaded, what was admitted keeps working', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 4 * SHARE, perClientBytes: SHARE });
  const p = await proxyWith(budget);
  const admitted = await openTunnel(p.port, '127.0.0.3');
  t.equal(budget.usedBy('127.0.0.3'), 0, 'an open tunnel holds nothing before a verdict');

  // Four heads that never end, each read by Node's parser: the share, exactly.
  const heads = await Promise.all(Array.from({ length: 4 }, () => connectFrom(p.port, '127.0.0.2')));
  for (const s of heads) s.write(`GET http://web.test:${holdPort}/ HTTP/1.1\r\nX-Slow: `);
  await settle(() => budget.usedBy('127.0.0.2') === SHARE, 'the four heads to be charged');

  const refused = await rawRequest(p.port, Buffer.from(`CONNECT tls.test:${echoPort} HTTP/1.1\r\n\r\n`), '127.0.0.1');
  t.equal(refused.status, 200, 'another client is served');
  refused.socket.destroy();
  const over = await connectFrom(p.port, '127.0.0.2');
  over.write(`CONNECT tls.test:${echoPort} HTTP/1.1\r\n\r\n`);
  const answer = await readUntil(over, undefined);
  t.match(answer, /^HTTP\/1\.1 503 Service Unavailable \(overloaded: [ -~]+\)\r\n/);
  t.match(answer, /\r\nX-Egress-Reason: overloaded\r\n/);
  t.match(answer, /\r\nRetry-After: 1\r\n/);
  t.match(answer, /egress failed: overloaded: .*127\.0\.0\.2 holds 64 KiB of its 64 KiB share/);
  over.destroy();
  await settle(() => decisions(p).some((l) => l.reason === 'overloaded'), 'the decision line');
  t.match(decisions(p).filter((l) => l.reason === 'overloaded'), [{ decision: 'deny', method: undefined, client: /^127\.0\.0\.2:\d+$/ }]);
  t.equal(await overloadedMetric(p), 1, 'the decision metric');
  const held = (await p.proxy.metrics.getMetricsAsJSON()).find((m) => m.name === 'egress_held_bytes');
  t.equal(held?.values[0]?.value, SHARE, 'the held-bytes gauge');

  // The health check from the same client is still answered.
  const health = await connectFrom(p.port, '127.0.0.2');
  health.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  t.match(await readUntil(health, undefined), /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nok\n$/);
  health.destroy();

  t.ok(await echoes(admitted, 'still here'), 'the tunnel admitted before still carries bytes');
  for (const s of [...heads, admitted]) s.destroy();
  await settle(() => budget.used === 0 && p.proxy.openConnections === 0, 'the budget to empty when everyone has left');
});

t.test('a hello that grows past the share is refused after its 200, and its bytes dropped', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 4 * SHARE, perClientBytes: SHARE });
  const p = await proxyWith(budget);
  const admitted = await openTunnel(p.port, '127.0.0.4');
  const first = await connectFrom(p.port, '127.0.0.4');
  first.write(`CONNECT tls.test:${echoPort} HTTP/1.1\r\n\r\n`);
  await readUntil(first, '\r\n\r\n');
  first.write(halfHello());
  await settle(() => budget.usedBy('127.0.0.4') > 32 * KIB, 'the first half-sent hello to be held');
  const second = await connectFrom(p.port, '127.0.0.4');
  second.on('error', () => undefined);
  second.write(`CONNECT tls.test:${echoPort} HTTP/1.1\r\n\r\n`);
  await readUntil(second, '\r\n\r\n');
  second.write(halfHello());
  const rest = await readUntil(second, undefined);
  t.same(Buffer.from(rest, 'latin1'), Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31]), 'a TLS access_denied alert, and the close');
  await settle(() => decisions(p).some((l) => l.reason === 'overloaded'), 'the decision line');
  t.match(decisions(p).filter((l) => l.reason === 'overloaded'), [{ decision: 'deny', method: 'CONNECT', host: 'tls.test', detail: /do not fit: 127\.0\.0\.4 holds/ }]);
  t.ok(budget.usedBy('127.0.0.4') < SHARE, 'the refused hello is no longer held');
  t.ok(await echoes(admitted, 'unaffected'), 'the admitted tunnel keeps working');
  for (const s of [first, second, admitted]) s.destroy();
  await settle(() => budget.used === 0, 'the budget to empty');
});

t.test('a request that would wait its turn with a body it cannot be charged for cuts its connection', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 4 * SHARE, perClientBytes: SHARE });
  const p = await proxyWith(budget);
  const s = await connectFrom(p.port, '127.0.0.5');
  s.on('error', () => undefined);
  const authority = `web.test:${holdPort}`;
  s.write(`GET http://${authority}/slow HTTP/1.1\r\nHost: ${authority}\r\n\r\nPOST http://${authority}/ HTTP/1.1\r\nHost: ${authority}\r\nContent-Length: 1000000\r\n\r\n${'x'.repeat(60_000)}`);
  await readUntil(s, undefined);
  await settle(() => decisions(p).length === 2, 'both lines');
  t.same(decisions(p).map((l) => [l.method, l.decision, l.reason ?? l.error]), [['POST', 'deny', 'overloaded'], ['GET', 'allow', 'client_closed']]);
  await settle(() => budget.used === 0, 'the budget to empty');
});

// The transparent listeners (issue 20) share the explicit proxy's budget: a hello held on the
// transparent TLS listener and a head on the transparent HTTP listener are charged to the same
// client's share as its connections to the proxy port, each way round.
t.test('the transparent listeners share the budget: hellos and heads held there count against the same share', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 4 * SHARE, perClientBytes: SHARE });
  const p = await proxyWith(budget);
  const TRANSPARENT = '127.0.0.2';
  const listening = await p.proxy.listenTransparent({ listen: TRANSPARENT, answer: TRANSPARENT, ports: [{ kind: 'tls', dialled: echoPort, listen: 0 }, { kind: 'http', dialled: holdPort, listen: 0 }] });
  const at = (dialled: number): number => listening.ports.find((x) => x.dialled === dialled)!.listen;
  const client = '127.0.0.6';
  const open: net.Socket[] = [];
  const from = async (port: number, host: string): Promise<net.Socket> => {
    const s = await connectFrom(port, client, host);
    s.on('error', () => undefined);
    open.push(s);
    return s;
  };

  // A head that never ends on the transparent HTTP listener: charged like one on the proxy port.
  const head = await from(at(holdPort), TRANSPARENT);
  head.write(`GET / HTTP/1.1\r\nHost: web.test:${holdPort}\r\nX-Slow: `);
  await settle(() => budget.usedBy(client) === ACCEPT_BYTES + 12 * KIB, 'the transparent head to be charged');

  // A hello left one byte short on the transparent TLS listener: every byte of it is charged.
  const hello1 = await from(at(echoPort), TRANSPARENT);
  const half = halfHello();
  hello1.write(half);
  const held = ACCEPT_BYTES + 12 * KIB + ACCEPT_BYTES + half.length;
  await settle(() => budget.usedBy(client) === held, 'the transparent hello to be charged');

  // So the proxy port has no room for this client's next head (its parser's 12 KiB do not fit).
  const explicit = await from(p.port, '127.0.0.1');
  explicit.write(`GET http://web.test:${holdPort}/ HTTP/1.1\r\nHost: web.test:${holdPort}\r\n\r\n`);
  const answer = await readUntil(explicit, undefined);
  t.match(answer, /^HTTP\/1\.1 503 Service Unavailable \(overloaded: [ -~]+\)\r\n/, 'the proxy port refuses past the share the transparent bytes used');
  t.match(answer, /\r\nX-Egress-Reason: overloaded\r\n/);
  explicit.destroy();
  await settle(() => budget.usedBy(client) === held, 'the refused connection to give its floor back');

  // And a second hello on the transparent listener grows past the share: a TLS alert, its line.
  const hello2 = await from(at(echoPort), TRANSPARENT);
  hello2.write(half);
  const rest = await readUntil(hello2, undefined);
  // internal_error, as for every refusal that is not the policy's (transparent-tls.ts).
  t.same(Buffer.from(rest, 'latin1'), Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50]), 'a TLS internal_error alert, and the close');
  await settle(() => decisions(p).filter((l) => l.reason === 'overloaded').length === 2, 'both decision lines');
  t.match(decisions(p).filter((l) => l.reason === 'overloaded'), [
    { decision: 'deny', client: new RegExp(`^${client}:`) },
    { decision: 'deny', via: 'transparent', port: echoPort, detail: /do not fit: 127\.0\.0\.6 holds/ },
  ]);
  t.equal(await overloadedMetric(p), 2, 'the decision metric');

  // Another client is still served on the transparent listener.
  const other = await connectFrom(at(echoPort), '127.0.0.7', TRANSPARENT);
  other.write(hello);
  t.match(await readUntil(other, hello.subarray(-8).toString('latin1')), hello.subarray(-8).toString('latin1'), 'another client\'s hello goes through');
  other.destroy();
  for (const s of open) s.destroy();
  await settle(() => budget.used === 0 && p.proxy.openConnections === 0, 'the budget to empty when everyone has left');
});
