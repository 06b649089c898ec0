/**
 * A DNS server that answers for an allowed name may send thousands of addresses: a 64 KiB answer
 * holds about 4,000 A records, and c-ares takes it whole. An answer of more than
 * MAX_ANSWER_ADDRESSES of one family refuses the name as it arrives. Below that, every address is
 * still checked (one private among them refuses the request), but a decision keeps only the first
 * few, so that a connection does not hold them all outside the memory budget for its life, dial
 * each in turn, and write them into every decision line. The DNS server and every dial are on
 * loopback: the public addresses answered are never reached.
 */
import net from 'node:net';
import t from 'tap';
import { MAX_PINNED_ADDRESSES } from '../../policy/index.js';
import { MAX_ANSWER_ADDRESSES } from '../../proxy/dns/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { freePort, listen } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

/** `count` public IPv4 addresses (8.N.0.0 up); 4,000 are one UDP answer of about 64 KiB. */
const many = (second: number, count = MAX_ANSWER_ADDRESSES): string[] => Array.from({ length: count }, (_, i) => `8.${second}.${i >> 8}.${i & 255}`);
const MANY = many(1);

const echo = net.createServer((s) => {
  s.on('error', () => undefined);
  s.pipe(s);
});
const echoPort = await listen(echo);
const closedPort = await freePort();
const dns = await startDnsServer();
dns.set('many.dns.test', { answers: MANY });
dns.set('many-refusing.dns.test', { answers: many(2) });
dns.set('many-last-private.dns.test', { answers: [...MANY.slice(1), '10.0.0.1'] });
dns.set('oversized.dns.test', { answers: many(3, 4_000) });
dns.set('oversized-by-one.dns.test', { answers: many(4, MAX_ANSWER_ADDRESSES + 1) });
// Every dial goes to loopback: the answer's first address to the echo service, the rest refused.
const proxy = await startTestProxy({
  policy: { allowHosts: ['*.dns.test'], connectPorts: [443], tunnelDefault: 'opaque' },
  dnsServer: dns.address,
  dnsTimeoutMs: 3_000,
  connect: (address) => net.connect({ host: '127.0.0.1', port: address === MANY[0] ? echoPort : closedPort }),
});
t.teardown(async () => {
  await proxy.close();
  await dns.close();
  echo.close();
});

const lineFor = (host: string): Record<string, unknown> | undefined => proxy.logs.find((l) => l.event === 'decision' && l.host === host);

t.test(`an answer of ${MAX_ANSWER_ADDRESSES} addresses that all refuse: only the first few are dialled, and the line names only those`, async (t) => {
  const before = proxy.dialed.length;
  const res = await rawRequest(proxy.port, 'CONNECT many-refusing.dns.test:443 HTTP/1.1\r\n\r\n', '127.0.0.1', 15_000);
  t.equal(res.status, 502);
  t.equal(res.reason, 'connect_failed');
  t.equal(proxy.dialed.length - before, MAX_PINNED_ADDRESSES, 'dialled the addresses kept, in order, no more');
  t.same(proxy.dialed.slice(before, before + 2), ['8.2.0.0:443', '8.2.0.1:443']);
  await settle(() => lineFor('many-refusing.dns.test') !== undefined, 'the decision line');
  t.equal((lineFor('many-refusing.dns.test')?.addresses as unknown[]).length, MAX_PINNED_ADDRESSES);
});

t.test('a tunnel pinned to such an answer holds and logs only the addresses kept', async (t) => {
  const client = net.connect({ host: '127.0.0.1', port: proxy.port });
  client.write('CONNECT many.dns.test:443 HTTP/1.1\r\n\r\n');
  t.match(await readUntil(client, '\r\n\r\n'), /^HTTP\/1\.1 200 /);
  client.write('ping');
  t.match(await readUntil(client, 'ping'), /ping$/, 'the tunnel carries bytes');
  await settle(() => lineFor('many.dns.test') !== undefined, 'the decision line');
  const line = lineFor('many.dns.test');
  t.equal(line?.decision, 'allow');
  t.same(line?.addresses, MANY.slice(0, MAX_PINNED_ADDRESSES));
  client.destroy();
});

t.test(`every address is still checked: a private one last among ${MAX_ANSWER_ADDRESSES} refuses the request, nothing dialled`, async (t) => {
  const before = proxy.dialed.length;
  const res = await rawRequest(proxy.port, 'CONNECT many-last-private.dns.test:443 HTTP/1.1\r\n\r\n');
  t.equal(res.status, 403);
  t.equal(res.reason, 'address_not_allowed');
  t.match(res.body, /10\.0\.0\.1/);
  t.equal(proxy.dialed.length, before);
});

t.test('an answer of more addresses of one family than the proxy takes refuses the name, nothing dialled', async (t) => {
  for (const [host, count] of [['oversized.dns.test', 4_000], ['oversized-by-one.dns.test', MAX_ANSWER_ADDRESSES + 1]] as const) {
    const before = proxy.dialed.length;
    const res = await rawRequest(proxy.port, `CONNECT ${host}:443 HTTP/1.1\r\n\r\n`);
    t.equal(res.status, 502, host);
    t.equal(res.reason, 'dns_failed');
    t.match(res.body, new RegExp(`holds ${count} A records, more than the ${MAX_ANSWER_ADDRESSES} the proxy takes`));
    t.equal(proxy.dialed.length, before);
  }
});
