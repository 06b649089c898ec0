/**
 * A tunnel's upstream dial belongs to its client: a client that closes while its CONNECT is still
 * being dialled gives the dial up at once. Otherwise each such client connection left a socket
 * (a descriptor, in SYN_SENT against an address that never answers) for the whole connect
 * timeout after its slot was freed, so one client opening and closing CONNECTs to a silent
 * allowed address held descriptors past the open-file plan, which counts one upstream per open
 * client connection.
 */
import net from 'node:net';
import t from 'tap';
import { heldDials } from '../support/held-dials.js';
import { settle } from '../support/settle.js';
import { startTestProxy } from '../support/test-proxy.js';

/** 127.0.0.9 stands for an address that never accepts: the hook's socket is never connected. */
const SILENT = '127.0.0.9';
const held = heldDials(SILENT);

const proxy = await startTestProxy({
  policy: { allowHosts: ['silent.test'], connectPorts: [443], testHosts: { 'silent.test': SILENT } },
  limits: { connectTimeoutMs: 120_000 },
  connect: held.connect,
});
t.teardown(async () => {
  held.destroy();
  await proxy.close();
});

t.test('a client that resets while its tunnel is dialled ends the dial', async (t) => {
  const N = 20;
  for (let i = 0; i < N; i++) {
    const client = net.connect(proxy.port, '127.0.0.1');
    client.on('error', () => undefined);
    client.write('CONNECT silent.test:443 HTTP/1.1\r\nHost: silent.test:443\r\n\r\n');
    const before = held.sockets.length;
    await settle(() => held.sockets.length > before, 'the dial started');
    // A reset: the proxy's socket closes (and its slot is freed) at once. A FIN alone is a half-close,
    // which keeps the connection, and its slot, open.
    client.resetAndDestroy();
  }
  t.equal(held.sockets.length, N, 'one dial per CONNECT');
  // Far inside the 120 s connect timeout: each dial is given up with its client.
  await settle(() => held.sockets.every((s) => s.destroyed), 'every abandoned dial destroyed', 5_000);
  t.pass('no dial outlives its client');
});

t.test('each abandoned dial has its one line: allowed, the client closed', async (t) => {
  await settle(() => proxy.logs.filter((l) => l.host === 'silent.test').length >= 20, 'a line per CONNECT');
  const lines = proxy.logs.filter((l) => l.host === 'silent.test');
  t.equal(lines.length, 20);
  t.ok(
    lines.every((l) => l.error === 'client_closed'),
    'client_closed, not connect_failed',
  );
});
