/**
 * Pipelined plain-HTTP requests and clients that stop reading: what one client connection can
 * make the proxy hold upstream, and that everything it holds ends when the client does.
 */
import net from 'node:net';
import t from 'tap';
import { MAX_WAITING } from '../../proxy/pipeline.js';
import { listen } from '../support/loopback.js';
import { readUntil } from '../support/raw-client.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

// An upstream that holds every request open (/hold) or sends 8 MiB (/big), counting its
// connections and the requests it has seen.
const open = new Set<net.Socket>();
let requests = 0;
const upstream = net.createServer((socket) => {
  open.add(socket);
  socket.on('close', () => open.delete(socket));
  socket.on('error', () => undefined);
  let head = '';
  socket.on('data', (d: Buffer) => {
    head += d.toString('latin1');
    for (let end = head.indexOf('\r\n\r\n'); end !== -1; end = head.indexOf('\r\n\r\n')) {
      const path = /^[A-Z]+ (\S+)/.exec(head)?.[1] ?? '';
      head = head.slice(end + 4);
      requests += 1;
      if (path === '/big') {
        const size = 8 * 1024 * 1024;
        socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
        socket.write(Buffer.alloc(size, 0x61));
      } else if (path === '/small') {
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n');
      }
    }
  });
});
const port = await listen(upstream);
t.teardown(() => upstream.close());

const p = await startTestProxy({
  policy: { allowHosts: ['up.test'], connectPorts: [port], testHosts: { 'up.test': '127.0.0.1' } },
  limits: { idleTimeoutMs: 600, maxConnectionsPerClient: 1 },
});
t.teardown(() => p.close());
const get = (path: string): string => `GET http://up.test:${port}${path} HTTP/1.1\r\nHost: up.test:${port}\r\n\r\n`;
const lines = (event: string): Record<string, unknown>[] => p.logs.filter((l) => l.event === event);

t.beforeEach(async () => {
  await settle(() => open.size === 0, 'the upstream connections of the last test to close', 10_000);
  requests = 0;
});

t.test('pipelined requests are answered one at a time, in order', async (t) => {
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(get('/small').repeat(5).replace(/\r\n\r\n$/, '\r\nConnection: close\r\n\r\n'));
  const out = await readUntil(socket, undefined);
  t.equal(out.match(/HTTP\/1\.1 200 OK/g)?.length, 5, 'five answers');
  t.equal(requests, 5);
  await settle(() => lines('decision').length >= 5, 'their lines');
});

t.test('a burst of pipelined requests holds one upstream request, and ends with the client', async (t) => {
  const before = { decisions: lines('decision').length, dropped: lines('requests_dropped').length };
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(get('/hold').repeat(MAX_WAITING + 1));
  await settle(() => requests === 1, 'the first request upstream');
  await new Promise((r) => setTimeout(r, 300));
  t.equal(requests, 1, 'the rest wait for their turn');
  t.equal(open.size, 1, 'one upstream connection');
  socket.destroy();
  // undici closes an aborted request's connection rather than reuse it (within its 4 s keep-alive).
  await settle(() => open.size === 0, 'the upstream connection to close with the client', 10_000);
  await settle(() => lines('requests_dropped').length > before.dropped, 'the dropped line');
  t.match(lines('decision').slice(before.decisions), [{ decision: 'allow', error: 'client_closed' }], 'the one started: one line');
  t.equal(lines('requests_dropped').at(-1)?.requests, MAX_WAITING, 'those never started: counted on one line');
});

t.test('more pipelined requests than may wait: one deny line, the connection cut, nothing more upstream', async (t) => {
  const before = { decisions: lines('decision').length, dropped: lines('requests_dropped').length };
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  const count = 50_000;
  socket.write(get('/hold').repeat(count));
  const out = await readUntil(socket, undefined);
  t.equal(out, '', 'nothing was answered');
  await settle(() => lines('requests_dropped').length > before.dropped, 'the dropped line');
  t.ok(requests <= 1, 'at most the first request went upstream');
  await settle(() => open.size === 0, 'its upstream connection to close', 10_000);
  const decided = lines('decision').slice(before.decisions);
  t.match(decided.map((l) => [l.decision, l.reason ?? l.error]).sort(), [['allow', 'client_closed'], ['deny', 'bad_request']]);
  t.match(decided.find((l) => l.decision === 'deny')?.detail, `more than ${MAX_WAITING} pipelined requests`);
  const dropped = Number(lines('requests_dropped').at(-1)?.requests);
  t.ok(dropped > MAX_WAITING && dropped < count, `the rest of what was parsed counted as dropped (${dropped})`);
});

t.test('a client that stops reading a response is ended at the idle timeout, with the upstream', async (t) => {
  const before = lines('decision').length;
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(get('/big'));
  socket.pause();
  await settle(() => requests === 1, 'the request upstream');
  await settle(() => lines('decision').length > before, 'its line', 5_000);
  t.match(lines('decision').slice(before), [{ decision: 'allow', status: 200, completed: false, error: 'idle_timeout' }]);
  await settle(() => open.size === 0, 'the upstream connection to close', 10_000);
  socket.destroy();
});
