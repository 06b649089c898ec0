/**
 * An accept that fails (no descriptor left: EMFILE, ENFILE; or an error the kernel reports for a
 * pending connection) ends that one connection, never the process, on every listener the proxy
 * has: the proxy port (server.ts), the metrics listener and, in transparent mode,
 * the TLS and HTTP listeners and the DNS responder's TCP server. A net.Server without an 'error' listener turns
 * such an accept into an uncaught exception, and the process (every client's egress) ends.
 *
 * The accept error is emitted on each listening server found among the process's handles: the
 * kernel's EMFILE is not reliably reachable in a test (libuv's reserve descriptor usually hides it).
 */
import net from 'node:net';
import t from 'tap';
import { startTestProxy } from '../support/test-proxy.js';
import { listen } from '../support/loopback.js';
import http from 'node:http';
import { rawRequest } from '../support/raw-client.js';
import { captureLogs } from '../support/log-capture.js';
import { createLogger, startMetricsServer } from '../../proxy/record/index.js';

const ADDRESS = '127.0.0.2';

const web = http.createServer((req, res) => res.end(`http ${req.url} host=${req.headers.host}\n`));
const webPort = await listen(web);
t.teardown(() => {
  web.close();
  web.closeAllConnections();
});

/** The listening TCP servers of this process bound to `host`. */
function serversOn(host: string): net.Server[] {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  return handles.filter((h): h is net.Server => h instanceof net.Server && (h.address() as net.AddressInfo | null)?.address === host);
}

function acceptError(): NodeJS.ErrnoException {
  return Object.assign(new Error('accept EMFILE'), { code: 'EMFILE', errno: -24, syscall: 'accept' });
}

t.test('a failed accept on a transparent listener or the DNS TCP server ends no process', async (t) => {
  const proxy = await startTestProxy({ policy: { allowHosts: ['web.test'], connectPorts: [webPort, 443], testHosts: { 'web.test': '127.0.0.1' } } });
  t.teardown(() => proxy.close());
  const transparent = await proxy.proxy.listenTransparent({
    listen: ADDRESS,
    answer: ADDRESS,
    ports: [
      { kind: 'dns', dialled: 53, listen: 0 },
      { kind: 'tls', dialled: 443, listen: 0 },
      { kind: 'http', dialled: webPort, listen: 0 },
    ],
  });
  const servers = serversOn(ADDRESS);
  // The TLS and HTTP listeners, and the DNS responder's TCP side.
  t.equal(servers.length, 3, 'three TCP servers on the transparent address');
  for (const server of servers) {
    const port = (server.address() as net.AddressInfo).port;
    t.doesNotThrow(() => server.emit('error', acceptError()), `an accept error on ${ADDRESS}:${port} is handled`);
  }
  // Still serving: a transparent HTTP request reaches its upstream.
  const httpPort = transparent.ports.find((p) => p.kind === 'http')!.listen;
  const res = await rawRequest(httpPort, `GET /after HTTP/1.1\r\nHost: web.test:${webPort}\r\nConnection: close\r\n\r\n`, ADDRESS);
  t.match(res.body, /http \/after host=web\.test/, 'the transparent HTTP listener still serves');
  t.ok(proxy.logs.some((l) => l.event === 'accept_failed'), 'the failure is logged');
});

t.test('a failed accept on the proxy port ends no process (the listener it had already)', async (t) => {
  const proxy = await startTestProxy({ policy: { allowHosts: ['web.test'], connectPorts: [webPort], testHosts: { 'web.test': '127.0.0.1' } } });
  t.teardown(() => proxy.close());
  const server = serversOn('127.0.0.1').find((s) => (s.address() as net.AddressInfo).port === proxy.port);
  t.ok(server !== undefined, 'the proxy port found');
  t.doesNotThrow(() => server!.emit('error', acceptError()));
  t.match(proxy.logs.find((l) => l.event === 'accept_failed'), { listener: `proxy 127.0.0.1:${proxy.port}` }, 'logged, naming the listener');
  const res = await rawRequest(proxy.port, 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
  t.equal(res.status, 200, 'still serving');
});

t.test('a failed accept on the metrics listener ends no process, and is logged as the others are', async (t) => {
  const proxy = await startTestProxy({ policy: { allowHosts: ['web.test'], connectPorts: [webPort] } });
  t.teardown(() => proxy.close());
  const { logs, sink } = captureLogs();
  const metrics = await startMetricsServer({ host: '127.0.0.3', port: 0 }, proxy.proxy.metrics, createLogger('info', sink));
  t.teardown(() => metrics.close());
  const [server] = serversOn('127.0.0.3');
  t.ok(server !== undefined, 'the metrics listener found');
  t.doesNotThrow(() => server!.emit('error', acceptError()));
  t.match(logs.find((l) => l.event === 'accept_failed'), { listener: 'metrics', error: 'EMFILE', count: 1 }, 'logged, naming the metrics listener');
  const res = await rawRequest(Number(metrics.address.split(':')[1]), 'GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', '127.0.0.3');
  t.equal(res.status, 200, 'still scraped');
});
