/**
 * A shared proxy's DNS responder of sandbox A serves A's network; a client of sandbox B that
 * reaches A's proxy address (SECURITY.md: a client of one network reaching the proxy's address on
 * another) is refused within a small rate of its own, and spends none of A's: not its query
 * rates, not the count past which A's UDP socket is shed, not its TCP connections. (Before, B's
 * flood counted toward A's shedding, and A's own clients lost UDP DNS.)
 */
import t, { type Test } from 'tap';
import dgram from 'node:dgram';
import net from 'node:net';
import dnsPacket from 'dns-packet';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createEgressProxy, createLogger } from '../../proxy/index.js';
import { openTenants } from '../../proxy/tenants/index.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { freePort } from '../support/loopback.js';
import { captureLogs } from '../support/log-capture.js';

const A = { subnet: '127.0.1.0/28', proxy: '127.0.1.1', client: '127.0.1.5' };
const B = { subnet: '127.0.2.0/28', proxy: '127.0.2.1', client: '127.0.2.5' };

function ask(to: string, port: number, from: string, name: string, ms = 400): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const done = (v: string | undefined): void => {
      clearTimeout(timer);
      socket.close();
      resolve(v);
    };
    const timer = setTimeout(() => done(undefined), ms);
    socket.on('message', (msg) => done((dnsPacket.decode(msg) as { rcode?: string }).rcode ?? '?'));
    socket.on('error', () => undefined);
    const q = dnsPacket.encode({ id: 9, type: 'query', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name, class: 'IN' }] });
    socket.bind(0, from, () => socket.send(q, port, to));
  });
}

/** A shared proxy serving sandboxes A and B (one registration each), and a free port for its DNS. */
async function sharedProxy(t: Test): Promise<{ proxy: ReturnType<typeof createEgressProxy>; shared: ReturnType<typeof openTenants>; logs: Record<string, unknown>[]; dnsPort: number }> {
  const dir = mkdtempSync(join(tmpdir(), 'rt-tenants-'));
  const { logs, sink } = captureLogs();
  const logger = createLogger('debug', sink);
  putSlot(dir, 'slot-a', { version: 1, sandbox: 'cap-a', lifecycle: 'life-a-0001', subnet: A.subnet, address: A.proxy, policy: { allowHosts: ['a.test'] } });
  putSlot(dir, 'slot-b', { version: 1, sandbox: 'cap-b', lifecycle: 'life-b-0001', subnet: B.subnet, address: B.proxy, policy: { allowHosts: ['b.test'] } });
  const { proxy, shared } = await startSharedProxy(t, dir, logger, { host: '127.0.0.1' });
  return { proxy, shared, logs, dnsPort: await freePort() };
}

t.test('a client of sandbox B flooding A\'s DNS address takes nothing of A\'s', async (t) => {
  const { proxy, shared, logs, dnsPort } = await sharedProxy(t);
  // Default limits: a shared proxy's responders shed at SANDBOX_UDP_SHED_AFTER (2,000).
  await proxy.listenTransparent({ listen: '0.0.0.0', answer: '0.0.0.0', ports: [{ kind: 'dns', dialled: 53, listen: dnsPort }], dnsHost: shared.tenants });
  let first: string | undefined;
  const deadline = Date.now() + 3_000;
  do first = await ask(A.proxy, dnsPort, A.client, 'a.test');
  while (first === undefined && Date.now() < deadline);
  t.equal(first, 'NOERROR', 'A answered before');
  t.equal(await ask(A.proxy, dnsPort, B.client, 'a.test'), 'REFUSED', 'B\'s client is no client of A\'s responder');

  // B's client sends to A's proxy address, paced so that the kernel drops little, for ~1 s.
  const flood = dgram.createSocket('udp4');
  flood.on('error', () => undefined);
  await new Promise<void>((r) => flood.bind(0, B.client, () => r()));
  const q = dnsPacket.encode({ id: 3, type: 'query', flags: 0, questions: [{ type: 'A', name: 'x.test', class: 'IN' }] });
  const until = Date.now() + 1_200;
  while (Date.now() < until && !logs.some((l) => l.event === 'dns_shed')) {
    for (let i = 0; i < 100; i++) flood.send(q, dnsPort, A.proxy);
    await new Promise((r) => setTimeout(r, 5));
  }
  flood.close();
  const shed = logs.find((l) => l.event === 'dns_shed');
  t.notOk(shed, `A's responder keeps its UDP through B's flood${shed === undefined ? '' : `: ${JSON.stringify(shed)}`}`);
  t.equal(await ask(A.proxy, dnsPort, A.client, 'a.test'), 'NOERROR', 'A\'s own client is still answered right after B\'s flood');

  // Over TCP, B's client holds no connection of A's responder; A's own client does.
  const closedWithin = (from: string, ms: number): Promise<boolean> =>
    new Promise((resolve) => {
      const socket = net.connect({ host: A.proxy, port: dnsPort, localAddress: from });
      socket.on('error', () => undefined);
      const timer = setTimeout(() => {
        socket.destroy();
        resolve(false);
      }, ms);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  t.ok(await closedWithin(B.client, 1_000), 'B\'s TCP connection to A\'s responder is closed at once');
  t.notOk(await closedWithin(A.client, 300), 'A\'s own is kept');
});

/**
 * Opens TCP connections to a responder on `port`, closed at the test's end: `kept(to, from, ms)`
 * connects from `from` to `to` and says whether the connection is still open after `ms`.
 */
function tcpKept(t: Test, port: number): (to: string, from: string, ms: number) => Promise<boolean> {
  const held: net.Socket[] = [];
  t.teardown(() => {
    for (const s of held) s.destroy();
  });
  return (to, from, ms) =>
    new Promise((resolve) => {
      const socket = net.connect({ host: to, port, localAddress: from });
      held.push(socket);
      socket.on('error', () => undefined);
      const timer = setTimeout(() => resolve(true), ms);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
}

t.test("the sandboxes' DNS responders hold their TCP connections within one cap together, the one the open-file plan keeps", async (t) => {
  const { proxy, shared, dnsPort } = await sharedProxy(t);
  await proxy.listenTransparent({ listen: '0.0.0.0', answer: '0.0.0.0', ports: [{ kind: 'dns', dialled: 53, listen: dnsPort }], dnsHost: shared.tenants, dnsLimits: { maxTcpTotal: 3, maxTcpPerClient: 2 } });
  const deadline = Date.now() + 3_000;
  while ((await ask(B.proxy, dnsPort, B.client, 'b.test')) !== 'NOERROR' && Date.now() < deadline);
  const kept = tcpKept(t, dnsPort);
  t.same([await kept(A.proxy, A.client, 300), await kept(A.proxy, A.client, 300)], [true, true], "A's client holds its two");
  t.ok(await kept(B.proxy, B.client, 300), "B's client holds one");
  t.notOk(await kept(B.proxy, B.client, 1_000), "B's second is closed, within B's own cap of two: the three are A's and B's together");
});

t.test("one sandbox's clients together hold no more than its share of the shared TCP cap", async (t) => {
  // SECURITY.md: on a shared proxy a share is per sandbox, whatever addresses it uses. The
  // per-client cap alone let a sandbox with several addresses in its subnet (two containers, or
  // one that adds an address) take every slot, and every other sandbox's DNS over TCP with them.
  const { proxy, shared, dnsPort } = await sharedProxy(t);
  await proxy.listenTransparent({ listen: '0.0.0.0', answer: '0.0.0.0', ports: [{ kind: 'dns', dialled: 53, listen: dnsPort }], dnsHost: shared.tenants, dnsLimits: { maxTcpTotal: 4, maxTcpPerClient: 2 } });
  const deadline = Date.now() + 3_000;
  while ((await ask(A.proxy, dnsPort, A.client, 'a.test')) !== 'NOERROR' && Date.now() < deadline);
  while ((await ask(B.proxy, dnsPort, B.client, 'b.test')) !== 'NOERROR' && Date.now() < deadline);
  const kept = tcpKept(t, dnsPort);
  const others = ['127.0.1.6', '127.0.1.7'];
  t.same([await kept(A.proxy, A.client, 300), await kept(A.proxy, A.client, 300)], [true, true], "A's first client holds its two");
  t.same([await kept(A.proxy, others[0]!, 300), await kept(A.proxy, others[1]!, 300)], [false, false], "A's other addresses get none past A's share");
  t.ok(await kept(B.proxy, B.client, 300), "B's client still holds a connection");
});

/** Sends `count` queries for `name` from `from` to `to:port` at once; the answers that came within `ms`. */
function burst(to: string, port: number, from: string, name: string, count: number, ms = 500): Promise<number> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    let answers = 0;
    socket.on('message', () => void (answers += 1));
    socket.on('error', () => undefined);
    socket.bind(0, from, async () => {
      // In small batches, so that the kernel's receive buffer drops none.
      for (let i = 0; i < count; i++) {
        socket.send(dnsPacket.encode({ id: i, type: 'query', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name, class: 'IN' }] }), port, to);
        if (i % 10 === 9) await new Promise((r) => setTimeout(r, 2));
      }
      setTimeout(() => {
        socket.close();
        resolve(answers);
      }, ms);
    });
  });
}

t.test("one sandbox's addresses together get one client's DNS query rate and refusal lines, not one each", async (t) => {
  // SECURITY.md: on a shared proxy a client is its sandbox. The responder counted its query rate
  // (100 a second, burst 200) and its refused-name lines (2 a second, burst 20) by address, so a
  // sandbox with several addresses in its subnet had each of them several times over.
  const { proxy, shared, logs, dnsPort } = await sharedProxy(t);
  await proxy.listenTransparent({ listen: '0.0.0.0', answer: '0.0.0.0', ports: [{ kind: 'dns', dialled: 53, listen: dnsPort }], dnsHost: shared.tenants });
  const deadline = Date.now() + 3_000;
  while ((await ask(A.proxy, dnsPort, A.client, 'a.test')) !== 'NOERROR' && Date.now() < deadline);
  const lines = (): number => logs.filter((l) => l.event === 'decision' && l.method === 'DNS' && String(l.client).startsWith('127.0.1.')).length;
  const linesBefore = lines();
  const addresses = ['127.0.1.6', '127.0.1.7', '127.0.1.8', '127.0.1.9'];
  const answered = await Promise.all(addresses.map((from) => burst(A.proxy, dnsPort, from, 'not-allowed.test', 150)));
  const total = answered.reduce((a, b) => a + b, 0);
  t.ok(total <= 240, `four addresses of sandbox A got ${total} answers (${answered.join(', ')}): one client's burst of 200 and its rate meanwhile`);
  t.ok(lines() - linesBefore <= 24, `and ${lines() - linesBefore} refusal lines: one client's burst of 20`);
  t.equal(await ask(B.proxy, dnsPort, B.client, 'b.test'), 'NOERROR', 'B is answered');
});

t.test("one sandbox's addresses together get one client's rate of new DNS TCP connections", async (t) => {
  // The rate of new connections (past it one is closed unread) was kept by address: a sandbox with
  // several addresses churned connections at that rate several times over.
  const { proxy, shared, dnsPort } = await sharedProxy(t);
  await proxy.listenTransparent({ listen: '0.0.0.0', answer: '0.0.0.0', ports: [{ kind: 'dns', dialled: 53, listen: dnsPort }], dnsHost: shared.tenants, dnsLimits: { tcpConnectionsPerSecond: 0.1, tcpConnectionBurst: 2 } });
  const deadline = Date.now() + 3_000;
  while ((await ask(A.proxy, dnsPort, A.client, 'a.test')) !== 'NOERROR' && Date.now() < deadline);
  while ((await ask(B.proxy, dnsPort, B.client, 'b.test')) !== 'NOERROR' && Date.now() < deadline);
  const kept = tcpKept(t, dnsPort);
  const results: boolean[] = [];
  for (const from of ['127.0.1.6', '127.0.1.7', '127.0.1.8']) for (let i = 0; i < 2; i++) results.push(await kept(A.proxy, from, 200));
  t.equal(results.filter(Boolean).length, 2, `A's three addresses opened ${results.filter(Boolean).length} connections within A's burst of 2`);
  t.ok(await kept(B.proxy, B.client, 300), "B's own rate is untouched");
});
