/**
 * A shared proxy's plain-HTTP forwarding keeps each sandbox on upstream connections of its own.
 * The pools were keyed by destination alone, so two sandboxes allowed the same host shared keep-
 * alive connections to it; against a server that reads a request's body as the next request (a
 * CL.0 desync: an endpoint that ignores Content-Length, found in real servers and CDNs), one
 * sandbox could put a request of its own on the shared connection and another sandbox's next
 * request got its answer (or was appended to it). On loopback, each /28 of 127.0.0.0/8 a sandbox
 * network, as in tenants.test.ts.
 */
import t from 'tap';
import http from 'node:http';
import net from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../proxy/index.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { rawRequest } from '../support/raw-client.js';
import { listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';
import { captureLogs } from '../support/log-capture.js';

const A = { subnet: '127.0.1.0/28', proxy: '127.0.1.1', client: '127.0.1.5' };
const B = { subnet: '127.0.2.0/28', proxy: '127.0.2.1', client: '127.0.2.5' };

t.test('a request one sandbox smuggles to a desyncing server never answers another sandbox', async (t) => {
  // A sequential HTTP/1.1 server that ignores every request body (CL.0): the body is read as the
  // next request on the connection. /slow answers after a while, as a real endpoint might.
  const seen: { port: number; path: string }[] = [];
  const server = net.createServer((socket) => {
    socket.on('error', () => socket.destroy());
    let text = '';
    let answered = Promise.resolve();
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      for (let end = text.indexOf('\r\n\r\n'); end !== -1; end = text.indexOf('\r\n\r\n')) {
        const path = /^[A-Z]+ (\S+)/.exec(text)?.[1] ?? '?';
        text = text.slice(end + 4);
        seen.push({ port: socket.remotePort ?? 0, path });
        answered = answered
          .then(() => new Promise((r) => setTimeout(r, path === '/slow' ? 1_000 : 0)))
          .then(() => {
            const body = `answer to ${path}`;
            socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
          });
      }
    });
  });
  const upstream = await listen(server);
  const dir = mkdtempSync(join(tmpdir(), 'tenant-pools-'));
  const register = (slot: string, sandbox: string, net: typeof A): void =>
    putSlot(dir, slot, { version: 1, sandbox, lifecycle: `life-${sandbox}-0001`, subnet: net.subnet, address: net.proxy, policy: { allowHosts: ['shared.test'], connectPorts: [upstream] } });
  register('slot-a', 'cap-a', A);
  register('slot-b', 'cap-b', B);
  const { logs, sink } = captureLogs();
  const logger = createLogger('debug', sink);
  t.teardown(() => server.close());
  const { port } = await startSharedProxy(t, dir, logger, { testHosts: { 'shared.test': '127.0.0.1' } });
  await settle(() => logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');

  // Sandbox A: a POST whose body is a request of its own, which this server reads as one.
  const smuggled = 'GET /slow HTTP/1.1\r\nHost: shared.test\r\n\r\n';
  const a = await rawRequest(port, `POST http://shared.test:${upstream}/a HTTP/1.1\r\nHost: shared.test:${upstream}\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`, A.proxy, 5_000, A.client);
  t.equal(a.body, 'answer to /a');
  await settle(() => seen.some((s) => s.path === '/slow'), 'the server read the smuggled request');
  // Sandbox B, while the smuggled request's answer is still due.
  const b = await rawRequest(port, `GET http://shared.test:${upstream}/b HTTP/1.1\r\nHost: shared.test:${upstream}\r\n\r\n`, B.proxy, 5_000, B.client);
  a.socket.destroy();
  b.socket.destroy();
  t.equal(b.status, 200);
  t.equal(b.body, 'answer to /b', "b gets its own answer, never the one to a's smuggled request");
  const portOf = (path: string): number | undefined => seen.find((s) => s.path === path)?.port;
  t.not(portOf('/b'), portOf('/a'), "b's request went on an upstream connection a never used");

  // One sandbox still reuses its own upstream connections.
  const again = await rawRequest(port, `GET http://shared.test:${upstream}/b2 HTTP/1.1\r\nHost: shared.test:${upstream}\r\n\r\n`, B.proxy, 5_000, B.client);
  again.socket.destroy();
  t.equal(again.body, 'answer to /b2');
  t.equal(portOf('/b2'), portOf('/b'), "b's next request reuses b's connection");
});

t.test('upstream sockets at the plan: the idle connections shed are those of the sandbox holding the most, not the least recently used', async (t) => {
  // Each answer names the upstream connection it came on. Answers are held until `together`
  // requests are in, so that requests sent together each open a connection of their own, however
  // slowly a loaded machine sends them (a 20 ms hold let two of eight share one in CI).
  let together = 1;
  const held: (() => void)[] = [];
  const server = http.createServer((req, res) => {
    held.push(() => res.writeHead(200, { 'Content-Length': String(req.socket.remotePort).length }).end(String(req.socket.remotePort)));
    if (held.length >= together) for (const answer of held.splice(0)) answer();
  });
  server.keepAliveTimeout = 60_000;
  const upstream = await listen(server);
  t.teardown(() => server.close());
  const dir = mkdtempSync(join(tmpdir(), 'tenant-pools-'));
  const hosts = ['b.test', ...Array.from({ length: 9 }, (_, i) => `a${i}.test`)];
  for (const [slot, sandbox, net] of [['slot-a', 'cap-a', A], ['slot-b', 'cap-b', B]] as const) {
    putSlot(dir, slot, { version: 1, sandbox, lifecycle: `life-${sandbox}-0001`, subnet: net.subnet, address: net.proxy, policy: { allowHosts: hosts, connectPorts: [upstream] } });
  }
  const { logs, sink } = captureLogs();
  // The plan holds 16 upstream sockets; a sandbox may open 8 connections (its share's floor).
  const { proxy, port } = await startSharedProxy(t, dir, createLogger('info', sink), { testHosts: Object.fromEntries(hosts.map((h) => [h, '127.0.0.1'])), limits: { maxConnections: 16 } });
  await settle(() => logs.filter((l) => l.event === 'tenant_registered').length >= 2, 'both registrations');
  const get = async (from: typeof A, host: string): Promise<string> => {
    const r = await rawRequest(port, `GET http://${host}:${upstream}/ HTTP/1.1\r\nHost: ${host}:${upstream}\r\n\r\n`, from.proxy, 5_000, from.client);
    r.socket.destroy();
    // Its client connection counted closed before the next: eight at once are A's share of them.
    await settle(() => proxy.openConnections === 0, 'the client connections closed');
    return r.body;
  };
  // B's one idle connection is the least recently used; then A leaves eight idle in one pool.
  const b = await get(B, 'b.test');
  together = 8;
  const a = await Promise.all(Array.from({ length: 8 }, () => get(A, 'a0.test')));
  together = 1;
  t.equal(new Set(a).size, 8, `a holds eight upstream connections (${a.join(' ')})`);
  // Seven more destinations of A's take the process to its plan of upstream sockets, the eighth past it.
  for (let i = 1; i <= 8; i += 1) await get(A, `a${i}.test`);
  t.equal(await get(B, 'b.test'), b, "b's next request reuses its idle keep-alive connection");
  t.notOk(a.includes(await get(A, 'a0.test')), "a's pool of eight idle connections was closed");
});
