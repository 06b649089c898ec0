/**
 * Upstream sockets stay within the descriptors the open-file plan gives them: one per client
 * connection (fd-budget.ts). A plain-HTTP request leaves its upstream connection idle in its
 * destination's pool for seconds; one client cycling a few keep-alive connections through many
 * allowed destinations left one idle socket per request, past the plan, and under a binding
 * open-file limit (600: 86 connections planned) ten such connections ran the process out of
 * descriptors, so every other client's requests failed `connect_failed` while it went on.
 */
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { defaultConnect } from '../../proxy/index.js';
import { listen } from '../support/loopback.js';
import { startTestProxy } from '../support/test-proxy.js';

const MAX_CONNECTIONS = 16;
const CLIENTS = 4;
const HOSTS_EACH = 20;

/** One keep-alive GET on `socket`; resolves with the status once the whole answer is in. */
function get(socket: net.Socket, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end === -1) return;
      const length = Number(/^content-length: *(\d+)$/im.exec(text.slice(0, end))?.[1] ?? 0);
      if (text.length < end + 4 + length) return;
      socket.off('data', onData);
      resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0));
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write(`GET http://${host}:${port}/ HTTP/1.1\r\nHost: ${host}:${port}\r\n\r\n`);
  });
}

t.test('idle pooled upstream connections never take the process past its planned descriptors', async (t) => {
  const web = http.createServer((_req, res) => res.writeHead(200, { 'Content-Length': '2' }).end('ok'));
  web.keepAliveTimeout = 60_000;
  const webPort = await listen(web);
  t.teardown(() => web.close());
  const hosts = Array.from({ length: CLIENTS * HOSTS_EACH }, (_, i) => `h${i}.test`);
  let open = 0;
  let peak = 0;
  const proxy = await startTestProxy({
    policy: { allowHosts: hosts, connectPorts: [webPort], testHosts: Object.fromEntries(hosts.map((h) => [h, '127.0.0.1'])) },
    limits: { maxConnections: MAX_CONNECTIONS },
    connect: (address, port, purpose) => {
      const socket = defaultConnect(address, port, purpose);
      open += 1;
      peak = Math.max(peak, open);
      socket.once('close', () => (open -= 1));
      return socket;
    },
  });
  t.teardown(() => proxy.close());

  // A few keep-alive connections, each asking one destination after another.
  const statuses = await Promise.all(
    Array.from({ length: CLIENTS }, async (_, c) => {
      const socket = net.connect(proxy.port, '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      const seen: number[] = [];
      for (let i = 0; i < HOSTS_EACH; i++) seen.push(await get(socket, hosts[c * HOSTS_EACH + i]!, webPort));
      socket.destroy();
      return seen;
    }),
  );
  t.ok(
    statuses.flat().every((s) => s === 200),
    'every request answered',
  );
  // One per planned connection, and at most one more for each client connection dialling at the
  // same moment (an idle socket closed to make room is counted until its close is reported).
  t.ok(peak <= MAX_CONNECTIONS + CLIENTS, `at most ${MAX_CONNECTIONS + CLIENTS} upstream sockets open at once (peak ${peak}, ${CLIENTS * HOSTS_EACH} requests)`);
});
