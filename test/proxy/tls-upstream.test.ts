/**
 * A `tls` tunnel carries TLS both ways: real servers on loopback that are not TLS (an SMTP-like
 * line server that speaks first, one that greets late, a web server that answers a ClientHello in
 * clear) are refused `tls_upstream_not_tls` after the client's valid hello, and nothing either
 * side said in clear reaches the other; a real TLS server (node:tls) that refuses the hello with
 * an alert is TLS, and passes. An `opaque` entry to the same SMTP server still carries its
 * protocol. A client that closes while the proxy waits for the server's first answer gets its
 * decision line at once, and the tunnel ends.
 */
import net from 'node:net';
import tls from 'node:tls';
import t from 'tap';
import { listen } from '../support/loopback.js';
import { needUnmet } from '../support/needs.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { opensslUnavailable, selfSignedCert } from '../support/tls-cert.js';
import { captureHello } from '../support/tls-hello.js';
import { startTestProxy } from '../support/test-proxy.js';

/** A server on loopback that records what each connection received. */
interface Recorded {
  readonly port: number;
  /** Everything received, per connection, in latin1. */
  readonly received: string[];
  /** Connections closed so far. */
  closed: number;
}

async function recording(onConnection: (s: net.Socket, got: (text: string) => void) => void): Promise<Recorded> {
  const rec = { port: 0, received: [] as string[], closed: 0 };
  const server = net.createServer((s) => {
    const at = rec.received.push('') - 1;
    s.on('error', () => undefined);
    s.on('close', () => (rec.closed += 1));
    onConnection(s, (text) => (rec.received[at] += text));
  });
  rec.port = await listen(server);
  t.teardown(() => server.close());
  return rec;
}

/** An SMTP-like line server: a banner (after `bannerDelayMs`), then 250 to every line (354 to DATA). */
const smtp = (bannerDelayMs: number): Promise<Recorded> =>
  recording((s, got) => {
    setTimeout(() => s.writable && s.write('220 mail.allowed.test ESMTP\r\n'), bannerDelayMs);
    let line = '';
    s.on('data', (d: Buffer) => {
      got(d.toString('latin1'));
      line += d.toString('latin1');
      for (let end = line.indexOf('\r\n'); end !== -1; end = line.indexOf('\r\n')) {
        s.write(line.slice(0, end) === 'DATA' ? '354 go ahead\r\n' : '250 ok\r\n');
        line = line.slice(end + 2);
      }
    });
  });

const [smtpFirst, smtpLate] = await Promise.all([smtp(0), smtp(300)]);
// A plain web server: waits for the client's bytes, then answers in clear.
const clearWeb = await recording((s, got) =>
  s.on('data', (d: Buffer) => {
    got(d.toString('latin1'));
    if (s.writable) s.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n');
  }),
);
// A server that takes the hello and says nothing, ever.
const silent = await recording((s, got) => s.on('data', (d: Buffer) => got(d.toString('latin1'))));

const noOpenssl = opensslUnavailable();
let tlsOnly13: { port: number; close(): void } | undefined;
let tlsPlain: { port: number; close(): void } | undefined;
if (noOpenssl !== undefined) t.test('TLS servers (node:tls) need a certificate', async (t) => needUnmet(t, noOpenssl));
else {
  const cert = selfSignedCert();
  const start = async (options: tls.TlsOptions): Promise<{ port: number; close(): void }> => {
    const server = tls.createServer({ ...cert, ...options }, (s) => s.end('node tls\n'));
    server.on('tlsClientError', () => undefined);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { port: (server.address() as net.AddressInfo).port, close: () => server.close() };
  };
  // TLS 1.3 only: a client that offers at most TLS 1.2 gets a protocol_version alert for its hello.
  tlsOnly13 = await start({ minVersion: 'TLSv1.3' });
  tlsPlain = await start({});
  t.teardown(() => {
    tlsOnly13?.close();
    tlsPlain?.close();
  });
}

const ports = [smtpFirst.port, smtpLate.port, clearWeb.port, silent.port, ...(tlsOnly13 ? [tlsOnly13.port, tlsPlain!.port] : [])];
const p = await startTestProxy({
  policy: {
    allowHosts: ['allowed.test', { host: 'mail.test', tunnel: 'opaque' }],
    connectPorts: ports,
    testHosts: { 'allowed.test': '127.0.0.1', 'mail.test': '127.0.0.1' },
  },
});
t.teardown(() => p.close());

const hello = await captureHello({ servername: 'allowed.test' });
const decisions = (port: number): Record<string, unknown>[] => p.logs.filter((l) => l.event === 'decision' && l.port === port);

/** What the client read with the 200 (a refusal can follow it at once), per tunnel socket. */
const early = new WeakMap<net.Socket, string>();

async function tunnel(host: string, port: number): Promise<net.Socket> {
  const res = await rawRequest(p.port, `CONNECT ${host}:${port} HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  t.equal(res.status, 200, `CONNECT ${host}:${port}`);
  res.socket.on('error', () => undefined);
  early.set(res.socket, res.body);
  return res.socket;
}

/** Everything the client reads until the proxy ends the tunnel (which may have happened already). */
function readToEnd(socket: net.Socket, timeoutMs = 8_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = early.get(socket) ?? '';
    const done = (): void => {
      clearTimeout(timer);
      resolve(text);
    };
    const timer = setTimeout(() => reject(new Error(`the tunnel was not ended; read ${JSON.stringify(text)}`)), timeoutMs);
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    if (socket.readableEnded || socket.destroyed) return done();
    socket.once('end', done);
    socket.once('close', done);
    socket.resume();
  });
}

/** What the client read, and the tunnel's one decision line, once the proxy has closed it. */
async function outcome(socket: net.Socket, port: number): Promise<{ read: string; line: Record<string, unknown> }> {
  const read = await readToEnd(socket);
  socket.destroy();
  await settle(() => decisions(port).length > 0, 'the decision line');
  await new Promise((r) => setTimeout(r, 100));
  const lines = decisions(port);
  t.equal(lines.length, 1, 'one decision line');
  return { read, line: lines[0]! };
}

const SMTP_LINES = ['EHLO client.test', 'MAIL FROM:<a@client.test>', 'RCPT TO:<b@elsewhere.test>', 'DATA', 'the data', '.'];

t.test('an upstream that speaks first (SMTP): refused, the hello never answered in clear', async (t) => {
  const socket = await tunnel('allowed.test', smtpFirst.port);
  // The banner is sent at once; the client's hello comes after it.
  await settle(() => smtpFirst.received.length === 1, 'the upstream connection');
  await new Promise((r) => setTimeout(r, 100));
  socket.write(hello);
  for (const line of SMTP_LINES) socket.write(`${line}\r\n`);
  const { read, line } = await outcome(socket, smtpFirst.port);
  t.match(line, { decision: 'deny', reason: 'tls_upstream_not_tls', detail: /spoke before/, host: 'allowed.test' });
  t.notMatch(read, /220|250|354/, 'no line of the server reached the client');
  t.equal(smtpFirst.received[0], '', 'no byte of the client reached the server');
});

t.test('an upstream that greets after the hello (the banner taken for an answer): refused, nothing pipelined passes', async (t) => {
  const socket = await tunnel('allowed.test', smtpLate.port);
  socket.write(Buffer.concat([hello, Buffer.from(SMTP_LINES.map((l) => `${l}\r\n`).join(''))]));
  const { read, line } = await outcome(socket, smtpLate.port);
  t.match(line, { decision: 'deny', reason: 'tls_upstream_not_tls', detail: /0x32/, sni: 'allowed.test' });
  t.notMatch(read, /220|250|354/, 'no line of the server reached the client');
  t.equal(smtpLate.received[0], hello.toString('latin1'), 'the server got the checked hello and nothing behind it');
});

t.test('a web server that answers the hello in clear: refused, the plain text behind the hello never reaches it', async (t) => {
  const socket = await tunnel('allowed.test', clearWeb.port);
  socket.write(Buffer.concat([hello, Buffer.from('GET /secret HTTP/1.1\r\nHost: other.test\r\n\r\n')]));
  const { read, line } = await outcome(socket, clearWeb.port);
  t.match(line, { decision: 'deny', reason: 'tls_upstream_not_tls', detail: /0x48/ });
  t.notMatch(read, /HTTP\/1\.1 400/, 'the answer in clear did not reach the client');
  t.equal(clearWeb.received[0], hello.toString('latin1'), 'only the hello reached the server');
});

t.test('an opaque entry still carries a protocol in clear', async (t) => {
  const socket = await tunnel('mail.test', smtpFirst.port);
  const banner = early.get(socket)!.includes('220 ') ? early.get(socket)! : await readUntil(socket, '220 ');
  t.match(banner, /^220 /, 'the banner');
  socket.write('EHLO client.test\r\n');
  t.match(await readUntil(socket, '250 '), /250 ok/);
  socket.destroy();
  t.match(decisions(smtpFirst.port).at(-1), { decision: 'allow', tunnel: 'opaque' });
});

t.test('TLS servers (node:tls)', { skip: tlsOnly13 === undefined && 'no openssl' }, async (t) => {
  t.test('one that refuses the hello with an alert: the alert is TLS and reaches the client', async (t) => {
    const socket = await tunnel('allowed.test', tlsOnly13!.port);
    const error = await new Promise<string>((resolve) => {
      const secure = tls.connect({ socket, servername: 'allowed.test', rejectUnauthorized: false, maxVersion: 'TLSv1.2' });
      secure.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      secure.on('secureConnect', () => resolve('handshake completed'));
    });
    t.match(error, /ALERT_PROTOCOL_VERSION/, `the server's own alert (${error})`);
    socket.destroy();
    await settle(() => decisions(tlsOnly13!.port).length > 0, 'the decision line');
    t.match(decisions(tlsOnly13!.port), [{ decision: 'allow', sni: 'allowed.test' }]);
  });
  t.test('one that completes the handshake', async (t) => {
    const socket = await tunnel('allowed.test', tlsPlain!.port);
    const answer = await new Promise<string>((resolve) => {
      const secure = tls.connect({ socket, servername: 'allowed.test', rejectUnauthorized: false });
      let text = '';
      secure.on('data', (d: Buffer) => (text += d.toString()));
      secure.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      secure.on('end', () => resolve(text));
    });
    t.equal(answer, 'node tls\n');
    socket.destroy();
  });
});

t.test('a client that closes while the proxy waits for the server\'s first answer: its line at once, the tunnel ended', async (t) => {
  const socket = await tunnel('allowed.test', silent.port);
  socket.write(hello);
  await settle(() => silent.received[0] === hello.toString('latin1'), 'the hello to reach the server');
  const started = Date.now();
  socket.end();
  // The proxy's idle timeout is 300 s: only the close itself can end this.
  await readToEnd(socket, 3_000);
  await settle(() => decisions(silent.port).length > 0, 'the decision line', 3_000);
  t.ok(Date.now() - started < 2_000, `written ${Date.now() - started} ms after the close`);
  t.match(decisions(silent.port), [{ decision: 'allow', error: 'client_closed', sni: 'allowed.test' }]);
  await settle(() => p.proxy.openConnections === 0, 'the connection to stop counting', 3_000);
  await settle(() => silent.closed === 1, 'the upstream connection to close', 3_000);
  t.match(p.logs.filter((l) => l.event === 'tunnel_closed' && l.port === silent.port), [{ closedBy: 'client' }]);
});
