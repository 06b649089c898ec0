/**
 * The metrics listener keeps to slots of its own (SECURITY.md): at most METRICS_MAX_CONNECTIONS
 * open connections, past which a new one is closed at once, so that whoever reaches the metrics
 * port can hold those slots and nothing more; a scrape gets through again once one is given up.
 * It answers the health check as well, for a liveness probe no client of the proxy port can starve.
 */
import net from 'node:net';
import t from 'tap';
import { Registry } from 'prom-client';
import { EGRESS_HEALTH_PATH, EGRESS_METRICS_PATH } from '../../common/index.js';
import { createLogger, METRICS_MAX_CONNECTIONS, startMetricsServer } from '../../proxy/record/index.js';
import { rawRequest } from '../support/raw-client.js';

const metrics = await startMetricsServer({ host: '127.0.0.1', port: 0 }, new Registry(), createLogger('silent'));
t.teardown(() => metrics.close());
const port = Number(metrics.address.split(':').pop());

const open = (): Promise<net.Socket> =>
  new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
  });

/** Whether the listener closed `s` within `ms` (a socket it took stays open). */
const closedWithin = (s: net.Socket, ms: number): Promise<boolean> =>
  new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    s.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
    s.on('error', () => undefined);
    s.resume();
  });

t.test('past its slots the metrics listener closes a new connection at once, and scrapes again once one is free', async (t) => {
  const held: net.Socket[] = [];
  t.teardown(() => held.forEach((s) => s.destroy()));
  for (let i = 0; i < METRICS_MAX_CONNECTIONS; i++) held.push(await open());
  const taken = await Promise.all(held.map((s) => closedWithin(s, 300)));
  t.same(taken.filter(Boolean), [], `all ${METRICS_MAX_CONNECTIONS} are taken and kept`);
  const extra = await open();
  held.push(extra);
  t.ok(await closedWithin(extra, 2_000), `connection ${METRICS_MAX_CONNECTIONS + 1} is closed by the listener`);
  held.shift()?.destroy();
  // The server counts a connection gone once its close is handled: ask until the slot is seen free.
  const scrape = (): Promise<number> => rawRequest(port, `GET ${EGRESS_METRICS_PATH} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n`).then((r) => r.status, () => 0);
  let status = await scrape();
  for (let i = 0; i < 20 && status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 50));
    status = await scrape();
  }
  t.equal(status, 200, 'a scrape gets the freed slot');
});

t.test('the metrics listener answers the health check too (a Kubernetes liveness probe asks it there)', async (t) => {
  const get = await rawRequest(port, `GET ${EGRESS_HEALTH_PATH} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n`);
  t.same([get.status, get.body], [200, 'ok\n']);
  const head = await rawRequest(port, `HEAD ${EGRESS_HEALTH_PATH} HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n`);
  t.equal(head.status, 200, 'HEAD too');
  const post = await rawRequest(port, `POST ${EGRESS_HEALTH_PATH} HTTP/1.1\r\nHost: m\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
  t.equal(post.status, 404, 'nothing else');
});
