/**
 * CONNECT tunnels in their default mode, against two real TLS stacks (OpenSSL and Go's
 * crypto/tls) on loopback: a ClientHello naming the CONNECT host gets through however it is cut
 * into records and segments; every way of showing the proxy one name and the server another is
 * refused before a single client byte reaches the server; what is not TLS never passes; and a
 * refused or silent tunnel gives its connection slot back at once.
 */
import net from 'node:net';
import { Duplex } from 'node:stream';
import tls from 'node:tls';
import t from 'tap';
import { settle } from '../support/settle.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { startTestProxy } from '../support/test-proxy.js';
import { needUnmet } from '../support/needs.js';
import { opensslUnavailable } from '../support/tls-cert.js';
import { goUnavailable, startGoUpstream, startOpensslUpstream, type TlsUpstream } from '../support/tls-upstreams.js';

const noOpenssl = opensslUnavailable();
const noGo = goUnavailable();
const upstreams: TlsUpstream[] = [];
// An OpenSSL server that takes P-256 only, so a client offering an X25519 key share first gets a
// TLS 1.3 HelloRetryRequest and sends a second ClientHello.
let retrying: TlsUpstream | undefined;
if (noOpenssl !== undefined) t.test('TLS tunnels against OpenSSL', async (t) => needUnmet(t, noOpenssl));
else {
  upstreams.push(await startOpensslUpstream());
  retrying = await startOpensslUpstream('P-256');
  t.teardown(() => retrying?.close());
}
// The Go upstream also needs a certificate, so openssl too.
const goProblem = noGo ?? noOpenssl;
if (goProblem !== undefined) t.test('TLS tunnels against Go crypto/tls', async (t) => needUnmet(t, goProblem));
else upstreams.push(await startGoUpstream());
t.teardown(() => Promise.all(upstreams.map((u) => u.close())));

const plain = net.createServer((s) => {
  s.on('error', () => undefined);
  s.on('data', () => plainBytes.push(s.bytesRead));
});
const plainBytes: number[] = [];
await new Promise<void>((r) => plain.listen(0, '127.0.0.1', r));
const plainPort = (plain.address() as net.AddressInfo).port;
t.teardown(() => plain.close());

const proxyT = await startTestProxy({
  policy: {
    allowHosts: ['allowed.test', 'other.test', { host: 'opaque.test', tunnel: 'opaque' }],
    connectPorts: [...upstreams.map((u) => u.port), ...(retrying ? [retrying.port] : []), plainPort],
    testHosts: { 'allowed.test': '127.0.0.1', 'other.test': '127.0.0.1', 'opaque.test': '127.0.0.1' },
  },
  limits: { helloTimeoutMs: 500 },
});
t.teardown(() => proxyT.close());

type Rewrite = (record: Buffer) => Buffer;

/** Tunnels opened to each upstream, to wait until the upstream has seen all of them close. */
const tunnels = new Map<TlsUpstream, number>();

/** Re-records a single-record handshake message, cut at the given offsets of the message. */
function recut(record: Buffer, cuts: (message: Buffer) => number[]): Buffer {
  const message = record.subarray(5, 5 + record.readUInt16BE(3));
  const bounds = [0, ...cuts(message), message.length];
  const out: Buffer[] = [];
  for (let i = 0; i + 1 < bounds.length; i++) {
    const part = message.subarray(bounds[i], bounds[i + 1]);
    const header = Buffer.from([0x16, record[1]!, record[2]!, 0, 0]);
    header.writeUInt16BE(part.length, 3);
    out.push(header, part);
  }
  return Buffer.concat(out);
}

/**
 * A TLS client (Node's OpenSSL) through a CONNECT tunnel, whose first flight is rewritten on the
 * wire and sent in `segment`-byte writes. Resolves with what the server answered, or the error.
 */
async function handshakeThrough(
  upstream: TlsUpstream,
  connectHost: string,
  servername: string,
  rewrite: Rewrite,
  segment = 0,
  options: { later?: (bytes: Buffer, write: number) => Buffer; ecdhCurve?: string } = {},
): Promise<string> {
  const res = await rawRequest(proxyT.port, `CONNECT ${connectHost}:${upstream.port} HTTP/1.1\r\nHost: x\r\n\r\n`);
  if (res.status !== 200) return `status ${res.status}`;
  tunnels.set(upstream, (tunnels.get(upstream) ?? 0) + 1);
  const socket = res.socket;
  let writes = 0;
  const wire = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _encoding, done) {
      const bytes = writes === 0 ? rewrite(chunk) : (options.later?.(chunk, writes) ?? chunk);
      writes += 1;
      if (segment === 0) socket.write(bytes, () => done());
      else {
        for (let at = 0; at < bytes.length; at += segment) socket.write(bytes.subarray(at, at + segment));
        done();
      }
    },
    final(done) {
      socket.end();
      done();
    },
  });
  socket.on('data', (d: Buffer) => wire.push(d));
  socket.on('end', () => wire.push(null));
  socket.on('error', () => wire.destroy());
  return new Promise((resolve) => {
    const secure = tls.connect({ socket: wire, servername, rejectUnauthorized: false, ...(options.ecdhCurve ? { ecdhCurve: options.ecdhCurve } : {}) });
    let answer = '';
    secure.on('data', (d: Buffer) => (answer += d.toString()));
    secure.on('error', (err: NodeJS.ErrnoException) => resolve(`error ${err.code ?? err.message}`));
    // A TLS socket over a plain stream reports the server's close as 'end' (no 'close' follows).
    const done = (): void => {
      socket.destroy();
      resolve(answer === '' ? 'closed' : answer.trim());
    };
    secure.on('end', done);
    secure.on('close', done);
  });
}

const asIs: Rewrite = (r) => r;
const nameCut = (name: string, after: string): Rewrite => (r) => recut(r, (m) => [m.indexOf(Buffer.from(name)) + after.length]);
const prefixed = (prefix: number[]): Rewrite => (r) => Buffer.concat([Buffer.from(prefix), r]);
const versioned = (version: number): Rewrite => (r) => {
  const copy = Buffer.from(r);
  copy.writeUInt16BE(version, 1);
  return copy;
};

const reasons = (): unknown[] => proxyT.logs.filter((l) => l.event === 'decision' && l.decision === 'deny').map((l) => l.reason);

for (const upstream of upstreams) {
  const passes: { name: string; rewrite: Rewrite; segment?: number; servername?: string }[] = [
    { name: 'one record', rewrite: asIs },
    { name: 'a byte per TCP segment', rewrite: asIs, segment: 1 },
    { name: 'two records cut inside the server name', rewrite: nameCut('allowed.test', 'allo') },
    { name: 'three records', rewrite: (r) => recut(r, (m) => [3, m.indexOf(Buffer.from('allowed.test')) + 5]) },
    { name: 'in upper case, as the CONNECT host is normalised', rewrite: asIs, servername: 'ALLOWED.TEST' },
  ];
  // Go's server refuses a server name with a trailing dot itself (RFC 6066 §3 forbids it).
  if (upstream.name === 'OpenSSL') passes.push({ name: 'with one trailing dot', rewrite: asIs, servername: 'allowed.test.' });
  for (const c of passes) {
    t.test(`${upstream.name}: a ClientHello naming the CONNECT host passes, ${c.name}`, async (t) => {
      const servername = c.servername ?? 'allowed.test';
      const answer = await handshakeThrough(upstream, 'allowed.test', servername, c.rewrite, c.segment);
      t.match(answer, new RegExp(`^(openssl|go) ${servername.replace(/\./g, '\\.')}$`), 'the server completed the handshake for that name');
    });
  }

  // Each of these once showed the proxy "allowed.test" (or nothing) while the server completed a
  // handshake for another name.
  const refusals: { name: string; servername: string; rewrite: Rewrite; reason: string }[] = [
    { name: 'a record cut just after the allowed name', servername: 'allowed.test.other.test', rewrite: nameCut('allowed.test.other.test', 'allowed.test.'), reason: 'sni_mismatch' },
    { name: 'another name, one record', servername: 'other.test', rewrite: asIs, reason: 'sni_mismatch' },
    { name: 'an empty handshake record first', servername: 'other.test', rewrite: prefixed([0x16, 3, 1, 0, 0]), reason: 'tls_hello_malformed' },
    { name: 'a warning alert first', servername: 'other.test', rewrite: prefixed([0x15, 3, 1, 0, 2, 1, 0]), reason: 'tls_hello_malformed' },
    { name: 'change_cipher_spec first', servername: 'other.test', rewrite: prefixed([0x14, 3, 3, 0, 1, 1]), reason: 'tls_hello_malformed' },
    { name: 'an odd record version', servername: 'other.test', rewrite: versioned(0x0300), reason: 'tls_hello_malformed' },
    { name: 'no server name at all', servername: '', rewrite: asIs, reason: 'sni_missing' },
  ];
  for (const c of refusals) {
    t.test(`${upstream.name}: refused before the server sees a byte: ${c.name}`, async (t) => {
      await settle(() => upstream.closed() === (tunnels.get(upstream) ?? 0), 'earlier tunnels to close at the upstream');
      const handshakes = upstream.handshakes.length;
      const bytes = upstream.bytesReceived();
      const closed = upstream.closed();
      const deniedBefore = reasons().length;
      const answer = await handshakeThrough(upstream, 'allowed.test', c.servername, c.rewrite);
      t.notMatch(answer, /^(openssl|go) /, `no handshake completed (${answer})`);
      await settle(() => reasons().length > deniedBefore, 'the deny line');
      t.equal(reasons()[deniedBefore], c.reason);
      await settle(() => upstream.closed() > closed, 'the upstream connection to close');
      t.equal(upstream.handshakes.length, handshakes, 'the server completed no handshake');
      t.equal(upstream.bytesReceived(), bytes, 'the server received no byte');
    });
  }
}

/** Whether a client write holds a ClientHello (a handshake record whose message is type 1). */
const isHello = (bytes: Buffer): boolean => {
  for (let at = 0; at + 5 < bytes.length; at += 5 + bytes.readUInt16BE(at + 3)) if (bytes[at] === 0x16 && bytes[at + 5] === 1) return true;
  return false;
};

t.test('a HelloRetryRequest and a second ClientHello for the same host: the handshake completes', { skip: retrying === undefined && 'no openssl' }, async (t) => {
  const hellos: number[] = [];
  const answer = await handshakeThrough(retrying!, 'allowed.test', 'allowed.test', asIs, 0, {
    ecdhCurve: 'X25519:P-256',
    later: (bytes, write) => {
      if (isHello(bytes)) hellos.push(write);
      return bytes;
    },
  });
  t.equal(answer, 'openssl allowed.test');
  t.equal(hellos.length, 1, 'the client did send a second ClientHello (the server asked for a retry)');
  const lines = proxyT.logs.filter((l) => l.event === 'decision' && l.host === 'allowed.test' && l.port === retrying!.port);
  t.same(lines.map((l) => l.decision), ['allow'], 'one decision line');
});

t.test('a second ClientHello behind a run of change_cipher_spec records: the handshake completes', { skip: retrying === undefined && 'no openssl' }, async (t) => {
  const ccs = Buffer.from([0x14, 0x03, 0x03, 0x00, 0x01, 0x01]);
  const answer = await handshakeThrough(retrying!, 'allowed.test', 'allowed.test', asIs, 0, {
    ecdhCurve: 'X25519:P-256',
    later: (bytes) => (isHello(bytes) ? Buffer.concat([...Array.from({ length: 20 }, () => ccs), bytes]) : bytes),
  });
  t.equal(answer, 'openssl allowed.test');
});

t.test('a HelloRetryRequest and a second ClientHello for another host: refused before the server sees it', { skip: retrying === undefined && 'no openssl' }, async (t) => {
  const handshakes = retrying!.handshakes.length;
  const deniedBefore = reasons().length;
  const answer = await handshakeThrough(retrying!, 'allowed.test', 'allowed.test', asIs, 0, {
    ecdhCurve: 'X25519:P-256',
    // The same length, so every length in the hello stays right.
    later: (bytes) => (isHello(bytes) ? Buffer.from(bytes.toString('latin1').replace('allowed.test', 'allowee.test'), 'latin1') : bytes),
  });
  t.notMatch(answer, /^openssl /, `no handshake completed (${answer})`);
  await settle(() => reasons().length > deniedBefore, 'the deny line');
  t.equal(reasons()[deniedBefore], 'sni_mismatch');
  t.equal(retrying!.handshakes.length, handshakes, 'the server completed no handshake');
});

t.test('a refused tls tunnel has exactly one decision line, a deny', async (t) => {
  const before = proxyT.logs.length;
  const res = await rawRequest(proxyT.port, `CONNECT allowed.test:${plainPort} HTTP/1.1\r\n\r\n`);
  res.socket.write('GET / HTTP/1.1\r\nHost: other.test\r\n\r\n');
  await readUntil(res.socket, undefined);
  await settle(() => proxyT.logs.slice(before).some((l) => l.event === 'decision'), 'the decision line');
  await new Promise((r) => setTimeout(r, 50));
  t.same(proxyT.logs.slice(before).filter((l) => l.event === 'decision').map((l) => [l.decision, l.reason]), [['deny', 'sni_missing']]);
});

t.test('plain HTTP in a tunnel to port 80-style service is refused (sni_missing); nothing reaches it', async (t) => {
  const res = await rawRequest(proxyT.port, `CONNECT allowed.test:${plainPort} HTTP/1.1\r\n\r\n`);
  t.equal(res.status, 200);
  res.socket.write('GET / HTTP/1.1\r\nHost: other.test\r\n\r\n');
  await readUntil(res.socket, undefined);
  await settle(() => reasons().at(-1) === 'sni_missing', 'the deny line');
  t.same(plainBytes, [], 'the plain service received nothing');
});

t.test('an opaque entry carries any bytes', async (t) => {
  const res = await rawRequest(proxyT.port, `CONNECT opaque.test:${plainPort} HTTP/1.1\r\n\r\n`);
  t.equal(res.status, 200);
  res.socket.write('SSH-2.0-test\r\n');
  await settle(() => plainBytes.length > 0, 'the bytes to arrive');
  res.socket.destroy();
  plainBytes.length = 0;
});

t.test('CONNECT with a body is refused before anything is dialed', async (t) => {
  for (const framing of ['Content-Length: 20', 'Transfer-Encoding: chunked']) {
    const before = proxyT.dialed.length;
    const res = await rawRequest(proxyT.port, `CONNECT allowed.test:${plainPort} HTTP/1.1\r\n${framing}\r\n\r\nGET / HTTP/1.1\r\n\r\n`);
    t.equal(res.status, 400, framing);
    t.equal(res.reason, 'bad_request');
    t.same(proxyT.dialed.slice(before), [], 'nothing dialed');
    res.socket.destroy();
  }
});

t.test('a tunnel that never sends its ClientHello is closed at the hello deadline', async (t) => {
  const res = await rawRequest(proxyT.port, `CONNECT allowed.test:${plainPort} HTTP/1.1\r\n\r\n`);
  t.equal(res.status, 200);
  const started = Date.now();
  await readUntil(res.socket, undefined, 5_000);
  const waited = Date.now() - started;
  t.ok(waited >= 400 && waited < 3_000, `closed after ${waited} ms (deadline 500 ms)`);
  t.equal(reasons().at(-1), 'tls_hello_timeout');
  await settle(() => proxyT.proxy.openConnections === 0, 'the slot to be free');
});

t.test('a refused tunnel gives its slot back at once, even while its client keeps its side open', async (t) => {
  const socket = net.connect({ port: proxyT.port, host: '127.0.0.1', allowHalfOpen: true });
  await new Promise<void>((r) => socket.once('connect', () => r()));
  socket.write(`CONNECT allowed.test:${plainPort} HTTP/1.1\r\n\r\n`);
  await readUntil(socket, '\r\n\r\n');
  socket.write('not tls at all');
  // The client never closes and never reads again; the proxy stops counting it immediately
  // (well before the 5 s linger that finally closes the socket). The deadline is what a loaded
  // machine may need, and still ends before the linger, which starts after this write arrives.
  await settle(() => proxyT.proxy.openConnections === 0, 'the slot to be released', 3_500);
  t.pass('released');
  socket.destroy();
});

t.test('a server name that is not a host name is logged escaped, never raw', async (t) => {
  const res = await rawRequest(proxyT.port, `CONNECT allowed.test:${plainPort} HTTP/1.1\r\n\r\n`);
  const name = Buffer.from('allowed\x85test', 'latin1');
  const u16 = (n: number): Buffer => Buffer.from([n >> 8, n & 0xff]);
  const serverName = Buffer.concat([u16(0), u16(name.length + 5), u16(name.length + 3), Buffer.from([0]), u16(name.length), name]);
  const body = Buffer.concat([u16(0x0303), Buffer.alloc(32), Buffer.from([0]), u16(2), u16(0x1301), Buffer.from([1, 0]), u16(serverName.length), serverName]);
  const message = Buffer.concat([Buffer.from([1, 0]), u16(body.length), body]);
  res.socket.write(Buffer.concat([Buffer.from([0x16, 3, 1]), u16(message.length), message]));
  await readUntil(res.socket, undefined);
  // The escaped form, as it appears in the line: a backslash, "x85".
  await settle(() => proxyT.logs.some((l) => l.reason === 'sni_mismatch' && l.sni === 'allowed\\x85test'), 'the deny line with the escaped name');
  t.pass('bytes outside printable ASCII are escaped');
  t.notMatch(JSON.stringify(proxyT.logs), /[\u0080-\uffff]/, 'no non-ASCII character in any log line');
});
