/**
 * One client cannot take what the others need: its share of every shared pool (connections, the
 * memory held in tunnels and responses it does not read, rate tables, refusal lines) stays a
 * fraction of the total, and what it holds past its share is taken from it, oldest first. The
 * pure accounting is tested directly; the tunnel and response cases run a real proxy on loopback
 * with a small memory budget (the figures in a real 256 MiB cgroup are `npm run bench:load`).
 */
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { clientShare, CLIENT_SHARE_FLOOR } from '../../proxy/budget/limits.js';
import { LineGate, MAX_KINDS, OTHER_KINDS } from '../../proxy/record/line-gate.js';
import { MemoryBudget, READ_AHEAD_BYTES } from '../../proxy/budget/memory-budget.js';
import { networkOf, OVERFLOW_KEY, RateLimiter } from '../../proxy/budget/rate-limit.js';
import { listen, streamingServer } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';
import { REFUSAL_LINES } from '../../proxy/record/decisions.js';
import { captureHello } from '../support/tls-hello.js';

const KIB = 1024;

t.test('a client share is a quarter of the pool, never below the floor, never the whole of a large pool', async (t) => {
  t.equal(clientShare(16_384, 4_096), 4_096, 'the defaults: a quarter');
  t.equal(clientShare(3_413, 4_096), 853, 'a total lowered by the memory plan keeps the share a quarter of it');
  t.equal(clientShare(3_413), 853);
  t.equal(clientShare(1_000, 10), 10, 'a smaller share asked for is kept');
  t.equal(clientShare(20), CLIENT_SHARE_FLOOR, 'a small pool: the floor');
  t.equal(clientShare(3), 3, 'a pool below the floor is shared whole');
  t.equal(clientShare(1), 1);
});

t.test('held bytes: a client past its share loses its oldest stalls first; the budget past its total, the heaviest client\'s', async (t) => {
  const budget = new MemoryBudget({ totalBytes: 1_000, perClientBytes: 400 });
  const evicted: string[] = [];
  const hold = (client: string, name: string, bytes: number) => budget.hold(client, bytes, () => evicted.push(name));
  const a1 = hold('a', 'a1', 150);
  hold('a', 'a2', 150);
  t.same(evicted, [], 'within the share: nothing closed');
  hold('a', 'a3', 150);
  t.same(evicted, ['a1'], 'past the share: the oldest stall is closed');
  t.equal(budget.usedBy('a'), 300);
  a1.release();
  t.equal(budget.usedBy('a'), 300, 'releasing an evicted stall gives back nothing twice');
  hold('b', 'b1', 300);
  hold('c', 'c1', 350);
  t.same(evicted, ['a1'], 'everyone within its share and the total: nothing more closed');
  hold('d', 'd1', 200);
  t.same(evicted, ['a1', 'c1'], 'past the total: the oldest stall of the client holding the most');
  t.ok(budget.used <= 1_000, `the budget is back within its total (${budget.used})`);
  const small = budget.hold('e', 20, () => evicted.push('e1'));
  small.release();
  small.release();
  t.equal(budget.usedBy('e'), 0, 'release is idempotent');
  t.equal(budget.stalledBy('a'), 2);
  // A new connection within its share, with the total full of others' stalls: the stalls of the
  // client holding the most give way, so that stalls lock no one out.
  const full = new MemoryBudget({ totalBytes: 1_000, perClientBytes: 400 });
  const gone: string[] = [];
  full.hold('x', 300, () => gone.push('x1'));
  full.hold('y', 350, () => gone.push('y1'));
  full.hold('z', 300, () => gone.push('z1'));
  t.ok(full.admit('w', 100) !== undefined, 'a new client is admitted with the budget full of stalls');
  t.same(gone, ['y1'], 'by closing the oldest stall of the client holding the most');
  t.equal(full.admit('w', 400), undefined, 'past its own share it is still refused');
  // A stall bigger than the whole share closes itself.
  budget.hold('f', 500, () => evicted.push('f1'));
  t.equal(evicted.at(-1), 'f1', 'a stall alone past the share is closed at once');
  t.equal(budget.usedBy('f'), 0);
});

t.test('rate tables cannot be rotated around: past the cap, addresses share their network, then one key', async (t) => {
  let now = 0;
  const limiter = new RateLimiter(1, 2, 12, () => now);
  // Room for 9 own keys (three quarters of 12), then networks up to 11 keys, then the overflow key.
  for (let i = 1; i <= 9; i++) t.ok(limiter.takeFor(`10.0.0.${i}`));
  t.equal(limiter.size, 9);
  t.ok(limiter.takeFor('10.0.1.1') && limiter.takeFor('10.0.1.2'), 'a new address past the cap: its /24 has a bucket of its own');
  t.equal(limiter.keyOf('10.0.1.3'), '10.0.1.0/24', 'every address of that network shares it');
  t.notOk(limiter.takeFor('10.0.1.3'), 'and the network\'s burst is spent, however many addresses it rotates through');
  t.ok(limiter.takeFor('2001:db8:1:2:aaaa::1'), 'an IPv6 address is counted under its /64');
  t.equal(limiter.keyOf('2001:db8:1:2::99'), '2001:db8:1:2::/64');
  t.ok(limiter.takeFor('10.9.9.9'), 'the table full of networks: the shared overflow key');
  t.equal(limiter.keyOf('10.9.9.8'), OVERFLOW_KEY);
  t.ok(limiter.size <= 12, `the table stays capped (${limiter.size})`);
  t.ok(limiter.takeFor('10.0.0.1'), 'a known address keeps its own bucket');
  t.notOk(limiter.takeFor('10.0.0.1') && limiter.takeFor('10.0.0.1'), 'and its own rate');
  // Once buckets are full again, the sweep makes room for own keys.
  now = 10_000;
  t.ok(limiter.takeFor('10.5.5.5'));
  t.equal(limiter.keyOf('10.5.5.5'), '10.5.5.5', 'idle buckets were swept: a new address gets its own bucket again');
  t.equal(networkOf('::ffff:192.0.2.7'), '192.0.2.0/24', 'an IPv4-mapped address is its IPv4 network');
  t.equal(networkOf('not an address'), undefined);
});

t.test('refusal lines: a client past its rate is counted, not written, and does not spend the others\' lines', async (t) => {
  let now = 0;
  const gate = new LineGate({ clientPerSecond: 1, clientBurst: 3, totalPerSecond: 1, totalBurst: 5, maxClients: 16 }, () => now);
  const flood = Array.from({ length: 100 }, (_, i) => gate.admit('10.0.0.1', i % 2 === 0 ? 'host_not_allowed' : 'bad_request'));
  t.equal(flood.filter(Boolean).length, 3, 'the flooder gets its burst of lines');
  t.ok(gate.admit('10.0.0.2', 'host_not_allowed') && gate.admit('10.0.0.2', 'host_not_allowed'), 'another client still gets its lines');
  t.notOk(gate.admit('10.0.0.3', 'host_not_allowed'), 'the total is spent: counted only');
  t.same(gate.takeSummary(), { lines: 98, clients: 2, byReason: { bad_request: 49, host_not_allowed: 49 }, topClients: ['10.0.0.1=97', '10.0.0.3=1'] }, 'the counts, by reason and by client');
  t.equal(gate.takeSummary(), undefined, 'a summary starts afresh');
  now = 10_000;
  t.ok(gate.admit('10.0.0.1', 'host_not_allowed'), 'the rate refills');
});

t.test('a summary counts at most MAX_KINDS kinds apart: hosts a client makes up share one count past them', async (t) => {
  const gate = new LineGate({ clientPerSecond: 1, clientBurst: 1, totalPerSecond: 1, totalBurst: 1, maxClients: 16 }, () => 0);
  t.ok(gate.admit('cap-a', 'x0.a.test'), 'the burst');
  for (let i = 1; i <= MAX_KINDS + 10; i++) t.notOk(gate.admit('cap-a', `x${i}.a.test`));
  t.notOk(gate.admit('cap-a', 'x1.a.test'), 'a kind counted already');
  const summary = gate.takeSummary();
  t.equal(summary?.lines, MAX_KINDS + 11);
  t.equal(Object.keys(summary?.byReason ?? {}).length, MAX_KINDS + 1, 'the first kinds, and one more for the rest');
  t.same([summary?.byReason['x1.a.test'], summary?.byReason[OTHER_KINDS]], [2, 10]);
});

t.test('unread downloads: a client past its share of memory loses its oldest stalled tunnels; another client is served', async (t) => {
  const upstream = await streamingServer();
  t.teardown(() => upstream.close());
  const budget = new MemoryBudget({ totalBytes: 8 * 1024 * KIB, perClientBytes: 1024 * KIB });
  const p = await startTestProxy({
    policy: { allowHosts: [{ host: 'stream.test', tunnel: 'opaque' }], connectPorts: [upstream.port], testHosts: { 'stream.test': '127.0.0.1' } },
    memory: budget,
  });
  t.teardown(() => p.close());
  const tunnels: net.Socket[] = [];
  t.teardown(() => tunnels.forEach((s) => s.destroy()));
  for (let i = 0; i < 24; i++) {
    const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
    s.on('error', () => undefined);
    s.write(`CONNECT stream.test:${upstream.port} HTTP/1.1\r\n\r\n`);
    const head = await readUntil(s, '\r\n\r\n');
    t.match(head, /^HTTP\/1\.1 200 /, `tunnel ${i} opened`);
    // The client reads nothing more: the download backs up into the proxy.
    s.pause();
    tunnels.push(s);
    await new Promise((r) => setTimeout(r, 20));
  }
  const evicted = (): Record<string, unknown>[] => p.logs.filter((l) => l.event === 'tunnel_closed' && l.closedBy === 'overloaded');
  await settle(() => evicted().length >= 8, 'stalled tunnels closed to free memory');
  t.ok(budget.usedBy('127.0.0.2') <= 1024 * KIB, `the client holds at most its share (${Math.round(budget.usedBy('127.0.0.2') / KIB)} KiB)`);
  t.ok(budget.stalledBy('127.0.0.2') >= 1 && budget.stalledBy('127.0.0.2') <= (1024 * KIB) / READ_AHEAD_BYTES, `${budget.stalledBy('127.0.0.2')} stalled tunnels charged`);
  t.match(evicted()[0], { detail: /its client held more than its share/ });
  const closedConns = evicted().map((l) => Number(l.conn));
  const openedConns = p.logs.filter((l) => l.event === 'decision' && l.decision === 'allow').map((l) => Number(l.conn));
  t.ok(closedConns.includes(Math.min(...openedConns)), 'the oldest tunnel was among the first closed');
  t.notOk(closedConns.includes(Math.max(...openedConns)), 'the newest was not');

  // Another client's download flows.
  const other = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.3' });
  t.teardown(() => other.destroy());
  other.write(`CONNECT stream.test:${upstream.port} HTTP/1.1\r\n\r\n`);
  t.match(await readUntil(other, '\r\n\r\n'), /^HTTP\/1\.1 200 /, 'another client opens a tunnel');
  let received = 0;
  other.on('data', (d: Buffer) => (received += d.length));
  await settle(() => received >= 4 * 1024 * KIB, 'and its download flows');
  other.destroy();
  for (const s of tunnels) s.destroy();
  await settle(() => budget.used === 0, 'everything given back once the clients left');
});

t.test('unread responses: a client past its share loses its oldest stalled responses, each with its line', async (t) => {
  const chunk = Buffer.alloc(64 * KIB, 0x62);
  const web = http.createServer((_req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
    const pump = (): void => {
      while (!res.destroyed && res.write(chunk));
    };
    res.on('drain', pump);
    pump();
  });
  const webPort = await listen(web);
  t.teardown(() => {
    web.closeAllConnections();
    web.close();
  });
  const budget = new MemoryBudget({ totalBytes: 8 * 1024 * KIB, perClientBytes: 1024 * KIB });
  // Small heads: a connection the HTTP parser reads is charged 12 bytes per byte of head allowed.
  const p = await startTestProxy({ policy: { allowHosts: ['web.test'], connectPorts: [webPort], testHosts: { 'web.test': '127.0.0.1' } }, memory: budget, limits: { maxHeaderBytes: 1024 } });
  t.teardown(() => p.close());
  const clients: net.Socket[] = [];
  t.teardown(() => clients.forEach((s) => s.destroy()));
  const answers = new Map<string, number>();
  for (let i = 0; i < 16; i++) {
    const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
    s.on('error', () => undefined);
    s.write(`GET http://web.test:${webPort}/big HTTP/1.1\r\nHost: web.test:${webPort}\r\n\r\n`);
    const head = await readUntil(s, '\r\n\r\n');
    // A new connection while the client's share is full of stalls is refused, as any past its share.
    const status = /^HTTP\/1\.1 (200|503) /.exec(head)?.[1] ?? head;
    answers.set(status, (answers.get(status) ?? 0) + 1);
    s.pause();
    clients.push(s);
    await new Promise((r) => setTimeout(r, 20));
  }
  t.ok((answers.get('200') ?? 0) >= 8, `responses started: ${JSON.stringify(Object.fromEntries(answers))}`);
  t.same([...answers.keys()].filter((k) => k !== '200' && k !== '503'), [], 'every connection answered 200 or 503 overloaded');
  const cut = (): Record<string, unknown>[] => p.logs.filter((l) => l.event === 'decision' && l.error === 'overloaded');
  await settle(() => cut().length >= 2, 'stalled responses cut to free memory');
  t.match(cut()[0], { decision: 'allow', completed: false, host: 'web.test' });
  t.ok(budget.usedBy('127.0.0.2') <= 1024 * KIB, `the client holds at most its share (${Math.round(budget.usedBy('127.0.0.2') / KIB)} KiB)`);
  for (const s of clients) s.destroy();
  await settle(() => budget.used === 0, 'everything given back');
});

t.test('refusal lines are capped per client, summed up by reason, and another client still gets its lines', async (t) => {
  const p = await startTestProxy({ policy: { allowHosts: ['a.example'] } });
  const started = Date.now();
  for (let i = 0; i < 150; i++) {
    const res = await rawRequest(p.port, 'GET http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.2');
    res.socket?.destroy();
  }
  const refill = Math.ceil(((Date.now() - started) / 1000) * REFUSAL_LINES.clientPerSecond);
  const other = await rawRequest(p.port, 'GET http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.3');
  other.socket?.destroy();
  await p.close();
  const lines = p.logs.filter((l) => l.event === 'decision');
  const fromFlooder = lines.filter((l) => String(l.client).startsWith('127.0.0.2:')).length;
  t.ok(fromFlooder >= REFUSAL_LINES.clientBurst && fromFlooder <= REFUSAL_LINES.clientBurst + refill, `the flooding client got ${fromFlooder} of 150 lines (its burst, and ${refill} refilled meanwhile)`);
  t.equal(lines.filter((l) => String(l.client).startsWith('127.0.0.3:')).length, 1, 'another client\'s refusal has its line');
  const summary = p.logs.find((l) => l.event === 'decision_lines_suppressed');
  t.match(summary, { lines: 150 - fromFlooder, clients: 1, byReason: { host_not_allowed: 150 - fromFlooder }, topClients: [`127.0.0.2=${150 - fromFlooder}`] }, 'the rest are counted by reason, and who sent them');
});

t.test('tunnels refused after their dial write no close line past the client\'s line cap', async (t) => {
  // The client's ClientHello is valid, and the upstream is dialled; the upstream then speaks
  // first, and the tunnel is refused (tls_upstream_not_tls) and closed. Its close line follows
  // its refusal's line, or is held back with it.
  const upstream = net.createServer((s) => {
    s.on('error', () => undefined);
    s.end('SSH-2.0-banner\r\n');
  });
  const upstreamPort = await listen(upstream);
  t.teardown(() => upstream.close());
  const hello = await captureHello({ servername: 'web.test' });
  const p = await startTestProxy({ policy: { allowHosts: ['web.test'], connectPorts: [upstreamPort], testHosts: { 'web.test': '127.0.0.1' } } });
  const refuseOne = (): Promise<void> =>
    new Promise((resolve) => {
      const s = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
      s.on('error', () => resolve());
      s.on('close', () => resolve());
      s.write(`CONNECT web.test:${upstreamPort} HTTP/1.1\r\nHost: web.test\r\n\r\n`);
      s.once('data', () => s.write(hello));
      s.resume();
    });
  const started = Date.now();
  for (let i = 0; i < 150; i++) await refuseOne();
  const refill = Math.ceil(((Date.now() - started) / 1000) * REFUSAL_LINES.clientPerSecond);
  const from = (event: string): number => p.logs.filter((l) => l.event === event && String(l.client).startsWith('127.0.0.2:')).length;
  // A close line comes once both sides have closed, after the client saw its own close.
  await settle(() => from('tunnel_closed') >= from('decision'), 'the close lines written');
  await p.close();
  const denies = p.logs.filter((l) => l.event === 'decision' && l.decision === 'deny' && l.reason === 'tls_upstream_not_tls').length;
  t.equal(p.dialed.length, 150, 'every tunnel was dialled');
  t.ok(denies >= REFUSAL_LINES.clientBurst && denies <= REFUSAL_LINES.clientBurst + refill, `${denies} refusal lines of 150 (the client's burst, and ${refill} refilled meanwhile)`);
  t.equal(from('tunnel_closed'), from('decision'), `a close line only where the refusal had its line (${from('tunnel_closed')} close lines)`);
});

t.test('an IPv4 client on a listener bound to :: is one client under its plain address', async (t) => {
  // Node names it ::ffff:127.0.0.2 there, and 127.0.0.2 on an IPv4 listener (the transparent
  // ones): two spellings would be two shares of every pool.
  const p = await startTestProxy({ policy: { allowHosts: ['a.example'] }, listen: { host: '::', port: 0 }, limits: { maxConnectionsPerClient: 1 } });
  t.teardown(() => p.close());
  const held = net.connect({ port: p.port, host: '127.0.0.1', localAddress: '127.0.0.2' });
  held.on('error', () => undefined);
  t.teardown(() => held.destroy());
  await new Promise((r) => held.once('connect', r));
  await settle(() => p.proxy.openConnections === 1, 'the first connection counted');
  const second = await rawRequest(p.port, 'GET http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\n\r\n', '127.0.0.1', 5_000, '127.0.0.2');
  second.socket?.destroy();
  t.equal(second.reason, 'client_limit');
  const line = p.logs.find((l) => l.event === 'decision');
  t.match(line, { reason: 'client_limit', client: /^127\.0\.0\.2:\d+$/, detail: /from 127\.0\.0\.2 / }, 'the line and its detail name the plain address');
});
