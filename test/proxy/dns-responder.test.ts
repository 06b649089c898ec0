/**
 * The transparent DNS responder on real sockets, asked by real DNS clients: dig (UDP, TCP, and
 * its retry over TCP after a truncated answer) and Node's own resolver (c-ares). What one client
 * can make it do is capped: its query rate (another client is still answered), its decision lines
 * (counted, then summarised), its TCP connections, their idle time and queries; a response sent to
 * it, or a message of the wrong size on TCP, gets nothing.
 */
import { execFile } from 'node:child_process';
import dgram from 'node:dgram';
import { promises as dns } from 'node:dns';
import net from 'node:net';
import t, { type Test } from 'tap';
import dnsPacket from 'dns-packet';
import { startDnsResponder, type DnsLimits, type DnsResponder } from '../../proxy/dns/dns-responder.js';
import { TcpSlots } from '../../proxy/dns/dns-tcp.js';
import { createLogger } from '../../proxy/record/log.js';
import { createProxyMetrics } from '../../proxy/record/metrics.js';
import { toolMissing, needUnmet } from '../support/needs.js';
import { settle } from '../support/settle.js';
import { policyOf } from '../support/test-proxy.js';
import { captureLogs } from '../support/log-capture.js';

const ANSWER = '10.213.0.2';
const policy = policyOf({ allowHosts: ['allowed.test', '*.wild.test'] });
const long = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(50)}.wild.test`;
/** The header fields dns-packet decodes that its types leave out. */
type Decoded = dnsPacket.DecodedPacket & { rcode?: string };

interface Running {
  readonly responder: DnsResponder;
  readonly logs: Record<string, unknown>[];
  metric(result: string): Promise<number>;
  decisions(reason: string): Promise<number>;
  /** Messages the responder has taken up, whatever it did with them (each is counted once). */
  processed(): Promise<number>;
}

/** Waits until `count` more messages than `before` are taken up, or 5 s have passed. */
async function processedPast(r: Running, before: number, count: number): Promise<void> {
  for (const end = Date.now() + 5_000; (await r.processed()) < before + count && Date.now() < end; ) await new Promise((resolve) => setTimeout(resolve, 10));
}

async function start(t: Test, limits: Partial<DnsLimits> = {}): Promise<Running> {
  const { logs, sink } = captureLogs();
  const metrics = createProxyMetrics(() => 0);
  const responder = await startDnsResponder('127.0.0.1', 0, { policy: () => policy, answer: ANSWER, observer: metrics.observer, log: createLogger('debug', sink), limits });
  t.teardown(() => responder.close());
  const value = async (name: string, labels: Record<string, string>): Promise<number> => {
    const m = (await metrics.registry.getSingleMetric(name)?.get())?.values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x));
    return m?.value ?? 0;
  };
  const processed = async (): Promise<number> => ((await metrics.registry.getSingleMetric('egress_dns_queries_total')?.get())?.values ?? []).reduce((n, v) => n + v.value, 0);
  return { responder, logs, metric: (result) => value('egress_dns_queries_total', { result }), decisions: (reason) => value('egress_decisions_total', { outcome: 'deny', reason }), processed };
}

function dig(port: number, ...args: string[]): Promise<{ status: string; answers: string[]; out: string }> {
  return new Promise((resolve) => {
    execFile('dig', [`@127.0.0.1`, '-p', String(port), '+tries=1', '+time=2', '+noall', '+answer', '+comments', ...args], (_err, stdout) => {
      const status = /status: ([A-Z]+)/.exec(stdout)?.[1] ?? 'none';
      const answers = stdout.split('\n').filter((l) => l && !l.startsWith(';')).map((l) => l.split(/\s+/).join(' '));
      resolve({ status, answers, out: stdout });
    });
  });
}

/** Sends one UDP message from `from`, and resolves with the answer, or undefined after `waitMs`. */
function udpAsk(port: number, message: Buffer, from = '127.0.0.1', waitMs = 300): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const socket = dgram.createSocket('udp4');
    const done = (value: Buffer | undefined): void => {
      clearTimeout(timer);
      socket.close();
      resolve(value);
    };
    const timer = setTimeout(() => done(undefined), waitMs);
    socket.on('message', (msg) => done(msg));
    socket.bind(0, from, () => socket.send(message, port, '127.0.0.1'));
  });
}

const query = (name: string, type: dnsPacket.RecordType = 'A', id = 7): Buffer =>
  dnsPacket.encode({ id, type: 'query', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type, name, class: 'IN' }] });
const framed = (message: Buffer): Buffer => Buffer.concat([Buffer.from([message.length >> 8, message.length & 0xff]), message]);

function tcpConnect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.on('error', reject);
  });
}

/** Reads framed answers until `count` have come or the connection closes. */
function tcpAnswers(socket: net.Socket, count: number, ms = 3_000): Promise<{ answers: Decoded[]; closed: boolean }> {
  return new Promise((resolve) => {
    let buffered = Buffer.alloc(0);
    const answers: Decoded[] = [];
    const finish = (closed: boolean): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      resolve({ answers, closed });
    };
    const timer = setTimeout(() => finish(false), ms);
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2 && buffered.length >= 2 + buffered.readUInt16BE(0)) {
        answers.push(dnsPacket.decode(buffered.subarray(2, 2 + buffered.readUInt16BE(0))));
        buffered = buffered.subarray(2 + buffered.readUInt16BE(0));
      }
      if (answers.length >= count) finish(false);
    };
    socket.on('data', onData);
    socket.once('close', () => finish(true));
  });
}

t.test('dig and Node\'s resolver get the allowlist\'s answers', async (t) => {
  const missing = toolMissing('dig', ['-v'], 'apt-get install bind9-dnsutils');
  if (missing !== undefined) return needUnmet(t, missing);
  const { responder, logs } = await start(t);
  const port = responder.port;

  const a = await dig(port, 'allowed.test', 'A');
  t.same([a.status, a.answers], ['NOERROR', [`allowed.test. 5 IN A ${ANSWER}`]], 'UDP: the proxy\'s address, TTL 5');
  const tcp = await dig(port, '+tcp', 'x.y.wild.test', 'A');
  t.same([tcp.status, tcp.answers], ['NOERROR', [`x.y.wild.test. 5 IN A ${ANSWER}`]], 'TCP, under a wildcard');
  const aaaa = await dig(port, 'allowed.test', 'AAAA');
  t.same([aaaa.status, aaaa.answers], ['NOERROR', []], 'AAAA: empty');
  const nx = await dig(port, 'example.com', 'A');
  t.same([nx.status, nx.answers], ['NXDOMAIN', []], 'an unlisted name: NXDOMAIN');
  const literal = await dig(port, '127.0.0.1', 'A');
  t.same([literal.status, literal.answers], ['NXDOMAIN', []], 'an IP literal as a name: NXDOMAIN');
  const chaos = await dig(port, 'version.bind', 'TXT', 'CH');
  t.equal(chaos.status, 'REFUSED', 'CHAOS class: refused, nothing said');
  const noEdns = await dig(port, '+noedns', '+ignore', long, 'A');
  t.match(noEdns.out, /flags: qr[^;]*tc/, 'a long name without EDNS: truncated over UDP');
  const retried = await dig(port, '+noedns', long, 'A');
  t.same([retried.status, retried.answers], ['NOERROR', [`${long}. 5 IN A ${ANSWER}`]], 'dig retries over TCP and gets it');

  const resolver = new dns.Resolver({ timeout: 1_000, tries: 1 });
  resolver.setServers([`127.0.0.1:${port}`]);
  t.same(await resolver.resolve4('Allowed.Test'), [ANSWER], 'c-ares: A');
  await t.rejects(resolver.resolve6('allowed.test'), { code: 'ENODATA' }, 'c-ares: no AAAA');
  await t.rejects(resolver.resolve4('example.com'), { code: 'ENOTFOUND' }, 'c-ares: NXDOMAIN');

  const lines = logs.filter((l) => l.event === 'decision');
  t.same(lines.map((l) => [l.reason, l.host, l.qtype, l.method, l.via]), [
    ['dns_not_allowed', 'example.com', 'A', 'DNS', 'transparent'],
    ['ip_literal', '127.0.0.1', 'A', 'DNS', 'transparent'],
    ['dns_not_allowed', 'example.com', 'A', 'DNS', 'transparent'],
  ], 'a decision line for each refused name, none for the answered ones');
  t.match(lines[0], { decision: 'deny', client: /^127\.0\.0\.1:\d+$/, detail: 'example.com is not on the allowlist' });
});

t.test('a response is never answered; UDP messages of no query size neither', async (t) => {
  const { responder, metric } = await start(t);
  const response = dnsPacket.encode({ id: 9, type: 'response', flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'A', name: 'allowed.test', class: 'IN' }] });
  t.equal(await udpAsk(responder.port, response), undefined, 'a response: nothing back');
  t.equal(await udpAsk(responder.port, Buffer.alloc(5)), undefined, 'five bytes: nothing back');
  t.equal(await udpAsk(responder.port, Buffer.alloc(600)), undefined, '600 bytes: nothing back');
  t.same([await metric('dropped_response'), await metric('dropped_short'), await metric('dropped_too_large')], [1, 1, 1]);
  const ok = await udpAsk(responder.port, query('allowed.test'));
  t.equal(ok && dnsPacket.decode(ok).answers?.length, 1, 'the responder still answers');
});

t.test('one client\'s query rate is capped; another client is still answered', async (t) => {
  const running = await start(t, { clientQueryBurst: 20, clientQueriesPerSecond: 1 });
  const { responder, metric } = running;
  const socket = dgram.createSocket('udp4');
  let answers = 0;
  socket.on('message', () => answers++);
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
  for (let i = 0; i < 100; i++) socket.send(query('allowed.test', 'A', i), responder.port, '127.0.0.1');
  await settle(() => answers >= 20, 'the burst answered');
  // Every query taken up (a loaded machine can take longer than the wait below), then time for
  // answers that should not come.
  await processedPast(running, 0, 100);
  await new Promise((r) => setTimeout(r, 300));
  socket.close();
  t.ok(answers >= 20 && answers <= 22, `${answers} of 100 answered (burst 20, 1/s)`);
  t.ok((await metric('rate_limited')) >= 78, 'the rest counted as rate_limited');
  const other = await udpAsk(responder.port, query('allowed.test'), '127.0.0.2');
  t.equal(other && dnsPacket.decode(other).answers?.length, 1, 'another client address is answered');
});

t.test('refused names cannot flood the log: lines are capped per client, every refusal counted', async (t) => {
  const { responder, logs, decisions } = await start(t, { clientLineBurst: 5, clientLinesPerSecond: 0.001, suppressedReportMs: 200 });
  const socket = dgram.createSocket('udp4');
  let answers = 0;
  socket.on('message', (msg) => {
    const decoded: Decoded = dnsPacket.decode(msg);
    if (decoded.rcode === 'NXDOMAIN') answers++;
  });
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
  // Distinct names, as a tunnel through DNS would send.
  for (let i = 0; i < 50; i++) socket.send(query(`chunk${i}.exfil.example`, 'A', i), responder.port, '127.0.0.1');
  await settle(() => answers === 50, 'every name answered NXDOMAIN');
  socket.close();
  t.equal(await decisions('dns_not_allowed'), 50, 'the decision metric counts every refusal');
  await settle(() => logs.some((l) => l.event === 'dns_lines_suppressed'), 'the summary line');
  t.equal(logs.filter((l) => l.event === 'decision').length, 5, 'five decision lines');
  t.match(logs.find((l) => l.event === 'dns_lines_suppressed'), { lines: 45, clients: 1 }, 'the rest summarised');
});

/**
 * Sends `count` queries from `from` (one UDP socket) and resolves with the answers that came back:
 * those to every query the responder took up, and any more within `waitMs` after. (The wait alone
 * was taken for the time to answer; a loaded machine can need more.)
 */
async function volley(r: Running, from: string, count: number, name = 'allowed.test', waitMs = 300): Promise<number> {
  const socket = dgram.createSocket('udp4');
  let answers = 0;
  socket.on('message', () => answers++);
  await new Promise<void>((resolve) => socket.bind(0, from, resolve));
  const before = await r.processed();
  for (let i = 0; i < count; i++) socket.send(query(name, 'A', i), r.responder.port, '127.0.0.1');
  await processedPast(r, before, count);
  await new Promise((resolve) => setTimeout(resolve, waitMs));
  socket.close();
  return answers;
}

t.test("a flooding client spends its own share first, never what the others have of the total", async (t) => {
  const running = await start(t, { clientQueryBurst: 20, clientQueriesPerSecond: 0.001, totalQueryBurst: 50, totalQueriesPerSecond: 0.001 });
  const flood = await volley(running, '127.0.0.1', 200);
  t.ok(flood >= 20 && flood <= 21, `the flooder got its burst (${flood} of 200)`);
  t.equal(await volley(running, '127.0.0.2', 20), 20, 'another client is answered every time, from what is left of the total');
});

t.test('source addresses rotated within one network share the network\'s rate', async (t) => {
  const running = await start(t, { clientQueryBurst: 5, clientQueriesPerSecond: 0.001, networkQueryBurst: 20, networkQueriesPerSecond: 0.001 });
  const { metric } = running;
  let answered = 0;
  for (let host = 1; host <= 20; host++) answered += await volley(running, `127.0.5.${host}`, 5, 'allowed.test', 50);
  t.ok(answered >= 20 && answered <= 21, `20 addresses of one /24, 5 queries each: ${answered} answered (the network's burst of 20)`);
  t.ok((await metric('rate_limited')) >= 79, 'the rest counted as rate_limited');
  t.equal(await volley(running, '127.0.6.1', 5), 5, 'a client of another network is answered');
});

t.test('a flooding neighbour takes at most its own share of the network\'s rate: a client beside it is answered', async (t) => {
  // The defaults' proportions: one client a quarter of its network.
  const running = await start(t, { clientQueryBurst: 20, clientQueriesPerSecond: 0.001, networkQueryBurst: 80, networkQueriesPerSecond: 0.001 });
  const flood = await volley(running, '127.0.8.1', 200);
  t.ok(flood >= 20 && flood <= 21, `the flooder got its burst (${flood} of 200)`);
  t.equal(await volley(running, '127.0.8.2', 20), 20, 'its neighbour in the same /24 is answered every time');
});

t.test('the line table cannot be rotated around: many sources write at most the total of lines', async (t) => {
  const running = await start(t, { clientLineBurst: 2, clientLinesPerSecond: 0.001, totalLineBurst: 10, totalLinesPerSecond: 0.001, maxClients: 16, suppressedReportMs: 200 });
  const { logs, decisions } = running;
  for (let host = 1; host <= 40; host++) await volley(running, `127.0.7.${host}`, 2, `refused${host}.example`, 20);
  t.equal(await decisions('dns_not_allowed'), 80, 'every refusal counted');
  const suppressed = (): number => logs.filter((l) => l.event === 'dns_lines_suppressed').reduce((n, l) => n + Number(l.lines), 0);
  await settle(() => suppressed() === 70, 'the rest in the summaries');
  const lines = logs.filter((l) => l.event === 'decision').length;
  t.equal(lines, 10, `40 rotating sources wrote ${lines} decision lines (the total's burst)`);
  t.match(logs.find((l) => l.event === 'dns_lines_suppressed'), { byReason: { dns_not_allowed: Number } });
});

t.test('TCP: new connections past a client\'s rate are closed unread; its answered ones go on', async (t) => {
  const { responder, metric } = await start(t, { tcpConnectionsPerSecond: 2, tcpConnectionBurst: 5 });
  // Each opens, asks once and closes: the rate counts connections, whatever they carry.
  const answered: boolean[] = [];
  for (let i = 0; i < 12; i++) {
    const s = await tcpConnect(responder.port);
    s.write(framed(query('allowed.test', 'A', i)));
    const { answers } = await tcpAnswers(s, 1, 1_000);
    s.destroy();
    answered.push(answers.length === 1);
  }
  const served = answered.filter(Boolean).length;
  t.ok(served >= 5 && served <= 8, `${served} of 12 served: the burst of 5, and what 2 a second refilled meanwhile`);
  t.equal(await metric('tcp_refused'), 12 - served, 'each one past the rate counted as refused');
});

t.test('TCP: pipelined queries answered in order; bad lengths, caps and idle connections closed', async (t) => {
  const { responder } = await start(t, { maxTcpPerClient: 3, tcpIdleMs: 300, maxQueriesPerTcp: 4 });
  const port = responder.port;

  await t.test('three queries in one write, three answers in order', async (t) => {
    const s = await tcpConnect(port);
    s.write(Buffer.concat([framed(query('allowed.test', 'A', 1)), framed(query('example.com', 'A', 2)), framed(query('allowed.test', 'AAAA', 3))]));
    const { answers } = await tcpAnswers(s, 3);
    s.destroy();
    t.same(answers.map((a) => [a.id, a.rcode, a.answers?.length]), [[1, 'NOERROR', 1], [2, 'NXDOMAIN', 0], [3, 'NOERROR', 0]]);
  });

  await t.test('a query split over writes', async (t) => {
    const s = await tcpConnect(port);
    const bytes = framed(query('allowed.test', 'A', 5));
    s.write(bytes.subarray(0, 1));
    await new Promise((r) => setTimeout(r, 50));
    s.write(bytes.subarray(1, 9));
    await new Promise((r) => setTimeout(r, 50));
    s.write(bytes.subarray(9));
    const { answers } = await tcpAnswers(s, 1);
    s.destroy();
    t.same(answers.map((a) => a.id), [5]);
  });

  for (const row of [
    { name: 'a zero length', bytes: Buffer.from([0, 0]) },
    { name: 'a length over the query cap', bytes: Buffer.from([0x02, 0x58]) },
    { name: 'a response', bytes: framed(dnsPacket.encode({ id: 1, type: 'response', questions: [{ type: 'A', name: 'allowed.test' }] })) },
    { name: 'a query past the per-connection cap', bytes: Buffer.concat(Array.from({ length: 5 }, (_, i) => framed(query('allowed.test', 'A', i)))) },
  ]) {
    await t.test(`${row.name}: closed`, async (t) => {
      const s = await tcpConnect(port);
      s.write(row.bytes);
      const { closed, answers } = await tcpAnswers(s, 99, 2_000);
      t.ok(closed, 'closed');
      t.ok(answers.length <= 4, `${answers.length} answers before it`);
    });
  }

  await t.test('an idle connection, and one trickling bytes, closed at the deadline', async (t) => {
    const idle = await tcpConnect(port);
    const trickle = await tcpConnect(port);
    const started = Date.now();
    // A 64-byte message announced, then a byte every 50 ms: never complete in time.
    trickle.write(Buffer.from([0, 64]));
    const timer = setInterval(() => trickle.writable && trickle.write(Buffer.from([0x61])), 50);
    const [a, b] = await Promise.all([tcpAnswers(idle, 1, 2_000), tcpAnswers(trickle, 1, 2_000)]);
    clearInterval(timer);
    t.same([a.closed, b.closed], [true, true]);
    t.ok(Date.now() - started < 1_500, 'at the 300 ms deadline, not later');
  });

  await t.test('connections per client are capped', async (t) => {
    const held = await Promise.all([tcpConnect(port), tcpConnect(port), tcpConnect(port)]);
    const fourth = await tcpConnect(port);
    const { closed } = await tcpAnswers(fourth, 1, 1_000);
    t.ok(closed, 'the fourth is closed at once');
    for (const s of held) s.destroy();
  });
});

t.test("responders sharing their TCP slots (a shared proxy's, one per sandbox) hold the cap together", async (t) => {
  const slots = new TcpSlots(3);
  const { sink } = captureLogs();
  const metrics = createProxyMetrics(() => 0);
  const open = async (): Promise<DnsResponder> => {
    const r = await startDnsResponder('127.0.0.1', 0, { policy: () => policy, answer: ANSWER, observer: metrics.observer, log: createLogger('silent', sink), tcpSlots: slots });
    t.teardown(() => r.close());
    return r;
  };
  const [a, b] = [await open(), await open()];
  const held = await Promise.all([tcpConnect(a.port), tcpConnect(a.port), tcpConnect(b.port)]);
  held[0]?.write(framed(query('allowed.test')));
  t.equal((await tcpAnswers(held[0] as net.Socket, 1)).answers.length, 1, 'a held connection is answered');
  const fourth = await tcpConnect(b.port);
  t.ok((await tcpAnswers(fourth, 1, 1_000)).closed, 'the fourth, to the other responder, is closed at once: the cap is theirs together');
  t.equal(slots.open, 3);
  held[1]?.destroy();
  const deadline = Date.now() + 2_000;
  while (slots.open > 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  const fifth = await tcpConnect(b.port);
  fifth.write(framed(query('allowed.test')));
  t.equal((await tcpAnswers(fifth, 1)).answers.length, 1, 'a slot one responder freed serves the other');
  for (const s of [...held, fifth]) s.destroy();
});

