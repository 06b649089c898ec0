/**
 * Exactly one decision line, and one decision metric, per request the proxy takes up: on every
 * path a request can end by. Allowed and refused, CONNECT and plain HTTP; every refusal the server
 * makes itself (limits, the memory budget, the head deadline, parse errors, Expect, Upgrade, a
 * request pipelined past the cap or behind a pending one); the refusals of a tunnel after its `200` (the TLS codes, an
 * upstream that is not TLS included); upstream failures before and after the response started;
 * clients that leave half-way (a tunnel's, after its hello went up, included). Each
 * case runs against a proxy of its own and lists every decision line it must produce, so a path
 * that writes none, or two, fails (a late second line included: the count is taken once the
 * connection has closed and a while after). The proxy's requests_dropped line is not a decision.
 * Transparent mode's TLS and HTTP connections are held to the same rule.
 */
import net from 'node:net';
import t from 'tap';
import type { Policy } from '../../policy/index.js';
import { ACCEPT_BYTES, MemoryBudget, type Connect, type ProxyLimits } from '../../proxy/index.js';
import { startDnsServer } from '../support/dns-server.js';
import { listen } from '../support/loopback.js';
import { rawRequest, readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { captureHello } from '../support/tls-hello.js';
import { policyOf, startTestProxy, type TestProxy } from '../support/test-proxy.js';

// An echo service (tunnels), and a scripted HTTP upstream: each connection reads a request head and
// acts out the script its path names (after /keep, the next head on the connection too).
const echoSockets = new Set<net.Socket>();
const echo = net.createServer({ allowHalfOpen: true }, (s) => {
  echoSockets.add(s);
  s.on('close', () => echoSockets.delete(s));
  s.on('error', () => undefined);
  s.on('data', (d: Buffer) => s.write(d));
  s.on('end', () => s.end());
});
const scripts: Record<string, (s: net.Socket) => void> = {
  '/ok': (s) => s.end('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n'),
  '/keep': (s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n'),
  '/slow': (s) => setTimeout(() => s.end('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n'), 600),
  '/reset': (s) => s.resetAndDestroy(),
  '/bad-status': (s) => s.end('HTTP/1.1 000 Nope\r\nContent-Length: 0\r\n\r\n'),
  '/silent': () => undefined,
  '/cut-body': (s) => {
    s.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart');
    setTimeout(() => s.resetAndDestroy(), 100);
  },
  '/stall-body': (s) => s.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart'),
  '/after-body': (s) => {
    s.on('data', () => undefined);
    s.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart');
  },
};
const upstreamSockets = new Set<net.Socket>();
/** Connections the scripted upstream accepted, ever. */
let accepted = 0;
const scripted = net.createServer((s) => {
  accepted += 1;
  upstreamSockets.add(s);
  s.on('close', () => upstreamSockets.delete(s));
  s.on('error', () => undefined);
  let head = '';
  const onData = (d: Buffer): void => {
    head += d.toString('latin1');
    for (let end = head.indexOf('\r\n\r\n'); end !== -1; end = head.indexOf('\r\n\r\n')) {
      const path = /^[A-Z]+ (\S+)/.exec(head)?.[1] ?? '';
      head = head.slice(end + 4);
      if (path !== '/keep') s.off('data', onData);
      (scripts[path] ?? ((x: net.Socket) => x.destroy()))(s);
      if (path !== '/keep') return;
    }
  };
  s.on('data', onData);
});
// Upstreams that are not TLS: one that speaks first (an SMTP banner), one that answers in clear;
// and one that takes what it is sent and never answers.
const banner = net.createServer((s) => {
  s.on('error', () => undefined);
  s.end('220 mail.test ESMTP\r\n');
});
const clear = net.createServer((s) => {
  s.on('error', () => undefined);
  s.once('data', () => s.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n'));
});
const silentSockets = new Set<net.Socket>();
const silent = net.createServer((s) => {
  silentSockets.add(s);
  s.on('close', () => silentSockets.delete(s));
  s.on('error', () => undefined);
  s.resume();
});
const [bannerPort, clearPort, silentPort] = await Promise.all([listen(banner), listen(clear), listen(silent)]);
const echoPort = await listen(echo);
const webPort = await listen(scripted);
const dns = await startDnsServer();
dns.set('nx.dns.test', { nxdomain: true });
dns.set('private.dns.test', { answers: ['10.0.0.1'] });
dns.set('late.dns.test', { answers: ['93.184.215.14'], delayMs: 300 });
t.teardown(async () => {
  echo.close();
  scripted.close();
  banner.close();
  clear.close();
  silent.close();
  for (const s of silentSockets) s.destroy();
  for (const s of upstreamSockets) s.destroy();
  await dns.close();
});

const web = `web.test:${webPort}`;
/** 127.0.0.9 stands for an address that takes 300 ms to accept (the connect hook delays it). */
const SLOW_ADDRESS = '127.0.0.9';
const policyInput = {
  allowHosts: [{ host: 'echo.test', tunnel: 'opaque' as const }, 'tls.test', 'web.test', 'dead.test', 'slow.test', '*.dns.test'],
  connectPorts: [echoPort, webPort, bannerPort, clearPort, silentPort, 443, 80],
  testHosts: { 'echo.test': '127.0.0.1', 'tls.test': '127.0.0.1', 'web.test': '127.0.0.1', 'dead.test': '127.0.0.3', 'slow.test': SLOW_ADDRESS },
};
const connect: Connect = (address, port) => {
  if (address !== SLOW_ADDRESS) return net.connect({ host: address, port, allowHalfOpen: true });
  const socket = new net.Socket({ allowHalfOpen: true });
  // Unless the dial was given up meanwhile: connect() would bring a destroyed socket back.
  setTimeout(() => {
    if (!socket.destroyed) socket.connect(port, '127.0.0.1');
  }, 300);
  return socket;
};
/** A policy whose allowlist fails while matching: the proxy must fail closed, with one line. */
const failingPolicy: Policy = {
  ...policyOf(policyInput),
  allowlist: {
    match: () => {
      throw new Error('matcher failed');
    },
  } as unknown as Policy['allowlist'],
};

const helloFor = (servername: string | undefined): Promise<Buffer> => captureHello(servername === undefined ? {} : { servername });
const [helloTls, helloEvil, helloNoName, helloDead] = await Promise.all([helloFor('tls.test'), helloFor('evil.net'), helloFor(undefined), helloFor('dead.test')]);

/** Where transparent cases find the proxy's transparent listeners. */
const TRANSPARENT = '127.0.0.2';

function connectTo(port: number, host = '127.0.0.1'): Promise<net.Socket> {
  return new Promise((resolve) => {
    const s = net.connect({ port, host, allowHalfOpen: true }, () => resolve(s));
    s.on('error', () => undefined);
  });
}

/** Writes `bytes`, then reads until the proxy closes the connection. */
async function exchange(port: number, bytes: string | Buffer, host = '127.0.0.1'): Promise<string> {
  const s = await connectTo(port, host);
  s.write(typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes);
  const out = await readUntil(s, undefined, 8_000);
  s.destroy();
  return out;
}

/** Opens a tunnel, then hands its socket to `then` (which ends it). */
async function tunnel(port: number, target: string, then: (s: net.Socket) => Promise<void>): Promise<void> {
  const res = await rawRequest(port, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  if (res.status !== 200) throw new Error(`tunnel to ${target} answered ${res.status}`);
  res.socket.on('error', () => undefined);
  await then(res.socket);
  res.socket.destroy();
}

/** Sends a request head, waits for `waitFor`, then resets the connection. */
async function resetAfter(port: number, bytes: string, waitFor: () => boolean, what: string): Promise<void> {
  const s = await connectTo(port);
  s.write(Buffer.from(bytes, 'latin1'));
  s.resume();
  await settle(waitFor, what);
  s.resetAndDestroy();
}

const get = (authority: string, path = '/ok'): string => `GET http://${authority}${path} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`;

interface Case {
  readonly name: string;
  readonly limits?: Partial<ProxyLimits>;
  readonly policy?: Policy;
  /** A memory budget of this many bytes (for one client and all), instead of none. */
  readonly memory?: number;
  /** With transparent listeners (on TRANSPARENT): TLS for the echo port, HTTP for the web port. */
  readonly transparent?: boolean;
  /** The client's part: returns once it is done with the proxy. `at` is the transparent listener for a dialled port. */
  readonly drive: (p: TestProxy, at: (dialled: number) => number) => Promise<void>;
  /** Every decision line it must produce: `allow`, `allow <error>` or `deny <reason>`, any order. */
  readonly lines: readonly string[];
  /** What each of those lines must also carry. */
  readonly fields?: Record<string, unknown>;
}

const cases: Case[] = [
  // CONNECT
  {
    name: 'CONNECT allowed: an opaque tunnel the client closes',
    drive: (p) => tunnel(p.port, `echo.test:${echoPort}`, async (s) => {
      s.write('ping');
      await readUntil(s, 'ping');
      s.end();
      await readUntil(s, undefined);
    }),
    lines: ['allow'],
  },
  {
    name: 'CONNECT allowed: a tls tunnel whose ClientHello names the host',
    drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => {
      s.write(helloTls);
      await readUntil(s, helloTls.subarray(-8).toString('latin1'));
    }),
    lines: ['allow'],
  },
  {
    name: 'CONNECT allowed: the upstream resets the tunnel',
    drive: (p) => tunnel(p.port, `echo.test:${echoPort}`, async (s) => {
      s.write('x');
      await readUntil(s, 'x');
      for (const u of echoSockets) u.resetAndDestroy();
      await readUntil(s, undefined);
    }),
    lines: ['allow'],
  },
  { name: 'CONNECT refused by the allowlist', drive: (p) => exchange(p.port, 'CONNECT evil.net:443 HTTP/1.1\r\n\r\n').then(), lines: ['deny host_not_allowed'] },
  { name: 'CONNECT to an IP literal', drive: (p) => exchange(p.port, 'CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n').then(), lines: ['deny ip_literal'] },
  { name: 'CONNECT to a port not allowed', drive: (p) => exchange(p.port, 'CONNECT echo.test:22 HTTP/1.1\r\n\r\n').then(), lines: ['deny port_not_allowed'] },
  { name: 'CONNECT without a port', drive: (p) => exchange(p.port, 'CONNECT echo.test HTTP/1.1\r\n\r\n').then(), lines: ['deny bad_request'] },
  { name: 'CONNECT with a body', drive: (p) => exchange(p.port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody`).then(), lines: ['deny bad_request'] },
  { name: 'CONNECT to a name that does not resolve', drive: (p) => exchange(p.port, 'CONNECT nx.dns.test:443 HTTP/1.1\r\n\r\n').then(), lines: ['deny dns_failed'] },
  { name: 'CONNECT to a name with a private address', drive: (p) => exchange(p.port, 'CONNECT private.dns.test:443 HTTP/1.1\r\n\r\n').then(), lines: ['deny address_not_allowed'] },
  { name: 'CONNECT that no address accepts', drive: (p) => exchange(p.port, `CONNECT dead.test:${echoPort} HTTP/1.1\r\n\r\n`).then(), lines: ['deny connect_failed'] },
  {
    name: 'CONNECT whose decision fails (fail closed)',
    policy: failingPolicy,
    drive: (p) => exchange(p.port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\n\r\n`).then(),
    lines: ['deny internal_error'],
  },
  {
    name: 'CONNECT whose client leaves while it is decided',
    drive: (p) => resetAfter(p.port, 'CONNECT late.dns.test:443 HTTP/1.1\r\n\r\n', () => dns.questions('late.dns.test') > 0, 'the lookup'),
    lines: ['allow client_closed'],
  },
  {
    name: 'CONNECT whose client leaves while the upstream is dialed',
    drive: (p) => resetAfter(p.port, `CONNECT slow.test:${echoPort} HTTP/1.1\r\n\r\n`, () => p.dialed.length > 0, 'the dial'),
    lines: ['allow client_closed'],
  },
  // A tls tunnel refused after its 200.
  { name: 'after the 200: a ClientHello for another name', drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => void (await readUntil(s.end(helloEvil), undefined))), lines: ['deny sni_mismatch'] },
  { name: 'after the 200: a ClientHello with no name', drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => void (await readUntil(s.end(helloNoName), undefined))), lines: ['deny sni_missing'] },
  { name: 'after the 200: plain HTTP instead of TLS', drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => void (await readUntil(s.end('GET / HTTP/1.1\r\n\r\n'), undefined))), lines: ['deny sni_missing'] },
  {
    name: 'after the 200: an alert before any ClientHello',
    drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => void (await readUntil(s.end(Buffer.from([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28])), undefined))),
    lines: ['deny tls_hello_malformed'],
  },
  {
    name: 'after the 200: no ClientHello in time',
    limits: { helloTimeoutMs: 300 },
    drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => void (await readUntil(s, undefined))),
    lines: ['deny tls_hello_timeout'],
  },
  {
    name: 'after the 200: the client closes half-way through its ClientHello',
    drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => void (await readUntil(s.end(helloTls.subarray(0, 40)), undefined))),
    lines: ['deny tls_hello_malformed'],
  },
  {
    name: 'after the 200: the client resets half-way through its ClientHello',
    drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => {
      s.write(helloTls.subarray(0, 40));
      await new Promise((r) => setTimeout(r, 100));
      s.resetAndDestroy();
    }),
    lines: ['deny tls_hello_malformed'],
  },
  // A tls tunnel whose upstream is not TLS, and one whose client leaves while the upstream is silent.
  // The client keeps its side open: the proxy's refusal ends the tunnel.
  {
    name: 'after the 200: the upstream speaks first',
    drive: (p) => tunnel(p.port, `tls.test:${bannerPort}`, async (s) => {
      s.write(helloTls);
      await readUntil(s, undefined);
    }),
    lines: ['deny tls_upstream_not_tls'],
  },
  {
    name: 'after the 200: the upstream answers the hello in clear',
    drive: (p) => tunnel(p.port, `tls.test:${clearPort}`, async (s) => {
      s.write(helloTls);
      await readUntil(s, undefined);
    }),
    lines: ['deny tls_upstream_not_tls'],
  },
  {
    name: 'after the 200: the client closes while the upstream has not answered its hello',
    drive: (p) => tunnel(p.port, `tls.test:${silentPort}`, async (s) => {
      s.write(helloTls);
      await settle(() => silentSockets.size > 0, 'the upstream connection');
      await new Promise((r) => setTimeout(r, 100));
      await readUntil(s.end(), undefined, 3_000);
    }),
    lines: ['allow client_closed'],
  },
  // Plain HTTP
  { name: 'plain HTTP allowed and completed', drive: (p) => exchange(p.port, get(web).replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n')).then(), lines: ['allow'] },
  { name: 'plain HTTP: three requests on one connection', drive: (p) => exchange(p.port, get(web, '/keep') + get(web, '/keep') + get(web, '/ok').replace('\r\n\r\n', '\r\nConnection: close\r\n\r\n')).then(), lines: ['allow', 'allow', 'allow'] },
  { name: 'plain HTTP refused by the allowlist', drive: (p) => exchange(p.port, get('evil.net')).then(), lines: ['deny host_not_allowed'] },
  { name: 'plain HTTP in origin form', drive: (p) => exchange(p.port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n').then(), lines: ['deny bad_request'] },
  { name: 'plain HTTP with a Host for another host', drive: (p) => exchange(p.port, `GET http://${web}/ HTTP/1.1\r\nHost: evil.net\r\n\r\n`).then(), lines: ['deny bad_request'] },
  { name: 'plain HTTP to a name that does not resolve', drive: (p) => exchange(p.port, get('nx.dns.test')).then(), lines: ['deny dns_failed'] },
  { name: 'plain HTTP that no address accepts', drive: (p) => exchange(p.port, get(`dead.test:${webPort}`)).then(), lines: ['deny connect_failed'] },
  {
    name: 'plain HTTP whose decision fails (fail closed, 500 internal_error)',
    policy: failingPolicy,
    drive: async (p) => {
      const out = await exchange(p.port, get(web));
      // The same refusal as every other: status, reason, type, and a body with its advice.
      const refusal = /^HTTP\/1\.1 500 Internal Server Error \(internal_error: the proxy failed while deciding\)\r\n(?<head>[^]*?)\r\n\r\n(?<body>[^]*)$/.exec(out);
      if (!refusal) throw new Error(`not a 500 refusal: ${JSON.stringify(out)}`);
      const { head, body } = refusal.groups!;
      for (const field of [/^X-Egress-Reason: internal_error$/m, /^Content-Type: text\/plain; charset=utf-8$/m, /^Connection: close$/m]) {
        if (!field.test(head!)) throw new Error(`the 500 lacks ${field}: ${JSON.stringify(out)}`);
      }
      if (!/^egress failed: internal_error: .+; .*proxy log\n$/.test(body!)) throw new Error(`the 500's body: ${JSON.stringify(body)}`);
    },
    lines: ['deny internal_error'],
  },
  {
    name: 'plain HTTP whose client leaves while it is decided',
    drive: (p) => resetAfter(p.port, get('late.dns.test'), () => dns.questions('late.dns.test') > 0, 'the lookup'),
    lines: ['allow client_closed'],
  },
  { name: 'plain HTTP: the upstream resets before its head', drive: (p) => exchange(p.port, get(web, '/reset')).then(), lines: ['deny upstream_failed'] },
  { name: 'plain HTTP: the upstream sends a bad status line', drive: (p) => exchange(p.port, get(web, '/bad-status')).then(), lines: ['deny bad_upstream_response'] },
  { name: 'plain HTTP: the upstream never answers', limits: { idleTimeoutMs: 400 }, drive: (p) => exchange(p.port, get(web, '/silent')).then(), lines: ['deny upstream_timeout'] },
  { name: 'plain HTTP: the upstream resets after the response started', drive: (p) => exchange(p.port, get(web, '/cut-body')).then(), lines: ['allow upstream_failed'] },
  {
    name: 'plain HTTP: the client leaves after the response started',
    drive: async (p) => {
      const s = await connectTo(p.port);
      s.write(get(web, '/stall-body'));
      await readUntil(s, 'part');
      s.resetAndDestroy();
    },
    lines: ['allow client_closed'],
  },
  {
    name: 'plain HTTP: the client leaves half-way through its upload',
    drive: async (p) => {
      const s = await connectTo(p.port);
      const before = accepted;
      s.write(`POST http://${web}/slow HTTP/1.1\r\nHost: ${web}\r\nContent-Length: 100\r\n\r\nhalf`);
      await settle(() => accepted > before, 'the upstream');
      s.resetAndDestroy();
    },
    lines: ['allow client_closed'],
  },
  {
    name: 'plain HTTP: a broken chunked body while the upstream is asked',
    drive: (p) => exchange(p.port, `POST http://${web}/slow HTTP/1.1\r\nHost: ${web}\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\nzz\r\n\r\n`).then(),
    lines: ['deny bad_request'],
  },
  {
    name: 'plain HTTP: a broken chunked body after the response started',
    drive: async (p) => {
      const s = await connectTo(p.port);
      s.write(`POST http://${web}/after-body HTTP/1.1\r\nHost: ${web}\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbody\r\n`);
      await readUntil(s, 'part');
      s.write('zz\r\n\r\n');
      await readUntil(s, undefined);
      s.destroy();
    },
    lines: ['allow bad_request'],
  },
  { name: 'the health check is no proxied request', drive: (p) => exchange(p.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n').then(), lines: [] },
  {
    name: 'a client that closes before sending anything',
    drive: async (p) => {
      const s = await connectTo(p.port);
      s.end();
      await readUntil(s, undefined);
    },
    lines: [],
  },
  // The memory budget (Node's parser is charged 192 KiB for a connection with the default 16 KiB
  // head limit; an ordinary request about 4 KiB, and a body waiting its turn 160 KiB more).
  { name: 'a new connection with no room in the memory budget', memory: 0, drive: (p) => exchange(p.port, `CONNECT echo.test:${echoPort} HTTP/1.1\r\n\r\n`).then(), lines: ['deny overloaded'] },
  { name: 'the health check with no room in the memory budget is answered, and no request', memory: 0, drive: (p) => exchange(p.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n').then(), lines: [] },
  { name: 'plain HTTP with no room for Node\'s parser', memory: ACCEPT_BYTES, drive: (p) => exchange(p.port, get(web)).then(), lines: ['deny overloaded'] },
  {
    name: 'a request with no room for itself, nothing before it: refused in its turn',
    memory: ACCEPT_BYTES + 192 * 1024 + 1024,
    drive: (p) => exchange(p.port, get(web)).then(),
    lines: ['deny overloaded'],
  },
  {
    name: 'a request that would wait its turn with a body there is no room for: the connection is cut',
    memory: ACCEPT_BYTES + 192 * 1024 + 16 * 1024,
    drive: (p) => exchange(p.port, `${get(web, '/slow')}POST http://${web}/ok HTTP/1.1\r\nHost: ${web}\r\nContent-Length: 100000\r\n\r\n${'x'.repeat(50_000)}`).then(),
    lines: ['allow client_closed', 'deny overloaded'],
  },
  {
    name: 'a tls tunnel whose hello grows past the budget',
    memory: ACCEPT_BYTES + 8 * 1024,
    drive: (p) => tunnel(p.port, `tls.test:${echoPort}`, async (s) => {
      // One full record of a ClientHello announced at 32 KiB.
      s.write(Buffer.concat([Buffer.from([22, 3, 1, 0x40, 0, 1, 0, 0x80, 0]), Buffer.alloc(16 * 1024 - 4, 1)]));
      await readUntil(s, undefined);
    }),
    lines: ['deny overloaded'],
  },
  // Refusals the server makes itself
  {
    name: 'one connection over the per-client limit',
    limits: { maxConnectionsPerClient: 1 },
    drive: async (p) => {
      const held = await connectTo(p.port);
      await settle(() => p.proxy.openConnections === 1, 'the first connection');
      await exchange(p.port, '');
      held.destroy();
    },
    lines: ['deny client_limit'],
    // Refused before the connection has a logger of its own: a warning naming the client.
    fields: { level: 40, client: /^127\.0\.0\.1:\d+$/ },
  },
  {
    name: 'one connection over the total limit',
    limits: { maxConnections: 1 },
    drive: async (p) => {
      const held = await connectTo(p.port);
      await settle(() => p.proxy.openConnections === 1, 'the first connection');
      await exchange(p.port, get(web));
      held.destroy();
    },
    lines: ['deny too_many_connections'],
    fields: { level: 40, client: /^127\.0\.0\.1:\d+$/ },
  },
  { name: 'the head deadline, with nothing sent', limits: { headerTimeoutMs: 300 }, drive: (p) => exchange(p.port, '').then(), lines: ['deny header_timeout'] },
  { name: 'the head deadline, half a CONNECT head sent', limits: { headerTimeoutMs: 300 }, drive: (p) => exchange(p.port, 'CONNECT echo.test:443 HTTP/1.1\r\nX-Slow: ').then(), lines: ['deny header_timeout'] },
  { name: 'the head deadline, half a GET head sent', limits: { headerTimeoutMs: 300 }, drive: (p) => exchange(p.port, `GET http://${web}/ HTTP/1.1\r\n`).then(), lines: ['deny header_timeout'] },
  { name: 'bytes that are no HTTP', drive: (p) => exchange(p.port, '\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03').then(), lines: ['deny bad_request'] },
  { name: 'a head over the size limit', drive: (p) => exchange(p.port, `GET http://${web}/ HTTP/1.1\r\nHost: ${web}\r\nX: ${'a'.repeat(20_000)}\r\n\r\n`).then(), lines: ['deny headers_too_large'] },
  // The failing bytes follow the request: while it is under way they refuse it, after it they
  // are refused on their own.
  { name: 'garbage behind a request under way', drive: (p) => exchange(p.port, get(web, '/slow') + 'GARBAGE\x01\r\n\r\n').then(), lines: ['deny bad_request'] },
  {
    name: 'garbage behind a request answered',
    drive: async (p) => {
      const s = await connectTo(p.port);
      s.write(get(web, '/keep'));
      await readUntil(s, 'ok\n');
      s.write('GARBAGE\x01\r\n\r\n');
      await readUntil(s, undefined);
      s.destroy();
    },
    lines: ['allow', 'deny bad_request'],
  },
  { name: 'an Expect other than 100-continue', drive: (p) => exchange(p.port, `GET http://${web}/ HTTP/1.1\r\nHost: ${web}\r\nExpect: magic\r\n\r\n`).then(), lines: ['deny bad_request'] },
  { name: 'an Upgrade request', drive: (p) => exchange(p.port, `GET http://${web}/ HTTP/1.1\r\nHost: ${web}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n`).then(), lines: ['deny bad_request'] },
  {
    name: 'a CONNECT pipelined behind a request still being answered',
    drive: (p) => exchange(p.port, get(web, '/slow') + `CONNECT echo.test:${echoPort} HTTP/1.1\r\n\r\n`).then(),
    lines: ['allow client_closed', 'deny bad_request'],
  },
  {
    name: 'one pipelined request more than may wait',
    drive: async (p) => {
      await exchange(p.port, get(web, '/slow').repeat(34));
      await settle(() => p.logs.some((l) => l.event === 'requests_dropped'), 'the requests_dropped line');
    },
    // The first is under way, 32 wait (and are dropped, on a line of their own), the 34th is refused.
    lines: ['allow client_closed', 'deny bad_request'],
  },
  // Transparent mode: TLS routed by its ClientHello, HTTP by its Host.
  {
    name: 'transparent TLS allowed: routed by its ClientHello',
    transparent: true,
    drive: async (_p, at) => {
      const s = await connectTo(at(echoPort), TRANSPARENT);
      s.write(helloTls);
      await readUntil(s, helloTls.subarray(-8).toString('latin1'));
      s.destroy();
    },
    lines: ['allow'],
    fields: { via: 'transparent', sni: 'tls.test', host: 'tls.test' },
  },
  { name: 'transparent TLS for a name off the allowlist', transparent: true, drive: (_p, at) => exchange(at(echoPort), helloEvil, TRANSPARENT).then(), lines: ['deny host_not_allowed'], fields: { via: 'transparent', sni: 'evil.net' } },
  { name: 'transparent TLS without a server name', transparent: true, drive: (_p, at) => exchange(at(echoPort), helloNoName, TRANSPARENT).then(), lines: ['deny sni_missing'], fields: { via: 'transparent' } },
  {
    name: 'transparent TLS: the client closes half-way through its hello',
    transparent: true,
    drive: async (_p, at) => {
      const s = await connectTo(at(echoPort), TRANSPARENT);
      s.end(helloTls.subarray(0, 40));
      await readUntil(s, undefined);
      s.destroy();
    },
    lines: ['deny tls_hello_malformed'],
  },
  { name: 'transparent TLS: no hello in time', transparent: true, limits: { helloTimeoutMs: 300 }, drive: (_p, at) => exchange(at(echoPort), '', TRANSPARENT).then(), lines: ['deny tls_hello_timeout'] },
  { name: 'transparent TLS that no address accepts', transparent: true, drive: (_p, at) => exchange(at(echoPort), helloDead, TRANSPARENT).then(), lines: ['deny connect_failed'], fields: { sni: 'dead.test' } },
  { name: 'transparent HTTP allowed: routed by its Host', transparent: true, drive: (_p, at) => exchange(at(webPort), `GET /ok HTTP/1.1\r\nHost: ${web}\r\nConnection: close\r\n\r\n`, TRANSPARENT).then(), lines: ['allow'], fields: { via: 'transparent', host: 'web.test' } },
  { name: 'transparent HTTP for a name off the allowlist', transparent: true, drive: (_p, at) => exchange(at(webPort), `GET /ok HTTP/1.1\r\nHost: evil.net:${webPort}\r\n\r\n`, TRANSPARENT).then(), lines: ['deny host_not_allowed'] },
  { name: 'transparent HTTP without a Host', transparent: true, drive: (_p, at) => exchange(at(webPort), 'GET /ok HTTP/1.0\r\n\r\n', TRANSPARENT).then(), lines: ['deny bad_request'] },
  {
    name: 'a transparent connection over the per-client limit',
    transparent: true,
    limits: { maxConnectionsPerClient: 1 },
    drive: async (p, at) => {
      const held = await connectTo(p.port);
      await settle(() => p.proxy.openConnections === 1, 'the first connection counted');
      await exchange(at(echoPort), helloTls, TRANSPARENT);
      held.destroy();
    },
    lines: ['deny client_limit'],
    fields: { level: 40, via: 'transparent' },
  },
  // The transparent listeners share the memory budget (memory-budget.test.ts fills it from both sides).
  { name: 'a transparent TLS connection with no room in the memory budget', transparent: true, memory: 0, drive: (_p, at) => exchange(at(echoPort), helloTls, TRANSPARENT).then(), lines: ['deny overloaded'], fields: { via: 'transparent', port: echoPort } },
  {
    name: 'a transparent HTTP head with no room for Node\'s parser',
    transparent: true,
    memory: ACCEPT_BYTES,
    drive: (_p, at) => exchange(at(webPort), `GET /ok HTTP/1.1\r\nHost: ${web}\r\n\r\n`, TRANSPARENT).then(),
    lines: ['deny overloaded'],
    fields: { via: 'transparent' },
  },
  {
    name: 'a transparent TLS hello that grows past the memory budget',
    transparent: true,
    memory: ACCEPT_BYTES + 8 * 1024,
    drive: (_p, at) => exchange(at(echoPort), Buffer.concat([Buffer.from([22, 3, 1, 0x40, 0, 1, 0, 0x80, 0]), Buffer.alloc(16 * 1024 - 4, 1)]), TRANSPARENT).then(),
    lines: ['deny overloaded'],
    fields: { via: 'transparent', port: echoPort },
  },
];

const summary = (l: Record<string, unknown>): string =>
  l.decision === 'deny' ? `deny ${String(l.reason)}` : l.error === undefined ? 'allow' : `allow ${String(l.error)}`;

for (const c of cases) {
  t.test(c.name, async (t) => {
    const memory = c.memory === undefined ? undefined : new MemoryBudget({ totalBytes: c.memory, perClientBytes: c.memory });
    const p = await startTestProxy({ policy: policyInput, dnsServer: dns.address, limits: c.limits ?? {}, connect, ...(memory ? { memory } : {}) });
    t.teardown(() => p.close());
    if (c.policy) p.proxy.setPolicy(c.policy);
    const listening = c.transparent
      ? await p.proxy.listenTransparent({ listen: TRANSPARENT, answer: TRANSPARENT, ports: [{ kind: 'tls', dialled: echoPort, listen: 0 }, { kind: 'http', dialled: webPort, listen: 0 }] })
      : undefined;
    const at = (dialled: number): number => listening?.ports.find((x) => x.dialled === dialled)?.listen ?? 0;
    const decisions = (): Record<string, unknown>[] => p.logs.filter((l) => l.event === 'decision');
    await c.drive(p, at);
    await settle(() => p.proxy.openConnections === 0 && decisions().length >= c.lines.length, `${c.lines.length} decision lines and every connection closed`, 8_000);
    // Room for a second line: a late timer, a close, a lookup answered after the client left.
    await new Promise((r) => setTimeout(r, 250));
    t.same(decisions().map(summary).sort(), [...c.lines].sort(), 'one decision line per request');
    if (c.fields) for (const line of decisions()) t.match(line, c.fields, 'the line\'s fields');
    const metric = (await p.proxy.metrics.getMetricsAsJSON()).find((m) => m.name === 'egress_decisions_total');
    const counted = (metric?.values ?? []).flatMap((v) => Array<string>(v.value).fill(`${String(v.labels.outcome)} ${String(v.labels.reason)}`));
    t.same(counted.sort(), decisions().map((l) => `${String(l.decision)} ${l.decision === 'deny' ? String(l.reason) : 'allowed'}`).sort(), 'one decision metric per line');
  });
}
