/**
 * A shared proxy's live change reaches a plain-HTTP request under way: an entry that gains method
 * or path rules refusing it ends it, as a new request would be refused and as an open tunnel to
 * that host is closed (tenants.test.ts). Before, only the host was checked again, so an upload
 * (a POST streaming its body) to a host narrowed to GET went on for as long as it liked. On
 * loopback, each /28 of 127.0.0.0/8 a sandbox network, as in tenants.test.ts.
 */
import t, { type Test } from 'tap';
import net from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../proxy/index.js';
import type { AllowEntry } from '../../policy/index.js';
import { putSlot, startSharedProxy } from '../support/shared-proxy.js';
import { listen } from '../support/loopback.js';
import { settle } from '../support/settle.js';
import { captureLogs } from '../support/log-capture.js';

const A = { subnet: '127.0.1.0/28', proxy: '127.0.1.1', client: '127.0.1.5' };

async function setup(t: Test) {
  // An upstream that reads a request's body for as long as it comes, and never answers.
  let received = 0;
  const server = net.createServer((socket) => {
    socket.on('error', () => socket.destroy());
    socket.on('data', (chunk: Buffer) => void (received += chunk.length));
  });
  const upstream = await listen(server);
  const dir = mkdtempSync(join(tmpdir(), 'tenant-http-revoke-'));
  const register = (allowHosts: AllowEntry[]): void =>
    putSlot(dir, 'slot-a', { version: 1, sandbox: 'cap-a', lifecycle: 'life-a-0001', subnet: A.subnet, address: A.proxy, policy: { allowHosts, connectPorts: [upstream] } });
  const { logs, sink } = captureLogs();
  const logger = createLogger('debug', sink);
  register(['a.test']);
  t.teardown(() => server.close());
  const { port } = await startSharedProxy(t, dir, logger, { testHosts: { 'a.test': '127.0.0.1' } });
  await settle(() => logs.some((l) => l.event === 'tenant_registered'), 'the registration');
  const registered = (): number => logs.filter((l) => l.event === 'tenant_registered').length;
  return { port, upstream, logs, register, registered, received: () => received };
}

const rows: Array<{ name: string; after: AllowEntry[]; closed: boolean }> = [
  { name: 'the entry gains method rules that refuse the request under way', after: [{ host: 'a.test', methods: ['GET'] }], closed: true },
  { name: 'the entry gains path rules that refuse it', after: [{ host: 'a.test', paths: ['/other'] }], closed: true },
  { name: 'the entry gains rules that still allow it: it goes on', after: [{ host: 'a.test', methods: ['POST'], paths: ['/up'] }], closed: false },
];

for (const row of rows) {
  t.test(row.name, async (t) => {
    const s = await setup(t);
    const client = net.connect({ host: A.proxy, port: s.port, localAddress: A.client });
    client.on('error', () => undefined);
    await new Promise((r) => client.once('connect', r));
    let ended = false;
    client.once('close', () => void (ended = true));
    client.on('data', () => undefined);
    client.write(`POST http://a.test:${s.upstream}/up HTTP/1.1\r\nHost: a.test:${s.upstream}\r\nTransfer-Encoding: chunked\r\n\r\n`);
    client.write('5\r\nhello\r\n');
    await settle(() => s.received() > 0, 'the upload reaches the upstream');
    s.register(row.after);
    await settle(() => s.registered() >= 2, 'the change');
    // The recheck runs at once when the list changes, in the same turn as the line just waited
    // for. The close, or the next piece of the upload, is then waited for rather than given a
    // fixed time, which a loaded machine can overrun; the deadline is far past either.
    if (row.closed) {
      await settle(() => ended, 'the request under way to be ended', 5_000).catch(() => undefined);
      t.ok(ended, 'the request under way is ended');
      t.ok(s.logs.some((l) => l.event === 'revoked' && l.reason === 'policy_revoked' && l.host === 'a.test'), 'the closure has its line');
    } else {
      // Time for a close that should not come: a pause here can only hide one, never invent one.
      await new Promise((r) => setTimeout(r, 300));
      const before = s.received();
      client.write('5\r\nworld\r\n');
      await settle(() => s.received() > before, 'the next piece of the upload upstream', 5_000).catch(() => undefined);
      t.ok(s.received() > before, 'the request, still allowed, goes on: the next piece reaches the upstream');
      t.notOk(ended, 'and the connection is open');
    }
    client.destroy();
  });
}
