/**
 * A one-sandbox DNS responder sheds a UDP flood at the kernel (proxy/dns/dns-udp.ts): past its
 * count of queries over the rate in a second its UDP socket is closed for a while (another client
 * of it gets no UDP answer then, TCP still answers), then bound again on the same port. A
 * responder that serves every client (the default) never closes its socket.
 */
import dgram from 'node:dgram';
import { readdirSync } from 'node:fs';
import net from 'node:net';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import dnsPacket from 'dns-packet';
import { startDnsResponder, type DnsLimits } from '../../proxy/dns/dns-responder.js';
import { createLogger } from '../../proxy/record/log.js';
import { createProxyMetrics } from '../../proxy/record/metrics.js';
import { policyOf } from '../support/test-proxy.js';
import { captureLogs } from '../support/log-capture.js';

const policy = policyOf({ allowHosts: ['allowed.test'] });
const query = (id: number): Buffer => dnsPacket.encode({ id, type: 'query', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name: 'allowed.test', class: 'IN' }] });

async function start(t: Test, limits: Partial<DnsLimits>): Promise<{ port: number; logs: Record<string, unknown>[] }> {
  const { logs, sink } = captureLogs();
  const responder = await startDnsResponder('127.0.0.1', 0, { policy: () => policy, answer: '10.213.0.14', observer: createProxyMetrics(() => 0).observer, log: createLogger('debug', sink), limits });
  t.teardown(() => responder.close());
  return { port: responder.port, logs };
}

/** One UDP query from `from`: answered or not within `ms`. */
function udpAnswered(port: number, from: string, ms = 300): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const done = (v: boolean): void => {
      clearTimeout(timer);
      socket.close();
      resolve(v);
    };
    const timer = setTimeout(() => done(false), ms);
    socket.on('message', () => done(true));
    socket.on('error', () => undefined);
    socket.bind(0, from, () => socket.send(query(1), port, '127.0.0.1'));
  });
}

/** One TCP query: answered or not. */
function tcpAnswered(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const timer = setTimeout(() => resolve(false), 2_000);
    socket.on('error', () => resolve(false));
    socket.on('data', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(true);
    });
    const q = query(2);
    socket.write(Buffer.concat([Buffer.from([q.length >> 8, q.length & 0xff]), q]));
  });
}

/** `count` queries from one client address, sent as fast as they go. */
async function blast(port: number, from: string, count: number): Promise<void> {
  const socket = dgram.createSocket('udp4');
  socket.on('error', () => undefined);
  await new Promise<void>((r) => socket.bind(0, from, () => r()));
  const q = query(3);
  await Promise.all(Array.from({ length: count }, () => new Promise<void>((r) => socket.send(q, port, '127.0.0.1', () => r()))));
  socket.close();
}

// Shed for 2 s: the socket closes early in the flood, and another client's query must come while
// it is closed, after the rest of the flood is sent and a pause; with 600 ms, a loaded machine
// that took half a second over the sends could find it open again.
const LIMITS = { clientQueriesPerSecond: 5, clientQueryBurst: 5, udpShedAfter: 100, udpShedMs: 2_000 };

t.test('a flood past the shedding point closes UDP for a while; TCP answers; UDP comes back on its port', async (t) => {
  const { port, logs } = await start(t, LIMITS);
  t.ok(await udpAnswered(port, '127.0.5.9'), 'answered before');
  const began = Date.now();
  await blast(port, '127.0.0.8', 2_000);
  // What the kernel queued of the flood is read first (more than its buffer holds was dropped).
  await new Promise((r) => setTimeout(r, 100));
  t.notOk(await udpAnswered(port, '127.0.5.9'), 'another client gets no UDP answer while it is shed');
  t.ok(await tcpAnswered(port), 'TCP is still answered');
  t.match(String(logs.find((l) => l.event === 'dns_shed')?.detail), /UDP queries over the rate within a second: UDP closed for 2000 ms/);
  let back = false;
  while (!back && Date.now() - began < 5_000) back = await udpAnswered(port, '127.0.5.9', 200);
  t.ok(back, `UDP answered again, on the same port, ${Date.now() - began} ms after the flood began`);
});

t.test('a responder that serves every client never sheds', async (t) => {
  const { port, logs } = await start(t, { clientQueriesPerSecond: 5, clientQueryBurst: 5 });
  await blast(port, '127.0.0.8', 2_000);
  await new Promise((r) => setTimeout(r, 100));
  t.ok(await udpAnswered(port, '127.0.5.9', 500), 'another client is answered right after the flood');
  t.notOk(logs.some((l) => l.event === 'dns_shed'));
});

// A shared proxy starts a registration's responder again every few hundred milliseconds while its
// address is on no interface yet (the shard's leg not connected): a failed start keeps nothing.
t.test('a responder whose address is on no interface fails to start and keeps no descriptor', async (t) => {
  const descriptors = (): number => readdirSync('/proc/self/fd').length;
  const attempt = (): Promise<unknown> =>
    startDnsResponder('10.255.77.1', 0, { policy: () => policy, answer: '10.255.77.1', observer: createProxyMetrics(() => 0).observer, log: createLogger('silent', new Writable({ write: (_c, _e, done) => done() })), limits: {} }).then(
      async (r) => {
        await r.close();
        return 'started';
      },
      (err: NodeJS.ErrnoException) => err.code,
    );
  t.equal(await attempt(), 'EADDRNOTAVAIL', 'the address is on no interface of this machine');
  const before = descriptors();
  for (let i = 0; i < 50; i++) await attempt();
  t.ok(descriptors() - before <= 2, `50 failed starts left ${descriptors() - before} descriptors open`);
});
