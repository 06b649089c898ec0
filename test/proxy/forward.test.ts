/**
 * Plain HTTP through the proxy against real servers on loopback, as a hostile client and a
 * hostile upstream would drive it: bodies that are themselves requests (smuggling), Connection
 * options that name framing fields, Host headers with more than an authority; and upstreams that
 * answer with bad status lines, control bytes, broken chunking, extra responses and early closes.
 * The proxy must never let one request become two, never pass on what it did not validate, never
 * write a second response, write exactly one decision line per request, and keep serving
 * everyone else (an uncaught error here would end this test process).
 */
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { startDnsServer } from '../support/dns-server.js';
import { listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { startTestProxy } from '../support/test-proxy.js';

// An honest upstream that records every request it parses.
interface Seen {
  method: string;
  url: string;
  host: string | undefined;
  framing: string;
  body: string;
}
const seen: Seen[] = [];
const web = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d: Buffer) => (body += d.toString('latin1')));
  req.on('end', () => {
    const framing = req.headers['transfer-encoding'] ?? (req.headers['content-length'] !== undefined ? `length ${req.headers['content-length']}` : 'none');
    seen.push({ method: req.method ?? '', url: req.url ?? '', host: req.headers.host, framing, body });
    const text = `seen ${req.method} ${req.url}\n`;
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': Buffer.byteLength(text) }).end(req.method === 'HEAD' ? undefined : text);
  });
});
const webPort = await listen(web);

// A scripted upstream: each connection reads one request head and answers with the script of
// the path it asked for.
const scripts = new Map<string, (socket: net.Socket) => void>();
const scripted = net.createServer((socket) => {
  socket.on('error', () => undefined);
  let head = '';
  socket.on('data', (d: Buffer) => {
    head += d.toString('latin1');
    const end = head.indexOf('\r\n\r\n');
    if (end === -1) return;
    const path = /^[A-Z]+ (\S+)/.exec(head)?.[1] ?? '';
    head = head.slice(end + 4);
    (scripts.get(path) ?? ((s: net.Socket) => s.destroy()))(socket);
  });
});
const scriptedPort = await listen(scripted);

// An echo service behind an opaque tunnel that must outlive everything below.
const echo = net.createServer((s) => {
  s.on('error', () => undefined);
  s.on('data', (d: Buffer) => s.write(d));
});
const echoPort = await listen(echo);
t.teardown(() => {
  web.close();
  scripted.close();
  echo.close();
});

const proxyT = await startTestProxy({
  policy: {
    allowHosts: ['allowed.test', 'hostile.test', 'dead.test', { host: 'echo.test', tunnel: 'opaque' }],
    connectPorts: [webPort, scriptedPort, echoPort, 80],
    testHosts: { 'allowed.test': '127.0.0.1', 'hostile.test': '127.0.0.1', 'dead.test': '127.0.0.3', 'echo.test': '127.0.0.1' },
  },
});
t.teardown(() => proxyT.close());
const { port } = proxyT;
const allowed = `allowed.test:${webPort}`;
const hostile = `hostile.test:${scriptedPort}`;

const tunnel = await rawRequest(port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\n\r\n`);
t.equal(tunnel.status, 200, 'a long-lived opaque tunnel is open');

const decisions = (): Record<string, unknown>[] => proxyT.logs.filter((l) => l.event === 'decision');

/**
 * Sends raw bytes and returns everything the proxy wrote until it closed. The requests ask for
 * `Connection: close` (a client's half-close would abort them: Node's HTTP server does not keep
 * half-open connections).
 */
async function exchange(bytes: string): Promise<string> {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(Buffer.from(bytes, 'latin1'));
  return readUntil(socket, undefined);
}

const smuggled = 'GET /smuggled HTTP/1.1\r\nHost: other.test\r\n\r\n';
const chunked = (text: string): string => `${text.length.toString(16)}\r\n${text}\r\n0\r\n\r\n`;

for (const method of ['GET', 'HEAD', 'DELETE', 'OPTIONS', 'POST']) {
  t.test(`${method} with a chunked body that is a request: one request upstream, the body framed by the proxy`, async (t) => {
    seen.length = 0;
    const out = await exchange(`${method} http://${allowed}/first HTTP/1.1\r\nHost: ${allowed}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunked(smuggled)}`);
    t.match(out, /^HTTP\/1\.1 200 /);
    await settle(() => seen.length >= 1, 'the upstream request');
    await new Promise((r) => setTimeout(r, 50));
    t.same(seen.map((s) => [s.method, s.url, s.host]), [[method, '/first', allowed]], 'exactly one request, to the checked host');
    t.match(seen[0]?.framing, new RegExp(`^(chunked|length ${smuggled.length})$`), 'framed explicitly');
    t.equal(seen[0]?.body, smuggled, 'the body arrived as a body');
  });
}

t.test('a Content-Length body is forwarded with that length, for any method', async (t) => {
  seen.length = 0;
  await exchange(`GET http://${allowed}/len HTTP/1.1\r\nHost: ${allowed}\r\nContent-Length: ${smuggled.length}\r\nConnection: close\r\n\r\n${smuggled}`);
  await settle(() => seen.length >= 1, 'the upstream request');
  await new Promise((r) => setTimeout(r, 50));
  t.same(seen.map((s) => [s.url, s.framing, s.body]), [['/len', `length ${smuggled.length}`, smuggled]]);
});

const refused: { name: string; request: string }[] = [
  { name: 'Connection names Content-Length', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}\r\nConnection: content-length\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}` },
  { name: 'Connection names Transfer-Encoding', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}\r\nConnection: keep-alive, Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(smuggled)}` },
  { name: 'Connection names Host', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}\r\nConnection: host\r\n\r\n` },
  { name: 'a coding before chunked', request: `POST http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n${chunked('x')}` },
  { name: 'Host with a path', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}/evil\r\n\r\n` },
  { name: 'Host with a query', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}?x\r\n\r\n` },
  { name: 'Host with userinfo', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: evil.net@${allowed}\r\n\r\n` },
  { name: 'Host with userinfo after the port', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}@evil.net\r\n\r\n` },
  { name: 'Host with another port', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: allowed.test:1\r\n\r\n` },
  { name: 'Host with a leading-zero port', request: `GET http://${allowed}/ HTTP/1.1\r\nHost: allowed.test:0${webPort}\r\n\r\n` },
  { name: 'no Host on HTTP/1.1', request: `GET http://${allowed}/ HTTP/1.1\r\n\r\n` },
];
for (const c of refused) {
  t.test(`refused before the upstream sees it: ${c.name}`, async (t) => {
    seen.length = 0;
    const before = decisions().length;
    const res = await rawRequest(port, c.request);
    t.equal(res.status, 400);
    t.equal(res.reason, 'bad_request');
    res.socket.destroy();
    await new Promise((r) => setTimeout(r, 50));
    t.same(seen, [], 'nothing reached the upstream');
    t.equal(decisions().length - before, 1, 'one decision line');
  });
}

t.test('HTTP/1.0 without Host is forwarded with the checked authority as Host', async (t) => {
  seen.length = 0;
  await exchange(`GET http://${allowed}/old HTTP/1.0\r\nConnection: close\r\n\r\n`);
  await settle(() => seen.length >= 1, 'the upstream request');
  t.equal(seen[0]?.host, allowed);
});

interface Hostile {
  name: string;
  answer: string | ((s: net.Socket) => void);
  /** What the client gets: a refusal with this reason, a passed-on status, or a cut-off response. */
  expect: { reason: string } | { status: number; body?: string } | 'cut';
}
const hostileCases: Hostile[] = [
  { name: 'status 000', answer: 'HTTP/1.1 000 OK\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'status 099', answer: 'HTTP/1.1 099 Hm\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'status 600', answer: 'HTTP/1.1 600 Hm\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'status 999', answer: 'HTTP/1.1 999 Hm\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'a control byte in the reason phrase', answer: 'HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'a non-ASCII reason phrase', answer: 'HTTP/1.1 200 \xc3\xa9\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'a NUL in a header value', answer: 'HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'a space in a header name', answer: 'HTTP/1.1 200 OK\r\nX A: b\r\nContent-Length: 0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'two different Content-Lengths', answer: 'HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab', expect: { reason: 'bad_upstream_response' } },
  { name: 'Content-Length beside chunked', answer: 'HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'an unasked 101', answer: 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n', expect: { reason: 'upstream_failed' } },
  { name: 'not HTTP at all', answer: 'SSH-2.0-OpenSSH\r\n', expect: { reason: 'bad_upstream_response' } },
  { name: 'closed before the head', answer: (s) => s.destroy(), expect: { reason: 'upstream_failed' } },
  { name: 'closed in the middle of the head', answer: (s) => s.end('HTTP/1.1 200 OK\r\nContent-Le'), expect: { reason: 'upstream_failed' } },
  { name: 'a head over the size limit', answer: `HTTP/1.1 200 OK\r\nX-Big: ${'a'.repeat(70 * 1024)}\r\nContent-Length: 0\r\n\r\n`, expect: { reason: 'bad_upstream_response' } },
  // undici refuses a 100 Continue that was not asked for (the proxy never sends Expect).
  { name: 'an unasked 100 Continue', answer: 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok', expect: { reason: 'upstream_failed' } },
  { name: 'an interim 103 before the answer', answer: 'HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok', expect: { status: 200, body: 'ok' } },
  { name: 'a bad chunk size after the first chunk', answer: 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\nevil\r\n0\r\n\r\n', expect: 'cut' },
  { name: 'closed in the middle of the body', answer: (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this'), expect: 'cut' },
  { name: 'a body longer than its Content-Length, then another response', answer: 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil', expect: { status: 200, body: 'ok' } },
  { name: 'trailing garbage after a complete response', answer: 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00\xff\r\n\r\ngarbage', expect: { status: 200, body: 'ok' } },
  { name: 'a valid answer with hop-by-hop fields', answer: 'HTTP/1.1 203 Fine\r\nConnection: close, X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=1\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok', expect: { status: 203, body: 'ok' } },
];
for (const [i, c] of hostileCases.entries()) {
  t.test(`hostile upstream: ${c.name}`, async (t) => {
    const path = `/case${i}`;
    scripts.set(path, typeof c.answer === 'string' ? ((s) => s.write(Buffer.from(c.answer as string, 'latin1'))) : c.answer);
    const before = decisions().length;
    const out = await exchange(`GET http://${hostile}${path} HTTP/1.1\r\nHost: ${hostile}\r\nConnection: close\r\n\r\n`);
    const heads = out.match(/HTTP\/1\.1 \d{3}/g) ?? [];
    t.ok(heads.length <= 1, `at most one response was written (${heads.length})`);
    if (c.expect === 'cut') {
      t.match(out, /^HTTP\/1\.1 200 /, 'the response had started');
      t.notMatch(out, /evil|\r\n0\r\n\r\n$/, 'and was cut off, not completed or extended');
    } else if ('reason' in c.expect) {
      t.match(out, /^HTTP\/1\.1 50[24] /);
      t.match(out, new RegExp(`\\r\\nX-Egress-Reason: ${c.expect.reason}\\r\\n`, 'i'));
    } else {
      t.match(out, new RegExp(`^HTTP/1\\.1 ${c.expect.status} `));
      if (c.expect.body !== undefined) t.match(out, new RegExp(`\\r\\n\\r\\n(2\\r\\n)?${c.expect.body}(\\r\\n0\\r\\n\\r\\n)?$`));
      t.notMatch(out, /evil|X-Private|Keep-Alive|garbage/i, 'nothing unvalidated passed on');
    }
    await settle(() => decisions().length > before, 'the decision line');
    await new Promise((r) => setTimeout(r, 30));
    const lines = decisions().slice(before);
    t.equal(lines.length, 1, 'exactly one decision line');
    if (typeof c.expect === 'object' && 'reason' in c.expect) t.match(lines[0], { decision: 'deny', reason: c.expect.reason });
    else t.match(lines[0], { decision: 'allow', completed: c.expect !== 'cut' });
  });
}

t.test('an upstream that never answers: 504 upstream_timeout at the idle timeout, one line', async (t) => {
  const slow = await startTestProxy({ policy: { allowHosts: ['hostile.test'], connectPorts: [scriptedPort], testHosts: { 'hostile.test': '127.0.0.1' } }, limits: { idleTimeoutMs: 400 } });
  t.teardown(() => slow.close());
  scripts.set('/silent', () => undefined);
  const res = await rawRequest(slow.port, `GET http://${hostile}/silent HTTP/1.1\r\nHost: ${hostile}\r\n\r\n`);
  t.equal(res.status, 504);
  t.equal(res.reason, 'upstream_timeout');
  res.socket.destroy();
  await settle(() => slow.logs.some((l) => l.event === 'decision'), 'the decision line');
  t.same(slow.logs.filter((l) => l.event === 'decision').map((l) => [l.decision, l.reason]), [['deny', 'upstream_timeout']]);
  // undici restarts its head timer on each 1xx: a trickle of them must not hold the request.
  scripts.set('/trickle-1xx', (s) => {
    const timer = setInterval(() => s.write('HTTP/1.1 102 Processing\r\n\r\n'), 100);
    s.on('close', () => clearInterval(timer));
    setTimeout(() => s.destroy(), 3_000);
  });
  const started = Date.now();
  const trickled = await rawRequest(slow.port, `GET http://${hostile}/trickle-1xx HTTP/1.1\r\nHost: ${hostile}\r\n\r\n`);
  t.equal(trickled.reason, 'upstream_timeout', 'a 1xx trickle: 504 upstream_timeout');
  t.ok(Date.now() - started < 2_500, `at the idle timeout, not when the upstream gave up (${Date.now() - started} ms)`);
  trickled.socket.destroy();
});

t.test('a smuggled extra response never reaches the next client', async (t) => {
  // The upstream answers the first request with two responses in one write; the second must be
  // dropped with its connection, not handed to whoever asks next.
  scripts.set('/desync', (s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nevil'));
  scripts.set('/next', (s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext'));
  const first = await exchange(`GET http://${hostile}/desync HTTP/1.1\r\nHost: ${hostile}\r\nConnection: close\r\n\r\n`);
  t.match(first, /\r\n\r\nok$/);
  const second = await exchange(`GET http://${hostile}/next HTTP/1.1\r\nHost: ${hostile}\r\nConnection: close\r\n\r\n`);
  t.match(second, /\r\n\r\nnext$/, 'the next client gets its own response');
});

t.test('an upstream that refuses the connection: one deny line, no allow', async (t) => {
  const before = decisions().length;
  const res = await rawRequest(port, 'GET http://dead.test/ HTTP/1.1\r\nHost: dead.test\r\n\r\n');
  t.equal(res.status, 502);
  t.equal(res.reason, 'connect_failed');
  res.socket.destroy();
  await settle(() => decisions().length > before, 'the decision line');
  await new Promise((r) => setTimeout(r, 30));
  t.same(decisions().slice(before).map((l) => [l.decision, l.reason]), [['deny', 'connect_failed']]);
  const metrics = await proxyT.proxy.metrics.metrics();
  t.notMatch(metrics, /outcome="allow",reason="connect_failed"/);
});

t.test('a client that does not read holds the upstream back (backpressure), not the proxy memory', async (t) => {
  const total = 64 * 1024 * 1024;
  let upstream: net.Socket | undefined;
  scripts.set('/big', (s) => {
    upstream = s;
    s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${total}\r\n\r\n`);
    const chunk = Buffer.alloc(256 * 1024, 0x61);
    const pump = (): void => {
      while (s.bytesWritten < total) if (!s.write(chunk)) return void s.once('drain', pump);
    };
    pump();
  });
  const client = net.connect(port, '127.0.0.1');
  client.on('error', () => undefined);
  client.write(`GET http://${hostile}/big HTTP/1.1\r\nHost: ${hostile}\r\nConnection: close\r\n\r\n`);
  client.pause(); // and never read
  await settle(() => upstream !== undefined, 'the upstream request');
  await new Promise((r) => setTimeout(r, 1_500));
  // Kernel buffers on both legs hold a few MiB; without backpressure the proxy would take it all.
  t.ok((upstream?.bytesWritten ?? total) < total / 4, `the upstream could send only ${upstream?.bytesWritten} of ${total} bytes`);
  const before = decisions().length;
  client.destroy();
  await settle(() => decisions().length > before, 'its decision line');
});

// Whatever a client pipelines behind a request whose response is on its way must never be
// answered inside that response: a parse error, an Upgrade and a CONNECT (Node hands the last two
// over as raw sockets) cut the connection instead, and every request keeps its own one line.
const behind: { name: string; bytes: string; lines: [string, string | undefined][] }[] = [
  { name: 'garbage', bytes: 'GARBAGE\x01\r\n\r\n', lines: [['allow', 'bad_request']] },
  { name: 'an Upgrade request', bytes: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`, lines: [['deny', 'bad_request'], ['allow', 'client_closed']] },
  { name: 'a CONNECT request', bytes: `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: echo.test:${echoPort}\r\n\r\nhello`, lines: [['deny', 'bad_request'], ['allow', 'client_closed']] },
];
for (const c of behind) {
  t.test(`${c.name} pipelined behind a request whose response is on its way never lands inside it`, async (t) => {
    // The bytes behind the request go once the response has started reaching the client, and the
    // rest of the response once the proxy has acted on them (a line), so that they always arrive
    // while the response is on its way; fixed delays (250 and 600 ms) let a loaded machine send
    // them before the response started, or after it ended. A proxy that writes no line before the
    // response ends gets the rest after the wait, and is judged by what it wrote, as before.
    let rest = (): void => undefined;
    scripts.set('/slow-body', (s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n0123456789');
      rest = () => void (s.destroyed || s.write('abcdefghij'));
    });
    const before = decisions().length;
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    let out = '';
    let ended = false;
    socket.on('data', (d: Buffer) => (out += d.toString('latin1')));
    socket.once('end', () => (ended = true));
    socket.once('close', () => (ended = true));
    socket.write(`GET http://${hostile}/slow-body HTTP/1.1\r\nHost: ${hostile}\r\n\r\n`);
    await settle(() => out.includes('0123456789') || ended, 'the response to start');
    socket.write(Buffer.from(c.bytes, 'latin1'));
    await settle(() => decisions().length > before || ended, 'the proxy to act on the bytes behind the request').catch(() => undefined);
    rest();
    await settle(() => ended, 'the connection to end');
    t.match(out, /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\n0123456789/, 'the first response had started');
    t.equal(out.match(/HTTP\/1\.1 \d{3}/g)?.length, 1, 'and no other response head was written');
    t.notMatch(out, /hello|Connection established/);
    await settle(() => decisions().length >= before + c.lines.length, 'the lines');
    await new Promise((r) => setTimeout(r, 50));
    const lines = decisions().slice(before);
    t.same(lines.map((l) => [l.decision, l.decision === 'deny' ? l.reason : l.error]).sort(), [...c.lines].sort(), 'one line per request');
  });
}

// A request refused before its response started, with bytes it cannot parse behind it: still one
// refusal and one line (a later parse error must not answer or log the same request again).
t.test('a refused request with garbage behind it: one refusal, one line', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  dns.set('private.test', { answers: ['10.0.0.1'] });
  dns.set('slow.test', { answers: ['10.0.0.1'], delayMs: 300 });
  const p = await startTestProxy({ policy: { allowHosts: ['private.test', 'slow.test'] }, dnsServer: dns.address });
  t.teardown(() => p.close());
  // The garbage goes with the request, once the request is refused (its line), or once its lookup
  // is under way (the question reached the DNS server, which answers 300 ms later). Fixed delays
  // (200 and 100 ms after the request) let a loaded machine send it before the refusal, or after
  // the lookup ended.
  const cases: { name: string; request: string; garbageWhen: 'with' | 'refused' | 'looking'; reason: string; garbage?: string }[] = [
    { name: 'by policy', request: 'GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n', garbageWhen: 'with', reason: 'host_not_allowed' },
    { name: 'after its lookup', request: 'GET http://private.test/ HTTP/1.1\r\nHost: private.test\r\n\r\n', garbageWhen: 'refused', reason: 'address_not_allowed' },
    { name: 'by the garbage, during its lookup', request: 'GET http://slow.test/ HTTP/1.1\r\nHost: slow.test\r\n\r\n', garbageWhen: 'looking', reason: 'bad_request' },
  ];
  // More than one read of the socket: Node's parser reports each read after its failure again.
  const much = `\x00${'z'.repeat(256 * 1024)}`;
  cases.push(
    { name: 'by policy, 256 KiB of garbage behind it', request: `GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n${much}`, garbageWhen: 'with', reason: 'host_not_allowed' },
    { name: 'by 256 KiB of garbage, during its lookup', request: 'GET http://slow.test/ HTTP/1.1\r\nHost: slow.test\r\n\r\n', garbageWhen: 'looking', reason: 'bad_request', garbage: much },
  );
  for (const c of cases) {
    const before = p.logs.filter((l) => l.event === 'decision').length;
    dns.set('slow.test', { answers: ['10.0.0.1'], delayMs: 300 }); // its question count from 0
    const socket = net.connect(p.port, '127.0.0.1');
    socket.on('error', () => undefined);
    const garbage = c.garbage ?? 'GARBAGE\x01\r\n\r\n';
    // Read from the start: the refusal may come before the garbage is sent.
    const reading = readUntil(socket, undefined);
    // In one write with the request: the refusal and the parse error in the same tick.
    if (c.garbageWhen === 'with') socket.write(`${c.request}${garbage}`);
    else {
      socket.write(c.request);
      if (c.garbageWhen === 'refused') await settle(() => p.logs.filter((l) => l.event === 'decision').length > before, `${c.name}: the refusal`);
      else await settle(() => dns.questions('slow.test') > 0, `${c.name}: the lookup`);
      socket.write(garbage);
    }
    const out = await reading;
    t.equal(out.match(/HTTP\/1\.1 \d{3}/g)?.length, 1, `${c.name}: one response`);
    t.match(out, new RegExp(`\\r\\nX-Egress-Reason: ${c.reason}\\r\\n`), `${c.name}: its reason`);
    await new Promise((r) => setTimeout(r, 400));
    t.same(p.logs.filter((l) => l.event === 'decision').slice(before).map((l) => l.reason), [c.reason], `${c.name}: one line`);
  }
});

// Pipelined requests are answered in order, but decided concurrently: an earlier request whose
// lookup ends later must not take over the parse-error hook of the one behind it, nor let the
// connection look idle while that one's response is still owed.
t.test('pipelined requests decided out of order: what follows them still meets the last one', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  dns.set('a.test', { answers: ['93.184.215.14'], delayMs: 300 });
  dns.set('b.test', { answers: ['93.184.215.15'] });
  dns.set('echo.test', { answers: ['93.184.215.16'] });
  // The public answers are dialed on loopback, so the test never leaves the machine.
  const p = await startTestProxy({
    policy: { allowHosts: ['a.test', 'b.test', { host: 'echo.test', tunnel: 'opaque' }], connectPorts: [scriptedPort, echoPort] },
    dnsServer: dns.address,
    connect: (_address, port) => net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }),
  });
  t.teardown(() => p.close());
  scripts.set('/pipe-a', (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nA\n'));
  // B's answer is held until what follows the first response has been acted on (a line), so that it
  // is still owed then; 800 ms after B's request let a loaded machine answer it before.
  let answerB = (): void => undefined;
  scripts.set('/pipe-b', (s) => {
    answerB = () => void (s.destroyed || s.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nB\n'));
  });
  scripts.set('/pipe-a-slow', (s) => {
    s.write('HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nA');
    setTimeout(() => s.end('AA\n'), 500);
  });
  const get = (host: string, path: string): string => `GET http://${host}:${scriptedPort}${path} HTTP/1.1\r\nHost: ${host}:${scriptedPort}\r\n\r\n`;
  const lines = (before: number): [unknown, unknown][] =>
    p.logs.filter((l) => l.event === 'decision').slice(before).map((l): [unknown, unknown] => [l.host ?? l.method, l.decision === 'deny' ? l.reason : (l.error ?? 'completed')]).sort();
  const cases = [
    {
      name: 'a CONNECT after the first response: refused, the connection cut',
      first: get('a.test', '/pipe-a') + get('b.test', '/pipe-b'),
      then: `CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: echo.test:${echoPort}\r\n\r\nhello`,
      after: /^$/,
      lines: [['CONNECT', 'bad_request'], ['a.test', 'completed'], ['b.test', 'client_closed']],
    },
    {
      name: 'garbage after the first response: the request behind it is refused',
      first: get('a.test', '/pipe-a') + get('b.test', '/pipe-b'),
      then: 'GARBAGE\x01\r\n\r\n',
      after: /^HTTP\/1\.1 400 [^]*\r\nX-Egress-Reason: bad_request\r\n[^]*egress denied: bad_request: malformed request/,
      lines: [['a.test', 'completed'], ['b.test', 'bad_request']],
    },
    {
      name: 'garbage behind a refusal queued after a slow response: one refusal, one line each',
      first: get('a.test', '/pipe-a-slow') + get('denied.test', '/') + 'GARBAGE\x01\r\n\r\n',
      then: undefined,
      after: /^A?A\n?HTTP\/1\.1 403 [^]*\r\nX-Egress-Reason: host_not_allowed\r\n/,
      lines: [['a.test', 'completed'], ['denied.test', 'host_not_allowed']],
    },
  ];
  for (const c of cases) {
    const before = p.logs.filter((l) => l.event === 'decision').length;
    const socket = net.connect(p.port, '127.0.0.1');
    socket.on('error', () => undefined);
    socket.write(Buffer.from(c.first, 'latin1'));
    const firstOut = await readUntil(socket, 'A', 5_000);
    t.match(firstOut, /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nA/, `${c.name}: the first response came first`);
    const decided = lines(before).length;
    if (c.then !== undefined) socket.write(Buffer.from(c.then, 'latin1'));
    const reading = readUntil(socket, undefined, 5_000);
    // A proxy that writes no line for it gets B's answer after the wait, and is judged as before.
    if (c.then !== undefined) await settle(() => lines(before).length > decided, `${c.name}: what followed acted on`).catch(() => undefined);
    answerB();
    const rest = (firstOut.slice(firstOut.indexOf('\r\n\r\nA') + 5) + (await reading)).replace(/^\n/, '');
    t.match(rest, c.after, `${c.name}: what followed it`);
    t.equal(rest.match(/HTTP\/1\.1 \d{3}/g)?.length ?? 0, c.after.source === '^$' ? 0 : 1, `${c.name}: at most one more response`);
    t.notMatch(rest, /hello|established/i, `${c.name}: no tunnel inside the connection`);
    await settle(() => lines(before).length >= c.lines.length, 'the lines');
    await new Promise((r) => setTimeout(r, 100));
    t.same(lines(before), [...c.lines].sort(), `${c.name}: one line per request`);
  }
});

// Requests the proxy answers itself leave nothing in flight to refuse: bytes it cannot parse
// behind them are refused after their answers, or not at all when that answer was a refusal.
t.test('garbage behind a request the proxy answered itself', async (t) => {
  const cases = [
    { name: 'behind /healthz: its answer, then a refusal', first: 'GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n', out: /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nok\nHTTP\/1\.1 400 Bad Request \(bad_request: [ -~]+\)\r\nX-Egress-Reason: bad_request\r\n/, responses: 2, lines: ['bad_request'] },
    { name: 'behind a refused Expect: that refusal only', first: `GET http://${allowed}/ HTTP/1.1\r\nHost: ${allowed}\r\nExpect: magic\r\n\r\n`, out: /^HTTP\/1\.1 400 Bad Request \(bad_request: [ -~]+\)\r\nX-Egress-Reason: bad_request\r\n[^]*Expect/, responses: 1, lines: ['bad_request'] },
  ];
  for (const c of cases) {
    const before = decisions().length;
    const out = await exchange(`${c.first}GARBAGE\x01\r\n\r\n`);
    t.match(out, c.out, c.name);
    t.equal(out.match(/HTTP\/1\.1 \d{3}/g)?.length, c.responses, `${c.name}: responses`);
    await new Promise((r) => setTimeout(r, 100));
    t.same(decisions().slice(before).map((l) => l.reason), c.lines, `${c.name}: lines`);
  }
});

// An upstream may answer before the request body is all sent (a 413, say): the rest of the body
// is never read, so the connection must close after that answer, not wait for a next request it
// can never parse.
t.test('an answer before the request body ended closes the connection after it', async (t) => {
  scripts.set('/early', (s) => s.write('HTTP/1.1 413 Payload Too Large\r\nContent-Length: 5\r\n\r\nnope\n'));
  const before = decisions().length;
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  const size = 4 * 1024 * 1024;
  socket.write(`POST http://${hostile}/early HTTP/1.1\r\nHost: ${hostile}\r\nContent-Length: ${size}\r\n\r\n`);
  socket.write(Buffer.alloc(size, 0x62));
  socket.write(`GET http://${allowed}/second HTTP/1.1\r\nHost: ${allowed}\r\n\r\n`);
  const started = Date.now();
  const out = await readUntil(socket, undefined, 10_000);
  t.match(out, /^HTTP\/1\.1 413 Payload Too Large\r\n[^]*Connection: close\r\n\r\nnope\n$/, 'the answer, saying the connection closes');
  t.ok(Date.now() - started < 4_000, 'and it closes promptly');
  await settle(() => decisions().length > before, 'its line');
  t.match(decisions().slice(before), [{ decision: 'allow', status: 413 }]);
});

// A CONNECT head the fast reader leaves to Node's parser (here: a Content-Length of 0) takes the
// socket over inside the first chunk; what the client sends while it is decided must reach the
// tunnel, not be dropped.
t.test('a CONNECT read by Node\'s parser keeps the bytes sent while it is decided', async (t) => {
  const dns = await startDnsServer();
  t.teardown(() => dns.close());
  dns.set('echo.test', { answers: ['93.184.215.16'], delayMs: 300 });
  const p = await startTestProxy({
    policy: { allowHosts: [{ host: 'echo.test', tunnel: 'opaque' }], connectPorts: [echoPort] },
    dnsServer: dns.address,
    connect: (_address, port) => net.connect({ host: '127.0.0.1', port, allowHalfOpen: true }),
  });
  t.teardown(() => p.close());
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  await new Promise((r) => socket.once('connect', r));
  socket.write(`CONNECT echo.test:${echoPort} HTTP/1.1\r\nHost: echo.test:${echoPort}\r\nContent-Length: 0\r\n\r\n`);
  setTimeout(() => socket.write('sent during the lookup'), 100);
  const out = await readUntil(socket, 'sent during the lookup', 5_000);
  t.match(out, /^HTTP\/1\.1 200 [^]*\r\n\r\nsent during the lookup$/, 'answered, then echoed');
  socket.destroy();
});

t.test('the long-lived tunnel survived all of it', async (t) => {
  // All of it: in the whole file, everything above; run alone, at least every refused request and
  // every hostile upstream once more.
  for (const c of refused) (await rawRequest(port, c.request)).socket.destroy();
  for (const [i, c] of hostileCases.entries()) {
    scripts.set(`/survive${i}`, typeof c.answer === 'string' ? ((s) => s.write(Buffer.from(c.answer as string, 'latin1'))) : c.answer);
    await exchange(`GET http://${hostile}/survive${i} HTTP/1.1\r\nHost: ${hostile}\r\nConnection: close\r\n\r\n`);
  }
  tunnel.socket.write('still here');
  t.match(await readUntil(tunnel.socket, 'still here'), 'still here');
  tunnel.socket.destroy();
  await settle(() => proxyT.logs.some((l) => l.event === 'tunnel_closed' && l.host === 'echo.test'), 'its close line');
});

t.test('an upstream Keep-Alive hint cannot hold an idle pooled connection past 4 s', async (t) => {
  let closedAt: number | undefined;
  scripts.set('/keep-600', (s) => {
    s.once('close', () => (closedAt = Date.now()));
    s.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=600\r\n\r\nok');
  });
  const res = await rawRequest(port, `GET http://${hostile}/keep-600 HTTP/1.1\r\nHost: ${hostile}\r\n\r\n`);
  t.equal(res.status, 200);
  const answered = Date.now();
  res.socket.destroy();
  // undici would keep it for the 600 s asked; capped, it closes after about 4 s.
  await settle(() => closedAt !== undefined, 'the idle upstream connection to close', 10_000);
  t.ok((closedAt ?? Infinity) - answered < 8_000, `closed ${(closedAt ?? NaN) - answered} ms after the answer`);
});
