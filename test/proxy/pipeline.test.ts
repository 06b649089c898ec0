/**
 * Pipelined plain-HTTP requests and clients that stop reading: what one client connection can
 * make the proxy hold upstream, and that everything it holds ends when the client does.
 */
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { MAX_WAITING } from '../../proxy/admission/pipeline.js';
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
      } else if (path === '/fill') {
        void fill(socket);
      } else if (path === '/small') {
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n');
      }
    }
  });
});
const port = await listen(upstream);

/**
 * A chunked response that ends just as the proxy's side of a client that does not read is full:
 * the proxy has its whole response, has ended it, and still holds its last bytes.
 */
let proxySide: net.Socket | undefined;
async function fill(socket: net.Socket): Promise<void> {
  socket.write('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n');
  const piece = Buffer.alloc(1024, 0x61);
  for (let i = 0; i < 64 * 1024; i++) {
    socket.write(`400\r\n`);
    socket.write(piece);
    socket.write('\r\n');
    if (i % 64 === 0) await new Promise((r) => setTimeout(r, 2));
    const pending = proxySide?.writableLength ?? 0;
    if (pending > 0 && pending < 8192) {
      socket.write('0\r\n\r\n');
      return;
    }
  }
}
t.teardown(() => upstream.close());

// Two proxies: one whose idle timeout no test step comes near, however loaded the machine, for
// the cases whose outcome is not a timeout; and one with a short idle timeout for the clients that
// stop reading, which are judged by the timeout's line, whenever it comes.
const policy = { allowHosts: ['up.test'], connectPorts: [port], testHosts: { 'up.test': '127.0.0.1' } };
const p = await startTestProxy({ policy, limits: { idleTimeoutMs: 60_000, maxConnectionsPerClient: 1 } });
t.teardown(() => p.close());
const idle = await startTestProxy({ policy, limits: { idleTimeoutMs: 600, maxConnectionsPerClient: 1 } });
t.teardown(() => idle.close());
const get = (path: string): string => `GET http://up.test:${port}${path} HTTP/1.1\r\nHost: up.test:${port}\r\n\r\n`;
const lines = (event: string): Record<string, unknown>[] => p.logs.filter((l) => l.event === event);
const idleLines = (event: string): Record<string, unknown>[] => idle.logs.filter((l) => l.event === event);

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

t.test('the body of a request waiting its turn stays with the client (backpressure), not in proxy memory', async (t) => {
  const socket = net.connect(p.port, '127.0.0.1');
  socket.on('error', () => undefined);
  const size = 96 * 1024 * 1024;
  await new Promise((r) => socket.once('connect', r));
  // The body follows the heads at once, as an uploading client sends it.
  socket.write(`${get('/hold')}POST http://up.test:${port}/upload HTTP/1.1\r\nHost: up.test:${port}\r\nContent-Length: ${size}\r\n\r\n`);
  // Written a MiB at a time, as fast as the connection takes it; counted once handed to the kernel.
  const piece = Buffer.alloc(1024 * 1024, 0x62);
  let taken = 0;
  let stop = false;
  const pump = (): void => {
    while (!stop && taken + piece.length <= size) {
      const ok = socket.write(piece, () => (taken += piece.length));
      if (!ok) {
        socket.once('drain', pump);
        return;
      }
    }
  };
  pump();
  await new Promise((r) => setTimeout(r, 2_000));
  stop = true;
  // Loopback kernel buffers on both ends hold a few MiB; without backpressure the proxy takes all.
  t.ok(taken < 40 * 1024 * 1024, `the connection took ${(taken / 1048576).toFixed(0)} MiB of the ${size / 1048576} MiB body`);
  socket.destroy();
  // The proxy reads nothing more of a client it holds back, so it sees this close only at its
  // idle timeout (a minute here); the upstream side ends the held request instead.
  for (const held of open) held.destroy();
});

t.test('a client that stops reading a response is ended at the idle timeout, with the upstream', async (t) => {
  const before = idleLines('decision').length;
  const socket = net.connect(idle.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.write(get('/big'));
  socket.pause();
  await settle(() => requests === 1, 'the request upstream');
  await settle(() => idleLines('decision').length > before, 'its line', 5_000);
  t.match(idleLines('decision').slice(before), [{ decision: 'allow', status: 200, completed: false, error: 'idle_timeout' }]);
  await settle(() => open.size === 0, 'the upstream connection to close', 10_000);
  socket.destroy();
});

t.test('a client that stops reading the last bytes of a response is ended at the idle timeout too', async (t) => {
  // The proxy's side of the client connection, to see what it still holds.
  const write = http.ServerResponse.prototype.write;
  t.teardown(() => {
    http.ServerResponse.prototype.write = write;
    proxySide = undefined;
  });
  http.ServerResponse.prototype.write = function (this: http.ServerResponse, ...args: Parameters<typeof write>) {
    proxySide ??= this.socket ?? undefined;
    return write.apply(this, args);
  } as typeof write;
  const before = idleLines('decision').length;
  const socket = net.connect(idle.port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.pause();
  socket.write(get('/fill') + get('/small'));
  await settle(() => idleLines('decision').length > before, 'its line', 20_000);
  t.match(idleLines('decision').slice(before), [{ decision: 'allow', status: 200, completed: false, error: 'idle_timeout' }], 'cut, and its line says so');
  t.equal(proxySide?.destroyed, true, 'the connection is closed');
  await settle(() => idleLines('requests_dropped').length > 0 && idleLines('requests_dropped').at(-1)?.requests === 1, 'the request behind it counted as dropped');
  socket.destroy();
});
